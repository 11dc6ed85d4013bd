#!/usr/bin/env bash
# finetune_bucket_resume.sh LOOM CKPT_COMPARE [MPIRUN...]: a bucketed fine-tune (data.bucket, the
# default) on examples of varied lengths resumes exactly mid-epoch: A runs N steps straight; B saves at
# K (mid-epoch), then every rank exits at K+1; C resumes B: A's and C's final checkpoints bitwise
# equal, losses identical; D, rows padded instead of packed (data.pack=false), has A's losses
# and validation losses within rtol 1e-4 (the same sums in another order), and resuming B unpacked is allowed. With MPIRUN: B2 (2 ranks) resumed on 1 rank matches A within rtol 1e-4
# (the same global batches at every rank count). Never writes outside its work folder.
LOOM=$1 CMP=$2; shift 2
MPIRUN=("$@")
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/../../checkpoints/resume_lib.sh"; exit 1; }
work finetune_bucket_resume
JOB=$SRC/configs/tiny-finetune.json
"$LOOM" train "$TINY" --set model.max_seq=256 --set train.steps=1 --set train.warmup=0 --out base --quiet \
  > base.log 2>&1 || { tail base.log; fail "base"; }
# 100 examples, queries of 1 to 12 filler words: ~90 train in global batches of 8, 12 steps per epoch;
# 2 epochs, K = 17 is mid-epoch 2 (the resumed run starts inside the second epoch's order)
tools='[{"name":"lights","parameters":{"room":"str"}},{"name":"weather","parameters":{"city":"str"}}]'
for i in $(seq 0 99); do
  pad=$(printf 'please %.0s' $(seq 1 $((i * 7 % 12 + 1))))
  echo "{\"query\":\"lights in room $i $pad\",\"tools\":$tools,\"answers\":[{\"name\":\"lights\",\"arguments\":{\"room\":\"r$i\"}}]}"
done > tools.jsonl
K=17
N=24
FT=(--set finetune.base=base/ckpt --set finetune.method=full --set finetune.epochs=2 --set train.batch_size=8
    --set parallel.threads=1 --set data.train=tools.jsonl)
ft() { # NP OUT ARGS...
  local np=$1 out=$2; shift 2
  loom_np "$np" finetune "$JOB" --out "$out" "${FT[@]}" "$@" > "$out.log" 2>&1
}
ft 1 A --set checkpoint.every=0 || { tail A.log; fail "A"; }
grep -q "batches by length (data.bucket).*: sorted" A.log || { tail A.log; fail "A: not bucketed and sorted (want the default data.bucket = true, lengths that pay for sorting)"; }
LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) ft 1 B --set checkpoint.every=$K
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { tail B.log; fail "B: exit $rc, want the injected failure at step $((K + 1))"; }
[ "$(cat B/ckpt/latest)" = "$(printf 'step_%08d.h5' $K)" ] || fail "B: latest is '$(cat B/ckpt/latest)', want step $K"
same_losses A/metrics.jsonl B/metrics.jsonl 1 $K
ft 1 C --set checkpoint.every=0 --resume B/ckpt || { tail C.log; fail "C"; }
same_losses A/metrics.jsonl C/metrics.jsonl $((K + 1)) $N
same_ckpt "$(latest A)" "$(latest C)"
grep -q "packed away, none of it computed (data.pack)" A.log || { tail A.log; fail "A: not packed (want the default data.pack = true)"; }
ft 1 D --set checkpoint.every=0 --set data.pack=false || { tail D.log; fail "D"; }
close_losses A/metrics.jsonl D/metrics.jsonl 1 $N 1e-4
# the validation passes too: packed in A, padded in D
vals() { sed -n 's/.*"val_loss": \([-0-9.eE+]*\).*/\1/p' "$1"; }
va=$(vals A/metrics.jsonl) vd=$(vals D/metrics.jsonl)
[ -n "$va" ] && [ "$(echo "$va" | wc -l)" = "$(echo "$vd" | wc -l)" ] || fail "val losses: A '$va', D '$vd'"
paste <(echo "$va") <(echo "$vd") | awk '{d = $1 - $2; if (d < 0) d = -d; if (!(d <= 1e-4 * $1)) bad = 1} END {exit bad}' ||
  fail "val loss packed ($(echo $va)) vs padded ($(echo $vd)) not within rtol 1e-4"
echo "ok: val loss packed $(echo $va), padded $(echo $vd)"
ft 1 E --set checkpoint.every=0 --set data.pack=false --resume B/ckpt || { tail E.log; fail "E: resume unpacked"; }
close_losses A/metrics.jsonl E/metrics.jsonl $((K + 1)) $N 1e-4
if [ ${#MPIRUN[@]} -gt 0 ]; then
  LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) ft 2 B2 --set checkpoint.every=$K
  [ "$(cat B2/ckpt/latest 2>/dev/null)" = "$(printf 'step_%08d.h5' $K)" ] || { tail B2.log; fail "B2: no save at step $K"; }
  close_losses A/metrics.jsonl B2/metrics.jsonl 1 $K 1e-4
  ft 1 C2 --set checkpoint.every=0 --resume B2/ckpt || { tail C2.log; fail "C2"; }
  close_losses A/metrics.jsonl C2/metrics.jsonl $((K + 1)) $N 1e-4
fi
echo "ok: bucketed fine-tune: $N straight == $K + crash + resume + $((N - K)), bitwise; unpacked within 1e-4"
