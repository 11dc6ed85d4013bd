#!/usr/bin/env bash
# tokenizer_resume.sh LOOM SRC: a resume checks the tokenizer by its content (the hash token files
# also record), not by the model.tokenizer path: the same tokenizer.json moved elsewhere resumes,
# another tokenizer.json put at the saved path is refused in one line with a non-zero exit.
set -u
loom=$1 src=$2
fx=$src/tests/fixtures/tokenizers
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/a" "$out/b"
cp "$fx/gpt2.json" "$out/a/tokenizer.json"
job=("$src/configs/tiny-train.json" --set model.vocab=2048 --set data.train="$src/configs/data/corpus.txt")
"$loom" train "${job[@]}" --set model.tokenizer="$out/a/tokenizer.json" --set train.steps=2 --out "$out/run" \
  >"$out/log1" 2>&1 || { echo "FAIL: first run"; tail -5 "$out/log1"; exit 1; }
mv "$out/a/tokenizer.json" "$out/b/tokenizer.json"
"$loom" train "${job[@]}" --set model.tokenizer="$out/b" --set train.steps=3 --out "$out/run2" --resume "$out/run/ckpt" \
  >"$out/log2" 2>&1 || { echo "FAIL: the same tokenizer, moved, must resume"; tail -5 "$out/log2"; exit 1; }
grep -q "resumed from" "$out/log2" || { echo "FAIL: did not resume: $(tail -3 "$out/log2")"; exit 1; }
cp "$fx/qwen2.json" "$out/b/tokenizer.json"
"$src/tests/launch/expect_fail.sh" "step_[0-9]+\.h5: the checkpoint was trained with another tokenizer \(hash [0-9a-f]{16}\) than model.tokenizer .*b/tokenizer.json \(hash [0-9a-f]{16}\)" \
  "$loom" train "${job[@]}" --set model.tokenizer="$out/b/tokenizer.json" --set train.steps=4 --out "$out/run3" \
  --resume "$out/run/ckpt" || exit 1
echo "ok: a moved tokenizer resumes, another one at the same path is refused"
