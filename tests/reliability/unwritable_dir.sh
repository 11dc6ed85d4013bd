#!/usr/bin/env bash
# unwritable_dir.sh LOOM CKPT_SCAN MPIRUN...: checkpoint.dir below a regular file can never be
# created: the first save fails with one error line naming the path, the job exits non-zero
# (not by a signal), on 1 rank and on 2 ranks with ZeRO-3 (the save's gathers are collective: rank 0
# must finish them after its write failed, or, now, the folder lock refuses it before step 1); with
# on_error "continue" too (issue 18.7: a run whose saves all fail no longer exits 0).
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
workdir unwritable_dir
echo "not a directory" >blocker
for np in 1 2; do
    LOG=stop_$np.log
    loom_np $np --out out --set train.steps=4 --set checkpoint.every=2 --set checkpoint.dir=blocker/ckpt \
        --set parallel.zero_stage=$((np == 2 ? 3 : 0))
    rc=$?
    [ $rc -ne 0 ] || fail "$np rank(s): exit 0 with an impossible checkpoint dir"
    [ $rc -lt 128 ] || { show; fail "$np rank(s): killed by signal $((rc - 128))"; }
    grep -qE "loom: error: .*blocker" "$LOG" || { show; fail "$np rank(s): no error line naming blocker/ckpt"; }
    echo "ok $np rank(s): $(grep -m1 'loom: error' "$LOG")"
done
# on_error=continue: the folder is checked (locked) before step 1, so nothing trains into a folder
# that can never hold a checkpoint; the job exits non-zero, not by a signal
LOG=continue.log
loom_np 2 --out out --set train.steps=4 --set checkpoint.every=2 --set checkpoint.dir=blocker/ckpt \
    --set checkpoint.on_error=continue
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || { show; fail "on_error=continue: exit $rc, want a clean non-zero exit"; }
grep -qE "loom: error: .*blocker" "$LOG" || { show; fail "on_error=continue: no error line naming blocker/ckpt"; }
echo "ok: on_error=continue ends non-zero: $(grep -m1 'loom: error' "$LOG")"
