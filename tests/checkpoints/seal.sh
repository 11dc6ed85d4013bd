#!/usr/bin/env bash
# seal.sh LOOM CKPT_COMPARE: the whole-file seal end to end. A sealed checkpoint with one byte
# flipped in the middle is refused by `loom ckpt info` and by a resume (file or directory), with
# the checksum message, a non-zero exit and the file left as it was; a file edited through HDF5
# (h5repack always, h5py too when installed, and the seal cut off) has no seal and is refused
# until `loom ckpt seal` accepts it, after which it loads and resumes. Only edits copies.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work seal
train 1 good --set train.steps=2
GOOD=good/ckpt/step_00000002.h5
size=$(stat -c %s $GOOD)
RES=(train "$TINY" "${BASE[@]}" --set train.steps=3)

# flip_byte FILE AT: xor 0x10 into byte AT
flip_byte()
{
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ') && [ -n "$b" ] || fail "read byte $2 of $1"
    printf "\\$(printf %03o $((b ^ 16)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none || fail "write $1"
}

# one byte in the middle: refused everywhere, the file unchanged, nothing trained or saved
mkdir -p middir && cp $GOOD middir/step_00000002.h5 && echo step_00000002.h5 >middir/latest
flip_byte middir/step_00000002.h5 $((size / 2))
cp middir/step_00000002.h5 mid.orig
MSG="step_00000002\.h5: whole-file checksum mismatch \(damaged file\)"
refused 1 "checkpoint middir/$MSG" ckpt info middir/step_00000002.h5
refused 1 "$MSG" ckpt info middir
refused 1 "$MSG" "${RES[@]}" --out mid1 --resume middir
refused 1 "$MSG" "${RES[@]}" --out mid2 --resume middir/step_00000002.h5
cmp -s middir/step_00000002.h5 mid.orig || fail "a refused load changed the file"
[ ! -e mid1/metrics.jsonl ] && [ ! -e mid1/ckpt ] && [ ! -e mid2/ckpt ] || fail "a refused resume trained or saved"

# a sound file: `ckpt seal` leaves it alone
out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt seal $GOOD 2>&1) || { echo "$out"; fail "ckpt seal on a sealed file"; }
echo "$out" | grep -q "already sealed, unchanged" || { echo "$out"; fail "ckpt seal: no 'already sealed'"; }

# seal_again FILE: refused without a seal, accepted by `loom ckpt seal`, then `ckpt info` is clean
seal_again()
{
    refused 1 "checkpoint $1: no seal \(not written by loom, or edited after the save; run \`loom ckpt seal $1\`" ckpt info "$1"
    local out
    out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt seal "$1" 2>&1) || { echo "$out"; fail "loom ckpt seal $1"; }
    echo "ok: $out"
    out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt info "$1" 2>&1) || { echo "$out" | tail; fail "ckpt info $1 after sealing"; }
    echo "$out" | grep -q "^STATUS: ok" || fail "ckpt info $1: not ok after sealing"
}

# the seal cut off (what any HDF5 writer does on close): sealing gives back the original bytes
cp $GOOD cut.h5 && truncate -s $((size - 24)) cut.h5 || fail "truncate"
seal_again cut.h5
cmp -s cut.h5 $GOOD || fail "sealed again, cut.h5 differs from the original"
train 1 cut --set train.steps=3 --resume cut.h5

# A file rewritten by another HDF5 writer: h5repack (hdf5-tools, which .ci/install-deps.sh
# installs) always; h5py as well where it is installed. A missing h5repack fails the test.
command -v h5repack >/dev/null || fail "h5repack not found (install hdf5-tools: .ci/install-deps.sh)"
h5repack $GOOD edited.h5 || fail "h5repack"
seal_again edited.h5
echo "ok: rewritten by h5repack, sealed, reads"
if python3 -c "import h5py" 2>/dev/null; then
    cp $GOOD edited2.h5 && python3 -c "
import h5py
with h5py.File('edited2.h5', 'r+') as f:
    f.attrs['job_config'] = f.attrs['job_config']  # rewritten by h5py: a variable-length string now
" || fail "h5py edit"
    seal_again edited2.h5
    echo "ok: edited with h5py, sealed, reads"
fi
echo "ok: flipped byte refused, unsealed files refused until 'loom ckpt seal'"
