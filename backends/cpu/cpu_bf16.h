/* cpu_bf16.h: the CPU backend's bf16 matmuls (`precision: bf16`) through oneDNN's matmul
 * primitive. Internal to backends/cpu and its tests; host thread only. */
#ifndef LOOM_CPU_BF16_H
#define LOOM_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

/* 1 when bf16 matmuls can run here: the CPU has AVX512_BF16 and oneDNN 2.x loads. Otherwise 0,
 * and `why` (if given) names what is missing. Decided once. */
int cpu_bf16_ready(char *why, size_t len);

/* Products with a dimension under this stay fp32: LoRA's rank-16 factor products ran slower in
 * bf16 (2 Sapphire Rapids cores, a SmolLM2-135M LoRA step: 16x576x2048 TN += 0.040 s fp32 against
 * 0.056 s bf16 per step, 2048x576x16 NN += 0.021 against 0.051), and stay more exact. */
#define CPU_BF16_MIN_DIM 64

/* C = alpha op(A) op(B) + beta C (row-major, dense: lda = tA ? M : K, ldb = tB ? K : N, ldc = N)
 * with A and B rounded to bf16 (nearest even) and the products summed in fp32. Bk: B already
 * rounded (a weight's kept copy, weights_bf16), else NULL. Returns 1 when done; 0, with C
 * untouched, when it cannot (not ready, oneDNN refused the shape, out of memory): the caller
 * computes the product in fp32 then. */
int cpu_bf16_matmul(int threads, float *C, const float *A, const float *B, const uint16_t *Bk,
                    int M, int N, int K, int tA, int tB, float alpha, float beta);

/* Product shapes whose oneDNN primitive is kept (at most a fixed count: the least recently used
 * makes room for a new one). For tests. */
int cpu_bf16_shapes_kept(void);

#endif
