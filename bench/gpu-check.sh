#!/usr/bin/env bash
# bench/gpu-check.sh: the check to run on a machine with an NVIDIA GPU (sized for one H200, well
# under 8 minutes): configure + build with -DLOOM_CUDA=ON, run the CUDA tests, then train
# gpt2-124m at T=1024 for a few steps in fp32/TF32 and bf16 (loom prints tokens/s and MFU per
# step), then 2 steps with the nccl transport on one rank. Exit status: number of failed stages.
# Usage: bench/gpu-check.sh   (from anywhere; builds in <repo>/build; BATCH=16 by default)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
batch=${BATCH:-16}
jobs=$(nproc 2>/dev/null || echo 4)
failed=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

stage() { printf '\n=== %s\n' "$*"; }
fail() { echo "FAILED: $*"; failed=$((failed + 1)); }

stage "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true

stage "configure + build (-DLOOM_CUDA=ON)"
start=$(date +%s)
if cmake -S . -B build -DLOOM_CUDA=ON -DCMAKE_BUILD_TYPE=Release > "$log/configure" 2>&1 &&
   cmake --build build -j"$jobs" > "$log/build" 2>&1; then
  grep -E "loom: BLAS|cuDNN" "$log/configure"
  echo "built in $(( $(date +%s) - start )) s; warnings: $(grep -c 'warning' "$log/build")"
else
  tail -40 "$log/configure" "$log/build"
  fail "build"
  exit "$failed"
fi

stage "CUDA tests (ctest -L cuda)"
(cd build && ctest -L cuda --output-on-failure --timeout 300) || fail "ctest -L cuda"

# One training run: prints loom's first and last step lines and its summary.
train() { # name, extra args...
  local name=$1
  shift
  stage "train gpt2-124m T=1024 B=$batch: $name"
  if ./build/launch/loom train configs/tiny-train.json --backend cuda \
       --set model.preset=gpt2-124m --set train.seq_len=1024 --set train.batch_size="$batch" \
       --out "$log/run-$name" "$@" > "$log/$name" 2>&1; then
    grep -E "backend|cuda:|comm:" "$log/$name" | head -6
    grep -E "^step|^done|^memory" "$log/$name" > "$log/$name.steps"
    head -2 "$log/$name.steps"
    echo "..."
    tail -4 "$log/$name.steps"
  else
    tail -30 "$log/$name"
    fail "train $name"
  fi
}

train "fp32-tf32" --set train.steps=20
train "bf16" --set train.steps=20 --set precision=bf16
# nccl bootstraps over MPI: one rank under mpirun (a singleton MPI_Init also works without it).
stage "nccl transport, 1 rank, 2 steps"
if command -v mpirun > /dev/null; then
  if mpirun --allow-run-as-root -np 1 ./build/launch/loom train configs/tiny-train.json \
       --backend cuda --set model.preset=gpt2-124m --set train.seq_len=1024 \
       --set train.batch_size="$batch" --set train.steps=2 --set parallel.comm=nccl --out "$log/run-nccl" \
       > "$log/nccl" 2>&1; then
    grep -E "comm:|^step|^done" "$log/nccl" | tail -5
  else
    tail -30 "$log/nccl"
    fail "train with parallel.comm=nccl"
  fi
else
  fail "mpirun not found (needed for the nccl stage)"
fi

stage "summary"
echo "$failed failed stage(s)"
exit "$failed"
