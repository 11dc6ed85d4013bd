/* test_cpu_dense.c: CPU backend dense ops against double references: matmul (all transposes,
 * beta 0/1), add, axpy, scale, fill, copies, sumsq, bias add/backward, AdamW over several steps,
 * memory and events. Never compares against the backend itself except for exact copies. */
#include "cpu_test.h"

static void test_matmul(backend *be, int M, int N, int K)
{
    float *A = frand((size_t)M * K, 1), *B = frand((size_t)K * N, 1), *C0 = frand((size_t)M * N, 1);
    double *want = malloc((size_t)M * N * sizeof(double));
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (int beta = 0; beta < 2; beta++) {
                float *C = fcopy(C0, (size_t)M * N);
                if (!beta) /* beta = 0 must ignore whatever C held, NaN included */
                    for (int i = 0; i < M * N; i++) C[i] = NAN;
                for (int i = 0; i < M * N; i++) want[i] = C0[i];
                ref_matmul(want, A, B, M, N, K, tA, tB, 0.7, beta, 0);
                backend_matmul(be, C, A, B, M, N, K, tA, tB, 0.7f, (float)beta);
                char name[80];
                snprintf(name, sizeof name, "matmul %dx%dx%d tA=%d tB=%d beta=%d", M, N, K, tA, tB,
                         beta);
                /* K products of U(-1,1) entries (E|ab| = 1/4, taken x2), times 0.7, plus beta*C (|C| < 1);
                 * then alpha, beta and the final add round once each */
                check_close(name, C, want, (size_t)M * N, tol32(K, 0.35 * K + 1, 3));
                free(C);
            }
    free(A);
    free(B);
    free(C0);
    free(want);
}

static void test_vector_ops(backend *be, size_t n)
{
    float *a = frand(n, 2), *b = frand(n, 2), *out = frand(n, 1), *y = frand(n, 1);
    double *want = malloc(n * sizeof(double));
    char name[80];
    backend_add(be, out, a, b, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    snprintf(name, sizeof name, "add n=%zu", n);
    check_close(name, out, want, n, tol32(1, 0, 1)); /* one rounding of the exact sum */
    for (size_t i = 0; i < n; i++) want[i] = y[i] + 0.3 * (double)a[i];
    backend_axpy(be, y, 0.3f, a, n);
    snprintf(name, sizeof name, "axpy n=%zu", n);
    /* 0.3f vs 0.3, the product and the sum round once each; |y| + |0.3a| < 1.6 cancels */
    check_close(name, y, want, n, tol32(2, 1.6, 2));
    for (size_t i = 0; i < n; i++) want[i] = -1.7 * (double)y[i];
    backend_scale(be, y, -1.7f, n);
    snprintf(name, sizeof name, "scale n=%zu", n);
    check_close(name, y, want, n, tol32(1, 0, 2)); /* -1.7f vs -1.7, the product */
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)a[i] * a[i];
    double got = backend_sumsq(be, a, n);
    int ok = fabs(got - ss) <= 1e-12 * ss;
    printf("%s sumsq n=%zu %.15g vs %.15g\n", ok ? "ok  " : "FAIL", n, got, ss);
    failures += !ok;
    a[n / 2] = NAN;
    ok = isnan(backend_sumsq(be, a, n));
    printf("%s sumsq propagates NaN\n", ok ? "ok  " : "FAIL");
    failures += !ok;
    backend_fill(be, out, 2.5f, n);
    for (size_t i = 0; i < n; i++) b[i] = 2.5f;
    check_equal("fill", out, b, n);
    /* 0 takes memset, -0.0 the store loop: both keep their sign bit */
    size_t zero_bits = 0, neg_zero = 0;
    backend_fill(be, out, 0.0f, n);
    for (size_t i = 0; i < n; i++) zero_bits += out[i] == 0.0f && !signbit(out[i]);
    backend_fill(be, out, -0.0f, n);
    for (size_t i = 0; i < n; i++) neg_zero += out[i] == 0.0f && signbit(out[i]);
    printf("%s fill 0 and -0 n=%zu\n", zero_bits == n && neg_zero == n ? "ok  " : "FAIL", n);
    failures += zero_bits != n || neg_zero != n;
    float *dev = backend_alloc(be, n * sizeof(float)), *back = frand(n, 1);
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) zeros += dev[i] == 0.0f;
    printf("%s alloc zero-filled\n", zeros == n ? "ok  " : "FAIL");
    failures += zeros != n;
    backend_copy_h2d(be, dev, y, n * sizeof(float));
    backend_copy_d2d(be, out, dev, n * sizeof(float));
    backend_copy_d2h(be, back, out, n * sizeof(float));
    check_equal("copy h2d, d2d, d2h", back, y, n);
    backend_free(be, dev);
    free(a), free(b), free(out), free(y), free(back), free(want);
}

typedef struct {
    double *base, *bias, *w;
    int N, C;
} bias_ctx;

