#!/usr/bin/env bash
# bench/bucket.sh [ROUNDS]: the README demo's fine-tune (configs/finetune-demo.json) with
# data.bucket false (every row at the data set's longest) and true (batches by length), alternated
# ROUNDS times (default 2): padding share, median tokens/s (real tokens), training wall time, exact
# match. Needs build/launch/loom and runs/demo/ckpt (`loom train configs/demo.json`). Not a test.
set -u
cd "$(dirname "$0")/.." || exit 1
R=${1:-2}
[ -f runs/demo/ckpt/latest ] || { echo "runs/demo/ckpt missing: run ./build/launch/loom train configs/demo.json"; exit 1; }
printf '%-7s %-5s %-9s %-10s %-8s %-10s %s\n' bucket round padding "tokens/s" "train s" "step ms" "exact match"
for r in $(seq 1 "$R"); do
  for b in false true; do
    log=$(mktemp)
    ./build/launch/loom finetune configs/finetune-demo.json --set data.bucket=$b --set finetune.eval_base=false \
      --out "runs/bench-bucket-$b" > "$log" 2>&1 || { tail "$log"; exit 1; }
    pad=$(sed -n 's/.*epoch 1: padding is \([0-9.]*%\).*/\1/p' "$log")
    tps=$(sed -n 's/.*, \([0-9]*\) tokens\/s (median).*/\1/p' "$log")
    m="runs/bench-bucket-$b/metrics.jsonl"
    # per-step times from the metrics file: the sum (training wall) and the median
    read -r total med <<< "$(sed -nE 's/.*"step_s": *([0-9.eE+-]+).*/\1/p' "$m" | sort -g |
      awk '{a[NR] = $1; s += $1} END {printf "%.1f %.1f", s, 1000 * a[int((NR + 1) / 2)]}')"
    acc=$(sed -n 's/.*exact match, held-out): [0-9.]*% -> \([0-9.]*%\).*/\1/p' "$log")
    printf '%-7s %-5s %-9s %-10s %-8s %-10s %s\n' "$b" "$r" "$pad" "$tps" "$total" "$med" "$acc"
    rm -f "$log"
  done
done
