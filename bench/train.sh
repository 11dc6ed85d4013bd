#!/usr/bin/env bash
# bench/train.sh [BUILD_DIR]: CPU training throughput of loom vs PyTorch on the same model, shape
# and thread count, alternating the two (A B A B) so machine drift hits both. Prints a table:
# tokens/s of each, their ratio, the MFU of each against the sgemm rate loom measured at the start
# of the same run, the ratio loom would reach at 100% of that rate (1 / torch MFU: the ceiling
# an sgemm-bound engine can reach), and the peak RSS of each next to the bytes loom accounts for
# (params + grads + Adam + activations). ROUNDS (2), STEPS (6), THREADS (2) set the run.
# The reference runs with PYTHON (default /usr/bin/python3: Debian's python3-torch, run with the
# OpenBLAS SkylakeX kernel and tcmalloc, its fastest setting on these machines; PYTHON=/work/venv/bin/python
# for pip's PyTorch). A Python without torch is reported missing, with the command that installs it.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
loom="$build/launch/loom"
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
steps=${STEPS:-6}
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c "import torch" 2> /dev/null; then
  echo "PyTorch reference: missing ($py has no torch); install with: apt-get install python3-torch" \
       "(Debian's, for /usr/bin/python3) or pip install torch (then PYTHON=that python)"
  exit 1
fi
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 2>/dev/null || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {printf "%.12g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

run_loom() { # preset B T -> "tok/s mfu rss_kb accounted_bytes sgemm_gflops mflop_per_token"
  /usr/bin/time -f "%M" -o "$tmp/rss" "$loom" train "$root/configs/tiny-train.json" \
    --set model=$1 --set train.batch_size=$2 --set train.seq_len=$3 --set train.steps=$steps \
    --set train.warmup=1 --set parallel.threads=$threads --set checkpoint.every=-1 \
    --out "$tmp/run" > "$tmp/loom.out" 2>&1 || { cat "$tmp/loom.out"; exit 1; }
  awk -v rss="$(cat "$tmp/rss")" '/^done:/ {tps=$7; mfu=$11} /^memory:/ {acc=$2}
       /^cpu: sgemm/ {sg=$3} /^model .*MFLOP\/token/ {for (i = 1; i < NF; i++) if ($(i+1) ~ /^MFLOP/) fl=$i}
       END {gsub("%","",mfu); print tps, mfu, rss, acc, sg, fl}' "$tmp/loom.out"
}

sgemm_now() { "$build/bench/bench_sgemm" --peak "$threads" | awk '{print $2}'; }

run_torch() { # layers heads width B T -> "tok/s rss_kb sgemm_gflops (measured just before)"
  local sg; sg=$(sgemm_now)
  OPENBLAS_CORETYPE=SkylakeX LD_PRELOAD="$tcmalloc" /usr/bin/time -f "%M" -o "$tmp/rss" \
    "$py" "$root/bench/torch_ref.py" --layers $1 --heads $2 --width $3 --batch $4 \
    --seq $5 --steps $steps --threads $threads > "$tmp/torch.out" 2>&1 || { cat "$tmp/torch.out"; exit 1; }
  awk -v rss="$(cat "$tmp/rss")" -v sg="$sg" '/^tokens_per_s/ {print $2, rss, sg}' "$tmp/torch.out"
}

# MFU: loom's against the sgemm rate it measured at the start of each run, torch's against the
# same measurement taken just before each torch run (the machine's speed drifts within minutes);
# "ceiling" = 1 / torch MFU: the ratio an engine running at 100% of sgemm would reach.
printf "%-12s %5s %9s %9s %6s %9s %9s %8s %9s %9s %6s %9s\n" model B*T "loom t/s" "torch t/s" ratio \
  "loom MFU" "torch MFU" ceiling "loom RSS" accounted "RSS/a" "torch RSS"
for spec in "gpt2-124m 12 12 768 4 256" "gpt2-small6 6 6 384 8 256"; do
  set -- $spec
  : > "$tmp/l"; : > "$tmp/t"
  for r in $(seq "$rounds"); do
    run_loom "$1" "$5" "$6" >> "$tmp/l"
    run_torch "$2" "$3" "$4" "$5" "$6" >> "$tmp/t"
  done
  col() { cut -d' ' -f"$2" "$tmp/$1" | median; }
  lt=$(col l 1); mfu=$(col l 2); lr=$(col l 3); acc=$(col l 4); sg=$(col l 5); fl=$(col l 6)
  tt=$(col t 1); tr=$(col t 2); tsg=$(col t 3)
  tmfu=$(echo "100 * $tt * $fl / 1000 / $tsg" | bc -l)
  printf "%-12s %5d %9.0f %9.0f %6.2f %8.1f%% %8.1f%% %8.2f %8.0fM %8.0fM %6.2f %8.0fM\n" "$1" $(( $5 * $6 )) \
    "$lt" "$tt" "$(echo "$lt / $tt" | bc -l)" "$mfu" "$tmfu" "$(echo "100 / $tmfu" | bc -l)" \
    "$(echo "$lr / 1024" | bc -l)" "$(echo "$acc / 1048576" | bc -l)" "$(echo "$lr * 1024 / $acc" | bc -l)" \
    "$(echo "$tr / 1024" | bc -l)"
done
