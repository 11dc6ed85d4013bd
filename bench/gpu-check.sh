#!/usr/bin/env bash
# bench/gpu-check.sh: the one check to run on a lent machine with NVIDIA GPUs (sized for one H200,
# about 5-8 minutes): build, the CUDA op suite (fp32, TF32, bf16), the NCCL tests (2 ranks and
# the stalled-rank abort when two GPUs exist), CUDA vs CPU loss parity on a small model (TF32 off,
# then on), and gpt2-124m training throughput (B=16, T=1024, bf16 and tf32) with MFU next to the
# H100/H200 bf16 peak. Ends with one table; exit status = number of failed rows. Never edits the
# tree; builds in <repo>/build-gpu. ARCHS (default "native") sets CMAKE_CUDA_ARCHITECTURES.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build-gpu
archs=${ARCHS:-native}
jobs=$(nproc 2>/dev/null || echo 4)
log=$(mktemp -d)
trap 'echo "logs kept in $log"' EXIT
rows=()   # "check|result|detail"
failed=0
row() { rows+=("$1|$2|$3"); [ "$2" = FAIL ] && failed=$((failed + 1)); echo "--- $1: $2 $3"; }
mpirun_() { mpirun --allow-run-as-root --oversubscribe --bind-to none "$@"; }
H100_BF16=989.4e12 # dense bf16 TFLOP/s, H100/H200 SXM datasheet

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "GPUs" "$([ "${ngpu:-0}" -gt 0 ] && echo ok || echo FAIL)" "${ngpu:-0} x ${gpu:-none}"

# --- build ---------------------------------------------------------------------------------
start=$(date +%s)
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_CUDA_EMU_TESTS=OFF \
     -DCMAKE_CUDA_ARCHITECTURES="$archs" > "$log/configure" 2>&1 &&
   cmake --build "$build" -j"$jobs" > "$log/build" 2>&1; then
  row "build" ok "$(( $(date +%s) - start )) s, archs $archs, $(grep -c 'warning' "$log/build") warnings; $(grep -o 'NCCL=[A-Z]*' "$log/configure")"
else
  tail -40 "$log/configure" "$log/build"
  row "build" FAIL "see $log/build"
  exit 1
fi
loom=$build/launch/loom

# --- op suite and NCCL tests -------------------------------------------------------------------
if "$build/tests/backends/cuda/test_cuda_ops" > "$log/ops" 2>&1; then
  row "op suite fp32/tf32/bf16" ok "$(grep -c '^op_suite ok' "$log/ops") checks"
else
  grep -E "FAIL" "$log/ops" | head -20
  row "op suite fp32/tf32/bf16" FAIL "$(grep -c 'FAIL' "$log/ops") failures (see $log/ops)"
fi
(cd "$build" && ctest -R test_nccl --output-on-failure --timeout 120) > "$log/nccl" 2>&1
nccl_rc=$?
row "nccl tests (ctest -R test_nccl)" "$([ $nccl_rc = 0 ] && echo ok || echo FAIL)" \
    "$(grep -cE 'Passed' "$log/nccl") passed, $(grep -cE 'Skipped|Not Run' "$log/nccl") skipped (2-rank ones need 2 GPUs)"

# --- loss parity: the same small job on the CPU and on CUDA -------------------------------------
small=(--set model=gpt2-small6 --set train.seq_len=128
       --set train.batch_size=4 --set train.steps=6 --set checkpoint.every=0)
losses() { sed -n 's/.*"loss": \([-0-9.eE+]*\).*/\1/p' "$1/metrics.jsonl"; }
"$loom" train configs/tiny-train.json --backend cpu "${small[@]}" --out "$log/p-cpu" > "$log/p-cpu.log" 2>&1
for mode in fp32 tf32; do
  tol=$([ $mode = fp32 ] && echo 1e-3 || echo 2e-2) # relative; TF32 rounds inputs to 2^-11
  if "$loom" train configs/tiny-train.json --backend cuda --set precision=$mode "${small[@]}" \
       --out "$log/p-$mode" > "$log/p-$mode.log" 2>&1; then
    worst=$(paste <(losses "$log/p-cpu") <(losses "$log/p-$mode") |
            awk 'function a(x) {return x < 0 ? -x : x} {d = a($1 - $2) / a($1); if (d > w) w = d; n++}
                 END {printf "%.2e %d", w, n}')
    set -- $worst
    ok=$(awk -v w="$1" -v t="$tol" -v n="$2" 'BEGIN {print (n >= 6 && w <= t) ? "ok" : "FAIL"}')
    row "loss parity cuda $mode vs cpu" "$ok" "worst relative diff $1 over $2 steps (tol $tol)"
  else
    tail -20 "$log/p-$mode.log"
    row "loss parity cuda $mode vs cpu" FAIL "run failed (see $log/p-$mode.log)"
  fi
done

# --- 2 ranks over NCCL (auto must pick it) -------------------------------------------------------
if [ "${ngpu:-0}" -ge 2 ]; then
  if mpirun_ -np 2 "$loom" train configs/tiny-train.json --backend cuda "${small[@]}" \
       --out "$log/np2" > "$log/np2.log" 2>&1 && grep -q "comm: nccl" "$log/np2.log"; then
    d=$(paste <(losses "$log/p-cpu") <(losses "$log/np2") |
        awk 'function a(x) {return x < 0 ? -x : x} {d = a($1 - $2) / a($1); if (d > w) w = d} END {printf "%.2e", w}')
    row "2 ranks, comm=auto -> nccl" ok "loss vs 1-rank cpu: worst relative diff $d"
  else
    tail -20 "$log/np2.log"
    row "2 ranks, comm=auto -> nccl" FAIL "see $log/np2.log"
  fi
else
  row "2 ranks, comm=auto -> nccl" skip "one GPU"
fi

# --- throughput: gpt2-124m, B=16, T=1024 ----------------------------------------------------------
for mode in bf16 tf32; do
  if "$loom" train configs/tiny-train.json --backend cuda --set model=gpt2-124m \
       --set train.seq_len=1024 --set train.batch_size=16 --set train.steps=20 --set train.warmup=2 \
       --set checkpoint.every=0 --set precision=$mode --out "$log/t-$mode" > "$log/t-$mode.log" 2>&1; then
    tps=$(awk '/^done:/ {print $7}' "$log/t-$mode.log")
    mfu=$(awk '/^done:/ {print $11}' "$log/t-$mode.log")
    fl=$(awk '/^model .*MFLOP\/token/ {for (i = 1; i < NF; i++) if ($(i+1) ~ /^MFLOP/) print $i}' "$log/t-$mode.log")
    h100=$(awk -v t="$tps" -v f="$fl" -v p=$H100_BF16 'BEGIN {printf "%.1f%%", 100 * t * f * 1e6 / p}')
    row "gpt2-124m B16 T1024 $mode" ok "$tps tok/s, MFU $mfu (own peak), $h100 of H100/H200 bf16 989 TFLOP/s"
  else
    tail -20 "$log/t-$mode.log"
    row "gpt2-124m B16 T1024 $mode" FAIL "see $log/t-$mode.log"
  fi
done

echo
printf '%-34s %-5s %s\n' check result detail
printf '%-34s %-5s %s\n' ---------------------------------- ----- ------
for r in "${rows[@]}"; do
  IFS='|' read -r c res d <<< "$r"
  printf '%-34s %-5s %s\n' "$c" "$res" "$d"
done
echo "$failed failed"
exit "$failed"
