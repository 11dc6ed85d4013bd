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
#include "backends/cpu/cpu_blas.h"
#include "base/error.h"
#include "base/log.h"

extern const backend_entry cpu_backend_entry;

#define TEST_FN static __attribute__((unused))

static int g_fail; /* failed checks in this test executable */
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

/* max |got - want| / max(|want|, floor) <= tol; prints one line, counts failures. */
TEST_FN void check_close(const char *what, const float *got, const double *want, size_t n,
                         double tol)
{
    double err = 0.0, mag = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= err)) err = e; /* NaN sticks */
        if (fabs(want[i]) > mag) mag = fabs(want[i]);
    }
    int ok = err / mag <= tol;
    printf("%s %-40s max err %.3e / max |ref| %.3e = %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what,
           err, mag, err / mag, tol);
    if (!ok) g_fail++;
}

/* Exact comparison of float results (copies, fills, determinism). */
TEST_FN void check_equal(const char *what, const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) bad++;
    printf("%s %-40s %zu of %zu differ\n", bad ? "FAIL" : "ok  ", what, bad, n);
    if (bad) g_fail++;
}

typedef double (*fd_fn)(void *ctx); /* sum_k w_k out_k of the double reference at ctx's inputs */

/* Gradient check: want_i = init_i + d f / d x_i by central differences (h = 1e-4, double) at
 * `samples` spread indices (all when samples == 0 or >= n); compared with the backend's got
 * (which started at init, NULL = 0, for += outputs). Error relative to max(|d f / d x|, 1e-3). */
TEST_FN void check_grad(const char *what, fd_fn f, void *ctx, double *x, size_t n, const float *got,
                        const float *init, size_t samples, double tol)
{
    size_t m = samples && samples < n ? samples : n;
    float *g = malloc(m * sizeof(float));
    double *want = malloc(m * sizeof(double));
    double mag = 1e-3, err = 0.0; /* floor: a gradient that is exactly 0 allows 1e-3 * tol */
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
        double d = (fp - fm) / (2 * h);
        if (fabs(d) > mag) mag = fabs(d);
        want[s] = (init ? init[i] : 0.0) + d;
        g[s] = got[i];
        double e = fabs(g[s] - want[s]);
        if (!(e <= err)) err = e;
    }
    int ok = err / mag <= tol;
    printf("%s %-40s grad max err %.3e / max |fd| %.3e = %.2e (tol %.0e, %zu pts)\n",
           ok ? "ok  " : "FAIL", what, err, mag, err / mag, tol, m);
    if (!ok) g_fail++;
    free(g);
    free(want);
}

TEST_FN double dot_fd(const double *w, const double *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

TEST_FN int test_finish(const char *name)
{
    printf("%s: %s (%d failed checks)\n", name, g_fail ? "FAILED" : "passed", g_fail);
    return g_fail ? 1 : 0;
}

#endif
