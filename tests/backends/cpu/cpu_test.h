/* cpu_test.h: helpers shared by the CPU backend tests: seeded random data, comparisons against
 * double-precision references, and central finite differences on those references.
 * Test-only (static functions in a header); never linked into the library. */
#ifndef LOOM_CPU_TEST_H
#define LOOM_CPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "tests/check.h"
#include "backends/cpu/cpu_blas.h" /* tests call cpu_blas_ensure_fast_kernel directly */
#include "base/error.h"
#include "base/log.h"

extern const backend_entry cpu_backend_entry;

#define TEST_FN static __attribute__((unused))

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

TEST_FN double rnd(void) /* uniform in [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

TEST_FN float *frand(size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(rnd() * scale);
    return x;
}

TEST_FN float *fcopy(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

TEST_FN double *todbl(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

TEST_FN backend *test_backend(int threads)
{
    backend_config cfg = {threads, 0, BACKEND_FP32, 0};
    log_set_quiet(1);
    setenv("LOOM_CPU_PEAK_GFLOPS", "100", 0); /* skip the calibration in tests */
    backend *be = cpu_backend_entry.create(&cfg);
    if (!be) {
        printf("FAIL: cpu backend create: %s\n", loom_error());
        exit(1);
    }
    return be;
}

/* got against a double reference under the element-wise rule of tests/check.h. */
TEST_FN void check_close(const char *what, const float *got, const double *want, size_t n,
                         check_tol t)
{
    check_allclose(what, got, want, n, t);
}

/* Exact comparison of float results (copies, fills, determinism). */
TEST_FN void check_equal(const char *what, const float *got, const float *want, size_t n)
{
    check_equal_f32(what, got, want, n);
}

/* An fp32 op's tolerance (tests/check.h): K accumulated terms whose magnitudes add up to about
 * S, then r roundings of the result's own. */
TEST_FN check_tol tol32(double K, double S, double r)
{
    return check_tol_sum(K, S, r, CHECK_U_FP32);
}

typedef double (*fd_fn)(void *ctx); /* sum_k w_k out_k of the double reference at ctx's inputs */

/* Central differences in double, d = (f(x+h) - f(x-h)) / 2h with h = 1e-4, are off from the
 * true derivative by h^2/6 |f'''| (1.7e-9 |f'''|; |f'''| is of order 1-10 for these ops at
 * these input scales) plus the double rounding of f over 2h (1e-16 |f| / 1e-4 with |f| < 1e3:
 * 1e-9). FD_ATOL covers both with margin and is added to the op's own fp32 tolerance. */
#define FD_ATOL 1e-7

/* Gradient check: want_i = init_i + d f / d x_i by central differences at `samples` spread
 * indices (all when samples == 0 or >= n), compared element-wise with the backend's got (which
 * started at init, NULL = 0, for += outputs) under t plus FD_ATOL. */
TEST_FN void check_grad(const char *what, fd_fn f, void *ctx, double *x, size_t n, const float *got,
                        const float *init, size_t samples, check_tol t)
{
    size_t m = samples && samples < n ? samples : n;
    /* LOOM_TEST_FD_SAMPLES caps the points (the valgrind stage: memcheck runs the double
     * reference ~50x slower; the tolerance and the op's code paths are the same) */
    const char *cap = getenv("LOOM_TEST_FD_SAMPLES");
    if (cap && atoi(cap) > 1 && (size_t)atoi(cap) < m) m = (size_t)atoi(cap);
    float *g = malloc(m * sizeof(float));
    double *want = malloc(m * sizeof(double));
    for (size_t s = 0; s < m; s++) {
        size_t i = m == n ? s
                          : (s == 0       ? 0
                             : s == m - 1 ? n - 1
                                          : (size_t)((rnd() + 1) * 0.5 * n) % n);
        const double h = 1e-4;
        double x0 = x[i];
        x[i] = x0 + h;
        double fp = f(ctx);
        x[i] = x0 - h;
        double fm = f(ctx);
        x[i] = x0;
        want[s] = (init ? init[i] : 0.0) + (fp - fm) / (2 * h);
        g[s] = got[i];
    }
    char name[128];
    snprintf(name, sizeof name, "%s (fd, %zu pts)", what, m);
    t.atol += FD_ATOL;
    check_allclose(name, g, want, m, t);
    free(g);
    free(want);
}

TEST_FN double dot_fd(const double *w, const double *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

TEST_FN int test_finish(const char *name) { return check_exit_code(name); }

/* C = alpha op(A) op(B) + beta C in double (row-major, dense; beta = 0 ignores C); bf16: the
 * operands rounded to bf16 first, the reference of precision bf16. */
TEST_FN void ref_matmul(double *C, const float *A, const float *B, int M, int N, int K, int tA,
                        int tB, double alpha, double beta, int bf16)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                float a = tA ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                float b = tB ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += bf16 ? (double)check_bf16_round(a) * check_bf16_round(b) : (double)a * b;
            }
            C[(size_t)i * N + j] = alpha * s + (beta != 0.0 ? beta * C[(size_t)i * N + j] : 0.0);
        }
}

#endif
