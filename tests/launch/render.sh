#!/usr/bin/env bash
# render.sh LOOM SRC: `loom render` shows what a fine-tune trains on. On the chat fixtures (Qwen2.5's
# template, the qwen2 fixture tokenizer, no held-out split) --json gives, row for row, the ids and
# loss mask transformers' apply_chat_template gives (tests/fixtures/tokenizers/chat_qwen2.5.jsonl);
# the text form marks exactly the trained tokens; --limit cuts; a bad --limit is one error line.
set -u
loom=$1 src=$2
F=$src/tests/fixtures/tokenizers
job=(render "$src/configs/finetune-demo.json" --set model.tokenizer="$F/qwen2.json" --set data.chat_format=qwen2.5
     --set data.train="$F/chat.jsonl" --set data.val_split=0 --set data.max_len=2048 --set model.max_seq=2048)
fail() { echo "FAIL: $*"; exit 1; }
out=$("$loom" "${job[@]}" --json 2>/dev/null) || fail "render --json exited non-zero"
[ "$(wc -l <<<"$out")" = "$(wc -l < "$F/chat_qwen2.5.jsonl")" ] || fail "$(wc -l <<<"$out") lines, want one per row"
k=0
while IFS= read -r want; do
  k=$((k + 1))
  got=$(sed -n "${k}p" <<<"$out")
  for f in ids mask; do
    w=$(tr -d ' ' <<<"$want" | grep -o "\"$f\":\[[0-9,]*\]")
    g=$(grep -o "\"$f\":\[[0-9,]*\]" <<<"$got")
    [ -n "$w" ] && [ "$w" = "$g" ] || fail "row $k: $f differs from transformers'"
  done
done < "$F/chat_qwen2.5.jsonl"
echo "ok: --json ids and masks equal transformers' for $k rows"
# the text form: one header per row, the trained runs between the markers: the last row's trained
# tokens are its assistant turn, which ends with <|im_end|>
txt=$("$loom" "${job[@]}" 2>/dev/null) || fail "render exited non-zero"
[ "$(grep -c '^=== train example' <<<"$txt")" = "$k" ] || fail "not one header per row"
grep -q '⟦<tool_call>' <<<"$txt" && grep -q '<|im_end|>⟧' <<<"$txt" || fail "the trained spans are not marked"
[ "$("$loom" "${job[@]}" --json --limit 2 2>/dev/null | wc -l)" = 2 ] || fail "--limit 2"
err=$("$loom" "${job[@]}" --limit x 2>&1 >/dev/null) && fail "--limit x accepted"
grep -q "loom: error: --limit 'x'" <<<"$err" || fail "--limit x: $err"
echo "ok: text form marks the trained spans, --limit cuts, a bad --limit is refused"
