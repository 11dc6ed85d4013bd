#!/usr/bin/env bash
# generate_cli.sh LOOM: batched generation and evaluation from the command line, on the tiny preset:
#  1. `loom sample --batch 3` greedy gives three copies of the `--batch 1` text; sampled, its
#     sample 0 is what `--batch 1` gives with the same seed (row r is seeded with seed + r);
#  2. `loom eval` with eval.max_examples=5 evaluates 5 examples, prints Needle's exact-call line
#     and shows a progress line on stderr; its counts (accuracy, Needle's figure, tokens generated)
#     are the same in batches of 4 as one at a time;
#  3. `loom finetune` with finetune.eval_base=false skips the base model's evaluation.
set -u
loom=$1
root=$(cd "$(dirname "$0")/../../.." && pwd)
w=generate_cli_out
rm -rf "$w" && mkdir -p "$w"
fail() { echo "FAIL: $*"; exit 1; }
"$loom" train "$root/configs/tiny-train.json" --set model.max_seq=256 --set train.steps=2 --set train.warmup=0 \
  --out "$w/base" --quiet > "$w/base.log" 2>&1 || { cat "$w/base.log"; fail "base"; }
job="$root/configs/tiny-finetune.json"
common=(--set data.train="$root/configs/data/tools.jsonl" --set finetune.base="$w/base/ckpt")

# text of sample r in a --batch output: the lines between its marker and the next
sample_of() { awk -v r="$2" '/^--- sample [0-9]+ ---$/ {on = ($3 == r); next} on' "$1"; }
# a --batch 1 output less the log lines every run prints before the text (those before marker 0)
text_of() { tail -n +"$(( $(grep -n -m1 '^--- sample 0 ---$' "$2" | cut -d: -f1) ))" "$1"; }
for mode in greedy sampled; do
  flags=(--prompt "the quick" --max-new 24)
  [ $mode = sampled ] && flags+=(--temperature 0.9 --top-k 20 --seed 5)
  "$loom" sample "$job" "${common[@]}" --set finetune.method=full "${flags[@]}" > "$w/one.out" 2> "$w/one.err" ||
    { cat "$w/one.err"; fail "sample $mode"; }
  "$loom" sample "$job" "${common[@]}" --set finetune.method=full "${flags[@]}" --batch 3 > "$w/three.out" 2> "$w/three.err" ||
    { cat "$w/three.err"; fail "sample --batch 3 $mode"; }
  want=$(text_of "$w/one.out" "$w/three.out")
  [ -n "$want" ] || fail "sample $mode printed nothing"
  last=0; [ $mode = greedy ] && last=2
  for r in $(seq 0 $last); do
    [ "$(sample_of "$w/three.out" $r)" = "$want" ] || { cat "$w/one.out" "$w/three.out"; fail "$mode sample $r of --batch 3 differs from --batch 1"; }
  done
  echo "sample $mode: --batch 3 matches --batch 1"
done

"$loom" eval "$job" "${common[@]}" --set finetune.method=full --set eval.max_examples=5 --set eval.batch=2 \
  > "$w/eval.out" 2> "$w/eval.err" || { cat "$w/eval.out" "$w/eval.err"; fail "eval"; }
grep -q "(5 examples, [0-9]* tokens generated in [0-9.]* s)" "$w/eval.out" || { cat "$w/eval.out"; fail "eval did not cover 5 examples"; }
grep -q "^eval .*: Needle's exact-call [0-9.]*% (an output without a call block counts as the answer \[\]) | answer \[\] in [0-9.]*% of the examples | no call block in [0-9.]*%$" "$w/eval.out" ||
  { cat "$w/eval.out"; fail "no line with Needle's exact-call figure"; }
grep -q "^eval base model: 5/5 examples, [0-9]* tokens, [0-9.]* tokens/s, done in" "$w/eval.err" ||
  { cat "$w/eval.err"; fail "no progress line on stderr"; }

# a batch of 4 prefills its prompts packed together: the counts do not depend on the batching
for b in 1 4; do
  "$loom" eval "$job" "${common[@]}" --set finetune.method=full --set eval.max_examples=9 --set eval.batch=$b \
    > "$w/eval$b.out" 2> "$w/eval$b.err" || { cat "$w/eval$b.err"; fail "eval batch $b"; }
done
counts() { sed 's/ generated in [0-9.]* s)$//' "$1"; }
[ "$(counts "$w/eval1.out")" = "$(counts "$w/eval4.out")" ] || { cat "$w/eval1.out" "$w/eval4.out"; fail "eval.batch 4 counts differ from eval.batch 1"; }
grep -q "(9 examples, [0-9]* tokens" "$w/eval4.out" || { cat "$w/eval4.out"; fail "eval did not cover 9 examples"; }

"$loom" finetune "$job" "${common[@]}" --set finetune.eval_base=false --set eval.max_examples=4 \
  --set checkpoint.every=-1 --out "$w/ft" > "$w/ft.out" 2> "$w/ft.err" || { cat "$w/ft.err"; fail "finetune"; }
grep -q "eval base model" "$w/ft.err" && fail "finetune.eval_base=false still evaluated the base model"
grep -q "^eval fine-tuned: 4/4 examples" "$w/ft.err" || { cat "$w/ft.err"; fail "no fine-tuned evaluation"; }
grep -q "tool-call accuracy (exact match, held-out): [0-9.]*%; .*4 examples, evaluation [0-9.]* s" "$w/ft.out" ||
  { cat "$w/ft.out"; fail "summary line without the evaluation's examples and wall time"; }
grep -q "model tiny: [0-9]* parameters ([0-9.]*M), [0-9]* trainable" "$w/ft.err" || fail "model line (a log, on stderr) without total and trainable"
echo "ok"
