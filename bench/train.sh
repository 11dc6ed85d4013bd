#!/usr/bin/env bash
# bench/train.sh [BUILD_DIR]: CPU pretraining step (AdamW, fp32) of loom vs every PyTorch a user can
# install here, on the same GPT-2 model, shape and thread count, alternated in one run (loom, ref 1, ref 2,
# ..., loom, ...) so machine drift hits all. References: pip PyTorch 2.x from PYTHON (default
# /work/venv/bin/python if present, else python3) eager and torch.compile (inductor), and Debian's
# python3-torch 1.13 from /usr/bin/python3 (OpenBLAS forced to the kernel loom uses, tcmalloc
# preloaded). Before each run: the load average and the sgemm rate (square, and on the model's own
# matmul shapes: bench_cpu_step --sgemm). Table: s/step, tokens/s, loom's ratio to each and to the
# fastest, MFU of each (model FLOPs/token from loom) against the median sgemm rates of the same
# run: "sh" the model's shapes, each on the library its race picks (what loom's matmuls can reach),
# "ob" the same shapes on OpenBLAS alone, "sq" square (the start race's library). Installs nothing:
# a missing reference is reported with the command that installs it.
# ROUNDS (2), STEPS (6), THREADS (2), MODELS ("gpt2-124m gpt2-small6") set the run. PRECISION=bf16
# runs loom with `precision: bf16` and the references under torch.autocast(bf16) (fp32 master
# weights on both sides); the MFU columns stay against the fp32 sgemm rates.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
loom="$build/launch/loom"
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
steps=${STEPS:-6}
models=${MODELS:-gpt2-124m gpt2-small6}
if [ -z "${PYTHON:-}" ]; then
  if [ -x /work/venv/bin/python ]; then PYTHON=/work/venv/bin/python; else PYTHON=python3; fi
fi
debpy=${DEBIAN_PYTHON:-/usr/bin/python3}
precision=${PRECISION:-fp32} autocast=(); [ "$precision" = bf16 ] && autocast=(--bf16)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads

# The references: "label python mode" rows (mode eager or compile, "+tcmalloc": with gperftools'
# tcmalloc preloaded, which PyTorch's CPU performance guide recommends: on a LoRA step it cut pip
# torch's page faults 2.3x and its step 1.6x); a Python whose torch is Debian's is the 1.13 one.
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 2>/dev/null || true)
torch_of() { "$1" -c 'import torch, sys; print(torch.__version__, "debian" if torch.__file__.startswith("/usr/lib/python3/") else "pip")' 2>/dev/null || true; }
refs=()
pip_v=$(torch_of "$PYTHON"); deb_v=""
[ "$(command -v "$PYTHON")" != "$(command -v "$debpy" || true)" ] && deb_v=$(torch_of "$debpy")
[ -z "$deb_v" ] && [ "${pip_v#* }" = debian ] && deb_v=$pip_v && pip_v=""
if [ -n "$pip_v" ] && [ "${pip_v#* }" = pip ]; then
  refs+=("pip-${pip_v%% *}-eager $PYTHON eager")
  case "$pip_v" in 1.*) ;; *) refs+=("pip-${pip_v%% *}-compile $PYTHON compile") ;; esac
  if [ -n "$tcmalloc" ]; then
    refs+=("pip-${pip_v%% *}-eager-tcmalloc $PYTHON eager+tcmalloc")
    case "$pip_v" in 1.*) ;; *) refs+=("pip-${pip_v%% *}-compile-tcmalloc $PYTHON compile+tcmalloc") ;; esac
  else
    echo "reference missing: pip PyTorch with tcmalloc preloaded; install with: apt-get install libgoogle-perftools4"
  fi
else
  echo "reference missing: pip PyTorch 2.x ($PYTHON has none); install with: python3 -m venv /work/venv &&" \
       "/work/venv/bin/pip install torch (then PYTHON=/work/venv/bin/python)"
fi
if [ -n "$deb_v" ]; then
  refs+=("debian-${deb_v%% *} $debpy eager")
else
  echo "reference missing: Debian's PyTorch 1.13 ($debpy has no torch); install with: apt-get install python3-torch"
fi
corename=""

median() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.12g\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
load() { cut -d' ' -f1 /proc/loadavg; }

shape_of() { # preset -> "layers width heads" from configs/models/<preset>.json
  awk -F'[:,]' '{for (i = 1; i < NF; i++) {g = $i; gsub(/[" {]/, "", g);
       if (g == "n_layer") L = $(i+1) + 0; if (g == "d_model") C = $(i+1) + 0; if (g == "n_head") H = $(i+1) + 0}}
       END {print L, C, H}' "$root/configs/models/$1.json"
}

sgemm_now() { # L C H B T -> appends "square shapes shapes-on-OpenBLAS" to $tmp/sg
  local a b
  a=$("$build/bench/bench_cpu_step" --sgemm "$threads" 1 "$@" | awk '{print $2, $4}')
  b=$(LOOM_GEMM=openblas "$build/bench/bench_cpu_step" --sgemm "$threads" 1 "$@" | awk '{print $4}')
  echo "$a $b" >> "$tmp/sg"
}

