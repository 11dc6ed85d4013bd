#!/usr/bin/env bash
# plan_peak.sh LOOM SRC [MPIRUN...]: `loom plan` against the measured peak of real CPU runs. Each
# run logs its ranks' peak resident growth since before the model (train.c: the peak RSS, VmHWM,
# restarted through /proc/self/clear_refs before the session opens, less VmRSS then); the largest
# rank's must be within 10% of `loom plan --json`'s total_per_rank, on 1 and 2 ranks, ZeRO stages
# 0-3, fp32 and bf16 (LOOM_CPU_BF16=1: oneDNN's bf16 path where the CPU has AVX512_BF16; elsewhere
# bf16 runs in fp32 and the plan says so), with recompute, LoRA fine-tunes (one whose evaluation
# needs memory of its own) and a Needle base's
# (QAT and float, 1 and 2 ranks; and its refusal). Then: train
# refuses in one line a job that does not fit LOOM_DEVICE_MEM, before allocating it, naming the
# largest part and the switch; LOOM_NO_FIT_CHECK=1 runs it anyway.
set -u
loom=$1 src=$2
shift 2
mpirun=("$@")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -r /proc/self/status ] || { echo "skip: no /proc/self/status to read a peak from"; exit 77; }
job=$src/configs/tiny-train.json
# 25M parameters (8 layers of d_model 512): ~400-800 MB per rank, so the model, not the process's
# fixed part, is what is measured; 2 steps, a few seconds a run
model=(--set model.d_model=512 --set model.n_layer=8 --set model.n_head=8 --set model.n_kv_head=8
       --set model.d_ff=2048 --set train.steps=2 --set train.warmup=0)
export LOOM_CPU_BF16=1

"$loom" plan --help | grep -q 'plan JOB.json .*-n RANKS' || fail "loom plan --help does not show the plan's usage"
msg=$("$loom" plan "$job" -n 0 2>&1) && fail "loom plan -n 0 exited 0"
[ "$(wc -l <<<"$msg")" = 1 ] && grep -q "^loom: error: -n '0'" <<<"$msg" || fail "loom plan -n 0: '$msg'"

# check NAME RANKS ENV-ARGS... -- LOOM-ARGS...: run `loom plan -n RANKS` and the job, compare
check() {
  local name=$1 ranks=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local cmd=$1
  shift
  local plan
  plan=$(env "${envs[@]}" "$loom" plan "$@" -n "$ranks" --json $( [ "$cmd" = finetune ] && echo --finetune) 2> "$name.plan.err") ||
    { cat "$name.plan.err"; fail "$name: loom plan exited non-zero"; }
  local want
  want=$(grep -oE '"total_per_rank":[0-9.e+]+' <<<"$plan" | cut -d: -f2)
  want=$(awk -v x="$want" 'BEGIN { printf "%.0f", x }')
  [ -n "$want" ] && [ "$want" -gt 0 ] || fail "$name: no total_per_rank in: $plan"
  local launch=()
  [ "$ranks" -gt 1 ] && launch=("${mpirun[@]}" -np "$ranks") # local ranks inherit this environment
  env "${envs[@]}" timeout 300 "${launch[@]}" "$loom" "$cmd" "$@" --out "run_$name" > "$name.out" 2> "$name.err" ||
    { tail -5 "$name.err"; fail "$name: loom $cmd exited non-zero"; }
  local line
  line=$(grep -m1 '^memory: peak resident growth' "$name.err") || fail "$name: no memory line in its log"
  local got
  got=$(grep -oE 'rank [0-9]+ [0-9]+' <<<"$line" | awk '$3 > m { m = $3 } END { print m + 0 }')
  local n
  n=$(grep -oE 'rank [0-9]+ [0-9]+' <<<"$line" | wc -l)
  [ "$n" = "$ranks" ] || fail "$name: $n ranks in '$line', want $ranks"
  local prec
  prec=$(grep -oE '"precision":"[a-z0-9]+"' <<<"$plan")
  awk -v g="$got" -v p="$want" -v n="$name" -v pr="$prec" 'BEGIN {
        d = (p - g) / g; printf "%-22s measured %6.1f MiB  plan %6.1f MiB  %+5.1f%%  %s\n", n, g / 1048576, p / 1048576, 100 * d, pr;
        exit (d > 0.10 || d < -0.10) }' || fail "$name: plan $want bytes is not within 10% of the measured peak $got"
}

