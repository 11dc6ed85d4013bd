/* cpu_tile.h: loom's register-tiled product for the small, single-threaded matmuls inside its own
 * parallel regions (attention's blocks): C = alpha A B (+ C), A read through any two strides, so a
 * transposed operand needs no copy. Internal to backends/cpu and its tests. */
#ifndef LOOM_CPU_TILE_H
#define LOOM_CPU_TILE_H

#include <stddef.h>

/* C (M x N, row stride ldc) = alpha A B, plus C's old value when acc != 0 (else C is only
 * written, NaN ignored). A(i, k) = A[i ars + k acs]; B is K x N with row stride ldb. One thread.
 * Each element sums k = 0 .. K-1 in order, one fused multiply-add per term, then alpha, then the
 * add: its bits depend only on its A row, its B column and K, not on M, N or its place in a tile.
 * isa: CPU_SKINNY_AVX512 / _AVX2 (cpu_skinny.h) picks the kernel (tests run each); at most the
 * CPU's. Where the CPU has neither, sgemm runs it (one of ars, acs must be 1 then). */
void cpu_tile_gemm_isa(int isa, int M, int N, int K, float alpha, const float *A, size_t ars,
                       size_t acs, const float *B, size_t ldb, int acc, float *C, size_t ldc);

/* The same with the CPU's widest kernel. */
void cpu_tile_gemm(int M, int N, int K, float alpha, const float *A, size_t ars, size_t acs,
                   const float *B, size_t ldb, int acc, float *C, size_t ldc);

#endif
