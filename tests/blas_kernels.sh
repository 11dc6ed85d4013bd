#!/bin/sh
# blas_kernels.sh: prints the OpenBLAS kernels (OPENBLAS_CORETYPE names) this CPU can run, one a
# line: Prescott (SSE3, every x86-64), Haswell and Zen (AVX2 + FMA), SkylakeX (AVX-512F),
# Cooperlake (AVX-512 BF16). CI runs the numeric tests under each. Prints nothing off x86-64.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || exit 0
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
has sse3 || has pni || exit 0
echo Prescott
if has avx2 && has fma; then echo Haswell; echo Zen; fi
if has avx512f && has avx512dq && has avx512bw && has avx512vl; then echo SkylakeX; fi
if has avx512_bf16; then echo Cooperlake; fi
