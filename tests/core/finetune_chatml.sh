#!/usr/bin/env bash
# finetune_chatml.sh LOOM SRC: a fine-tune on OpenAI-style conversations (tools, tool calls, tool
# results) in the qwen2.5 ChatML format with a tokenizer.json: pretrain one step with that
# tokenizer, fine-tune, evaluate (held-out exact match line), sample. Checks it runs end to end
# and that the loom format refuses the same rows (tool results) with one line.
set -u
loom=$1 src=$2
fx=$src/tests/fixtures/tokenizers
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for i in 1 2 3 4 5 6; do cat "$fx/chat.jsonl"; done > "$w/rows.jsonl"
m=(--set model.tokenizer="$fx/qwen2.json" --set model.vocab=1152 --set model.max_seq=1024)
"$loom" train "$src/configs/tiny-train.json" "${m[@]}" --set train.steps=1 --set train.warmup=0 --out "$w/base" \
  > "$w/base.log" 2>&1 || { tail -5 "$w/base.log"; fail "pretrain with the tokenizer.json"; }
ft=("${m[@]}" --set data.train="$w/rows.jsonl" --set data.chat_format=qwen2.5 --set data.max_len=1024
    --set finetune.base="$w/base/ckpt" --set train.batch_size=4 --set data.val_split=0.25)
"$loom" finetune "$src/configs/tiny-finetune.json" "${ft[@]}" --out "$w/ft" > "$w/ft.log" 2>&1 ||
  { tail -5 "$w/ft.log"; fail "fine-tune on OpenAI rows (qwen2.5)"; }
grep -q "accuracy (exact match, held-out)" "$w/ft.log" || { tail -5 "$w/ft.log"; fail "no accuracy line"; }
grep -q "padding is" "$w/ft.log" || fail "no padding share line"
"$loom" sample "$src/configs/tiny-finetune.json" "${ft[@]}" --ckpt "$w/ft/ckpt" --query "weather in Oslo" \
  --tools '[{"name": "get_weather", "parameters": {"city": "str"}}]' --max-new 8 > "$w/sample.out" 2> "$w/sample.log" ||
  { tail -3 "$w/sample.log"; fail "sample"; }
# the rows are rendered before the base is read: loom's format (byte tokenizer) refuses tool results
"$src/tests/launch/expect_fail.sh" "rows.jsonl:2: chat format loom cannot express a tool result" "$loom" finetune \
  "$src/configs/tiny-finetune.json" --set data.train="$w/rows.jsonl" --set data.chat_format=loom \
  --set finetune.base="$w/none" --out "$w/bad" || exit 1
echo "ok: $(grep -o 'accuracy (exact match, held-out).*' "$w/ft.log")"
