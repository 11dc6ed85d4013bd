/* cpu_skinny.h: loom's own product for a few rows against a weight's rows (decoding), C = alpha A
 * W^T + beta C with W stored N x K, no packing. Internal to backends/cpu and its tests. */
#ifndef LOOM_CPU_SKINNY_H
#define LOOM_CPU_SKINNY_H

/* The most rows of A it takes: a decode step's batch. At 64 rows it and OpenBLAS were even
 * (bench_skinny, 2 Sapphire Rapids cores, weights from memory: 0.84-1.38x in two runs), at 32
 * it was 1.25-1.76x faster, at 1-16 rows 1.6-3.6x. */
#define CPU_SKINNY_ROWS 64

enum { CPU_SKINNY_NONE, CPU_SKINNY_AVX2, CPU_SKINNY_AVX512 };

/* The widest kernel this CPU runs (AVX-512, AVX2+FMA, or none: not x86-64 or older). */
int cpu_skinny_isa(void);

/* C (M x N, row stride ldc) = alpha A W^T + beta C, A M x K (stride lda), W N x K (stride ldw),
 * on up to `threads` OpenMP threads (called outside a parallel region). beta == 0 ignores C's
 * contents. Every element's bits depend only on its A row, W row and K, not on M, the threads or
 * the split (within one kernel: AVX-512 and AVX2 sum in other orders). Returns 0, having done
 * nothing, when the shape is not its (M > CPU_SKINNY_ROWS) or the CPU has no kernel: the caller's
 * sgemm runs it then. */
int cpu_skinny_nt(int threads, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *W, int ldw, float beta, float *C, int ldc);

/* The same with the kernel named (tests run both on a CPU that has both). */
int cpu_skinny_nt_isa(int isa, int threads, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *W, int ldw, float beta, float *C, int ldc);

#endif
