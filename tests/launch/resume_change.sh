#!/usr/bin/env bash
# resume_change.sh LOOM JOB: resuming with a different train section (batch size, seq_len, seed,
# ...) changes the data order: it is refused in one line naming the field, unless
# train.allow_change=true (then a warning naming it); the unchanged job and exempt fields
# (train.micro_batch, train.log_every, train.steps) resume; sampling ignores train (issue 18.10).
set -u
loom=$1 job=$2
here=$(dirname "$0")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run=(train "$job" --set train.steps=4 --set checkpoint.every=2 --quiet)
timeout 300 "$loom" "${run[@]}" --out "$w/ref" > /dev/null 2> "$w/err" || { cat "$w/err"; fail "reference run"; }
mid="$w/ref/ckpt/step_00000002.h5"
[ -f "$mid" ] || fail "no step-2 checkpoint: $(ls "$w/ref/ckpt")"
for change in train.batch_size=16 train.seq_len=32 train.seed=7 train.lr=1e-2 train.warmup=1; do
    "$here/expect_fail.sh" "step_00000002.h5: ${change%%=*} changed since the checkpoint .*train.allow_change=true" \
        "$loom" "${run[@]}" --out "$w/x" --resume "$mid" --set "$change" || exit 1
done
timeout 300 "$loom" "${run[@]}" --out "$w/ok" --resume "$mid" > /dev/null 2> "$w/err" || { cat "$w/err"; fail "unchanged resume refused"; }
timeout 300 "$loom" "${run[@]}" --out "$w/mb" --resume "$mid" --set train.micro_batch=4 --set train.log_every=2 \
    --set train.steps=6 > /dev/null 2> "$w/err" || { cat "$w/err"; fail "a resume changing only micro_batch / log_every / steps refused"; }
timeout 300 "$loom" "${run[@]}" --out "$w/allow" --resume "$mid" --set train.batch_size=16 --set train.allow_change=true \
    > /dev/null 2> "$w/err" || { cat "$w/err"; fail "train.allow_change=true did not allow the change"; }
grep -q "train.batch_size changed since the checkpoint (8 -> 16); resuming anyway" "$w/err" ||
    { cat "$w/err"; fail "allow_change: no warning naming the field"; }
# sample and eval only read the weights: a different train section is no reason to refuse them
timeout 120 "$loom" sample "$job" --ckpt "$mid" --set train.batch_size=16 --prompt hi --max-new 2 --quiet \
    > /dev/null 2> "$w/err" || { cat "$w/err"; fail "sample refused a checkpoint over the train section"; }
echo "ok: changed train fields refused, exempt fields and allow_change resume"
