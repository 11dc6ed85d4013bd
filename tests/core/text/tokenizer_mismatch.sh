#!/usr/bin/env bash
# tokenizer_mismatch.sh LOOM SRC: `loom tokenize` with a tokenizer.json writes a token file that
# records its hash; a job whose model uses another tokenizer refuses it (one line, non-zero exit),
# and a job with that tokenizer trains on it.
set -u
loom=$1 src=$2
tok=$src/tests/fixtures/tokenizers/gpt2.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$loom" tokenize "$src/configs/data/corpus.txt" "$out/c.bin" --tokenizer "$tok" >"$out/log" 2>&1 ||
  { echo "FAIL: tokenize"; cat "$out/log"; exit 1; }
grep -q "tokenizer bpe" "$out/log" || { echo "FAIL: no tokenizer in: $(cat "$out/log")"; exit 1; }
"$src/tests/launch/expect_fail.sh" "c.bin: made by tokenizer [0-9a-f]{16}, the model uses byte" \
  "$loom" train "$src/configs/tiny-train.json" --set data.train="$out/c.bin" --out "$out/run" || exit 1
"$loom" train "$src/configs/tiny-train.json" --set data.train="$out/c.bin" --set model.tokenizer="$tok" \
  --set model.vocab=1216 --set train.steps=2 --out "$out/run2" >"$out/log2" 2>&1 ||
  { echo "FAIL: training with the tokenizer that made the file"; tail -5 "$out/log2"; exit 1; }
echo "ok: token file hash checked, training with the matching tokenizer runs"
