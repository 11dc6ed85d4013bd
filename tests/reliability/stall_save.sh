#!/usr/bin/env bash
# stall_save.sh: 2 ranks, one rank stalls (alive, no progress) inside the checkpoint save after
# step 2 (LOOM_FAULT_ACTION=stall_save): rank 0 in the middle of writing the file, or rank 1
# between its gathers (STALL_RANK, default 1; STALL_ZERO=3: sharded state, so the gathers are
# collectives the stall breaks). The live rank must end the job with one error line
# naming the stalled rank, its wait bounded by parallel.timeout_s plus the save's expected time
# (the tiny model's save is ~1 MB: well under a second at any measured rate, times the margin),
# not 4x the timeout as before. The bound is read from the error line ("timed out after W s")
# and, with slack for the abort, from the wall clock after the stall's fault line appeared.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
STALL_RANK=${STALL_RANK:-1}
ZERO=${STALL_ZERO:-0} # parallel.zero_stage: 3 makes the save's gathers collectives
LIVE=$((1 - STALL_RANK))
T=8
workdir "stall_save_${STALL_RANK}_$ZERO"
LOG=stall.log
FAULT_LINE="[rank $STALL_RANK] fault injection: stall_save in the save of step 2"
LOOM_FAULT_ACTION=stall_save LOOM_FAULT_RANK=$STALL_RANK LOOM_FAULT_STEP=2 \
    loom_np 2 --out run --set train.steps=4 --set checkpoint.every=2 --set parallel.timeout_s=$T \
    --set parallel.zero_stage=$ZERO &
job=$!
# when the stall began: the fault line's arrival, polled every 0.1 s
stall_ns=
while kill -0 $job 2>/dev/null; do
    grep -qF "$FAULT_LINE" "$LOG" 2>/dev/null && { stall_ns=$(date +%s%N); break; }
    sleep 0.1
done
wait $job
rc=$?
after_ms=$(( ($(date +%s%N) - ${stall_ns:-0}) / 1000000 ))
show 6
[ $rc -ne 0 ] || fail "job exited 0 with a rank stalled in a save"
[ $rc -ne 124 ] || fail "job hung: killed by the 120 s guard"
[ -n "$stall_ns" ] && grep -qF "$FAULT_LINE" "$LOG" ||
    fail "rank $STALL_RANK never reached the save of step 2 (no fault line)"
line=$(grep -E "loom: error: .*timed out after [0-9.]+ s on rank $LIVE: no answer from rank $STALL_RANK \(dead or stalled\)" "$LOG" | head -1)
[ -n "$line" ] || fail "no error line from rank $LIVE naming the stalled rank $STALL_RANK"
! grep -qE "no answer from .*rank.* $LIVE[,) ]" "$LOG" || fail "the live rank $LIVE was named as not answering"
wait_s=$(echo "$line" | sed -E 's/.*timed out after ([0-9.]+) s.*/\1/')
# timeout_s + the save's expected time: 1 s covers the tiny save's at any rate loom can measure
awk -v w="$wait_s" -v t=$T 'BEGIN { exit !(w >= t && w <= t + 1) }' ||
    fail "the save's wait was $wait_s s, want parallel.timeout_s $T + the save's expected time (< 1 s)"
# no second wait after the first timeout (an agreement with the stalled rank would add another)
n=$(grep -c "timed out after" "$LOG")
[ "$n" -le 1 ] || fail "$n timeouts reported: the job waited for the stalled rank more than once"
# the job ends within that wait + 3 s (asking who is alive) + 11 s for the abort on a loaded
# machine; 4x the timeout (the fixed wait before) would exceed it
limit_ms=$(( (T + 1 + 3 + 11) * 1000 ))
[ $after_ms -le $limit_ms ] || fail "the job ended $after_ms ms after the stall, over the ${limit_ms} ms that timeout_s $T allows"
step=$(latest_step run/ckpt 2>/dev/null)
[ "${step:-none}" != 2 ] || [ "$STALL_RANK" != 0 ] || fail "rank 0 stalled mid-write, yet latest names step 2"
echo "ok: rank $STALL_RANK stalled in the save; rank $LIVE named it after $wait_s s (timeout_s $T); job ended (exit $rc) ${after_ms} ms after the stall"
