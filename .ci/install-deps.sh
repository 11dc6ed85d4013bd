#!/usr/bin/env bash
# install-deps.sh: the Debian packages loom builds and tests with. Idempotent: installs only what
# is missing, so running it again costs a second. Uses sudo when not root. apt-get's hundreds of
# lines go to a log file (LOOM_DEPS_LOG, default build/install-deps.log in the repository), named
# in the one line printed; on failure its last lines are shown too.
set -euo pipefail
log=${LOOM_DEPS_LOG:-$(cd "$(dirname "$0")/.." && pwd)/build/install-deps.log}
pkgs=(build-essential cmake pkg-config libcjson-dev libopenblas-openmp-dev libpcre2-dev libutf8proc-dev
      openmpi-bin libopenmpi-dev libhdf5-dev libhdf5-openmpi-dev hdf5-tools
      libdnnl2 libdnnl-dev libblis4-openmp)
# libdnnl2 (oneDNN) and libblis4-openmp (BLIS): optional at run time (dlopen'd); when present the
# CPU backend races them against OpenBLAS at start and runs its large sgemms on the fastest
# (docs/cpu-gemm.md). BLIS registers libblas.so.3 at a lower priority than OpenBLAS: no change there.
# libdnnl-dev: oneDNN's headers, for the types of its matmul primitive that `precision: bf16` runs on
# (backends/cpu/cpu_bf16.c); without them loom still builds, and bf16 runs in fp32.
# EXTRA_PKGS: more for CI only (valgrind), so a newcomer's install stays what the build needs
read -r -a extra <<<"${EXTRA_PKGS:-}"
pkgs+=("${extra[@]}")
# loom's CPU kernels use OpenMP: the OpenMP build of OpenBLAS shares their thread pool, where the
# pthread build's spinning threads fight them (measured: 16-35% of a step lost). Debian gives the
# pthread build priority, so point the alternatives at the OpenMP one.
use_openblas_openmp() {
  local d=/usr/lib/x86_64-linux-gnu/openblas-openmp arch
  arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
  [ "$arch" = amd64 ] || d=/usr/lib/$(gcc -dumpmachine)/openblas-openmp
  [ -e "$d/libopenblas.so.0" ] || return 0
  for n in libopenblas.so libopenblas.so.0; do
    $SUDO update-alternatives --set "$n-$(basename "$(dirname "$d")")" "$d/$n" >/dev/null 2>&1 || true
  done
}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p "$(dirname "$log")"
  echo "install-deps: installing ${#missing[@]} packages (${missing[*]}); apt-get's output goes to $log"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
           --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "install-deps: error: apt-get failed (above: the last lines of $log)" >&2
    exit 1
  fi
else
  echo "install-deps: all ${#pkgs[@]} packages present"
fi
use_openblas_openmp
