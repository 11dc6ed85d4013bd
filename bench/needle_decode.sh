#!/usr/bin/env bash
# bench/needle_decode.sh [BUILD_DIR]: evaluation-style greedy decoding on Needle's default config
# (the base bench/needle.sh makes): loom's KV-cached batched decoding (bench_needle_decode, BATCH
# rows together; the cache-less decoder on one batch beside it) against Needle's own generator
# (bench/needle_decode.py: run.generate, one example at a time, no cache), both on W4 weights as
# Needle scores a fine-tune, prompts of P random ids, NEW new tokens. Prints tokens/s of each and
# the ratio, with the CPU and the load. N (8: loom's prompts), NN (2: Needle's, its first pays the
# compile), P (512), NEW (96), BATCH (8), UNCACHED (0; 1 also times loom's cache-less decoder on one
# batch: minutes at these sizes), BASE, PYTHON as in bench/needle.sh. Not a test.
set -euo pipefail
build=${1:-build}
bench="$build/bench/bench_needle_decode"
N=${N:-8} NN=${NN:-2} P=${P:-512} NEW=${NEW:-96} BATCH=${BATCH:-8} UNCACHED=${UNCACHED:-0}
base=${BASE:-/tmp/needle_default.safetensors}
source "$(dirname "$0")/needle_lib.sh"
echo "CPU: $cpu, $(nproc) threads; prompts of $P ids, $NEW new tokens; loom $N prompts, $BATCH a batch; Needle $NN prompts"
l1=$(cut -d' ' -f1 /proc/loadavg); lo=$("$bench" "$base" "$N" "$P" "$NEW" "$BATCH" "$UNCACHED")
l2=$(cut -d' ' -f1 /proc/loadavg); ne=$("$py" "$root/bench/needle_decode.py" "$base" "$NN" "$P" "$NEW" 2> /dev/null)
echo "loom (load $l1): $lo"
echo "Needle (load $l2): $ne"
a=$(echo "$lo" | field tokens_per_s) u=$(echo "$lo" | field uncached_tokens_per_s)
b=$(echo "$ne" | field tokens_per_s_after_first) b1=$(echo "$ne" | field tokens_per_s)
printf '%-48s %10s %10s %8s\n' figure loom Needle ratio
printf '%-48s %10.2f %10.2f %8s\n' "tokens/s, KV-cached batched (Needle: after its 1st)" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.1fx", a / b}')"
printf '%-48s %10.2f %10.2f %8s\n' "tokens/s, KV-cached (Needle: its 1st, with compile)" "$a" "$b1" "$(awk -v a="$a" -v b="$b1" 'BEGIN {printf "%.1fx", a / b}')"
[ "$UNCACHED" = 1 ] && printf '%-48s %10.2f %10.2f %8s\n' "tokens/s, loom without a cache (Needle: after 1st)" "$u" "$b" "$(awk -v a="$u" -v b="$b" 'BEGIN {printf "%.1fx", a / b}')"
echo "(ratio: loom / Needle, higher is better for loom)"
