#!/usr/bin/env bash
# bench/train.sh [BUILD_DIR]: CPU training throughput of loom vs PyTorch on the same model, shape
# and thread count, alternating the two (A B A B) so machine drift hits both. Prints a table:
# tokens/s of each, their ratio, loom's MFU against the sgemm rate it measured at start, and the
# peak RSS of each next to the bytes loom accounts for (params + grads + Adam + activations).
# Needs Debian's python3-torch for the reference (run with /usr/bin/python3, OpenBLAS SkylakeX
# kernel and tcmalloc: its fastest setting on these machines).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
loom="$build/launch/loom"
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
steps=${STEPS:-6}
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 2>/dev/null || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

run_loom() { # preset B T -> "tok/s mfu rss_kb accounted_bytes"
  /usr/bin/time -f "%M" -o "$tmp/rss" "$loom" train "$root/configs/tiny-train.json" --quiet \
    --set model=$1 --set train.batch_size=$2 --set train.seq_len=$3 --set train.steps=$steps \
    --set train.warmup=1 --set parallel.threads=$threads --set checkpoint.every=-1 \
    --out "$tmp/run" > "$tmp/loom.out" 2>&1 || { cat "$tmp/loom.out"; exit 1; }
  awk -v rss="$(cat "$tmp/rss")" '/^done:/ {tps=$7; mfu=$11} /^memory:/ {acc=$2}
       END {gsub("%","",mfu); print tps, mfu, rss, acc}' "$tmp/loom.out"
}

run_torch() { # layers heads width B T -> "tok/s rss_kb"
  OPENBLAS_CORETYPE=SkylakeX LD_PRELOAD="$tcmalloc" /usr/bin/time -f "%M" -o "$tmp/rss" \
    /usr/bin/python3 "$root/bench/torch_ref.py" --layers $1 --heads $2 --width $3 --batch $4 \
    --seq $5 --steps $steps --threads $threads > "$tmp/torch.out" 2>&1 || { cat "$tmp/torch.out"; exit 1; }
  awk -v rss="$(cat "$tmp/rss")" '/^tokens_per_s/ {print $2, rss}' "$tmp/torch.out"
}

printf "%-12s %5s %9s %9s %6s %9s %9s %9s %9s\n" model B*T "loom t/s" "torch t/s" ratio "MFU/sgemm" "loom RSS" "accounted" "torch RSS"
for spec in "gpt2-124m 12 12 768 4 256" "gpt2-small6 6 6 384 8 256"; do
  set -- $spec
  : > "$tmp/l"; : > "$tmp/t"
  for r in $(seq "$rounds"); do
    run_loom "$1" "$5" "$6" >> "$tmp/l"
    run_torch "$2" "$3" "$4" "$5" "$6" >> "$tmp/t"
  done
  lt=$(cut -d' ' -f1 "$tmp/l" | median); mfu=$(cut -d' ' -f2 "$tmp/l" | median)
  lr=$(cut -d' ' -f3 "$tmp/l" | median); acc=$(cut -d' ' -f4 "$tmp/l" | median)
  tt=$(cut -d' ' -f1 "$tmp/t" | median); tr=$(cut -d' ' -f2 "$tmp/t" | median)
  printf "%-12s %5d %9.0f %9.0f %6.2f %8.1f%% %8.0fM %8.0fM %8.0fM\n" "$1" $(( $5 * $6 )) "$lt" "$tt" \
    "$(echo "$lt / $tt" | bc -l)" "$mfu" "$(echo "$lr / 1024" | bc -l)" "$(echo "$acc / 1048576" | bc -l)" "$(echo "$tr / 1024" | bc -l)"
done
