#!/usr/bin/env bash
# bench/generate.sh [BUILD_DIR]: batched greedy decoding, generated tokens/s, on SmolLM2-135M's
# shapes with random weights (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152), 200-token
# prompts and 56 new tokens per row, at batch 2 and 32: loom (bench_generate: model_gen on the CPU
# backend) next to transformers' `generate` (greedy, KV cache) on the same thread count, run
# alternately per batch size, and their ratio. Not a test; installs nothing: without a Python
# that has torch and transformers the reference is reported missing, with the install command.
# BATCHES ("2 32"), THREADS (2), PROMPT (200), NEW (56), PYTHON (/work/venv/bin/python) set the run.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bench="$build/bench/bench_generate"
threads=${THREADS:-2} prompt=${PROMPT:-200} new=${NEW:-56} batches=${BATCHES:-2 32}
py=${PYTHON:-/work/venv/bin/python}
[ -x "$bench" ] || { echo "bench/generate.sh: $bench not built (cmake --build $build --target bench_generate)"; exit 1; }
have_hf=1
if [ ! -x "$py" ] || ! "$py" -c "import torch, transformers" 2> /dev/null; then
  have_hf=0
  echo "transformers reference: missing ($py with torch and transformers); install with:"
  echo "  python3 -m venv /work/venv && /work/venv/bin/pip install torch transformers"
fi
rows=()
for b in $batches; do
  out=$("$bench" "$b" "$prompt" "$new" "$threads")
  echo "$out" >&2 # (not tee /dev/stderr: reopening a redirected stderr file truncates it)
  l=$(echo "$out" | sed -n 's/.* \([0-9.]*\) generated tokens\/s.*/\1/p')
  h="missing"
  if [ $have_hf = 1 ]; then
    h=$("$py" "$root/bench/hf_generate.py" --batch "$b" --prompt "$prompt" --new "$new" --threads "$threads" |
        sed -n 's/^tokens_per_s //p')
  fi
  rows+=("$b $l $h")
done
printf "\n%-8s %18s %22s %8s\n" "batch" "loom tokens/s" "transformers tokens/s" "ratio"
for r in "${rows[@]}"; do
  read -r b l h <<< "$r"
  if [ "$h" = missing ]; then ratio="-"; else ratio=$(awk -v l="$l" -v h="$h" 'BEGIN {printf "%.2fx", l / h}'); fi
  printf "%-8s %18s %22s %8s\n" "$b" "$l" "$h" "$ratio"
done
echo "(SmolLM2-135M shapes, random weights, prompts $prompt + $new new tokens, greedy, $threads threads, fp32)"
