/* cpu_gemm.h: the sgemm library choice of the CPU backend (OpenBLAS linked; oneDNN, BLIS found with
 * dlopen at run time). Internal to backends/cpu and its tests; the choice is process-wide and made
 * on the host thread. Never a hard dependency: a missing library is logged and OpenBLAS runs. */
#ifndef LOOM_CPU_GEMM_H
#define LOOM_CPU_GEMM_H

#include <stddef.h>
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
 * or with a single library installed: that one. Otherwise each product family is raced on its
 * first call, on the call's own operands: OpenBLAS against the start race's best other library;
 * the other must win by 3%. A family is the product without its token count (M, or K for a
 * transposed A: the weight gradients), which changes from batch to batch, but with its log2
 * class; also the transpositions, beta == 0 or not, threads. The call's result is then computed
 * by the winner, and later calls of the family go straight to it. Once the choices are frozen
 * (cpu_gemm_choices_save or _load), a family not raced yet runs on the chosen library.
 * $LOOM_GEMM_RACE_INVERT=1 makes every race pick its loser (a test: resumed choices must not
 * come from races). */
void cpu_gemm_big(int threads, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, const float *B, float beta, float *C);

/* The library the family of (M, N, K, transA, transB, beta != 0, threads) was given by its race
 * or a checkpoint; -1 when none was (forced choice, single library, or not seen yet). */
int cpu_gemm_shape_lib(int threads, int transA, int transB, int M, int N, int K, int accumulate);

/* Families in the table (raced or loaded). */
int cpu_gemm_shapes_raced(void);

/* The library choices as one line of text, for a checkpoint: "chosen=LIB rival=LIB|none
 * forced=0|1 shapes=D1,D2,CLASS,TA,TB,ACC,THREADS=LIB;...". Decides the start choice first if no
 * large product has run yet, then freezes the choices (no more races), so this process goes on
 * as a process that loads the text will. 0, or -1 when it does not fit in len. */
int cpu_gemm_choices_save(int threads, char *buf, size_t len);

/* Adopt a cpu_gemm_choices_save text: its start choice, challenger and table, frozen. 0; or -1
 * with why (the choices stay this process's own): the text is unreadable, a library it names is
 * not installed here, or $LOOM_GEMM here asks for something else than the saved run ran. */
int cpu_gemm_choices_load(const char *text, int threads, char *why, size_t why_len);

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