run_loom() { # preset B T -> appends "s/step tok/s load" to $tmp/res0; sets $tmp/flops (MFLOP/token)
  local l; l=$(load)
  "$loom" train "$root/configs/tiny-train.json" \
    --set model=$1 --set train.batch_size=$2 --set train.seq_len=$3 --set train.steps=$steps \
    --set train.warmup=1 --set parallel.threads=$threads --set checkpoint.every=-1 --set precision=$precision \
    --out "$tmp/run" > "$tmp/loom.out" 2>&1 || { cat "$tmp/loom.out"; exit 1; }
  awk -v bt=$(( $2 * $3 )) -v l="$l" '/^done:/ {tps=$7} END {print bt / tps, tps, l}' "$tmp/loom.out" >> "$tmp/res0"
  corename=$(sed -n 's/^backend cpu (OpenBLAS \([A-Za-z0-9]*\).*/\1/p' "$tmp/loom.out" | head -1)
  awk '/^model .*MFLOP\/token/ {for (i = 1; i < NF; i++) if ($(i+1) ~ /^MFLOP/) print $i}' "$tmp/loom.out" > "$tmp/flops"
}

run_ref() { # index python mode L C H B T -> appends "s/step tok/s load" to $tmp/res<index>
  local i=$1 py=$2 mode=$3 l; shift 3; l=$(load)
  local envs=()
  if [ "$py" = "$debpy" ]; then envs=(OPENBLAS_CORETYPE=${corename:-Cooperlake} ${tcmalloc:+LD_PRELOAD=$tcmalloc}); fi
  case $mode in *+tcmalloc) envs+=(LD_PRELOAD=$tcmalloc); mode=${mode%+tcmalloc} ;; esac
  if ! env "${envs[@]}" "$py" "$root/bench/torch_ref.py" --layers $1 --width $2 --heads $3 --batch $4 \
    --seq $5 --steps $(( steps + 1 )) --threads $threads --mode $mode "${autocast[@]}" > "$tmp/ref.out" 2>&1; then
    echo "reference $py --mode $mode failed (left out of this round): $(tail -1 "$tmp/ref.out")"
    return 0
  fi
  awk -v bt=$(( $4 * $5 )) -v l="$l" '/^tokens_per_s/ {print bt / $2, $2, l}' "$tmp/ref.out" >> "$tmp/res$i"
}

col() { cut -d' ' -f"$2" "$tmp/$1" | median; }
echo "loom $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $precision, $threads threads, $rounds rounds of $steps steps," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for preset in $models; do
  case $preset in gpt2-124m) B=4 ;; *) B=8 ;; esac
  T=256
  set -- $(shape_of "$preset")
  L=$1 C=$2 H=$3
  rm -f "$tmp"/res* "$tmp/sg"; for i in $(seq 0 ${#refs[@]}); do : > "$tmp/res$i"; done
  for r in $(seq "$rounds"); do
    sgemm_now "$L" "$C" "$H" "$B" "$T"
    run_loom "$preset" "$B" "$T"
    for i in "${!refs[@]}"; do
      set -- ${refs[$i]}
      sgemm_now "$L" "$C" "$H" "$B" "$T"
      run_ref $(( i + 1 )) "$2" "$3" "$L" "$C" "$H" "$B" "$T"
    done
  done
  fl=$(cat "$tmp/flops"); sq=$(col sg 1); sh=$(col sg 2); ob=$(col sg 3)
  lt=$(col res0 2)
  best=0
  for i in "${!refs[@]}"; do
    t=$(col res$(( i + 1 )) 2)
    if [ -n "$t" ]; then best=$(echo "if ($t > $best) $t else $best" | bc -l); fi
  done
  echo
  echo "$preset B=$B T=$T (loom on OpenBLAS ${corename:-?}): $fl MFLOP/token; sgemm (median of the run) $sq GFLOP/s square, $sh GFLOP/s on the model's shapes" \
       "(range $(cut -d' ' -f2 "$tmp/sg" | sort -g | head -1)-$(cut -d' ' -f2 "$tmp/sg" | sort -g | tail -1); each shape on the library its race picks), $ob on OpenBLAS alone"
  printf "  %-26s %8s %9s %11s %8s %8s %8s %s\n" engine s/step tokens/s "loom ratio" "MFU sh" "MFU ob" "MFU sq" "load before each run"
  names=("loom" ); for i in "${!refs[@]}"; do set -- ${refs[$i]}; names+=("$1"); done
  for i in "${!names[@]}"; do
    t=$(col res$i 2)
    [ -n "$t" ] || { printf "  %-26s failed in every round\n" "${names[$i]}"; continue; }
    printf "  %-26s %8.2f %9.0f %11.2f %7.1f%% %7.1f%% %7.1f%% %s\n" "${names[$i]}" "$(echo "$B * $T / $t" | bc -l)" "$t" \
      "$(echo "$lt / $t" | bc -l)" "$(echo "100 * $t * $fl / 1000 / $sh" | bc -l)" \
      "$(echo "100 * $t * $fl / 1000 / $ob" | bc -l)" \
      "$(echo "100 * $t * $fl / 1000 / $sq" | bc -l)" "$(cut -d' ' -f3 "$tmp/res$i" | tr '\n' ' ')"
  done
  if [ "$best" != 0 ]; then
    printf "  loom / fastest reference: %.2fx (bar 1.3x); loom MFU on the model's shapes %.1f%% (bar 90%%)\n" \
      "$(echo "$lt / $best" | bc -l)" "$(echo "100 * $lt * $fl / 1000 / $sh" | bc -l)"
  fi
done
