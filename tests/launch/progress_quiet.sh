#!/usr/bin/env bash
# progress_quiet.sh LOOM SRC: train.log_every prints a progress line every N steps plus the run's
# first and last; --quiet silences eval's progress lines too (its results stay on stdout); --set
# model=PRESET on a job whose "model" object fixes fields warns which of them won over the preset.
set -u
loom=$1 src=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$loom" train "$src/configs/tiny-train.json" --set train.steps=5 --set train.log_every=2 --set parallel.threads=1 \
  --out run > out 2> err || { cat err; fail "train exited non-zero"; }
got=$(sed -nE 's/^step +([0-9]+)\/5 .*/\1/p' err | tr '\n' ' ')
[ "$got" = "1 2 4 5 " ] || fail "train.log_every=2: progress lines for steps '$got', want '1 2 4 5 '"
[ "$(grep -c '"step"' run/metrics.jsonl)" = 5 ] || fail "metrics.jsonl lost steps under log_every"
echo "ok: log_every=2 printed steps $got"
ev=(eval "$src/configs/hf-finetune.json" --set finetune.base="$src/tests/fixtures/hf/qwen2-chat"
    --set data.train="$src/tests/fixtures/tokenizers/chat.jsonl" --set data.val_split=0.5 --set parallel.threads=1)
"$loom" "${ev[@]}" > out 2> err || { cat err; fail "eval exited non-zero"; }
grep -q '^eval val loss:' err || fail "eval without --quiet printed no progress line (the check below would be vacuous)"
"$loom" "${ev[@]}" --quiet > out 2> err || { cat err; fail "eval --quiet exited non-zero"; }
[ ! -s err ] || fail "eval --quiet still wrote to stderr: $(head -3 err)"
grep -q 'tool-call exact match' out || fail "eval --quiet lost its result on stdout"
echo "ok: eval --quiet leaves stderr empty and the result on stdout"
msg=$("$loom" config show "$src/configs/tiny-train.json" --set model=gpt2-124m 2>&1 >/dev/null)
grep -q "^--set model.preset=gpt2-124m: the job file's fields win over the preset's: model.max_seq " <<<"$msg" ||
  fail "--set model=gpt2-124m on tiny-train.json (which fixes max_seq): '$msg'"
msg=$("$loom" config show "$src/configs/tiny-train.json" --set model=tiny 2>&1 >/dev/null)
[ -z "$msg" ] || fail "--set model=tiny (the file's own preset) warned: '$msg'"
echo "ok: --set model=PRESET names the fields the job file fixed"
