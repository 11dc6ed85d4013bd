#!/usr/bin/env bash
# chat_date_infer.sh LOOM: `loom eval` and `loom sample` on a checkpoint render with the date the
# checkpoint was trained with (its job config's data.date_string), not today's, unless the job
# sets one. A llama3-format LoRA fine-tune (the llama3 tokenizer fixture, a tiny base) trained
# with date 01 Feb 2025: eval without the field gives the same val loss as eval with that date set,
# and another date gives another loss (the date is in every example's system turn); each command
# says which date it used and where it came from.
LOOM=$1; shift
CMP=
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work chat_date_infer
head -40 "$SRC/configs/data/tools.jsonl" >tools.jsonl
C=(--set model.tokenizer="$SRC/tests/fixtures/tokenizers/llama3.json" --set model.vocab=1200
   --set model.max_seq=1024 --set parallel.threads=1)
loom_np 1 train "$TINY" "${C[@]}" --set train.steps=2 --out base --quiet || fail "base training failed"
F=("$SRC/configs/tiny-finetune.json" "${C[@]}" --set finetune.base="$PWD/base/ckpt" --set data.train="$PWD/tools.jsonl"
   --set data.chat_format=llama3 --set data.max_len=1024 --set train.batch_size=4)
loom_np 1 finetune "${F[@]}" --set 'data.date_string=01 Feb 2025' --out ft --quiet >/dev/null ||
    fail "the llama3 fine-tune failed"
# eval's val loss (as printed) and its date line, for the extra --set arguments given
eval_run() { loom_np 1 eval "${F[@]}" "$@" --ckpt ft/ckpt 2>&1 || fail "eval $* failed"; }
val_loss() { sed -nE 's/.*\| val loss ([-0-9.naif]+) \|.*/\1/p' <<<"$1"; }
plain=$(eval_run) || exit 1
grep -q "chat format llama3: the system turn's date is 01 Feb 2025 (the checkpoint's data.date_string)" <<<"$plain" ||
    fail "eval without data.date_string: no line naming the checkpoint's date: $(grep -i date <<<"$plain")"
same=$(eval_run --set 'data.date_string=01 Feb 2025') || exit 1
other=$(eval_run --set 'data.date_string=02 Mar 2024') || exit 1
grep -q "date is 02 Mar 2024 (data.date_string)" <<<"$other" || fail "eval with data.date_string set: $(grep -i date <<<"$other")"
a=$(val_loss "$plain") b=$(val_loss "$same") o=$(val_loss "$other")
[ -n "$a" ] && [ -n "$o" ] || fail "no val loss printed: $plain"
[ "$a" = "$b" ] || fail "eval without the field: val loss $a, with the checkpoint's date $b: another date was used"
[ "$a" != "$o" ] || fail "val loss $a with another date too: the test cannot tell dates apart"
# sample: the date line (stderr) with the checkpoint's date; the job's own date when set
Q=(--query "weather in Paris" --tools '[{"name":"get_weather","parameters":{"city":"str"}}]' --max-new 4)
s=$(loom_np 1 sample "${F[@]}" --ckpt ft/ckpt "${Q[@]}" 2>&1) || fail "sample failed: $s"
grep -q "date is 01 Feb 2025 (the checkpoint's data.date_string)" <<<"$s" || fail "sample: $(grep -i date <<<"$s")"
s=$(loom_np 1 sample "${F[@]}" --ckpt ft/ckpt --set 'data.date_string=02 Mar 2024' "${Q[@]}" 2>&1) || fail "sample failed: $s"
grep -q "date is 02 Mar 2024 (data.date_string)" <<<"$s" || fail "sample with the field set: $(grep -i date <<<"$s")"
echo "ok: eval and sample use the checkpoint's date (val loss $a; another date: $o), a set date wins"
