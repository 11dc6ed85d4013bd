#!/usr/bin/env bash
# needle_base_finetune.sh LOOM [MPIRUN...]: `loom finetune configs/needle-finetune.json` from a Needle base
# (tests/fixtures/needle/train_base.safetensors, made by Needle's own code) on Needle's rows with
# Needle's tokenizer, from the command line:
#  A  1 rank: the training loss of the last epoch below the first's, the validation loss falls;
#     `loom eval --ckpt` of A gives the validation loss A logged last, and both accuracy figures;
#     `loom export needle --merge` of A evaluates as A does (float), and of a run at lr 0 is the base
#     file byte for byte;
#  B  saves at step K and every rank exits at K+1; C resumes B: C's losses are A's as printed and the
#     adapters `loom export needle` writes from A and C are the same bytes;
#  G  finetune.qat=false: trains, and its losses are not A's (the switch reaches the numerics);
#  D  2 ranks (with MPIRUN), float: G's losses and gradient norms within rtol 1e-5 (the same global
#     batches, the gradients summed in another order), and D4 the same on 4 ranks with ZeRO-3 asked; Q, 2 ranks under QAT: A's first step; E (2
#     ranks, float) saved at K and F resumed on 1 rank: G's losses; M, 1 rank accumulating
#     micro-batches of one row: G's losses and norms;
#  R  the ladder rung model.layers=2 (layers 0 and 2 of the 3): trains (loss falls); `export needle`
#     writes its adapters at the base's depth (zero rows at the dropped layer, as `needle build --lora
#     --layers 2` wants them), `--merge` the rung itself, which evaluates as R does; a rung merged from
#     zero adapters evaluates as the rung of the base;
#  bad input: a damaged base, a file that is not a Needle base, the wrong targets, a resume with
#     another rank, an export of a non-Needle checkpoint: one error line each, non-zero exit.
# Never writes outside its work folder.
LOOM=$1; shift
MPIRUN=("$@")
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work needle_base_finetune
FIX=$SRC/tests/fixtures/needle
JOB=$SRC/configs/needle-finetune.json
# 26 rows, 0.2 held out: 4-row batches, 4 epochs; a small model learns at a larger rate than Needle's 1e-4
FT=(--set finetune.base=$FIX/train_base.safetensors --set data.train=$FIX/needle_rows.jsonl
    --set model.tokenizer=$FIX/needle.model --set train.batch_size=4 --set finetune.lora_rank=4
    --set finetune.lora_alpha=8 --set train.lr=1e-2 --set finetune.epochs=4 --set data.val_split=0.2
    --set parallel.threads=1)
ft() { # NP OUT ARGS...
  local np=$1 out=$2; shift 2
  loom_np "$np" finetune "$JOB" --out "$out" "${FT[@]}" "$@" > "$out.log" 2>&1
}
ft 1 A --set checkpoint.every=0 || { tail A.log; fail "A"; }
N=$(sed -nE 's/.*"step": *([0-9]+),.*/\1/p' A/metrics.jsonl | tail -1)
spe=$(sed -nE 's/.* ([0-9]+) steps per epoch.*/\1/p' A.log)
[ -n "$N" ] && [ -n "$spe" ] && [ "$N" -eq $((4 * spe)) ] || fail "A: $N steps, $spe per epoch: want 4 epochs"
first=$(losses A/metrics.jsonl 1 "$spe" | awk '{s += $1} END {print s / NR}')
last=$(losses A/metrics.jsonl $((N - spe + 1)) "$N" | awk '{s += $1} END {print s / NR}')
awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a - 0.5)}' || fail "A: mean loss of epoch 1 $first, of epoch 4 $last: want a fall of 0.5"
vals=$(sed -n 's/.*"val_loss": \([-0-9.eE+]*\).*/\1/p' A/metrics.jsonl)
[ "$(echo "$vals" | wc -l)" -eq 4 ] || fail "A: validation losses '$(echo $vals)': want one per epoch"
awk -v a="$(echo "$vals" | head -1)" -v b="$(echo "$vals" | tail -1)" 'BEGIN {exit !(b < a)}' || fail "A: validation loss $(echo $vals): want a fall"
echo "ok: A: mean loss epoch 1 $first -> epoch 4 $last; validation $(echo $vals)"

