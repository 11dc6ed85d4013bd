#!/usr/bin/env bash
# finetune_chat.sh LOOM SRC FORMAT: a fine-tune on OpenAI-style conversations (tools, tool calls,
# tool results) in chat format FORMAT with that family's fixture tokenizer.json: pretrain one step
# with the tokenizer, fine-tune, evaluate (held-out exact match line), sample a Needle-style query
# (no ids). Then a row the format cannot express is refused in one line naming file:line.
#   qwen2.5: ChatML with Hermes tool calls (loom's own format refuses the same rows' tool results)
#   qwen3: Qwen3's think blocks on rows with reasoning, with <think> tokens in the tokenizer (loom's
#          format refuses the rows' tool results)
#   mistral: Mistral-7B-Instruct-v0.3's, tool call ids of 9 characters (refuses non-alternating turns)
#   needle: Needle's rows and single-turn chats with its SentencePiece model, the format picked by
#           the tokenizer (refuses a line in neither form, where Needle skips it)
set -u
loom=$1 src=$2 format=$3
fx=$src/tests/fixtures/tokenizers
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
case $format in
qwen2.5) rows=$fx/chat.jsonl tok=$fx/qwen2.json vocab=1152 bad=2 ;;
qwen3) rows=$fx/chat_reasoning_rows.jsonl tok=$fx/qwen3_think.json vocab=1152 bad=1 ;;
mistral) rows=$fx/chat_mistral_rows.jsonl tok=$fx/mistral.json vocab=1216 ;;
needle) rows=$src/tests/fixtures/needle/needle_rows.jsonl tok=$src/tests/fixtures/needle/needle.model vocab=2000 ;;
*) fail "unknown format '$format'" ;;
esac
for i in 1 2 3 4 5 6; do cat "$rows"; done > "$w/rows.jsonl"
m=(--set model.tokenizer="$tok" --set model.vocab=$vocab --set model.max_seq=1024)
"$loom" train "$src/configs/tiny-train.json" "${m[@]}" --set train.steps=1 --set train.warmup=0 --out "$w/base" \
  > "$w/base.log" 2>&1 || { tail -5 "$w/base.log"; fail "pretrain with the tokenizer.json"; }
cf=$format
[ "$format" = needle ] && cf=  # picked from the tokenizer
ft=("${m[@]}" --set data.train="$w/rows.jsonl" --set data.chat_format=$cf --set data.max_len=1024
    --set finetune.base="$w/base/ckpt" --set train.batch_size=4 --set data.val_split=0.25)
"$loom" finetune "$src/configs/tiny-finetune.json" "${ft[@]}" --out "$w/ft" > "$w/ft.log" 2>&1 ||
  { tail -5 "$w/ft.log"; fail "fine-tune on OpenAI rows ($format)"; }
grep -q "accuracy (exact match, held-out)" "$w/ft.log" || { tail -5 "$w/ft.log"; fail "no accuracy line"; }
grep -q "padding is" "$w/ft.log" || fail "no padding share line"
# loom's format would be refused on this tokenizer (no <|user|>); Needle's rows give its fit_max_len
[ "$format" != needle ] || grep -q "rows of at most 256 tokens" "$w/ft.log" || { grep "^data" "$w/ft.log"; fail "rows not Needle's length"; }
"$loom" sample "$src/configs/tiny-finetune.json" "${ft[@]}" --ckpt "$w/ft/ckpt" --query "weather in Oslo" \
  --tools '[{"name": "get_weather", "parameters": {"city": "str"}}]' --max-new 8 > "$w/sample.out" 2> "$w/sample.log" ||
  { tail -3 "$w/sample.log"; fail "sample"; }
if [ "$format" = needle ]; then
    { head -1 "$rows"; echo '{"question": "not a Needle row"}'; } > "$w/bad.jsonl"
    "$src/tests/launch/expect_fail.sh" "bad.jsonl:2: missing field 'query' \\(a Needle row\\) or 'messages'" \
      "$loom" finetune "$src/configs/tiny-finetune.json" "${m[@]}" --set data.train="$w/bad.jsonl" \
      --set finetune.base="$w/base/ckpt" --out "$w/bad" || exit 1
elif [ "$format" = qwen2.5 ] || [ "$format" = qwen3 ]; then
    # the rows are rendered before the base is read: loom's format (byte tokenizer) refuses tool results
    "$src/tests/launch/expect_fail.sh" "rows.jsonl:$bad: chat format loom cannot express a tool result" "$loom" finetune \
      "$src/configs/tiny-finetune.json" --set data.train="$w/rows.jsonl" --set data.chat_format=loom \
      --set finetune.base="$w/none" --out "$w/bad" || exit 1
else
    { head -1 "$rows"
      echo '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]}'
    } > "$w/bad.jsonl"
    "$src/tests/launch/expect_fail.sh" "bad.jsonl:2: chat format mistral needs turns that alternate user/assistant" \
      "$loom" finetune "$src/configs/tiny-finetune.json" "${m[@]}" --set data.train="$w/bad.jsonl" \
      --set data.chat_format=mistral --set finetune.base="$w/base/ckpt" --out "$w/bad" || exit 1
fi
echo "ok: $(grep -o 'accuracy (exact match, held-out).*' "$w/ft.log")"
