#!/usr/bin/env bash
# info_verdict.sh LOOM CKPT_COMPARE: `loom ckpt info`'s verdict is the load's. Copies edited through
# HDF5 and re-sealed (every tensor sound) that a resume refuses are reported REFUSED with the load's
# reason and a non-zero exit: an rng_counter that disagrees with the cursor, a model_config (and
# job_config) that do not describe the stored tensors. A deleted loom_format under a valid loom
# seal is named as damaged root attributes, not "not a loom checkpoint". Only edits copies here.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work info_verdict
train 1 good --set train.steps=2
GOOD=good/ckpt/step_00000002.h5
RES=(train "$TINY" "${BASE[@]}" --set train.steps=4)
info() { timeout "$RUN_TIMEOUT" "$LOOM" ckpt info "$1" 2>&1; }
out=$(info $GOOD) || { echo "$out" | tail -3; fail "ckpt info on the sound file: exit non-zero"; }
grep -qx "STATUS: ok" <<<"$out" || fail "sound file: no 'STATUS: ok'"
# verdict NAME PATTERN: ckpt info and a resume both refuse NAME.h5 with PATTERN
verdict()
{
    local out rc
    out=$(info "$1.h5")
    rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] || { echo "$out" | tail -3; fail "ckpt info $1.h5: exit $rc, want a refusal"; }
    grep -qx "STATUS: REFUSED (a load refuses it: see the error)" <<<"$out" || { echo "$out" | tail -3; fail "ckpt info $1.h5: no REFUSED status"; }
    grep -qE "^loom: error: $1\.h5: attribute $2" <<<"$out" || { echo "$out" | tail -3; fail "ckpt info $1.h5: not the load's reason /$2/"; }
    refused 1 "$1\.h5: attribute $2" "${RES[@]}" --out "r$1" --resume "$1.h5" "${@:3}"
    echo "ok: $1: ckpt info and the resume refuse it alike"
}
cp $GOOD rng.h5 && "$CMP" --set-attr rng.h5 rng_counter $((1 << 31)) >/dev/null && "$LOOM" ckpt seal rng.h5 >/dev/null || fail "edit rng"
verdict rng "rng_counter = 2147483648, but the data order's position is sample_cursor = 24"
mc=$("$CMP" --get-attr $GOOD model_config) && jc=$("$CMP" --get-attr $GOOD job_config) || fail "get"
cp $GOOD dff.h5 && "$CMP" --set-attr dff.h5 model_config "${mc/\"d_ff\":256/\"d_ff\":128}" >/dev/null &&
  "$CMP" --set-attr dff.h5 job_config "$(echo "$jc" | sed 's/"d_ff": *256/"d_ff": 128/')" >/dev/null &&
  "$LOOM" ckpt seal dff.h5 >/dev/null || fail "edit dff"
verdict dff "model_config does not describe the stored tensors: .*shape mismatch for /model/h\.0\.mlp\.fc\.weight" --set model.d_ff=128
cp $GOOD fmt.h5 && "$CMP" --del-attr fmt.h5 loom_format >/dev/null && "$CMP" --seal fmt.h5 >/dev/null || fail "edit fmt"
out=$(info fmt.h5) && fail "ckpt info accepted a file without loom_format"
grep -q "^loom: error: checkpoint fmt\.h5: damaged root attributes under a valid loom seal: loom_format is missing" <<<"$out" ||
  grep -q "^loom: error: fmt\.h5: damaged root attributes under a valid loom seal: loom_format is missing" <<<"$out" ||
  { echo "$out" | tail -3; fail "a deleted loom_format under a valid seal: not named as damaged root attributes"; }
echo "ok: a deleted loom_format under a valid seal is named as damaged"
# a v2 file whose `tensors` manifest and an AdamW moment were both deleted: the manifest cannot
# name the loss, and every remaining tensor is sound, but a resume misses the moment
cp $GOOD lost.h5 && "$CMP" --del-attr lost.h5 tensors >/dev/null && "$CMP" --del-dataset lost.h5 /optimizer/m/ln_f.bias >/dev/null &&
  "$LOOM" ckpt seal lost.h5 >/dev/null || fail "edit lost"
out=$(info lost.h5) && { echo "$out" | tail -3; fail "ckpt info accepted a file that lost /optimizer/m/ln_f.bias"; }
grep -qx "STATUS: REFUSED (a load refuses it: see the error)" <<<"$out" || { echo "$out" | tail -3; fail "lost.h5: no REFUSED status"; }
grep -q "^loom: error: .*lost\.h5.*optimizer/m/ln_f\.bias" <<<"$out" || { echo "$out" | tail -3; fail "lost.h5: the lost tensor is not named"; }
refused 1 "lost\.h5.*optimizer/m/ln_f\.bias" "${RES[@]}" --out rlost --resume lost.h5
echo "ok: a lost moment under a deleted manifest: ckpt info and the resume refuse it alike"
