#!/usr/bin/env bash
# shared_dir.sh LOOM CKPT_SCAN MPIRUN...: issue 18.8. Two jobs given the same checkpoint folder
# used to kill each other (one's rotation deleted the other's temp file). Now the writer (rank 0)
# holds an flock on <folder>/writer.lock for the whole job: a second job is refused before its
# first step with one line naming the first job's pid and host, on 1 and 2 ranks, and the first
# job's files are untouched. Once the first job is gone (killed: the kernel drops its lock, no
# stale lock to clean up) the folder is free again. Only kills the job it started.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
workdir shared_dir
CK=$PWD/ck
# job A saves every step and stalls (pause()) at the start of step 3, holding the folder
LOOM_FAULT_ACTION=stall LOOM_FAULT_STEP=3 "$LOOM" train "$CFG" "${SETS[@]}" --out a --set train.steps=10 \
    --set checkpoint.dir=$CK --set checkpoint.every=1 >a.log 2>&1 &
A=$!
# SIGKILL: a SIGTERM only asks loom to stop after the step, and job A's step never ends (stall)
trap 'kill -KILL $A 2>/dev/null; wait $A 2>/dev/null' EXIT
for _ in $(seq 1200); do
    [ "$(cat $CK/latest 2>/dev/null)" = step_00000002.h5 ] && break
    kill -0 $A 2>/dev/null || { cat a.log; fail "job A ended early"; }
    sleep 0.1
done
[ "$(cat $CK/latest 2>/dev/null)" = step_00000002.h5 ] || fail "job A did not reach its step-2 checkpoint"
want=$(digest_of $CK/step_00000002.h5)
before=$(ls -A $CK | sort | tr '\n' ' ')

msg="checkpoint folder $CK is in use by another job \(pid $A on host $(hostname)\)"
for np in 1 2; do
    [ $np -eq 2 ] && [ ${#MPIRUN[@]} -eq 0 ] && continue
    LOG=b$np.log
    loom_np $np --out b$np --set train.steps=4 --set checkpoint.dir=$CK --set checkpoint.every=1 \
        --set parallel.zero_stage=$((np == 2 ? 3 : 0))
    rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { show; fail "$np rank(s): exit $rc, want a clean refusal"; }
    grep -qE "loom: error: $msg" "$LOG" || { show; fail "$np rank(s): no error line naming job A's pid and host"; }
    [ ! -s b$np/metrics.jsonl ] || fail "$np rank(s): the refused job trained"
    echo "ok $np rank(s): $(grep -m1 'loom: error' "$LOG")"
done
kill -0 $A 2>/dev/null || fail "job A died while another job was refused"
[ "$(ls -A $CK | sort | tr '\n' ' ')" = "$before" ] || fail "the refused jobs changed $CK: $(ls -A $CK)"
[ "$(digest_of $CK/step_00000002.h5)" = "$want" ] || fail "job A's step-2 checkpoint changed"

kill -KILL $A; wait $A 2>/dev/null
trap - EXIT
LOG=after.log
loom_np 1 --out c --set train.steps=4 --set checkpoint.dir=$CK --set checkpoint.every=1 --resume $CK ||
    { show; fail "the folder is not free after job A ended"; }
[ "$(latest_step $CK)" = 4 ] || fail "job C did not save step 4"
echo "ok: a second writer refused by name while the first runs; the folder free once it is gone"
