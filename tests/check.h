/* check.h: the one assertion (CHECK) and the one numeric comparison (check_allclose) of loom's C
 * tests. A failed check prints where and why, counts the failure and lets the test go on, so one
 * run reports every broken check; main returns `failures != 0` (check_exit_code()).
 * Never define another CHECK or another tolerance rule in a test: extend this file. */
#ifndef LOOM_TESTS_CHECK_H
#define LOOM_TESTS_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The failure counter: one per test program. A program built from several files defines
 * CHECK_COUNTER as the name of one shared `int` before including this header. */
#ifndef CHECK_COUNTER
#define CHECK_COUNTER failures
static int failures __attribute__((unused)) = 0;
#endif

/* A program may define CHECK_CONTEXT() as a string printed after every failure's message
 * (e.g. loom_error(), the last error set by the code under test). */
#ifdef CHECK_CONTEXT
#define CHECK_PRINT_CONTEXT() printf(" [%s]", CHECK_CONTEXT())
#else
#define CHECK_PRINT_CONTEXT() ((void)0)
#endif

#define CHECK(cond, ...)                                                \
    do {                                                                \
        if (!(cond)) {                                                  \
            printf("FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond);     \
            printf(__VA_ARGS__);                                        \
            CHECK_PRINT_CONTEXT();                                      \
            printf("\n");                                               \
            fflush(stdout);                                             \
            CHECK_COUNTER++;                                            \
        }                                                               \
    } while (0)

/* ---- the tolerance rule ----
 *
 * Every numeric comparison is element-wise, as numpy.allclose:
 *
 *     |got_i - want_i| <= atol + rtol * |want_i|      for every i (a NaN never passes).
 *
 * want is an independent reference (double precision, or finite differences of one), or the
 * CPU backend for the other backends. atol and rtol are chosen per op from its arithmetic, never
 * from the data being checked, with u the unit roundoff of the arithmetic that produced got:
 *
 *   u = 2^-24 for fp32, 2^-11 for TF32 inputs (10 stored mantissa bits), 2^-8 for bf16 (7).
 *
 * - A value that goes through r roundings of its own with no cancellation (a product, exp, a
 *   scale) is within r*u relative: rtol = r*u.
 * - A value accumulated from K terms t_k (a dot product of length K, a sum over a row) is within
 *   gamma * sum_k |t_k| of the exact sum. The worst case gamma = K*u (Higham, Accuracy and
 *   Stability of Numerical Algorithms, 3.1) is never approached by rounding errors that do not
 *   all align; with independent errors |err| <= lambda * sqrt(K) * u * sum_k |t_k| except with
 *   probability 2 exp(-lambda^2 / 2) (Higham & Mary 2019), lambda = 6 here (1.5e-8 per element).
 *   sum_k |t_k| is S = K * E|t| from the inputs' scales; when the terms share a sign S = |want|
 *   and the bound is relative (rtol); when they cancel (a true 0 at the extreme) it is absolute
 *   (atol), which is what keeps a 0-valued gradient's rounding noise from failing a check.
 * - Blocked and pairwise sums (every BLAS kernel, loom's own kernels) and FMA only lower the
 *   error, so one bound holds on every CPU OpenBLAS supports; TF32/bf16 loosen only ops whose
 *   inner products run in those formats (matmul, attention), never exact ops (copies, gathers,
 *   the embedding's lookup) nor element-wise fp32 kernels.
 * check_tol_sum() turns (K, S, u) into that pair; each test says where its K and S come from. */

#define CHECK_U_FP32 (1.0 / 16777216.0) /* 2^-24 */
#define CHECK_U_TF32 (1.0 / 2048.0)     /* 2^-11 */
#define CHECK_U_BF16 (1.0 / 256.0)      /* 2^-8 */
#define CHECK_LAMBDA 6.0

typedef struct check_tol {
    double atol, rtol;
} check_tol;

/* A result accumulated from K terms whose magnitudes add up to about S (cancelling: absolute
 * part) followed by r roundings of its own (relative part), in arithmetic of unit roundoff u. */
static inline check_tol check_tol_sum(double K, double S, double r, double u)
{
    double g = K > 1 ? CHECK_LAMBDA * sqrt(K) * u : 0.0; /* one term: nothing accumulates */
    check_tol t = {g * S, r * u + g};
    return t;
}

/* Exact results (copies, fills, gathers, deterministic reruns): bit equality is checked with
 * check_equal_f32; this is the same as a tolerance of 0 for code that takes a check_tol. */
/* x rounded to bf16, to nearest even (finite inputs), back in float: how the bf16 paths (CPU,
 * AMX, the device's __float2bfloat16_rn) round an operand, for references that model them. */
static inline float check_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

static const check_tol CHECK_EXACT = {0.0, 0.0};

/* Compare got[0..n) (float) with want[0..n) (double) under t. Prints one line (always when
 * verbose, else only on failure): the number of elements outside the bound and the worst one
 * (index, got, want, |err| / bound); counts a failure when any is outside. 1 if it passed. */
static inline int check_allclose_v(const char *what, const float *got, const double *want,
                                   size_t n, check_tol t, int verbose)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        double bound = t.atol + t.rtol * fabs(want[i]);
        int in = err <= bound; /* false for NaN */
        double ratio = in ? (bound > 0 ? err / bound : 0.0)
                          : (bound > 0 && err == err ? err / bound : INFINITY);
        if (!in) bad++;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    int ok = bad == 0;
    if (!ok || verbose) {
        if (n)
            printf("%s %-44s %zu of %zu outside atol %.1e + rtol %.1e*|want|; worst [%zu] got "
                   "%.7g want %.7g (%.2f of its bound)\n",
                   ok ? "ok  " : "FAIL", what, bad, n, t.atol, t.rtol, worst, (double)got[worst],
                   want[worst], worst_ratio);
        else
            printf("ok   %-44s (empty)\n", what);
        fflush(stdout);
    }
    if (!ok) CHECK_COUNTER++;
    return ok;
}

static inline int check_allclose(const char *what, const float *got, const double *want,
                                 size_t n, check_tol t)
{
    return check_allclose_v(what, got, want, n, t, 1);
}

/* Terms rounded one by one before an exact-enough sum (bf16 attention rounds each probability
 * p_j to bf16 before sum_j p_j v_j): the worst case of element i's error is u sum_k |t_ik|,
 * which the reference knows from its terms; the caller passes bound_i = that (from the inputs,
 * never from got) plus the fp32 tolerance of the rest. |got_i - want_i| <= bound_i for every i,
 * reported as check_allclose_v does. 1 if it passed. */
static inline int check_within(const char *what, const float *got, const double *want,
                               const double *bound, size_t n)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        int in = err <= bound[i]; /* false for NaN */
        double ratio = bound[i] > 0 && err == err ? err / bound[i] : in ? 0.0 : INFINITY;
        if (!in) bad++;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
    if (n)
        printf("%s %-44s %zu of %zu outside their bounds; worst [%zu] got %.7g want %.7g bound "
               "%.2e (%.2f of it)\n",
               bad ? "FAIL" : "ok  ", what, bad, n, worst, (double)got[worst], want[worst],
               bound[worst], worst_ratio);
    fflush(stdout);
    if (bad) CHECK_COUNTER++;
    return bad == 0;
}

/* Bitwise comparison of float arrays (copies, fills, determinism, resume). */
static inline int check_equal_f32(const char *what, const float *got, const float *want, size_t n)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        union { float f; unsigned u; } a = {got[i]}, b = {want[i]};
        if (a.u != b.u && !bad++) first = i;
    }
    printf("%s %-44s %zu of %zu differ", bad ? "FAIL" : "ok  ", what, bad, n);
    if (bad) printf(" (first [%zu]: %.9g vs %.9g)", first, (double)got[first], (double)want[first]);
    printf("\n");
    fflush(stdout);
    if (bad) CHECK_COUNTER++;
    return bad == 0;
}

/* main's return value and its closing line ("NAME: passed" / "NAME: FAILED (N failed checks)"). */
static inline int check_exit_code(const char *name)
{
    if (CHECK_COUNTER)
        printf("%s: FAILED (%d failed check%s)\n", name, CHECK_COUNTER, CHECK_COUNTER == 1 ? "" : "s");
    else
        printf("%s: passed\n", name);
    return CHECK_COUNTER ? 1 : 0;
}

/* A whole file, NUL-terminated (malloc'd; its length in *n), or NULL when it cannot be read. */
static inline char *check_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) buf[len] = '\0';
    *n = buf ? (size_t)len : 0;
    return buf;
}

#endif
