#!/usr/bin/env bash
# bench/lora.sh [BUILD_DIR]: one LoRA fine-tune step (rank 16 on q,k,v,o, AdamW on the adapters,
# fp32) on SmolLM2-135M's shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied,
# SwiGLU/RMSNorm/RoPE), random base, at B=8 T=256: loom (bench_lora) next to transformers + PEFT
# (bench/peft_lora.py) on the same shapes, batch, rank, targets and thread count, alternated
# (loom, PEFT, PEFT with tcmalloc, loom, ...). PEFT runs twice per round: as installed (glibc
# malloc), and with gperftools' tcmalloc preloaded as PyTorch's CPU performance guide recommends
# (it cut PEFT's page faults 2.3x and its step from 13.5 to 8.6 s here); the ratio is against the
# faster. Data: random ids, every row full length (no padding, so tokens/s
# counts B*T real tokens on both sides), the loss on the last FRAC of each row (0.25: the answers'
# share of configs/data/tools.jsonl's characters is 25%). Prints median s/step, tokens/s, peak RSS
# and the ratio, with the machine's load before each run. Installs nothing: a Python without
# torch/transformers/peft is reported missing, with the command that installs them.
# ROUNDS (2), STEPS (4: the first is not timed), THREADS (2), FRAC (0.25), B (8), T (256), RANK (16),
# PYTHON (/work/venv/bin/python if present, else python3) set the run. PRECISION=bf16 runs loom with
# bf16 matmuls and PEFT under torch.autocast(bf16), both fp32 master weights (docs/precision.md).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bench="$build/bench/bench_lora"
rounds=${ROUNDS:-2} steps=${STEPS:-4} threads=${THREADS:-2} frac=${FRAC:-0.25}
precision=${PRECISION:-fp32} autocast=(); [ "$precision" = bf16 ] && autocast=(--bf16)
export PRECISION=$precision
B=${B:-8} T=${T:-256} rank=${RANK:-16}
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x /work/venv/bin/python ]; then py=/work/venv/bin/python
else py=python3; fi
[ -x "$bench" ] || { echo "bench/lora.sh: $bench not built (cmake --build $build --target bench_lora)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_peft=1
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 2>/dev/null || true)
[ -n "$tcmalloc" ] || echo "PEFT with tcmalloc: missing; install with: apt-get install libgoogle-perftools4"
if ! "$py" -c "import torch, transformers, peft" 2> /dev/null; then
  have_peft=0
  echo "PEFT reference: missing ($py lacks torch, transformers or peft); install with:"
  echo "  python3 -m venv /work/venv && /work/venv/bin/pip install torch transformers peft"
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.12g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
load() { cut -d' ' -f1 /proc/loadavg; }

: > "$tmp/l"; : > "$tmp/p"; : > "$tmp/t"
for r in $(seq "$rounds"); do
  la=$(load)
  /usr/bin/time -f "%M" -o "$tmp/rss" "$bench" "$B" "$T" "$rank" "$steps" "$frac" "$threads" \
    > "$tmp/loom.out" 2> "$tmp/loom.err" || { cat "$tmp/loom.err"; exit 1; }
  s=$(sed -n 's/.*median \([0-9.]*\) s\/step.*/\1/p' "$tmp/loom.out")
  echo "round $r loom: $s s/step, load before $la ($(tail -1 "$tmp/loom.out" | sed 's/.*(\(cpu.*\))$/\1/'))" >&2
  echo "$s $(cat "$tmp/rss") $la" >> "$tmp/l"
  [ $have_peft = 1 ] || continue
  for v in p t; do # p: PEFT as installed; t: with tcmalloc preloaded
    [ $v = p ] || [ -n "$tcmalloc" ] || continue
    pre=(); [ $v = p ] || pre=(LD_PRELOAD="$tcmalloc")
    la=$(load)
    env "${pre[@]}" /usr/bin/time -f "%M" -o "$tmp/rss" \
      "$py" "$root/bench/peft_lora.py" --batch "$B" --seq "$T" --rank "$rank" --frac "$frac" \
      --steps "$steps" --threads "$threads" "${autocast[@]}" > "$tmp/peft.out" 2>&1 || { cat "$tmp/peft.out"; exit 1; }
    s=$(sed -n 's/^s_per_step //p' "$tmp/peft.out")
    echo "round $r PEFT$([ $v = t ] && echo ' + tcmalloc'): $s s/step, load before $la" >&2
    echo "$s $(cat "$tmp/rss") $la" >> "$tmp/$v"
  done
done
col() { cut -d' ' -f"$2" "$tmp/$1" | median; }
printf "\n%-34s %9s %10s %9s %12s\n" "LoRA step (B=$B, T=$T, r$rank q,k,v,o)" "s/step" "tokens/s" "peak RSS" "load before"
row() { # name file
  local s rss; s=$(col "$2" 1); rss=$(col "$2" 2)
  printf "%-34s %9.2f %10.1f %8.2fG %12s\n" "$1" "$s" "$(echo "$B * $T / $s" | bc -l)" \
    "$(echo "$rss / 1048576" | bc -l)" "$(cut -d' ' -f3 "$tmp/$2" | paste -sd/)"
}
row "loom (median of $rounds rounds)" l
if [ $have_peft = 1 ]; then
  row "transformers + PEFT (same run)" p
  fast=p
  if [ -s "$tmp/t" ]; then
    row "PEFT + tcmalloc (same run)" t
    [ "$(echo "$(col t 1) < $(col p 1)" | bc -l)" = 1 ] && fast=t
  fi
  printf "%-34s %9s %9.2fx\n" "ratio (loom / the faster PEFT)" "" "$(echo "$(col $fast 1) / $(col l 1)" | bc -l)"
else
  printf "%-34s %9s\n" "transformers + PEFT" "missing"
fi
echo "(SmolLM2-135M shapes, random weights and ids, loss on the last $frac of each row, $threads threads, $precision;" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
