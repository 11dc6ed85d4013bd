#!/usr/bin/env bash
# slow_waits.sh LOOM MPIRUN...: until step 1 is done the collectives wait 4x parallel.timeout_s
# (ranks reach their first collective at different times), afterwards timeout_s itself. Rank 1
# stalls before step 1, then (another job) before step 2; rank 0's message gives the limit it used.
set -u
loom=$1; shift
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf slow_waits && mkdir -p slow_waits && cd slow_waits || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# run STEP: 2 ranks, rank 1 stalls at the start of STEP (timeout_s 3); output in sSTEP.log
run()
{
    LOOM_FAULT_ACTION=stall LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=$1 timeout -k 5 120 "${MPI[@]}" -np 2 \
        -x LOOM_FAULT_ACTION -x LOOM_FAULT_RANK -x LOOM_FAULT_STEP \
        "$loom" train "$src/configs/tiny-train.json" --set train.steps=50 --set train.batch_size=4 \
        --set parallel.threads=1 --set parallel.timeout_s=3 --out "s$1" --quiet >"s$1.log" 2>&1
}
MPI=("$@")
for step in 1 2; do
    run $step
    rc=$?
    tail -3 "s$step.log"
    [ $rc -ne 0 ] || fail "step $step: the job exited 0 with a stalled rank"
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "step $step: the job hung (120 s guard)"
done
grep -qE "on rank 0: no answer from rank 1" s1.log || fail "stall before step 1: rank 0 did not name rank 1"
grep -qE "timed out after 12 s on rank 0" s1.log || fail "stall before step 1: want a 12 s limit (4 x timeout_s 3)"
grep -qE "timed out after 3 s on rank 0: no answer from rank 1" s2.log || fail "stall before step 2: want the 3 s limit"
echo "ok: step 1 waited 4 x timeout_s, step 2 timeout_s"
