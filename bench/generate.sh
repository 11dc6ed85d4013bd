#!/usr/bin/env bash
# bench/generate.sh [BUILD_DIR]: batched greedy decoding, generated tokens/s, on SmolLM2-135M's
# shapes with random weights (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152), 200-token
# prompts and 56 new tokens per row, at batch 2 and 32: loom (bench_generate: model_gen on the CPU
# backend) next to transformers' `generate` (greedy, KV cache) on the same thread count, run
# alternately per batch size, and their ratio; transformers runs as installed and, when gperftools
# is installed, again with tcmalloc preloaded (PyTorch's CPU guide; the ratio is against the faster).
# Not a test; installs nothing: without a Python
# that has torch and transformers the reference is reported missing, with the install command.
# BATCHES ("2 32"), THREADS (2), PROMPT (200), NEW (56), PYTHON (/work/venv/bin/python) set the run;
# PROMPT_MIN=M gives the rows prompts of mixed lengths, M to PROMPT tokens (an evaluation batch:
# loom prefills them packed, transformers left-padded to PROMPT).
# PRECISION=bf16 runs loom's bf16 matmuls (the prefill's) against transformers in bf16, the faster
# of torch.autocast bf16 and weights cast to bf16 (each run's figures go to stderr).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bench="$build/bench/bench_generate"
threads=${THREADS:-2} prompt=${PROMPT:-200} new=${NEW:-56} batches=${BATCHES:-2 32}
prompt_min=${PROMPT_MIN:-$prompt}
export PROMPT_MIN=$prompt_min
precision=${PRECISION:-fp32}
export PRECISION=$precision
dtypes=fp32; [ "$precision" = bf16 ] && dtypes="autocast bf16"
py=${PYTHON:-/work/venv/bin/python}
[ -x "$bench" ] || { echo "bench/generate.sh: $bench not built (cmake --build $build --target bench_generate)"; exit 1; }
have_hf=1
if [ ! -x "$py" ] || ! "$py" -c "import torch, transformers" 2> /dev/null; then
  have_hf=0
  echo "transformers reference: missing ($py with torch and transformers); install with:"
  echo "  python3 -m venv /work/venv && /work/venv/bin/pip install torch transformers"
fi
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 2>/dev/null || true)
[ -n "$tcmalloc" ] || echo "transformers with tcmalloc: missing; install with: apt-get install libgoogle-perftools4"
hf_rate() { # batch [preload] -> generated tokens/s, the faster of $dtypes
  local best=0 r d
  for d in $dtypes; do
    r=$(env ${2:+LD_PRELOAD=$2} "$py" "$root/bench/hf_generate.py" --batch "$1" --prompt "$prompt" \
          --prompt-min "$prompt_min" --new "$new" --threads "$threads" --dtype "$d" | sed -n 's/^tokens_per_s //p')
    echo "transformers batch $1 --dtype $d${2:+ (tcmalloc)}: $r tokens/s" >&2
    best=$(awk -v a="$best" -v b="$r" 'BEGIN {print (b > a ? b : a)}')
  done
  echo "$best"
}
rows=()
for b in $batches; do
  out=$("$bench" "$b" "$prompt" "$new" "$threads")
  echo "$out" >&2 # (not tee /dev/stderr: reopening a redirected stderr file truncates it)
  l=$(echo "$out" | sed -n 's/.* \([0-9.]*\) generated tokens\/s.*/\1/p')
  h="missing" t="-"
  if [ $have_hf = 1 ]; then
    h=$(hf_rate "$b")
    [ -z "$tcmalloc" ] || t=$(hf_rate "$b" "$tcmalloc")
  fi
  rows+=("$b $l $h $t")
done
printf "\n%-8s %14s %22s %16s %8s\n" "batch" "loom tokens/s" "transformers tokens/s" "+ tcmalloc" "ratio"
for r in "${rows[@]}"; do
  read -r b l h t <<< "$r"
  if [ "$h" = missing ]; then ratio="-"
  else ratio=$(awk -v l="$l" -v h="$h" -v t="$t" 'BEGIN {if (t != "-" && t > h) h = t; printf "%.2fx", l / h}'); fi
  printf "%-8s %14s %22s %16s %8s\n" "$b" "$l" "$h" "$t" "$ratio"
done
echo "(ratio: loom over the faster transformers run)"
echo "(SmolLM2-135M shapes, random weights, prompts $prompt_min..$prompt + $new new tokens, greedy, $threads threads, $precision)"
