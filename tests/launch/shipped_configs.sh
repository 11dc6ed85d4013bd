#!/usr/bin/env bash
# shipped_configs.sh LOOM SRC: every job in configs/ runs as shipped, briefly, in a copy of the
# folder (so its relative paths resolve as they do for a user in the repository): demo.json, then
# finetune-demo.json on its checkpoint; tiny-train.json, then tiny-finetune.json on its
# checkpoint; hf-finetune.json on the qwen2-chat fixture folder with its shipped chats; and
# needle-finetune.json on the Needle fixture base, tokenizer and rows. Each for 2 steps.
set -u
loom=$1 src=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$w/log" 2>/dev/null; exit 1; }
cp -r "$src/configs" "$w/configs"
cd "$w" || exit 1
short=(--set train.steps=2 --set train.warmup=1 --quiet)
run() { # run NAME CMD...: the job exits 0
  "$loom" "${@:2}" > "$w/log" 2>&1 || fail "$1 exited non-zero"
  echo "ok: $1"
}
run demo.json train configs/demo.json "${short[@]}"
run "finetune-demo.json on demo.json's checkpoint" finetune configs/finetune-demo.json "${short[@]}"
run tiny-train.json train configs/tiny-train.json "${short[@]}"
run "tiny-finetune.json on tiny-train.json's checkpoint" finetune configs/tiny-finetune.json "${short[@]}"
run hf-finetune.json finetune configs/hf-finetune.json --set finetune.base="$src/tests/fixtures/hf/qwen2-chat" \
  --set data.val_split=0 --set train.batch_size=2 "${short[@]}"
n=$src/tests/fixtures/needle
run needle-finetune.json finetune configs/needle-finetune.json --set finetune.base="$n/train_base.safetensors" \
  --set model.tokenizer="$n/needle.model" --set data.train="$n/needle_rows.jsonl" --set data.val_split=0 \
  --set train.batch_size=2 "${short[@]}"