check z0_fp32_race 1 -u LOOM_GEMM -- train "$job" "${model[@]}" --set checkpoint.every=-1
check z0_fp32_recompute 1 -- train "$job" "${model[@]}" --set train.recompute=true --set checkpoint.every=0
check z1_bf16 1 -- train "$job" "${model[@]}" --set parallel.zero_stage=1 --set precision=bf16 --set checkpoint.every=-1
check z3_fp32 1 -- train "$job" "${model[@]}" --set parallel.zero_stage=3 --set checkpoint.every=-1
if [ ${#mpirun[@]} -gt 0 ]; then
  check np2_z0_fp32 2 -- train "$job" "${model[@]}" --set checkpoint.every=-1
  check np2_z1_fp32 2 -- train "$job" "${model[@]}" --set parallel.zero_stage=1 --set checkpoint.every=0
  check np2_z2_bf16 2 -- train "$job" "${model[@]}" --set parallel.zero_stage=2 --set precision=bf16 --set checkpoint.every=-1
  check np2_z3_fp32 2 -- train "$job" "${model[@]}" --set parallel.zero_stage=3 --set checkpoint.every=-1
  check np2_z3_bf16 2 -- train "$job" "${model[@]}" --set parallel.zero_stage=3 --set precision=bf16 --set checkpoint.every=-1
else
  echo "no mpirun: the 2-rank runs are skipped"
fi

# a LoRA fine-tune of a base trained here: its frozen base, adapters and rows from the data
"$loom" train "$job" "${model[@]}" --set train.steps=1 --set checkpoint.every=0 --out base > /dev/null 2> base.err ||
  { tail -5 base.err; fail "the base's training exited non-zero"; }
head -40 "$src/configs/data/tools.jsonl" > tools.jsonl
check lora_bf16 1 -- finetune "$src/configs/tiny-finetune.json" "${model[@]}" --set finetune.base="$w/base/ckpt" \
  --set data.train="$w/tools.jsonl" --set train.batch_size=8 --set precision=bf16 --set finetune.eval_base=false \
  --set eval.max_examples=2 --set checkpoint.every=-1

# the held-out evaluation of a fine-tune whose training arena is small (train.recompute) decodes 32
# rows on a context of its own beside it (model_gen): the plan counts it (without, it planned 65% low)
head -200 "$src/configs/data/tools.jsonl" > tools200.jsonl
check lora_eval32 1 -- finetune "$src/configs/tiny-finetune.json" "${model[@]}" --set finetune.base="$w/base/ckpt" \
  --set data.train="$w/tools200.jsonl" --set train.batch_size=8 --set train.recompute=true --set data.val_split=0.3 \
  --set eval.batch=32 --set eval.max_examples=32 --set finetune.eval_base=false --set checkpoint.every=-1

# a Needle base's LoRA fine-tune (its own net, core/train/finetune_needle.c): the base as its net
# holds it (each target's base and merged copy, W4 under QAT), the arena of its longest batch, the
# held-out evaluation's second net; 21 rows of up to 200 tokens on the 3-layer fixture: ~200 MB
fix=$src/tests/fixtures/needle
needle=(--set finetune.base="$fix/train_base.safetensors" --set data.train="$fix/needle_rows.jsonl"
        --set model.tokenizer="$fix/needle.model" --set finetune.epochs=1 --set checkpoint.every=-1)
check needle_qat 1 -- finetune "$src/configs/needle-finetune.json" "${needle[@]}" --set train.batch_size=21
check needle_float_recompute 1 -- finetune "$src/configs/needle-finetune.json" "${needle[@]}" --set train.batch_size=21 \
  --set finetune.qat=false --set train.recompute=true
if [ ${#mpirun[@]} -gt 0 ]; then
  check np2_needle 2 -- finetune "$src/configs/needle-finetune.json" "${needle[@]}" --set train.batch_size=20
fi
msg=$(LOOM_DEVICE_MEM=50M "$loom" finetune "$src/configs/needle-finetune.json" "${needle[@]}" --set train.batch_size=21 \
      --out needle_refused 2>&1) && fail "a Needle fine-tune ran over LOOM_DEVICE_MEM"
[ "$(grep -c error <<<"$msg")" = 1 ] &&
  grep -qE '^loom: error: the job needs [0-9.]+ [KMG]iB per rank and the device has 50.0 MiB \(LOOM_DEVICE_MEM\): the largest part is activations, [0-9.]+ MiB; train.recompute=true shrinks it' <<<"$msg" ||
  { echo "$msg"; fail "the Needle refusal does not name the need, the device, the largest part and the switch"; }
grep -q '^step' <<<"$msg" && fail "the refused Needle job ran a step"
echo "ok: a Needle fine-tune refuses in one line"

# the refusal: activations dominate (16 rows of 256), 100 MiB offered
big=("${model[@]}" --set train.batch_size=16 --set train.seq_len=256 --set checkpoint.every=-1)
LOOM_DEVICE_MEM=100M "$loom" plan "$job" "${big[@]}" > plan.txt 2>&1 || fail "loom plan of a job that does not fit exited non-zero"
grep -q '^fits: no: the largest part is activations .*train.recompute=true' plan.txt ||
  { cat plan.txt; fail "loom plan does not say the job misses and why"; }
LOOM_DEVICE_MEM=100M "$loom" plan "$job" "${big[@]}" --json | grep -q '"fits":false' || fail "loom plan --json: fits is not false"
LOOM_DEVICE_MEM=100M "$loom" train "$job" "${big[@]}" --out refused > refused.out 2> refused.err && fail "train ran a job over LOOM_DEVICE_MEM"
errs=$(grep -c 'error' refused.err)
[ "$errs" = 1 ] || { cat refused.err; fail "the refusal took $errs error lines, want 1"; }
grep -qE '^loom: error: the job needs [0-9.]+ [KMG]iB per rank and the device has 100.0 MiB \(LOOM_DEVICE_MEM\): the largest part is activations, [0-9.]+ [KMG]iB; train.recompute=true shrinks it' refused.err ||
  { cat refused.err; fail "the refusal does not name the need, the device, the largest part and the switch"; }
grep -q '^step' refused.err && fail "the refused job ran a step"
[ -e refused/metrics.jsonl ] && fail "the refused job started its run"
echo "ok: train refuses in one line: $(grep error refused.err | cut -c1-150)..."
if [ ${#mpirun[@]} -gt 0 ]; then
  LOOM_DEVICE_MEM=100M timeout 120 "${mpirun[@]}" -np 2 "$loom" train "$job" "${big[@]}" --out refused2 \
    > refused2.out 2> refused2.err && fail "2 ranks ran a job over LOOM_DEVICE_MEM"
  grep -q '^\[rank 0\] loom: error: the job needs .* x 2 ranks on this node .*largest part is activations' refused2.err ||
    { cat refused2.err; fail "2 ranks: rank 0 does not say why"; }
  grep -q 'MPI_ABORT' refused2.err && fail "2 ranks: the refusal aborted through MPI instead of ending together"
  echo "ok: 2 ranks refuse together, rank 0 says why"
fi
LOOM_DEVICE_MEM=1M LOOM_NO_FIT_CHECK=1 "$loom" train "$job" --set train.steps=1 --set train.warmup=0 --set checkpoint.every=-1 --out forced \
  > forced.out 2> forced.err || { cat forced.err; fail "LOOM_NO_FIT_CHECK=1 did not run the job"; }
echo "ok: LOOM_NO_FIT_CHECK=1 runs it anyway"
