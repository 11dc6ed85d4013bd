#!/usr/bin/env bash
# bench/needle.sh [BUILD_DIR]: Needle's LoRA fine-tune on its default config (TransformerConfig():
# d 768, 20 layers, 12/2 heads, vocab 16384, mHC 4 lanes, 5 engram sites) at B=16 T=256, random
# tokens, every position with loss, W4 STE + A8 + KV8 on, LoRA r 16 / alpha 32 on the five
# targets, clip + AdamW: loom's needle family (bench_needle) next to Needle's own jitted
# train_step (bench/needle_step.py, compile included in its first), the same checkpoint (made by
# needle_step.py on its first run at BASE), machine and thread count, alternated per round. Prints
# the first step's time from start, the median step, peak RSS, each side's and the ratio, with
# the CPU and the load, and the step's FLOPs against the same run's sgemm rate (the ceiling).
# ROUNDS (1), STEPS (3: the first is timed apart), B (16), T (256), BASE
# (/tmp/needle_default.safetensors), PYTHON (/work/venv/bin/python if present, else python3).
# Installs nothing: a Python without Needle is reported, with the command that installs it.
set -euo pipefail
build=${1:-build}
bench="$build/bench/bench_needle"
rounds=${ROUNDS:-1} steps=${STEPS:-3} B=${B:-16} T=${T:-256}
base=${BASE:-/tmp/needle_default.safetensors}
source "$(dirname "$0")/needle_lib.sh"
load() { cut -d' ' -f1 /proc/loadavg; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "CPU: $cpu, $(nproc) threads; B $B T $T, $steps steps per run, $rounds rounds"
for r in $(seq "$rounds"); do
  l1=$(load); lo=$("$bench" "$base" "$B" "$T" "$steps" 1)
  l2=$(load); ne=$("$py" "$root/bench/needle_step.py" "$base" "$B" "$T" "$steps" 2> "$log")
  echo "round $r: loom (load $l1) $lo"
  echo "round $r: Needle (load $l2) $ne"
done
printf '%-34s %12s %12s %8s\n' figure loom Needle ratio
for f in first_step_s step_s peak_rss_mb; do
  a=$(echo "$lo" | field "$f") b=$(echo "$ne" | field "$f")
  printf '%-34s %12.1f %12.1f %8s\n' "$f" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2fx", b / a}')"
done
echo "(ratio: Needle / loom, higher is better for loom; the losses differ: each side draws its own tokens and adapter)"
# The ceiling: loom's count of the step's model FLOPs (needle_net_step_flops; docs/needle.md section 7
# counts 1402.1275 GFLOP by hand at B16 T256; Needle executes 1799.0764 with its whole-layer
# recompute, loom 1192.8338 with its kept blocks and factored adapter gradients, section 7) at
# this machine's sgemm rate.
if [ -x "$build/bench/bench_sgemm" ]; then
  rate=$("$build/bench/bench_sgemm" 2>/dev/null | sed -n 's/.*calibrated peak \([0-9.]*\) GFLOP.*/\1/p')
  st=$(echo "$lo" | field step_s) gf=$(echo "$lo" | field model_gflop)
  if [ "$B" = 16 ] && [ "$T" = 256 ]; then
    awk -v g="$gf" 'BEGIN { printf "model FLOPs: loom counts %.4f GFLOP, docs/needle.md by hand 1402.1275: %s\n", g, (g - 1402.1275 < 0.001 && 1402.1275 - g < 0.001) ? "equal" : "DIFFERENT" }'
  fi
  [ -n "$rate" ] && [ -n "$gf" ] && awk -v r="$rate" -v s="$st" -v g="$gf" 'BEGIN {
    c = g / r; x = c * 1192.8338 / 1402.1275; y = c * 1799.0764 / 1402.1275
    printf "sgemm %.1f GFLOP/s: ceiling %.2f s/step (model FLOPs), %.2f s (what loom executes), %.2f s (what Needle executes); loom %.2f s = %.2f of the first, %.2f of the second\n", r, c, x, y, s, c / s, x / s }'
fi
