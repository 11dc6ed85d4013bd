#!/usr/bin/env bash
# gemm_resume.sh LOOM JOB [MPIRUN...]: a run resumed from a checkpoint multiplies as the saved run
# did, though the CPU's sgemm library is raced per product family at run time
# (docs/cpu-gemm.md): the checkpoint keeps each rank's choices and a resume on the same machine
# adopts them. The resumed run races with LOOM_GEMM_RACE_INVERT=1 (every race picks its loser),
# so only choices adopted from the file can make it end with the uninterrupted run's /model and
# /optimizer bit for bit (h5diff, exact); a fresh inverted run must differ, or the test would
# prove nothing. With MPIRUN, the same on 2 ranks, and a 1-rank resume of that checkpoint says it
# chooses afresh. Exits 77 (skipped, naming why) where only one sgemm library is installed, or
# where the libraries agree bitwise on these products.
set -u
loom=$1 job=$2
shift 2
mpirun=("$@")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset LOOM_GEMM LOOM_GEMM_RACE_INVERT
# products of 512 x 256 x 1024 and up: past CPU_GEMM_BIG, where the race runs
run=(train "$job" --backend cpu --set train.steps=6 --set checkpoint.every=3
     --set model.d_model=256 --set model.n_head=4 --set model.d_ff=1024)
a6=$w/a/ckpt/step_00000006.h5

timeout 300 "$loom" "${run[@]}" --out "$w/a" > /dev/null 2> "$w/a.err" ||
  { cat "$w/a.err"; fail "run a exit $?"; }
grep -q '^cpu: sgemm by [a-z]*, or [a-z]* where a product shape' "$w/a.err" || {
  echo "skip: no per-shape race here: $(grep -m1 '^cpu: sgemm by' "$w/a.err")"
  exit 77
}
"$loom" ckpt info "$w/a/ckpt/step_00000003.h5" > "$w/info" || fail "ckpt info of step 3 failed"
grep -q '^tuning rank 0  cpu .* | chosen=[a-z]* rival=[a-z]* forced=0 shapes=[0-9]' "$w/info" ||
  { cat "$w/info"; fail "ckpt info shows no sgemm choices of rank 0"; }

LOOM_GEMM_RACE_INVERT=1 timeout 300 "$loom" "${run[@]}" --out "$w/c" > /dev/null 2> "$w/c.err" ||
  { cat "$w/c.err"; fail "inverted run exit $?"; }
if h5diff "$a6" "$w/c/ckpt/step_00000006.h5" /model > /dev/null 2>&1; then
  echo "skip: the inverted races give the same weights (the libraries agree bitwise here)"
  exit 77
fi

LOOM_GEMM_RACE_INVERT=1 timeout 300 "$loom" "${run[@]}" --out "$w/b" \
  --resume "$w/a/ckpt/step_00000003.h5" > /dev/null 2> "$w/b.err" ||
  { cat "$w/b.err"; fail "resume exit $?"; }
adopted='^cpu: sgemm choices from the checkpoint ([1-9][0-9]* product families, else [a-z]*)'
grep -q "$adopted" "$w/b.err" ||
  { cat "$w/b.err"; fail "the resume did not adopt the checkpoint's sgemm choices"; }
"$loom" ckpt info "$w/b/ckpt/step_00000006.h5" > "$w/binfo" || fail "ckpt info of the resume failed"
[ "$(grep '^tuning rank' "$w/binfo")" = "$(grep '^tuning rank' "$w/info")" ] ||
  fail "the resumed run saved other sgemm choices than it adopted"
for g in /model /optimizer; do
  h5diff "$a6" "$w/b/ckpt/step_00000006.h5" "$g" > "$w/diff" 2>&1 ||
    { head -20 "$w/diff"; fail "resume: $g differs from the uninterrupted run"; }
done
echo "ok: 1 rank: resumed bitwise with the checkpoint's sgemm choices, inverted races differ"
[ ${#mpirun[@]} -gt 0 ] || exit 0

timeout 300 "${mpirun[@]}" -np 2 "$loom" "${run[@]}" --out "$w/m" > /dev/null 2> "$w/m.err" ||
  { tail -20 "$w/m.err"; fail "2-rank run exit $?"; }
"$loom" ckpt info "$w/m/ckpt/step_00000003.h5" > "$w/minfo" ||
  fail "ckpt info of the 2-rank step 3 failed"
grep -q '^tuning rank 1  cpu ' "$w/minfo" ||
  { cat "$w/minfo"; fail "ckpt info shows no line of rank 1"; }
LOOM_GEMM_RACE_INVERT=1 timeout 300 "${mpirun[@]}" -np 2 -x LOOM_GEMM_RACE_INVERT \
  "$loom" "${run[@]}" \
  --out "$w/n" --resume "$w/m/ckpt/step_00000003.h5" > /dev/null 2> "$w/n.err" ||
  { tail -20 "$w/n.err"; fail "2-rank resume exit $?"; }
# each rank saves the choices it adopted (frozen) at its next checkpoint: the same lines
"$loom" ckpt info "$w/n/ckpt/step_00000006.h5" > "$w/ninfo" ||
  fail "ckpt info of the 2-rank resume failed"
[ "$(grep '^tuning rank' "$w/ninfo")" = "$(grep '^tuning rank' "$w/minfo")" ] ||
  { grep '^tuning' "$w/minfo" "$w/ninfo" | cut -c1-200; fail "ranks did not adopt their lines"; }
for g in /model /optimizer; do
  h5diff "$w/m/ckpt/step_00000006.h5" "$w/n/ckpt/step_00000006.h5" "$g" > "$w/diff" 2>&1 ||
    { head -20 "$w/diff"; fail "2-rank resume: $g differs from the uninterrupted run"; }
done
timeout 300 "$loom" "${run[@]}" --out "$w/o" --resume "$w/m/ckpt/step_00000003.h5" > /dev/null \
  2> "$w/o.err" || { cat "$w/o.err"; fail "1-rank resume of the 2-rank checkpoint exit $?"; }
grep -q 'saved by 2 ranks, resumed by 1: each backend chooses its kernels afresh' "$w/o.err" ||
  { cat "$w/o.err"; fail "a 1-rank resume of 2 ranks' choices did not say it chooses afresh"; }
echo "ok: 2 ranks: resumed bitwise with each rank's choices; 1 rank chooses afresh"