K=$((spe + 2))
LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) ft 1 B --set checkpoint.every=$K
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { tail B.log; fail "B: exit $rc, want the injected failure at step $((K + 1))"; }
[ "$(cat B/ckpt/latest)" = "$(printf 'step_%08d.h5' $K)" ] || fail "B: latest is '$(cat B/ckpt/latest)', want step $K"
ft 1 C --set checkpoint.every=0 --resume B/ckpt || { tail C.log; fail "C"; }
same_losses A/metrics.jsonl C/metrics.jsonl $((K + 1)) "$N"
"$LOOM" export needle A/ckpt A.safetensors > /dev/null 2>&1 || fail "export A"
"$LOOM" export needle C/ckpt C.safetensors > /dev/null 2>&1 || fail "export C"
cmp A.safetensors C.safetensors || fail "the adapters of A and of C (resumed) differ"
echo "ok: C resumed at step $K: the exported adapter is A's, byte for byte"
# loom eval of A's checkpoint: the validation loss A logged last (the same rows, the same adapters),
# and both accuracy figures; of the base alone: another loss
"$LOOM" eval "$JOB" "${FT[@]}" --ckpt A/ckpt --quiet > eval.out 2> eval.log || { cat eval.log; fail "loom eval A"; }
got=$(sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p' eval.out)
want=$(echo "$vals" | tail -1)
# the same sums on the same adapters; printed to 4 and 6 decimals, so equal to 1e-4 as text allows
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(g != "" && d <= 1.5e-4) }' ||
  { cat eval.out; fail "loom eval A: val loss '$got', A logged $want"; }
grep -q "Needle's exact-call" eval.out && grep -q "tool-call exact match" eval.out || { cat eval.out; fail "loom eval A: the accuracy lines"; }
"$LOOM" eval "$JOB" "${FT[@]}" --quiet > eval0.out 2>&1 || { cat eval0.out; fail "loom eval of the base"; }
got0=$(sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p' eval0.out)
[ -n "$got0" ] && [ "$got0" != "$got" ] || fail "loom eval of the base: val loss '$got0' (A's: $got)"
echo "ok: loom eval: A's checkpoint val loss $got as logged, the base's $got0"
# loom sample of A's checkpoint: greedy is the same text every time and in every row of a batch;
# a seeded sample repeats, and row 0 of a batch is the batch of one
tools='[{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]'
smp() { "$LOOM" sample "$JOB" "${FT[@]}" --ckpt A/ckpt --query "weather in Paris?" --tools "$tools" --max-new 24 "$@" 2> sample.log; }
g1=$(smp) && g2=$(smp) && g3=$(smp --batch 3) || { cat sample.log; fail "loom sample"; }
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "loom sample: greedy gave '$g1' then '$g2'"
[ "$(grep -c . <<<"$g3")" -ge 3 ] && [ "$(grep -v '^--- sample' <<<"$g3" | sort -u)" = "$g1" ] ||
  fail "loom sample --batch 3 (greedy): '$g3', want '$g1' three times"
s1=$(smp --temperature 1 --seed 7 --batch 2) && s2=$(smp --temperature 1 --seed 7 --batch 2) && s0=$(smp --temperature 1 --seed 7) ||
  { cat sample.log; fail "loom sample --temperature 1"; }
[ "$s1" = "$s2" ] && [ "$(sed -n 2p <<<"$s1")" = "$s0" ] && [ "$s0" != "$g1" ] ||
  fail "loom sample: seeded samples '$s1' / '$s2' / '$s0' (greedy '$g1')"
echo "ok: loom sample: greedy '$g1'; seeded '$s0'"
# --merge: the base with A's adapters folded in; evaluated alone (float) it is A evaluated with its
# adapters (the same W + s A B, summed in another order: 1e-7 relative on the weights), and far from
# the base alone; a run that never moved its adapters (lr 0) merges back into the base, byte for byte
"$LOOM" export needle A/ckpt merged.safetensors --merge > /dev/null 2>&1 || fail "export --merge A"
fl=(--set finetune.qat=false --quiet)
# val_loss ARGS...: loom eval's validation loss of the job with ARGS (float)
val_loss() { "$LOOM" eval "$JOB" "${FT[@]}" "${fl[@]}" "$@" 2> /dev/null | sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p'; }
# merged_as WHAT CKPT MERGED ARGS...: MERGED alone evaluates as CKPT with its adapters (within 2e-4)
# and far from the base (or rung) alone
merged_as() {
  local what=$1 ck=$2 mf=$3; shift 3
  va=$(val_loss "$@" --ckpt "$ck") vm=$(val_loss --set finetune.base="$mf") vb=$(val_loss "$@")
  awk -v a="$va" -v m="$vm" -v b="$vb" 'BEGIN { d = a - m; if (d < 0) d = -d; e = a - b; if (e < 0) e = -e;
    exit !(a != "" && m != "" && d <= 2e-4 && e > 100 * 2e-4) }' ||
    fail "$what: val loss $vm, $ck with its adapters $va, without them $vb (want the first two within 2e-4)"
}
merged_as "merged base" A/ckpt merged.safetensors
echo "ok: export --merge: val loss $vm, A with its adapters $va, the base alone $vb"
ft 1 Z --set checkpoint.every=0 --set train.lr=0 --set finetune.epochs=1 --set finetune.eval_base=false || { tail Z.log; fail "Z (lr 0)"; }
"$LOOM" export needle Z/ckpt Z.safetensors --merge > /dev/null 2>&1 || fail "export --merge Z"
cmp Z.safetensors "$FIX/train_base.safetensors" || fail "a zero adapter merged: not the base's bytes"
echo "ok: a zero adapter merged gives the base file back, byte for byte"
head -c 8 A.safetensors | od -An -tu8 | awk '{exit !($1 > 100)}' || fail "A.safetensors: no safetensors header"
grep -a -q '"scale":"2.0"' A.safetensors && grep -a -q '"rank":"4"' A.safetensors && grep -a -q 'lora/stack/layers/block/self_attn/out_proj/kernel/B' A.safetensors ||
  fail "A.safetensors: want Needle's metadata (scale \"2.0\", rank \"4\") and lora/<path>/A, /B tensors"

ft 1 G --set checkpoint.every=0 --set finetune.qat=false || { tail G.log; fail "G"; }
grep -q "numerics float32" G.log && grep -q "numerics Needle's QAT" A.log || fail "the numerics line: want QAT in A, float32 in G"
[ "$(losses A/metrics.jsonl 1 "$N")" != "$(losses G/metrics.jsonl 1 "$N")" ] || fail "G (float) has A's (QAT) losses"
echo "ok: G (finetune.qat=false) trains to $(losses G/metrics.jsonl "$N" "$N")"

# R: the rung of 2 layers (float, to compare evaluations as A's merge does)
ft 1 R --set checkpoint.every=0 --set finetune.qat=false --set model.layers=2 || { tail R.log; fail "R (rung 2)"; }
grep -q "2 layers (its ladder rung" R.log || fail "R: the model line does not say the rung"
first=$(losses R/metrics.jsonl 1 "$spe" | awk '{s += $1} END {print s / NR}')
last=$(losses R/metrics.jsonl $((N - spe + 1)) "$N" | awk '{s += $1} END {print s / NR}')
awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a - 0.5)}' || fail "R: mean loss of epoch 1 $first, of epoch 4 $last: want a fall of 0.5"
"$LOOM" export needle R/ckpt R.safetensors > /dev/null 2>&1 || fail "export R"
grep -a -q '"lora/stack/layers/block/self_attn/q_proj/kernel/A":{"dtype":"F32","shape":\[3,64,4\]' R.safetensors ||
  fail "R.safetensors: the rung's adapter is not at the base's depth 3"
