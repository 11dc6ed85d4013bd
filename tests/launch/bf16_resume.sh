#!/usr/bin/env bash
# bf16_resume.sh LOOM JOB: `precision: bf16` on the CPU backend (docs/precision.md). Where it runs,
# the loss falls, a run resumed from its step-3 checkpoint ends with the weights and Adam moments
# of the uninterrupted run bit for bit (h5diff, exact), and they differ from an fp32 run's (the
# bf16 matmuls ran). Where it cannot run, the start line must say fp32 runs; the test then exits
# 77 (ctest: skipped), naming why.
set -u
loom=$1 job=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run=(train "$job" --backend cpu --set train.steps=6 --set checkpoint.every=3)
timeout 300 "$loom" "${run[@]}" --set precision=bf16 --out "$w/a" > "$w/a.out" 2> "$w/a.err" ||
  { cat "$w/a.err"; fail "bf16 run exit $?"; }
if grep -q '^backend cpu .* float32 .*precision bf16 asked' "$w/a.err"; then
  grep -q '^cpu: precision bf16 runs in fp32: ' "$w/a.err" || { cat "$w/a.err"; fail "fp32 fallback without a reason"; }
  echo "skip: $(sed -n 's/^cpu: precision bf16 runs in fp32: //p' "$w/a.err")"
  exit 77
fi
grep -q '^backend cpu .* bf16 matmuls, fp32 master weights' "$w/a.err" ||
  { grep '^backend' "$w/a.err"; fail "the start line names neither bf16 nor the fp32 fallback"; }
first=$(sed -n 's/^step 1\/6 | loss \([0-9.]*\).*/\1/p' "$w/a.err")
last=$(sed -n 's/^step 6\/6 | loss \([0-9.]*\).*/\1/p' "$w/a.err")
[ -n "$first" ] && [ -n "$last" ] && [ "$(echo "$last < $first" | bc -l)" = 1 ] ||
  fail "bf16 loss did not fall: step 1 '$first', step 6 '$last'"
timeout 300 "$loom" "${run[@]}" --set precision=bf16 --out "$w/b" --resume "$w/a/ckpt/step_00000003.h5" \
  > /dev/null 2> "$w/b.err" || { cat "$w/b.err"; fail "bf16 resume exit $?"; }
for g in /model /optimizer; do
  h5diff "$w/a/ckpt/step_00000006.h5" "$w/b/ckpt/step_00000006.h5" "$g" > "$w/diff" 2>&1 ||
    { head -20 "$w/diff"; fail "bf16 resume: $g differs from the uninterrupted run"; }
done
timeout 300 "$loom" "${run[@]}" --out "$w/c" > /dev/null 2> "$w/c.err" || { cat "$w/c.err"; fail "fp32 run exit $?"; }
h5diff "$w/a/ckpt/step_00000006.h5" "$w/c/ckpt/step_00000006.h5" /model > /dev/null 2>&1 &&
  fail "the bf16 run's weights equal the fp32 run's: the bf16 matmuls did not run"
echo "ok: bf16 on the cpu: loss $first -> $last, resume bitwise, differs from fp32"