static double bias_f(void *p)
{
    bias_ctx *c = p;
    double s = 0.0;
    for (int n = 0; n < c->N; n++)
        for (int j = 0; j < c->C; j++)
            s += c->w[n * c->C + j] * (c->base[n * c->C + j] + c->bias[j]);
    return s;
}

static void test_bias(backend *be, int N, int C)
{
    size_t nc = (size_t)N * C;
    float *out = frand(nc, 1), *bias = frand((size_t)C, 1), *w = frand(nc, 1);
    float *db0 = frand((size_t)C, 1), *db = fcopy(db0, (size_t)C);
    bias_ctx ctx = {todbl(out, nc), todbl(bias, (size_t)C), todbl(w, nc), N, C};
    double *want = malloc(nc * sizeof(double));
    for (size_t i = 0; i < nc; i++) want[i] = ctx.base[i] + ctx.bias[i % C];
    backend_bias_add(be, out, bias, N, C);
    char name[80];
    snprintf(name, sizeof name, "bias_add N=%d C=%d", N, C);
    check_close(name, out, want, nc, tol32(1, 0, 1)); /* one rounding */
    backend_bias_backward(be, db, w, N, C);
    snprintf(name, sizeof name, "bias_backward N=%d C=%d (+=)", N, C);
    /* db0 + N terms of U(-1,1) (E|w| = 1/2, taken x2) */
    check_grad(name, bias_f, &ctx, ctx.bias, (size_t)C, db, db0, 0, tol32(N + 1, N + 1, 1));
    free(out), free(bias), free(w), free(db0), free(db), free(want);
    free(ctx.base), free(ctx.bias), free(ctx.w);
}

static void test_adamw(backend *be, size_t n)
{
    float *p = frand(n, 1), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    double *pd = todbl(p, n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    for (int t = 1; t <= 5; t++) {
        float *g = frand(n, 3);
        backend_adamw(be, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
                      (float)gs);
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] * gs;
            md[i] = b1 * md[i] + (1 - b1) * gi;
            vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
            double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
            pd[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pd[i]);
        }
        free(g);
    }
    char name[80];
    snprintf(name, sizeof name, "adamw 5 steps n=%zu param", n);
    /* 5 steps, each ~10 roundings (scaling, the moments, the bias corrections, sqrt, divide,
     * decay) on values of order 1 (p in (-1,1) moves by lr = 1e-2 a step); m sums 5 signed
     * terms of |g| <= 1.5 weighted by 0.1 (cancels); v sums 5 positive terms (relative) */
    check_close(name, p, pd, n, tol32(5, 2, 50));
    check_close("adamw m", m, md, n, tol32(5, 1.5, 50));
    check_close("adamw v", v, vd, n, tol32(5, 0, 50));
    free(p), free(m), free(v), free(pd), free(md), free(vd);
}

/* Events: work queued before event_record is visible to the host after event_sync (on the CPU
 * every op has finished when it returns; the check holds any backend to the same contract), two
 * events are distinct objects, and the CPU has no native streams (NULL, as backend.h says). */
static void test_events(backend *be)
{
    const size_t n = 4099;
    float *a = backend_alloc(be, n * sizeof(float)), *b = backend_alloc(be, n * sizeof(float));
    float *host = malloc(n * sizeof(float));
    backend_event *ev = backend_event_create(be), *ev2 = backend_event_create(be);
    CHECK(ev != NULL && ev2 != NULL && ev != ev2, "event_create: %p %p", (void *)ev, (void *)ev2);
    backend_fill(be, a, 1.5f, n);
    backend_fill(be, b, -0.25f, n);
    backend_add(be, b, a, b, n);
    if (ev) backend_event_record(be, ev);
    if (ev) backend_event_sync(be, ev);
    backend_copy_d2h(be, host, b, n * sizeof(float));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += host[i] != 1.25f;
    CHECK(wrong == 0, "%zu of %zu results not visible after event_sync", wrong, n);
    CHECK(backend_native_stream(be, 0) == NULL && backend_native_stream(be, 1) == NULL,
          "the cpu backend reports a native stream");
    if (ev) backend_event_destroy(be, ev);
    if (ev2) backend_event_destroy(be, ev2);
    backend_free(be, a);
    backend_free(be, b);
    free(host);
    printf("%s events and streams\n", wrong == 0 && ev && ev2 && ev != ev2 ? "ok  " : "FAIL");
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    backend *be = test_backend(2);
    test_matmul(be, 37, 53, 29);
    test_matmul(be, 130, 70, 90);
    test_matmul(be, 1, 5, 3);
    /* few rows against a large matrix (decode): the columns are split across threads, with an
     * uneven last block */
    test_matmul(be, 1, 1037, 300);
    test_matmul(be, 3, 700, 200);
    test_vector_ops(be, 1001);
    test_vector_ops(be, 100003);
    test_bias(be, 7, 13);
    test_bias(be, 300, 200);
    test_adamw(be, 1001);
    test_adamw(be, 70001);
    test_events(be);
    backend_destroy(be);
    return test_finish("test_cpu_dense");
}
