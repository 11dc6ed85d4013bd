#!/usr/bin/env bash
# finetune_mistral.sh LOOM SRC: a fine-tune on OpenAI-style conversations (tools, tool calls with
# ids, tool results) in the mistral format (Mistral-7B-Instruct-v0.3's) with the mistral fixture
# tokenizer: pretrain one step, fine-tune, evaluate (held-out exact match line), sample a
# Needle-style query (no ids). A row the template refuses is one line naming file:line.
set -u
loom=$1 src=$2
fx=$src/tests/fixtures/tokenizers
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for i in 1 2 3 4 5 6; do cat "$fx/chat_mistral_rows.jsonl"; done > "$w/rows.jsonl"
m=(--set model.tokenizer="$fx/mistral.json" --set model.vocab=1216 --set model.max_seq=1024)
"$loom" train "$src/configs/tiny-train.json" "${m[@]}" --set train.steps=1 --set train.warmup=0 --out "$w/base" \
  > "$w/base.log" 2>&1 || { tail -5 "$w/base.log"; fail "pretrain with the tokenizer.json"; }
ft=("${m[@]}" --set data.train="$w/rows.jsonl" --set data.chat_format=mistral --set data.max_len=1024
    --set finetune.base="$w/base/ckpt" --set train.batch_size=4 --set data.val_split=0.25)
"$loom" finetune "$src/configs/tiny-finetune.json" "${ft[@]}" --out "$w/ft" > "$w/ft.log" 2>&1 ||
  { tail -5 "$w/ft.log"; fail "fine-tune on OpenAI rows (mistral)"; }
grep -q "accuracy (exact match, held-out)" "$w/ft.log" || { tail -5 "$w/ft.log"; fail "no accuracy line"; }
"$loom" sample "$src/configs/tiny-finetune.json" "${ft[@]}" --ckpt "$w/ft/ckpt" --query "weather in Oslo" \
  --tools '[{"name": "get_weather", "parameters": {"city": "str"}}]' --max-new 8 > "$w/sample.out" 2> "$w/sample.log" ||
  { tail -3 "$w/sample.log"; fail "sample"; }
{ head -1 "$fx/chat_mistral_rows.jsonl"
  echo '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]}'
} > "$w/bad.jsonl"
"$src/tests/launch/expect_fail.sh" "bad.jsonl:2: chat format mistral needs turns that alternate user/assistant" \
  "$loom" finetune "$src/configs/tiny-finetune.json" "${m[@]}" --set data.train="$w/bad.jsonl" \
  --set data.chat_format=mistral --set finetune.base="$w/base/ckpt" --out "$w/bad" || exit 1
echo "ok: $(grep -o 'accuracy (exact match, held-out).*' "$w/ft.log")"
