#!/usr/bin/env bash
# bench/dp.sh [BUILD_DIR]: data parallelism on one machine: `mpirun -np 2` with 1 thread per rank
# vs 1 rank with 2 threads, same cores, same global batch (gpt2-124m, B=4, T=256 by default),
# alternating the two (A B A B). Prints tokens/s of each and the ratio (target >= 0.9: the
# gradient all-reduce must overlap backward for 2 ranks to keep up with 2 threads).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
loom="$build/launch/loom"
model=${MODEL:-gpt2-124m} batch=${BATCH:-4} seq=${SEQ:-256} steps=${STEPS:-5} rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train "$root/configs/tiny-train.json" --quiet --set model=$model --set train.batch_size=$batch
      --set train.seq_len=$seq --set train.steps=$steps --set train.warmup=1 --set checkpoint.every=-1)
tps() { awk '/^done:/ {print $7}' "$1"; }
median() { sort -g | awk '{a[NR]=$1} END {printf "%.12g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
: > "$tmp/one"; : > "$tmp/two"
for r in $(seq "$rounds"); do
  "$loom" "${args[@]}" --set parallel.threads=2 --out "$tmp/a" > "$tmp/a.log" 2>&1
  tps "$tmp/a.log" >> "$tmp/one"
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$loom" "${args[@]}" \
    --set parallel.threads=1 --out "$tmp/b" > "$tmp/b.log" 2>&1
  tps "$tmp/b.log" >> "$tmp/two"
done
one=$(median < "$tmp/one"); two=$(median < "$tmp/two")
printf "%-28s %12s\n" "setup ($model B=$batch T=$seq)" "tokens/s"
printf "%-28s %12.0f\n" "1 rank x 2 threads" "$one"
printf "%-28s %12.0f\n" "2 ranks x 1 thread (MPI)" "$two"
printf "%-28s %12.2f\n" "ratio (2 ranks / 1 rank)" "$(echo "$two / $one" | bc -l)"
