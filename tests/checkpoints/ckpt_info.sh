#!/usr/bin/env bash
# ckpt_info.sh LOOM CKPT_COMPARE: `loom ckpt info DIR|FILE` prints the step and every tensor (as
# h5ls sees them when installed) and exits 0 on a sound checkpoint; non-zero on a damaged copy
# (the whole-file seal; sealed anyway, naming the bad tensor); never crashes. Only damages copies
# in its work folder.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work ckpt_info
train 1 good --set train.steps=3
GOOD=good/ckpt/step_00000003.h5

info() { timeout "$RUN_TIMEOUT" "$LOOM" ckpt info "$@" 2>&1; }
for arg in good/ckpt $GOOD; do
    out=$(info "$arg")
    rc=$?
    [ $rc -eq 0 ] || { echo "$out" | tail; fail "loom ckpt info $arg: exit $rc"; }
    echo "$out" | grep -qE '^step +3$' || { echo "$out" | head; fail "ckpt info $arg: no 'step 3' line"; }
    n=$(echo "$out" | grep -cE '^(model|optimizer/m|optimizer/v)/[^ ]+ .* ok$')
    [ "$n" -ge 3 ] && [ $((n % 3)) -eq 0 ] || fail "ckpt info $arg: $n tensors marked ok"
    for t in model/wte.weight optimizer/m/h.1.mlp.proj.weight optimizer/v/ln_f.bias; do
        echo "$out" | grep -qE "^$t .* ok$" || fail "ckpt info $arg: no '$t ... ok' line"
    done
done
if command -v h5ls >/dev/null; then
    # every dataset in the file is listed (h5ls -r prints "/model/wte.weight Dataset {...}")
    want=$(h5ls -r $GOOD | awk '$2 == "Dataset" { sub("^/", "", $1); print $1 }' | sort)
    have=$(echo "$out" | awk '$NF == "ok" && $1 ~ /\// { print $1 }' | sort)
    [ -n "$want" ] && [ "$want" = "$have" ] || { diff <(echo "$want") <(echo "$have"); fail "tensors listed differ from h5ls -r"; }
fi
echo "ok: ckpt info lists $n tensors at step 3, exit 0"

# a flipped byte: the whole-file seal refuses the file; sealed anyway, every tensor is listed and
# the damaged one marked BAD
cp $GOOD bad.h5 && "$CMP" --flip bad.h5 /optimizer/m/h.0.attn.q.weight 100 || fail "flip"
out=$(info bad.h5)
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] || { echo "$out" | tail; fail "ckpt info on a flipped byte: exit $rc"; }
echo "$out" | grep -qE '^loom: error: checkpoint bad\.h5: whole-file checksum mismatch \(damaged file\)$' ||
    { echo "$out"; fail "no whole-file checksum error for the flipped byte"; }
"$CMP" --seal bad.h5 >/dev/null || fail "seal"
out=$(info bad.h5)
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] || { echo "$out" | tail; fail "ckpt info on a flipped byte (sealed anyway): exit $rc"; }
echo "$out" | grep -qE '^optimizer/m/h\.0\.attn\.q\.weight .* BAD$' || { echo "$out"; fail "no BAD line for the flipped tensor"; }
echo "$out" | grep -qE '^optimizer/v/ln_f\.bias .* ok$' || fail "sound tensors no longer listed as ok"
echo "ok: flipped byte: exit $rc, $(echo "$out" | grep -m1 BAD)"

cp $GOOD half.h5 && truncate -s $(($(stat -c %s $GOOD) / 2)) half.h5 || fail "truncate"
out=$(info half.h5)
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "ckpt info on a truncated file: exit $rc"
echo "$out" | grep -qE 'loom: error: checkpoint half\.h5: truncated \([0-9]+ of [0-9]+ bytes\)' ||
    { echo "$out"; fail "no message naming the truncation"; }
out=$(info nowhere)
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "ckpt info on a missing path: exit $rc"
echo "ok: truncated and missing: exit $rc"

# issue 18.5: a FIFO as the checkpoint, named by `latest`, or as `latest` itself is refused at once
# (open() on a FIFO blocked forever: `refused` fails a hang at its timeout)
mkfifo fifo.h5 && mkdir -p fifodir fifolatest && mkfifo fifodir/step_00000003.h5 && mkfifo fifolatest/latest || fail "mkfifo"
echo step_00000003.h5 >fifodir/latest
RES=(train "$TINY" "${BASE[@]}" --set train.steps=4)
refused 1 "fifo\.h5: not a regular file, not a checkpoint" ckpt info fifo.h5
refused 1 "fifo\.h5: not a regular file" ckpt seal fifo.h5
refused 1 "fifo\.h5: not a regular file, not a checkpoint" "${RES[@]}" --out f1 --resume fifo.h5
refused 1 "fifodir/latest points to step_00000003\.h5, which is not a regular file" "${RES[@]}" --out f2 --resume fifodir
refused 1 "fifolatest/latest: \`latest\` is not a regular file" "${RES[@]}" --out f3 --resume fifolatest
echo "ok: FIFOs refused without blocking"
