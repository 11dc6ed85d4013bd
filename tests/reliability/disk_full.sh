#!/usr/bin/env bash
# disk_full.sh LOOM CKPT_SCAN MPIRUN... with DISK_FULL=fsize|tmpfs: a 2-rank job whose checkpoint
# save runs out of space after a good save at step 2:
#   fsize  1 rank under `ulimit -f` (SIGXFSZ ignored, so write() fails with EFBIG; 1 rank as the
#          limit would also break Open MPI's shared-memory files),
#   tmpfs  2 ranks; the checkpoint dir is a 2 MiB tmpfs that holds one checkpoint (1.5 MB of blocks) but not two
#          (ENOSPC); needs mount rights, else SKIP (77).
# on_error "stop": exit non-zero with an error line (on 1 rank it must name the cause; on 2 ranks
# rank 1's "the save failed on rank 0" may be the only line that gets out before the abort);
# "continue": training goes on to the end, and the job exits non-zero as its last save failed
# too. Either way the
# step-2 checkpoint stays `latest`, loadable and finite, and no temp file is left behind.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
mode=${DISK_FULL:-fsize}
workdir disk_full_$mode
RUN=(--set train.steps=6 --set checkpoint.every=2 --set checkpoint.keep=1)
if [ "$mode" = tmpfs ]; then
    mkdir -p small
    mount -t tmpfs -o size=2m loomtest small 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
    trap 'umount "$PWD/small"' EXIT
    CK=small/ckpt
    NP=2
    # ZeRO-3: the save gathers shards region by region while rank 0 writes; a write that fails
    # part way must still finish the gathers (no rank left waiting in one)
    RUN+=(--set parallel.zero_stage=3)
else
    CK=out/ckpt
    NP=1
fi
LOG=first.log
loom_np $NP --out out "${RUN[@]}" --set train.steps=2 --set checkpoint.dir=$CK || { show; fail "first save failed"; }
[ "$(latest_step $CK)" = 2 ] || fail "no step-2 checkpoint to start from"
want=$(digest_of $CK/step_00000002.h5)
# the step-2 file spans 2.5 MB: a 1 MiB file size limit stops every later save part way
[ "$mode" = fsize ] && WRAP=(bash -c 'trap "" XFSZ; ulimit -f 1024; exec "$@"' limit)

check_previous()
{
    local got
    got=$(latest_step $CK) || fail "$1: ckpt info on latest failed"
    [ "$got" = 2 ] || fail "$1: latest moved to step $got"
    [ "$(digest_of $CK/step_00000002.h5)" = "$want" ] || fail "$1: the step-2 checkpoint changed"
    ls $CK/.*.tmp >/dev/null 2>&1 && fail "$1: a temp file was left in $CK"
    return 0
}

LOG=stop.log
loom_np $NP --out out "${RUN[@]}" --set checkpoint.dir=$CK --resume $CK --set checkpoint.on_error=stop
rc=$?
show 3
[ $rc -ne 0 ] || fail "on_error=stop: job exited 0 after a failed save"
[ $rc -lt 128 ] || fail "on_error=stop: killed by signal $((rc - 128)), no clean stop"
cause="loom: error: .*step_00000004.*(File too large|No space left)"
grep -qE "$cause" "$LOG" || { [ $NP -gt 1 ] && grep -qE "loom: error: .*save failed on rank 0" "$LOG"; } ||
    fail "on_error=stop: no error line naming the checkpoint and the cause"
check_previous "on_error=stop"

# continue: the step-4 save fails with a warning and training goes on; the last save (step 6)
# fails too, so the job ends non-zero (issue 18.7: it exited 0 with nothing of its end state saved)
LOG=continue.log
loom_np $NP --out out "${RUN[@]}" --set checkpoint.dir=$CK --resume $CK --set checkpoint.on_error=continue
rc=$?
[ $rc -ne 0 ] || { show; fail "on_error=continue: exit 0 although the last save failed"; }
[ $rc -lt 128 ] || { show; fail "on_error=continue: killed by signal $((rc - 128))"; }
grep -q "checkpoint failed, training continues" "$LOG" || { show; fail "on_error=continue: no warning"; }
grep -q '"step": *6' out/metrics.jsonl || { show; fail "on_error=continue: training did not reach step 6"; }
grep -qE "loom: error: .*last save \(step 6\) failed|save failed on rank 0" "$LOG" ||
    { show; fail "on_error=continue: no error line for the failed last save"; }
check_previous "on_error=continue"
echo "ok ($mode): failed saves stop or continue as asked; step 2 stays latest and intact"
