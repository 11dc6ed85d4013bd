#!/usr/bin/env bash
# stall_resume.sh: 2 ranks, rank 1 stalls (stops making progress, alive) at step 3 with
# parallel.timeout_s=5 and a checkpoint every 2 steps. The job must end by itself, non-zero, with
# rank 0's collective timing out (after the configured 5 s, as its message says) and naming the
# operation and the stalled rank 1, before the 120 s guard (24x the timeout: no wall-clock
# assertion beyond that, so a loaded machine cannot fail it); then a resume from the last complete
# checkpoint (step 2) must finish and match an uninterrupted run bit for bit.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
workdir stall_resume
LOG=ref.log
loom_np 2 --out ref --set train.steps=6 --set checkpoint.every=2 || { show; fail "reference run failed"; }
want=$(digest_of ref/ckpt/step_00000006.h5) || fail "reference checkpoint unreadable"

LOG=stall.log
start=$(date +%s%N)
LOOM_FAULT_ACTION=stall LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=3 \
    loom_np 2 --out run --set train.steps=6 --set checkpoint.every=2 --set parallel.timeout_s=5
rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
show 4
[ $rc -ne 0 ] || fail "job exited 0 with a stalled rank"
[ $rc -ne 124 ] || fail "job hung: killed by the 120 s guard"
# rank 0 notices through its timeout (not some other failure), and names the culprit: the rank
# that did not answer its "alive" message
grep -qE "loom: error: .*(allreduce|allgather|broadcast|reduce_scatter|barrier).* timed out after 5 s on rank 0: no answer from rank 1 \(dead or stalled\)" "$LOG" ||
    fail "no error line from rank 0 naming the timed-out operation and the stalled rank 1"
! grep -qE "no answer from .*rank.* 0[,) ]" "$LOG" || fail "the live rank 0 was named as not answering"
step=$(latest_step run/ckpt) || fail "ckpt info on the interrupted run's latest failed"
[ "$step" = 2 ] || fail "latest is step $step, want 2"

LOG=resume.log
loom_np 2 --out run --resume run/ckpt --set train.steps=6 --set checkpoint.every=2 || { show; fail "resume failed"; }
grep -q "resumed from .* at step 2" "$LOG" || { show; fail "resume did not start from step 2"; }
got=$(digest_of run/ckpt/step_00000006.h5) || fail "resumed checkpoint unreadable"
[ "$got" = "$want" ] || fail "resumed run's step-6 checkpoint differs from the uninterrupted run ($got vs $want)"
echo "ok: stalled job ended (exit $rc) after ${took_ms} ms; resume from step 2 matches bit for bit"
