/* cpu_blas.c: the BLAS side of the CPU backend: OpenBLAS's kernel check and re-exec, thread count,
 * matmul (OpenBLAS, or for large products the library cpu_gemm.c chose) and the sgemm calibration
 * that gives the peak FLOP/s for MFU.
 * It must never call sgemm with a thread count different from what the caller set. */
#include "backends/cpu/cpu_blas.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_bf16.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_skinny.h"
#include "base/log.h"

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

const char *cpu_blas_corename(void)
{
#ifdef __APPLE__
    return "Accelerate";
#else
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
#endif
}

/* Speed tier of an OpenBLAS kernel name: 3 AVX-512, 2 AVX2, 1 AVX, 0 anything older/generic. */
static int cpu_blas_tier(const char *core)
{
    static const char *const t3[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const t2[] = {"haswell", "zen", "skylake"};
    static const char *const t1[] = {"sandybridge", "bulldozer", "piledriver", "steamroller",
                                     "excavator"};
    char low[32];
    size_t i = 0;
    for (; core[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)core[i]);
    low[i] = 0;
    for (size_t k = 0; k < sizeof t3 / sizeof *t3; k++)
        if (strcmp(low, t3[k]) == 0) return 3;
    for (size_t k = 0; k < sizeof t2 / sizeof *t2; k++)
        if (strcmp(low, t2[k]) == 0) return 2;
    for (size_t k = 0; k < sizeof t1 / sizeof *t1; k++)
        if (strcmp(low, t1[k]) == 0) return 1;
    return 0;
}

int cpu_blas_kernel_ok(const char *core, const char *wanted)
{
    return !wanted || cpu_blas_tier(core) >= cpu_blas_tier(wanted);
}

const char *cpu_blas_wanted_kernel(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
#endif
    return NULL;
}

void cpu_blas_ensure_fast_kernel(char **argv)
{
#if defined(__APPLE__) || !defined(__linux__)
    (void)argv;
#else
    const char *core = cpu_blas_corename();
    const char *want = cpu_blas_wanted_kernel();
    if (cpu_blas_kernel_ok(core, want)) return;
    /* LOOM_CPU_REEXEC_TEST: the test sets OPENBLAS_CORETYPE=Prescott to get a slow kernel on any
     * CPU, and this flag says "treat it as not chosen by the user" so the re-exec path runs. */
    int user_set = getenv("OPENBLAS_CORETYPE") && !getenv("LOOM_CPU_REEXEC_TEST");
    /* The user's (or the site's) choice, e.g. a kernel pinned where a newer one misbehaves: honoured
     * without a word here (this runs before --quiet is read); the backend's start line names it. */
    if (user_set) return;
    if (!argv || getenv("LOOM_NO_REEXEC") || getenv("LOOM_CPU_REEXECED")) {
        log_warn("cpu: OpenBLAS runs the %s kernel, slower than this CPU supports (%s); "
                 "set OPENBLAS_CORETYPE=%s for 4-5x faster matmuls",
                 core, want, want);
        return;
    }
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("LOOM_CPU_REEXECED", "1", 1);
    unsetenv("LOOM_CPU_REEXEC_TEST");
    execv("/proc/self/exe", argv);
    log_warn("cpu: re-exec with OPENBLAS_CORETYPE=%s failed; continuing with the slow %s kernel",
             want, core);
#endif
}

void cpu_blas_check_threading(int threads)
{
#ifndef __APPLE__
    /* Measured on 2 Zen4 cores (an MLP block: 2 sgemms + layernorm/bias/gelu/add): with the
     * pthreads build, OpenBLAS's spinning workers and OpenMP's share the cores and the OpenMP
     * kernels took 16-28% of the time instead of 3%. */
    if (threads > 1 && openblas_get_parallel() == 1)
        log_info("cpu: OpenBLAS is the pthreads build; its threads compete with OpenMP's "
                 "(install libopenblas-openmp-dev for ~25%% faster steps)");
#else
    (void)threads;
#endif
}

/* OpenBLAS's thread count is process-wide while each backend has its own; every matmul states
 * the count it wants and the (cheap) switch happens only when it differs. Host thread only. */
static int cpu_blas_threads_now = -1;

void cpu_blas_set_threads(int n)
{
    if (n == cpu_blas_threads_now) return;
    cpu_blas_threads_now = n;
#ifndef __APPLE__
    openblas_set_num_threads(n);
#endif
    cpu_gemm_set_threads(n);
}

/* The OpenMP build of OpenBLAS already runs single-threaded inside a parallel region; the
 * pthreads build must be told, or each of our threads would fan out to all BLAS threads. */
void cpu_blas_enter_parallel(void)
{
#ifndef __APPLE__
    if (openblas_get_parallel() != 2) cpu_blas_set_threads(1);
#endif
}

/* A few rows against a large matrix (decoding one token: M = 1): OpenBLAS runs such a product
 * on one thread (its small-matrix path) while the other cores spin, so the columns are split
 * across our threads instead, each a single-threaded sgemm over its own block of op(B) and C.
 * Measured on a 27-layer 512-wide model's decode: 35% of the time was libgomp spinning. */
#define CPU_FEW_ROWS 8
#define CPU_SPLIT_MIN ((size_t)1 << 16) /* N * K below this: one thread is faster */

static void cpu_matmul_split_cols(int threads, float *C, const float *A, const float *B, int M,
                                  int N, int K, int transA, int transB, float alpha, float beta)
{
    int per = ((N + threads - 1) / threads + 15) / 16 * 16; /* 64-byte column blocks */
    cpu_blas_enter_parallel();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        int j0 = t * per, nb = N - j0 < per ? N - j0 : per;
        if (nb <= 0) continue;
        const float *Bj = transB ? B + (size_t)j0 * K : B + j0;
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                    transB ? CblasTrans : CblasNoTrans, M, nb, K, alpha, A, transA ? M : K, Bj,
                    transB ? K : N, beta, C + j0, N);
    }
}

