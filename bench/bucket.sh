#!/usr/bin/env bash
# bench/bucket.sh [ROUNDS]: the README demo's fine-tune (configs/finetune-demo.json) with
# data.bucket false (every row at the data set's longest) and true (batches by length), alternated
# ROUNDS times (default 2), on THREADS BLAS threads (default 1: CPU seconds stay meaningful on a
# shared machine): padding share, the process's user CPU seconds, the steps' wall time (sum,
# median, fastest), real tokens/s (median) and exact match. Needs build/launch/loom and
# runs/demo/ckpt (`loom train configs/demo.json`). Not a test; installs nothing.
set -u
cd "$(dirname "$0")/.." || exit 1
R=${1:-2}
TH=${THREADS:-1}
[ -f runs/demo/ckpt/latest ] || { echo "runs/demo/ckpt missing: run ./build/launch/loom train configs/demo.json"; exit 1; }
printf '%-7s %-5s %-8s %-7s %-8s %-9s %-9s %-9s %s\n' bucket round padding "cpu s" "steps s" "median ms" \
  "min ms" "tokens/s" "exact match"
for r in $(seq 1 "$R"); do
  for b in false true; do
    log=$(mktemp)
    TIMEFORMAT=%U
    cpu=$( { time ./build/launch/loom finetune configs/finetune-demo.json --set data.bucket=$b \
      --set finetune.eval_base=false --set parallel.threads="$TH" --out "runs/bench-bucket-$b" > "$log" 2>&1; } 2>&1 ) ||
      { tail "$log"; exit 1; }
    pad=$(sed -n 's/.*epoch 1: padding is \([0-9.]*%\).*/\1/p' "$log")
    tps=$(sed -n 's/.*, \([0-9]*\) tokens\/s (median).*/\1/p' "$log")
    read -r total med min <<< "$(sed -nE 's/.*"step_s": *([0-9.eE+-]+).*/\1/p' "runs/bench-bucket-$b/metrics.jsonl" |
      sort -g | awk '{a[NR] = $1; s += $1} END {printf "%.1f %.1f %.1f", s, 1000 * a[int((NR + 1) / 2)], 1000 * a[1]}')"
    acc=$(sed -n 's/.*exact match, held-out): \([0-9.]*% -> \)\{0,1\}\([0-9.]*%\).*/\2/p' "$log")
    printf '%-7s %-5s %-8s %-7s %-8s %-9s %-9s %-9s %s\n' "$b" "$r" "$pad" "$cpu" "$total" "$med" "$min" "$tps" "$acc"
    rm -f "$log"
  done
done
