#!/usr/bin/env bash
# nan_steps.sh LOOM CKPT_SCAN MPIRUN... with NAN_CASE=loss|grad|stop, 2 ranks, a checkpoint
# every 2 steps (core/train/fault.h injects the bad values on one rank only):
#   loss  rank 1's loss of step 3 is NaN -> every rank skips step 3 and the job finishes
#   grad  rank 0's gradients of step 4 are NaN (the reduction carries them to rank 1) -> every
#         rank skips step 4, and the step-4 checkpoint right after it is finite
#   stop  rank 1's loss is +Inf at steps 3 and 4 with train.max_bad_steps=2 -> the job stops
#         non-zero with the max_bad_steps message; `latest` stays on step 2
# In every case no checkpoint file holds a NaN or Inf (read back with ckpt_scan).
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
case=${NAN_CASE:-loss}
workdir nan_$case
RUN=(--set train.steps=6 --set checkpoint.every=2 --set checkpoint.keep=10)
LOG=run.log
case $case in
    loss) export LOOM_FAULT_ACTION=nan LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=3; bad=3 ;;
    grad) export LOOM_FAULT_ACTION=nan_grad LOOM_FAULT_RANK=0 LOOM_FAULT_STEP=4; bad=4 ;;
    stop) export LOOM_FAULT_ACTION=inf LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=3 LOOM_FAULT_COUNT=2; bad=3 ;;
    *) fail "unknown NAN_CASE $case" ;;
esac
loom_np 2 --out out "${RUN[@]}" --set train.max_bad_steps=2
rc=$?
grep -q "fault injection: $LOOM_FAULT_ACTION at step $bad" "$LOG" || { show; fail "the fault did not fire"; }
# every rank saw the bad step and skipped it: each logs its own warning (matched without the
# "[rank N]" prefix, which two ranks writing to one stderr may interleave)
n=$(grep -oE "step $bad: non-finite loss or gradient \([^)]*\): step skipped" "$LOG" | wc -l)
[ "$n" = 2 ] || { show; fail "step $bad skipped on $n of 2 ranks"; }
if [ "$case" = stop ]; then
    [ $rc -ne 0 ] || { show; fail "job exited 0 after 2 bad steps in a row with max_bad_steps=2"; }
    [ $rc -lt 128 ] || { show; fail "killed by signal $((rc - 128))"; }
    grep -qE "loom: error: .*2 non-finite steps in a row.*max_bad_steps" "$LOG" ||
        { show; fail "no max_bad_steps error line"; }
    [ "$(latest_step out/ckpt)" = 2 ] || fail "latest is not the step-2 checkpoint"
else
    [ $rc -eq 0 ] || { show; fail "job failed (exit $rc) after one bad step"; }
    n=$(grep -o "step skipped" "$LOG" | wc -l)
    [ "$n" = 2 ] || { show; fail "$n skipped-step warnings, want one per rank"; }
    grep -q "done: 6 steps" "$LOG" || { show; fail "job did not finish 6 steps"; }
    # training goes on: the last step's loss is a finite number in the metrics
    last=$(tail -1 out/metrics.jsonl)
    echo "$last" | grep -qE '"step": 6, "loss": [0-9]+\.[0-9]+' || fail "step 6 loss not finite: $last"
fi
"$SCAN" out/ckpt || fail "a checkpoint holds a non-finite value or is unreadable"
echo "ok ($case): bad step $bad skipped on every rank (exit $rc)"
