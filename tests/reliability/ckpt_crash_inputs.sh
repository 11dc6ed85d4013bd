#!/usr/bin/env bash
# ckpt_crash_inputs.sh LOOM DIR: `loom ckpt info` on every damaged checkpoint in DIR (the inputs
# on which bench/fuzz.sh saw HDF5 1.10 itself crash; hdf5_segv_info_* killed `loom ckpt info` by
# SIGSEGV before the whole-file seal) must exit non-zero with one "loom: error:" line naming the
# file, never by a signal or a hang. Reads the inputs only; writes nothing.
LOOM=$1 DIR=$2
fail() { echo "FAIL: $*"; exit 1; }
n=0
for f in "$DIR"/*; do
    [ -f "$f" ] || continue
    out=$(timeout 30 "$LOOM" ckpt info "$f" 2>&1 >/dev/null)
    rc=$?
    name=$(basename "$f")
    [ $rc -ne 0 ] || fail "$name: exit 0 (accepted as a sound checkpoint)"
    [ $rc -ne 124 ] || fail "$name: hung (30 s)"
    [ $rc -lt 128 ] || fail "$name: killed by signal $((rc - 128))"
    [ "$(echo "$out" | grep -c "^loom: error: .*$name")" -eq 1 ] || { echo "$out"; fail "$name: want one error line naming the file"; }
    echo "ok: $name: exit $rc: $out"
    n=$((n + 1))
done
[ $n -ge 12 ] || fail "only $n inputs in $DIR"
echo "ok: $n damaged checkpoints refused cleanly"
