/* cpu_gemm.h: the sgemm library choice of the CPU backend (OpenBLAS linked; oneDNN, BLIS found with
 * dlopen at run time). Internal to backends/cpu and its tests; the choice is process-wide and made
 * on the host thread. Never a hard dependency: a missing library is logged and OpenBLAS runs. */
#ifndef LOOM_CPU_GEMM_H
#define LOOM_CPU_GEMM_H

#include <stdint.h>

enum { CPU_GEMM_OPENBLAS, CPU_GEMM_ONEDNN, CPU_GEMM_BLIS, CPU_GEMM_COUNT };

/* The entry points found with dlsym (also bench_gemm_libs's, which links nothing of loom):
 * oneDNN's dnnl_sgemm (2.x and 3.x): row-major, 'N'/'T', dnnl_dim_t = int64_t, returns a status.
 * BLIS's typed bli_sgemm (Debian: dim_t/inc_t int64_t, BLIS_TRANSPOSE 8) with row and column
 * strides. Not BLIS's cblas_sgemm: that name, and the sgemm_ it calls, are OpenBLAS's too. */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);
typedef void (*bli_sgemm_fn)(int, int, int64_t, int64_t, int64_t, const float *, const float *,
                             int64_t, int64_t, const float *, int64_t, int64_t, const float *,
                             float *, int64_t, int64_t);

/* Products with M*N*K at least this go to cpu_gemm_big; smaller ones always to OpenBLAS, so small
 * models (all the tests') neither pay for a race nor change with its outcome. 2^22 takes in a
 * rank-16 LoRA factor of a 2048-token step (2048 x 16 x 576 = 2^24.2), where libraries differ 2x. */
#define CPU_GEMM_BIG ((double)(1 << 22))

/* The process's library, decided on first call: $LOOM_GEMM (openblas|onednn|blis; auto or unset:
 * race) or a ~0.15 s race of those installed on three layer-sized shapes at `threads` threads
 * (another library must beat OpenBLAS by 3%). Logs the choice and the rates. The MFU calibration
 * runs on it; unless forced, the best library other than OpenBLAS becomes the challenger of
 * cpu_gemm_big's per-shape races. The caller has set OpenBLAS's thread count to `threads`. */
int cpu_gemm_choose(int threads);

/* Make `lib` the choice for every large product, no per-shape race (tests, benchmarks). -1 when
 * it is not installed. */
int cpu_gemm_force(int lib);

/* C = alpha op(A) op(B) + beta C (row-major, lda = transA ? M : K, ldb = transB ? K : N, ldc = N)
 * for a product of M*N*K >= CPU_GEMM_BIG at `threads` threads. Forced ($LOOM_GEMM, cpu_gemm_force)
 * or with a single library installed: that one. Otherwise each product shape (M, N, K, the
 * transpositions, beta == 0 or not, threads) is raced on its first call, on the call's own
 * operands: OpenBLAS against the start race's best other library; the other must win by 3%. The
 * call's result is then computed by the winner, and later calls of the shape go straight to it. */
void cpu_gemm_big(int threads, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, const float *B, float beta, float *C);

/* The library shape (M, N, K, transA, transB, beta != 0, threads) was given by its race; -1 when
 * it has not run (forced choice, single library, or not seen yet). For profiles. */
int cpu_gemm_shape_lib(int threads, int transA, int transB, int M, int N, int K, int accumulate);

/* 1 when `lib` is usable here (dlopen on first ask). */
int cpu_gemm_available(int lib);

const char *cpu_gemm_lib_name(int lib);   /* "openblas", "onednn", "blis" */
const char *cpu_gemm_lib_package(int lib); /* the Debian package that installs it */
int cpu_gemm_lib_from_name(const char *name); /* -1 if none */

/* Thread count for the loaded libraries (OpenBLAS's is set by cpu_blas_set_threads). */
void cpu_gemm_set_threads(int n);

/* C = alpha op(A) op(B) + beta C by `lib` (row-major, leading dimensions as stored); OpenBLAS when
 * `lib` is not loaded. */
void cpu_gemm_lib(int lib, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
