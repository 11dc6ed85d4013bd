#!/usr/bin/env bash
# stall_resume.sh: 2 ranks, rank 1 stalls (stops making progress, alive) at step 3 with
# parallel.timeout_s=5 and a checkpoint every 2 steps. The job must exit non-zero within
# timeout + 10 s with a message from rank 0 naming the operation and the stalled rank 1; then a
# resume from the last complete checkpoint (step 2) must finish and match an uninterrupted run bit
# for bit.
source "$(dirname "$0")/common.sh"
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
[ $took_ms -le 15000 ] || fail "took ${took_ms} ms to end (limit timeout_s 5 + 10 s)"
# rank 0 notices, and names the culprit: the rank that did not answer its "alive" message
grep -qE "loom: error: .*(allreduce|allgather|broadcast|reduce_scatter|barrier).* on rank 0: no answer from rank 1 \(dead or stalled\)" "$LOG" ||
    fail "no error line from rank 0 naming the operation and the stalled rank 1"
! grep -qE "no answer from .*rank.* 0[,) ]" "$LOG" || fail "the live rank 0 was named as not answering"
step=$(latest_step run/ckpt) || fail "ckpt info on the interrupted run's latest failed"
[ "$step" = 2 ] || fail "latest is step $step, want 2"

LOG=resume.log
loom_np 2 --out run --resume run/ckpt --set train.steps=6 --set checkpoint.every=2 || { show; fail "resume failed"; }
grep -q "resumed from .* at step 2" "$LOG" || { show; fail "resume did not start from step 2"; }
got=$(digest_of run/ckpt/step_00000006.h5) || fail "resumed checkpoint unreadable"
[ "$got" = "$want" ] || fail "resumed run's step-6 checkpoint differs from the uninterrupted run ($got vs $want)"
echo "ok: stalled job ended (exit $rc) after ${took_ms} ms; resume from step 2 matches bit for bit"
