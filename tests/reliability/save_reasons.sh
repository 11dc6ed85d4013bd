#!/usr/bin/env bash
# save_reasons.sh LOOM CKPT_SCAN MPIRUN...: issue 18.7. A failed save says why: a read-only file
# system and a full disk each give their own cause in the error line (before, both printed
# "cannot create checkpoint file ()": the HDF5 error stack was cleared before it was read). The
# checkpoint dir is a small tmpfs made read-only, or filled up; needs mount rights, else SKIP (77).
# `latest` stays on the good step-2 checkpoint and no temp or orphan file is left behind.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
workdir save_reasons
mkdir -p small
mount -t tmpfs -o size=4m loomtest small 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
trap 'umount "$PWD/small" 2>/dev/null' EXIT
CK=small/ckpt
RUN=(--out out --set checkpoint.dir=$CK --set checkpoint.every=2 --set checkpoint.keep=3)
LOG=first.log
loom_np 1 "${RUN[@]}" --set train.steps=2 || { show; fail "first save failed"; }
[ "$(latest_step $CK)" = 2 ] || fail "no step-2 checkpoint to start from"

# check_left CASE: latest still on step 2, only the step-2 file (and the lock) in the folder
check_left()
{
    [ "$(latest_step $CK)" = 2 ] || fail "$1: latest moved"
    local extra
    extra=$(ls -A $CK | grep -vxE "latest|step_00000002\.h5|writer\.lock")
    [ -z "$extra" ] || fail "$1: left in $CK: $extra"
}

# read-only: the folder is there, nothing can be created in it
mount -o remount,ro small || fail "remount read-only"
LOG=ro.log
loom_np 1 "${RUN[@]}" --set train.steps=4 --resume $CK --set checkpoint.dir=$CK
rc=$?
show 3
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "read-only: exit $rc, want a clean non-zero exit"
grep -qE "loom: error: .*small/ckpt.*\(.*Read-only file system\)" "$LOG" || fail "read-only: no error line naming the cause"
grep -q "()" "$LOG" && fail "read-only: an empty reason is printed"
mount -o remount,rw small || fail "remount read-write"
check_left read-only

# full: a filler takes every free block, then a save runs out of space
dd if=/dev/zero of=small/filler bs=64k status=none 2>/dev/null
LOG=full.log
loom_np 1 "${RUN[@]}" --set train.steps=4 --resume $CK --set checkpoint.dir=$CK
rc=$?
show 3
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "full disk: exit $rc, want a clean non-zero exit"
grep -qE "loom: error: .*step_00000004.*No space left on device" "$LOG" || fail "full disk: no error line naming the cause"
grep -q "()" "$LOG" && fail "full disk: an empty reason is printed"
rm -f small/filler
check_left "full disk"
echo "ok: read-only and full file systems each named as the cause; latest stays on step 2"
