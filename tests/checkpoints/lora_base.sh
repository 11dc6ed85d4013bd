#!/usr/bin/env bash
# lora_base.sh LOOM CKPT_COMPARE: issue 18.6. LoRA adapters are bound to the base they were trained
# on: the adapter checkpoint records the base's digest (of its tensors' checksums), and a resume
# with another finetune.base of the same shape, or `loom ckpt merge` onto another base, is refused
# with one line (before, both succeeded silently); finetune.allow_other_base=true and
# `--allow-other-base` accept it knowingly. The same base under another path is the same base.
LOOM=$1 CMP=$2
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work lora_base
JOB=$SRC/configs/tiny-finetune.json
tools='[{"name":"lights","parameters":{"room":"str"}}]'
for i in $(seq 0 39); do
    echo "{\"query\":\"lights in room $((i % 5))\",\"tools\":$tools,\"answers\":[{\"name\":\"lights\",\"arguments\":{\"room\":\"r$((i % 5))\"}}]}"
done >tools.jsonl
# two bases of the same shape (another seed), and a copy of the first under another name
train 1 baseA --set model.max_seq=256 --set train.steps=1 --set train.warmup=0
train 1 baseB --set model.max_seq=256 --set train.steps=1 --set train.warmup=0 --set train.seed=7
mkdir -p copyA && cp "$(latest baseA)" copyA/base.h5
FT=(finetune "$JOB" --set data.train=tools.jsonl --set parallel.threads=1 --quiet --set finetune.epochs=1)
out=$(timeout "$RUN_TIMEOUT" "$LOOM" "${FT[@]}" --set finetune.base=baseA/ckpt --out lora 2>&1) ||
    { echo "$out" | tail; fail "LoRA fine-tune on baseA"; }
ADA=$(latest lora)
digest=$("$CMP" --get-attr "$ADA" base_digest) || fail "no base_digest in $ADA"
[ "$digest" != 0 ] || fail "$ADA: base_digest is 0 (not bound)"
echo "ok: $ADA records base digest $digest"

refused 1 "the adapters were trained on another base \(digest [0-9a-f]{16}\), not finetune\.base baseB/ckpt \([0-9a-f]{16}\); set finetune\.allow_other_base=true" \
    "${FT[@]}" --set finetune.base=baseB/ckpt --out res_b --resume lora/ckpt
refused 1 "the adapters were trained on another base .*not finetune\.base baseB/ckpt" \
    eval "$JOB" --set data.train=tools.jsonl --set finetune.base=baseB/ckpt --quiet --ckpt lora/ckpt
out=$(timeout "$RUN_TIMEOUT" "$LOOM" "${FT[@]}" --set finetune.base=baseB/ckpt --set finetune.allow_other_base=true \
    --out res_b2 --resume lora/ckpt 2>&1) || { echo "$out" | tail; fail "allow_other_base: resume refused"; }
echo "$out" | grep -q "trained on another base than baseB/ckpt (finetune.allow_other_base)" ||
    { echo "$out" | tail; fail "allow_other_base: no warning"; }
out=$(timeout "$RUN_TIMEOUT" "$LOOM" "${FT[@]}" --set finetune.base=copyA/base.h5 --out res_a --resume lora/ckpt 2>&1) ||
    { echo "$out" | tail; fail "the same base under another path refused"; }
echo "ok: resume refused on another base, accepted with finetune.allow_other_base and on a copy of the base"

refused 1 "lora/ckpt/step_[0-9]+\.h5: the adapters were trained on another base .*not baseB/ckpt .*add --allow-other-base" \
    ckpt merge baseB/ckpt lora/ckpt merged_b
[ ! -e merged_b ] || fail "a refused merge wrote merged_b"
out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt merge baseB/ckpt lora/ckpt merged_b2 --allow-other-base 2>&1) ||
    { echo "$out"; fail "merge --allow-other-base"; }
out=$(timeout "$RUN_TIMEOUT" "$LOOM" ckpt merge copyA/base.h5 lora/ckpt merged_a 2>&1) || { echo "$out"; fail "merge onto baseA"; }
[ "$("$CMP" --get-attr "$(cat merged_a/latest | sed 's|^|merged_a/|')" base_digest)" = 0 ] ||
    fail "the merged model is still bound to a base"
echo "ok: merge refused onto another base, accepted with --allow-other-base and onto the base itself"
