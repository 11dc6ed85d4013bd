#!/usr/bin/env bash
# state_attrs.sh LOOM CKPT_COMPARE: issue 18.3. Every training-state attribute a resume reads back
# is checked against its range and against the rest of the file, and a file that fails is refused
# with one line naming the attribute (before, a step of 2^40 logged a huge step and trained from
# 0, a step of -5 gave a negative lr, an rng_counter of 2^31 silently changed Adam's bias
# correction). Each case edits a copy through HDF5 and has `loom ckpt seal` accept it (the tensors
# are sound), so only the state check can refuse it. A version 1 file (AdamW step in rng_counter)
# still resumes, to the same losses. Only edits copies in its work folder.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work state_attrs
train 1 good --set train.steps=2
GOOD=good/ckpt/step_00000002.h5
RES=(train "$TINY" "${BASE[@]}" --set train.steps=4)
n=0

# edited NAME: a fresh copy of GOOD as NAME.h5 (edit it, then `sealed NAME`)
edited() { cp $GOOD "$1.h5" || fail "copy"; }
sealed()
{
    local out
    out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt seal "$1.h5" 2>&1) || { echo "$out"; fail "loom ckpt seal $1.h5"; }
}
# bad ATTR VALUE PATTERN: GOOD with ATTR = VALUE is refused by a resume with PATTERN; nothing trained
bad()
{
    n=$((n + 1))
    edited a$n && "$CMP" --set-attr a$n.h5 "$1" "$2" >/dev/null || fail "set $1"
    sealed a$n
    refused 1 "a$n\.h5: attribute $3" "${RES[@]}" --out r$n --resume a$n.h5
    [ ! -s r$n/metrics.jsonl ] && [ ! -e r$n/ckpt ] || fail "r$n: a refused resume trained or saved"
}
bad step $((1 << 40)) "step = 1099511627776 is out of range \[0, 2147483647\]"
bad step -5 "step = -5 is out of range \[0, 2147483647\]"
bad step $(((1 << 31) + 20)) "step = 2147483668 is out of range \[0, 2147483647\]"
bad step 3 "sample_cursor = 24, but step 3 x train\.batch_size 12 \(job_config\) = 36"
bad adam_step $((1 << 31)) "adam_step = 2147483648 is out of range \[0, step 2\]"
bad adam_step -1 "adam_step = -1 is out of range \[0, step 2\]"
bad rng_counter $((1 << 31)) "rng_counter = 2147483648, but the data order's position is sample_cursor = 24"
bad sample_cursor -3 "sample_cursor = -3 is out of range"
bad tokens_seen 5 "tokens_seen = 5, but sample_cursor 24 x train\.seq_len 64 \(job_config\) = 1536"
bad epoch -1 "epoch = -1 is out of range"
bad seed 7 "seed = 7, but job_config has train\.seed = 1337"
bad lr -0.5 "lr = -0\.5 is not a finite non-negative learning rate"
bad world_size 0 "world_size = 0 is out of range"
bad zero_stage 4 "zero_stage = 4 is out of range \[0, 3\]"

# the config JSON against the tensors: model_config (and job_config) say d_ff 128, the tensors
# were saved with 256; and model_config alone edited, disagreeing with job_config
mc=$("$CMP" --get-attr $GOOD model_config) && jc=$("$CMP" --get-attr $GOOD job_config) || fail "get"
echo "$mc" | grep -q '"d_ff":256' || fail "no d_ff 256 in $mc"
edited dff && "$CMP" --set-attr dff.h5 model_config "${mc/\"d_ff\":256/\"d_ff\":128}" >/dev/null &&
    "$CMP" --set-attr dff.h5 job_config "$(echo "$jc" | sed 's/"d_ff": *256/"d_ff": 128/')" >/dev/null || fail "edit"
sealed dff
refused 1 "dff\.h5: attribute model_config does not describe the stored tensors: .*shape mismatch for /model/h\.0\.mlp\.fc\.weight" \
    "${RES[@]}" --out rdff --resume dff.h5 --set model.d_ff=128
edited mc1 && "$CMP" --set-attr mc1.h5 model_config "${mc/\"d_ff\":256/\"d_ff\":128}" >/dev/null || fail "edit"
sealed mc1
refused 1 "mc1\.h5: attribute model_config disagrees with job_config in field '.*d_ff'" \
    "${RES[@]}" --out rmc1 --resume mc1.h5 --set model.d_ff=128

# format version 1 (decided: still loads): the AdamW step in rng_counter, no adam_step, no
# base_digest, no tensors manifest. It resumes to exactly the losses the version 2 file gives.
edited v1 && for a in adam_step base_digest tensors; do "$CMP" --del-attr v1.h5 $a >/dev/null || fail "del $a"; done
"$CMP" --set-attr v1.h5 format_version 1 >/dev/null && "$CMP" --set-attr v1.h5 rng_counter 2 >/dev/null || fail "v1"
cp v1.h5 v1bad.h5 && "$CMP" --set-attr v1bad.h5 rng_counter $((1 << 31)) >/dev/null || fail "v1bad"
sealed v1
sealed v1bad
out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt info v1.h5 2>&1) || { echo "$out" | tail; fail "ckpt info v1.h5"; }
echo "$out" | grep -q "loom-checkpoint v1" && echo "$out" | grep -qE "^adam_step +2 .*version 1" ||
    { echo "$out" | head; fail "ckpt info v1.h5: no v1 / adam_step 2 line"; }
refused 1 "v1bad\.h5: attribute rng_counter = 2147483648 \(the AdamW step, in a version 1 file\) is out of range \[0, step 2\]" \
    "${RES[@]}" --out rv1bad --resume v1bad.h5
train 1 from_v2 --set train.steps=4 --resume $GOOD
train 1 from_v1 --set train.steps=4 --resume v1.h5
same_losses from_v2/metrics.jsonl from_v1/metrics.jsonl 3 4
same_ckpt "$(latest from_v2)" "$(latest from_v1)"
echo "ok: $n state attributes out of range refused by name, config JSON checked, version 1 resumes"
