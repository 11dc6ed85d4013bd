#!/usr/bin/env bash
# damaged_links.sh LOOM CKPT_COMPARE: a byte flipped in a group's link table (the stored tensor
# names, not their data) must give a clean error from `loom ckpt info` and from a resume, never a
# crash. Only damages a copy in its work folder.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh"
work damaged_links
train 1 good --set train.steps=2
GOOD=good/ckpt/step_00000002.h5
# the first stored copy of a tensor name (a link message in one group's link table)
at=$(grep -boa 'h\.1\.ln_1\.weight' $GOOD | head -1 | cut -d: -f1)
[ -n "$at" ] || fail "no link name found in $GOOD"
cp $GOOD links.h5 && printf 'H' | dd of=links.h5 bs=1 seek="$at" conv=notrunc status=none || fail "edit"
echo "changed byte $at ('h' of h.1.ln_1.weight) in links.h5"

out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt info links.h5 2>&1)
rc=$?
[ $rc -ne 0 ] || fail "ckpt info: exit 0 on a damaged link table"
[ $rc -lt 124 ] || { echo "$out" | tail -5; fail "loom ckpt info links.h5: exit $rc (killed by signal $((rc - 128)))"; }
echo "ok: ckpt info exit $rc: $(echo "$out" | grep -m1 'loom: error:')"
refused 1 "links\.h5" train "$TINY" "${BASE[@]}" --set train.steps=4 --out res --resume links.h5