/* C = alpha op(A) op(B) + beta C, row-major; lda/ldb are the stored row lengths. */
void cpu_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta)
{
    if (M <= 0 || N <= 0) return;
    int threads = cpu_st(be)->threads;
    cpu_blas_set_threads(threads);
    if (K <= 0) { /* empty product: only the beta part remains */
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    /* precision bf16 (set only where cpu_bf16_ready): a product against a weight with a kept
     * bf16 copy (weights_bf16) runs in bf16 at any M, decode steps too: with W read as bf16 and no
     * rounding pass, oneDNN's AMX kernel beat the fp32 few-rows kernel 1.5x at 32 rows, and a
     * row's bits do not depend on M (test_cpu_bf16), so batched decoding stays one-at-a-time's */
    const uint16_t *Bk = be->cfg.precision == BACKEND_BF16
                             ? cpu_bf16_kept_find(cpu_st(be), B, (size_t)K * N)
                             : NULL;
    if (Bk && N >= CPU_BF16_MIN_DIM && K >= CPU_BF16_MIN_DIM &&
        cpu_bf16_matmul(threads, C, A, B, Bk, M, N, K, transA, transB, alpha, beta))
        return;
    /* a decode step's rows against a weight's rows: loom's kernel reads W in place (cpu_skinny.c) */
    if (!transA && transB && cpu_skinny_nt(threads, M, N, K, alpha, A, K, B, K, beta, C, N)) return;
    /* every other product of precision bf16 in bf16 too, but those with a dimension under
     * CPU_BF16_MIN_DIM (LoRA's factors) */
    if (be->cfg.precision == BACKEND_BF16 && M >= CPU_BF16_MIN_DIM && N >= CPU_BF16_MIN_DIM &&
        K >= CPU_BF16_MIN_DIM &&
        cpu_bf16_matmul(threads, C, A, B, NULL, M, N, K, transA, transB, alpha, beta))
        return;
    if (threads > 1 && M <= CPU_FEW_ROWS && N >= 16 * threads && (size_t)N * K >= CPU_SPLIT_MIN) {
        cpu_matmul_split_cols(threads, C, A, B, M, N, K, transA, transB, alpha, beta);
        return;
    }
    /* large products: the library their shape's race (or LOOM_GEMM) picked */
    if ((double)M * N * K >= CPU_GEMM_BIG)
        cpu_gemm_big(threads, transA, transB, M, N, K, alpha, A, B, beta, C);
    else
        cpu_gemm_lib(CPU_GEMM_OPENBLAS, transA, transB, M, N, K, alpha, A, transA ? M : K, B,
                     transB ? K : N, beta, C, N);
}

/* Best 1536^3 sgemm (bf16: a bf16 matmul, cpu_bf16.c) over 0.2 s (at least 4 timed runs, ~40 ms
 * each on 2 Zen4 cores) after one warm-up: FLOP/s; 0 when bf16 cannot run. Best-of over a fixed time, since one run caught by another process reads low.
 * The leading dimension is padded off a power of two: with 1024^3 at ld 1024 the rate depended
 * on where the process's pages landed (160 or 205 GFLOP/s in back-to-back runs of one binary,
 * steady within each) and the job's MFU with it; 1536 at ld 1552 reads 200-203 every time. */
double cpu_blas_calibrate(int threads, int bf16)
{
    const int n = 1536, ld = 1552;
    size_t sz = (size_t)n * ld;
    float *a = NULL, *b = NULL, *c = NULL;
    if (posix_memalign((void **)&a, 64, sz * sizeof(float)) ||
        posix_memalign((void **)&b, 64, sz * sizeof(float)) ||
        posix_memalign((void **)&c, 64, sz * sizeof(float))) {
        free(a);
        free(b);
        return 0.0;
    }
    for (size_t i = 0; i < sz; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
        c[i] = 0.0f;
    }
    cpu_blas_set_threads(threads);
    int lib = cpu_gemm_choose(threads); /* the rate of the library the large matmuls take */
    double best = 1e30, start = cpu_now();
    for (int it = 0; it < 5 || cpu_now() - start < 0.2; it++) {
        double t0 = cpu_now();
        if (!bf16) {
            cpu_gemm_lib(lib, 0, 1, n, n, n, 1.0f, a, ld, b, ld, 0.0f, c, ld);
        } else if (!cpu_bf16_matmul(threads, c, a, b, NULL, n, n, n, 0, 1, 1.0f, 0.0f)) { /* dense */
            best = 1e30;
            break;
        }
        double dt = cpu_now() - t0;
        if (it > 0 && dt < best) best = dt;
    }
    free(a);
    free(b);
    free(c);
    return best < 1e30 ? 2.0 * n * (double)n * n / best : 0.0;
}