"$LOOM" export needle R/ckpt Rm.safetensors --merge > /dev/null 2>&1 || fail "export --merge R"
grep -a -q 'num_layers\\": 2' Rm.safetensors && grep -a -q 'ladder_order\\": \[0, 1\]' Rm.safetensors ||
  fail "Rm.safetensors: want the rung's config (num_layers 2, ladder_order [0, 1])"
merged_as "merged rung" R/ckpt Rm.safetensors --set model.layers=2
ft 1 RZ --set checkpoint.every=0 --set train.lr=0 --set finetune.epochs=1 --set finetune.eval_base=false --set model.layers=2 ||
  { tail RZ.log; fail "RZ (rung, lr 0)"; }
"$LOOM" export needle RZ/ckpt RZ.safetensors --merge > /dev/null 2>&1 || fail "export --merge RZ"
vz=$(val_loss --set finetune.base=RZ.safetensors)
[ -n "$vz" ] && [ "$vz" = "$vb" ] || fail "the rung merged from zero adapters: val loss '$vz', the rung of the base $vb"
echo "ok: R (rung 2) trains to $last; its merge evaluates as R ($vm vs $va), a zero merge as the rung ($vz)"

# norms FILE: the logged gradient norms, one per line
norms() { sed -nE 's/.*"grad_norm": *([-0-9.eE+]+).*/\1/p' "$1"; }
# close_norms A B RTOL: the same count of norms, each |a-b| <= RTOL*|a|
close_norms() {
  paste <(norms "$1") <(norms "$2") | awk -v r="$3" 'NF != 2 {bad = 1} { d = $1 - $2; if (d < 0) d = -d;
    if (!(d <= r * $1)) { printf "step %d: norm %s vs %s\n", NR, $1, $2; bad = 1 } } END {exit bad || NR == 0}' ||
    fail "gradient norms not within rtol $3: $1 vs $2"
  echo "ok: gradient norms within rtol $3: $1 vs $2"
}
# micro-batches of one row accumulated into the step (train.micro_batch): G's sums in another order
ft 1 M --set checkpoint.every=0 --set finetune.qat=false --set train.micro_batch=1 || { tail M.log; fail "M"; }
close_losses G/metrics.jsonl M/metrics.jsonl 1 "$N" 1e-5
close_norms G/metrics.jsonl M/metrics.jsonl 1e-5
if [ ${#MPIRUN[@]} -gt 0 ]; then
  # In float the ranks' sums differ from one rank's in order only: 1e-7 relative measured, 1e-5
  # allowed over the steps' compounding; a gradient scaled by the rank count shows in the norms.
  # Under QAT a last-bit difference flips a W4 code and the runs part (1e-3 by step 10): only step 1,
  # before any update, is compared there.
  ft 2 D --set checkpoint.every=0 --set finetune.qat=false || { tail D.log; fail "D (2 ranks)"; }
  close_losses G/metrics.jsonl D/metrics.jsonl 1 "$N" 1e-5
  close_norms G/metrics.jsonl D/metrics.jsonl 1e-5
  # 4 ranks of one row each, ZeRO-3 asked, one epoch: G1's losses and norms (1 rank, the same
  # schedule and global batches)
  ft 4 D4 --set checkpoint.every=0 --set finetune.qat=false --set parallel.zero_stage=3 --set train.warmup=2 \
    --set finetune.epochs=1 || { tail D4.log; fail "D4 (4 ranks)"; }
  grep -q "zero_stage 3: nothing to shard" D4.log || fail "D4: no line on what ZeRO shards"
  ft 1 G1 --set checkpoint.every=0 --set finetune.qat=false --set train.warmup=2 --set finetune.epochs=1 || { tail G1.log; fail "G1"; }
  close_losses G1/metrics.jsonl D4/metrics.jsonl 1 "$spe" 1e-5
  close_norms G1/metrics.jsonl D4/metrics.jsonl 1e-5
  ft 2 Q --set checkpoint.every=0 || { tail Q.log; fail "Q (2 ranks, QAT)"; }
  close_losses A/metrics.jsonl Q/metrics.jsonl 1 1 1e-6
  awk -v a="$(norms A/metrics.jsonl | head -1)" -v b="$(norms Q/metrics.jsonl | head -1)" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * a) }' || fail "Q: step 1's gradient norm is not A's (rtol 1e-5)"
  LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) ft 2 E --set checkpoint.every=$K --set finetune.qat=false
  [ "$(cat E/ckpt/latest 2>/dev/null)" = "$(printf 'step_%08d.h5' $K)" ] || { tail E.log; fail "E: no checkpoint at step $K"; }
  ft 1 F --set checkpoint.every=0 --set finetune.qat=false --resume E/ckpt || { tail F.log; fail "F: 2 ranks' checkpoint resumed on 1"; }
  grep -q "saved by 2 rank" F.log || fail "F: the resume line does not name the 2 ranks that saved"
  close_losses G/metrics.jsonl F/metrics.jsonl $((K + 1)) "$N" 1e-5
