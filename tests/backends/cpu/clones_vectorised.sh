#!/usr/bin/env bash
# clones_vectorised.sh LIB.a: every CPU kernel built for several ISAs (CPU_CLONES) that GCC
# vectorises in its AVX-512 clone is vectorised in its AVX2 clone too. The bug this guards: under
# the default -ftrapping-math GCC 12 kept every exp loop's AVX2 clone scalar (a select's discarded
# arm may not run unconditionally without masked arithmetic), so SwiGLU, GELU and attention's
# dscore ran ~6x slower on AVX2-only CPUs (AMD Zen 2/3) while AVX-512 machines never showed it.
# Reads the built code (objdump), not timings. Exit 77 (skip) off x86-64 or without objdump.
set -u
lib=${1:?usage: clones_vectorised.sh LIB.a}
command -v objdump >/dev/null 2>&1 || { echo "SKIP: no objdump"; exit 77; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: not x86-64 (no ISA clones)"; exit 77; }
[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }
# per function symbol: how many of its instructions name a ymm / zmm register
objdump -d --no-show-raw-insn "$lib" | awk '
  /^[0-9a-f]+ <[^>]+>:$/ { name = $2; gsub(/[<>:]/, "", name); y[name] += 0; z[name] += 0; next }
  name != "" && /%ymm/ { y[name]++ }
  name != "" && /%zmm/ { z[name]++ }
  END {
    clones = 0; bad = 0
    for (f in y) {
      if (f !~ /\.arch_x86_64_v4$/) continue
      base = f; sub(/\.arch_x86_64_v4$/, "", base)
      v3 = base ".arch_x86_64_v3"
      if (!(v3 in y)) continue
      clones++
      if (y[f] + z[f] > 0 && y[v3] == 0) {
        printf "FAIL: %s is vectorised for AVX-512 (%d vector instructions) but scalar for AVX2\n",
               base, y[f] + z[f]
        bad++
      }
    }
    if (clones == 0) { print "FAIL: no AVX-512/AVX2 clone pairs found in the library"; exit 1 }
    printf "%d clone pairs checked, %d scalar AVX2 clones of vectorised kernels\n", clones, bad
    exit bad > 0
  }'
