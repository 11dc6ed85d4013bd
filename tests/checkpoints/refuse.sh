#!/usr/bin/env bash
# refuse.sh LOOM CKPT_COMPARE MPIRUN...: a resume that cannot be exact is refused with one clear
# line and a non-zero exit, never a crash or a hang: another model config, a flipped tensor byte
# (any group; caught by the whole-file seal, and by the tensor's own checksum under a fresh seal),
# a truncated file; on 1 and 2 ranks. Only damages copies in its work folder.
LOOM=$1 CMP=$2; shift 2
MPIRUN=("$@")
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work refuse
train 1 good --set train.steps=2
GOOD=good/ckpt/step_00000002.h5
RES=(train "$TINY" "${BASE[@]}" --set train.steps=4)

# another architecture: the field is named, nothing is trained or saved
refused 1 "field 'model\.n_layer'" "${RES[@]}" --out mis1 --resume good/ckpt --set model.n_layer=3
[ ! -s mis1/metrics.jsonl ] && [ ! -e mis1/ckpt ] || fail "mis1: a refused resume trained or saved"
refused 1 "field 'model\.mlp'" "${RES[@]}" --out mis2 --resume $GOOD --set model.mlp=swiglu
if [ "${#MPIRUN[@]}" -gt 0 ]; then
    refused 2 "field 'model\.n_layer'" "${RES[@]}" --out mis3 --resume good/ckpt --set model.n_layer=3 \
        --set parallel.zero_stage=3
fi

# one flipped byte in the tensor data of the last group read, and of the first. The whole-file
# seal refuses the file before HDF5 reads it, and `loom ckpt seal` will not accept it (naming the
# tensor) nor change it; sealed anyway (ckpt_compare --seal), the per-tensor checksum catches it.
cp $GOOD bad_v.h5 && "$CMP" --flip bad_v.h5 /optimizer/v/h.1.mlp.fc.weight 40000 || fail "flip"
cp bad_v.h5 bad_v.orig
refused 1 "bad_v\.h5: whole-file checksum mismatch \(damaged file\)" "${RES[@]}" --out bad0 --resume bad_v.h5
if [ "${#MPIRUN[@]}" -gt 0 ]; then
    refused 2 "bad_v\.h5: whole-file checksum mismatch" "${RES[@]}" --out bad0 --resume bad_v.h5
fi
refused 1 "bad_v\.h5: not sealed: 1 tensor\(s\) failed their checksum, first /optimizer/v/h\.1\.mlp\.fc\.weight \(BAD\)" \
    ckpt seal bad_v.h5
cmp -s bad_v.h5 bad_v.orig || fail "a refused 'loom ckpt seal' changed the file"
"$CMP" --seal bad_v.h5 >/dev/null || fail "seal"
refused 1 "bad_v\.h5.*checksum mismatch in /optimizer/v/h\.1\.mlp\.fc\.weight" "${RES[@]}" --out bad1 --resume bad_v.h5
[ ! -s bad1/metrics.jsonl ] && [ ! -e bad1/ckpt ] || fail "bad1: a refused resume trained or saved"
cp $GOOD bad_m.h5 && "$CMP" --flip bad_m.h5 /model/wte.weight 4000 && "$CMP" --seal bad_m.h5 >/dev/null || fail "flip"
refused 1 "checksum mismatch in /model/wte\.weight" "${RES[@]}" --out bad2 --resume bad_m.h5
if [ "${#MPIRUN[@]}" -gt 0 ]; then
    refused 2 "checksum mismatch in /optimizer/v/h\.1\.mlp\.fc\.weight" "${RES[@]}" --out bad3 --resume bad_v.h5 \
        --set parallel.zero_stage=3
fi

# cut in half
cp $GOOD half.h5 && truncate -s $(($(stat -c %s $GOOD) / 2)) half.h5 || fail "truncate"
refused 1 "half\.h5: truncated \([0-9]+ of $(stat -c %s $GOOD) bytes\)" "${RES[@]}" --out bad4 --resume half.h5

# the original was never touched: it still resumes
train 1 ok --set train.steps=3 --resume good/ckpt
[ "$(losses ok/metrics.jsonl 3 3 | wc -l)" -eq 1 ] || fail "ok: the good checkpoint no longer resumes"
echo "ok: mismatched and damaged checkpoints refused"