fi

# train.steps named by the job is the fine-tune's length (over the 4 epochs FT asks for)
ft 1 S --set train.steps=2 --set checkpoint.every=0 || { tail S.log; fail "S"; }
[ "$(sed -nE 's/.*"step": *([0-9]+),.*/\1/p' S/metrics.jsonl | tail -1)" = 2 ] && grep -q "train.steps 2 (set by the job)" S.log ||
  { tail S.log; fail "S: train.steps=2 did not decide the fine-tune's length"; }
echo "ok: S: train.steps=2 named by the job: 2 steps"

head -c 100000 "$FIX/train_base.safetensors" > cut.safetensors
refused 1 "cut.safetensors" finetune "$JOB" --out X "${FT[@]}" --set finetune.base=cut.safetensors
refused 1 "format_version" finetune "$JOB" --out X "${FT[@]}" --set finetune.base=$FIX/model_ref.safetensors
refused 1 "finetune.lora_targets" finetune "$JOB" --out X "${FT[@]}" --set finetune.lora_targets=q,k,v
refused 1 "finetune.lora_rank" finetune "$JOB" --out X "${FT[@]}" --set finetune.lora_rank=8 --resume B/ckpt
refused 1 "train_base.safetensors.*2 to 3" finetune "$JOB" --out X "${FT[@]}" --set model.layers=4
refused 1 "model.layers=0, the job has model.layers=2" finetune "$JOB" --out X "${FT[@]}" --set model.layers=2 --resume B/ckpt
refused 1 "model.layers" train "$TINY" --set model.layers=2 --out X
"$LOOM" train "$TINY" --set train.steps=1 --set train.warmup=0 --out T --quiet > T.log 2>&1 || { tail T.log; fail "T"; }
refused 1 "not a Needle fine-tune" export needle T/ckpt out.safetensors
refused 1 "not a Needle fine-tune" finetune "$JOB" --out X "${FT[@]}" --resume T/ckpt
[ ! -e out.safetensors ] || fail "a refused export left out.safetensors"
echo "PASS"
