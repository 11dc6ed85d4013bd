#!/usr/bin/env bash
# exact_resume.sh LOOM CKPT_COMPARE NP ZERO_STAGE MPIRUN...: resume is exact on the same world size.
# A: 2k steps straight. B: the same job stopped (killed) at the start of step k+1 after a save at k.
# C: resumes B and runs to 2k. A's and C's final checkpoints are bitwise equal, losses identical.
# Never edits anything outside its work folder.
LOOM=$1 CMP=$2 NP=$3 ZS=$4; shift 4
MPIRUN=("$@")
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
K=4
N=$((2 * K))
work "exact_resume_np${NP}_z${ZS}"
JOB=(--set train.steps=$N --set parallel.zero_stage=$ZS)

train "$NP" A "${JOB[@]}" --set checkpoint.every=0
[ "$(cat A/ckpt/latest)" = "$(printf 'step_%08d.h5' $N)" ] || fail "A: latest is '$(cat A/ckpt/latest)', want step $N"
[ "$(ls A/ckpt/*.h5 | wc -l)" -eq 1 ] || fail "A: checkpoint.every=0 must save only at the end: $(ls A/ckpt)"

# B: the same job (same LR schedule over N steps), saved at k, then every rank exits at step k+1:
# a crash right after a checkpoint.
out=$(LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) \
      loom_np "$NP" train "$TINY" --out B "${BASE[@]}" "${JOB[@]}" --set checkpoint.every=$K 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "$out" | tail; fail "B: exit $rc, want the injected failure at step $((K + 1))"; }
[ "$(cat B/ckpt/latest)" = "$(printf 'step_%08d.h5' $K)" ] || fail "B: latest is '$(cat B/ckpt/latest)', want step $K"
[ "$(losses B/metrics.jsonl 1 $K | wc -l)" -eq $K ] || fail "B: want $K logged steps"
same_losses A/metrics.jsonl B/metrics.jsonl 1 $K

# C: resume B's directory (its `latest`), finish the job.
train "$NP" C "${JOB[@]}" --set checkpoint.every=0 --resume B/ckpt
first=$(sed -nE '1s/.*"step": *([0-9]+),.*/\1/p' C/metrics.jsonl)
[ "$first" = $((K + 1)) ] || fail "C: first logged step is '$first', want $((K + 1)) (no step redone or skipped)"
same_losses A/metrics.jsonl C/metrics.jsonl $((K + 1)) $N
same_ckpt "$(latest A)" "$(latest C)"
echo "ok: np $NP ZeRO $ZS: $N straight == $K + crash + resume + $K, bitwise"
