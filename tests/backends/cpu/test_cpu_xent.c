/* test_cpu_xent.c: CPU fused softmax cross-entropy against a double reference (losses) and its
 * in-place dlogits against finite differences of grad_scale * sum(losses); masked targets, padded
 * vocab, a huge logit offset; and the accuracy (ulp) of the vectorised cpu_expf it relies on. */
#include "backends/cpu/cpu_exp.h"
#include "cpu_test.h"

typedef struct {
    double *x, *loss;
    const int32_t *tgt;
    int N, V, Vr;
    double gs;
} xent_ctx;

static void ref_xent(xent_ctx *c)
{
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->V;
        int y = c->tgt[n];
        if (y < 0) {
            c->loss[n] = 0.0;
            continue;
        }
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < c->Vr; j++) m = x[j] > m ? x[j] : m;
        for (int j = 0; j < c->Vr; j++) s += exp(x[j] - m);
        c->loss[n] = log(s) + m - x[y];
    }
}

static double xent_f(void *p)
{
    xent_ctx *c = p;
    ref_xent(c);
    double s = 0.0;
    for (int n = 0; n < c->N; n++) s += c->gs * c->loss[n];
    return s;
}

static void test_xent(backend *be, int N, int V, int Vr, size_t samples)
{
    size_t nv = (size_t)N * V;
    float *x = frand(nv, 4), *loss = frand((size_t)N, 1);
    int32_t *tgt = malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) tgt[n] = (int32_t)((rnd() + 1) * 0.5 * Vr) % Vr;
    if (N > 2) tgt[1] = -1; /* masked */
    if (N > 3) tgt[3] = -100;
    for (int j = 0; j < V; j++) x[j] += 1000.0f; /* stability: row 0 shifted far up */
    for (int j = Vr; j < V; j++) x[(size_t)(N - 1) * V + j] = 50.0f; /* padding must not count */
    xent_ctx c = {todbl(x, nv), malloc(N * sizeof(double)), tgt, N, V, Vr, 0.37};
    ref_xent(&c);
    backend_softmax_xent(be, x, loss, tgt, N, V, Vr, 0.37f);
    char name[96];
    snprintf(name, sizeof name, "softmax_xent losses N=%d V=%d V_real=%d", N, V, Vr);
    /* loss = log(sum_j exp(x_j - m)) - (x_y - m): the differences are exact (Sterbenz), the
     * sum has Vr positive terms (relative g_Vr) after expf's 2 ulp, so log(sum) is off by
     * g_Vr + 3u absolute; the final add rounds once (relative) */
    const double g = CHECK_LAMBDA * sqrt((double)Vr) * CHECK_U_FP32;
    const check_tol loss_tol = {g + 3 * CHECK_U_FP32, 2 * CHECK_U_FP32};
    check_close(name, loss, c.loss, (size_t)N, loss_tol);
    /* dlogits = gs (p_j - [j = y]), p_j = exp(x_j - lse): lse = m + log(sum) is rounded at its
     * own magnitude (|lse| < max|x| + ln V = 1004 + 11 with row 0's offset), so x_j - lse and
     * p_j are relatively off by (|lse| + g_Vr/u + 3)u plus expf's 2 ulp; subtracting 1 at the
     * target cancels (absolute u, times gs < 1), scaling by gs rounds once. Nothing here is a
     * matmul: no TF32 loosening. */
    const double lse_max = 1004.0 + log((double)Vr);
    const check_tol dlogit_tol = {2 * CHECK_U_FP32, g + (lse_max + 7) * CHECK_U_FP32};
    check_grad("  dlogits (masked rows, padded cols)", xent_f, &c, c.x, nv, x, NULL, samples,
               dlogit_tol);
    double *want = calloc(nv, sizeof(double)); /* and every element against the closed form */
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        double lse = c.loss[n] + c.x[(size_t)n * V + tgt[n]];
        for (int j = 0; j < Vr; j++)
            want[(size_t)n * V + j] = 0.37 * (exp(c.x[(size_t)n * V + j] - lse) - (j == tgt[n]));
    }
    check_close("  dlogits = g (softmax - onehot), all", x, want, nv, dlogit_tol);
    free(want);
    size_t nonzero = 0; /* exact zeros where the contract says 0 */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++)
            if ((tgt[n] < 0 || j >= Vr) && x[(size_t)n * V + j] != 0.0f) nonzero++;
    printf("%s   masked rows and padded columns exactly 0 (%zu not)\n", nonzero ? "FAIL" : "ok  ",
           nonzero);
    failures += nonzero != 0;
    free(x), free(loss), free(tgt), free(c.x), free(c.loss);
}

/* cpu_expf against double exp over [-87, 88]: the error stated in cpu_exp.h. */
static void test_expf_ulp(void)
{
    double worst = 0.0, at = 0.0;
    for (double x = -87.0; x <= 88.0; x += 1.0 / 4093.0) {
        float xf = (float)x;
        double want = exp((double)xf);
        float got = cpu_expf(xf);
        double ulp = ldexp(1.0, ilogb(want) - 23);
        double e = fabs(got - want) / ulp;
        if (!(e <= worst)) worst = e, at = xf;
    }
    int ok = worst <= 2.0 && cpu_expf(-100.0f) == 0.0f && isnan(cpu_expf(NAN));
    printf("%s cpu_expf max error %.2f ulp (at x = %.4f), 0 below -87.3, NaN kept\n",
           ok ? "ok  " : "FAIL", worst, at);
    failures += !ok;
}

/* cpu_expf_cr and cpu_logf_cr against long double over a sweep of float bit patterns (every
 * 4099th: exponents and mantissas all over): each result the float nearest the true value, but
 * within 1e-6 ulp of a halfway point (their double evaluation errs by < 3e-13 relative), and
 * libm's answers at the edges (overflow to inf, underflow to 0 and subnormals, inf, NaN, 0, x < 0). */
static void test_cr_ulp(void)
{
    double worst_e = 0.0, worst_l = 0.0;
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        uint32_t b = (uint32_t)u;
        float x;
        memcpy(&x, &b, sizeof x);
        if (!isfinite(x)) continue;
        const long double te = expl((long double)x);
        const float ge = cpu_expf_cr(x);
        if (te < 3.4028235e38L && te > 1e-46L) { /* finite, not below half the least subnormal */
            const long double ulp = (long double)nextafterf(ge, INFINITY) - (long double)ge;
            const double e = (double)(fabsl((long double)ge - te) / ulp);
            if (!(e <= worst_e)) worst_e = e;
        }
        if (x > 0.0f) {
            const long double tl = logl((long double)x);
            const float gl = cpu_logf_cr(x);
            const long double ulp = (long double)nextafterf(fabsf(gl), INFINITY) - (long double)fabsf(gl);
            const double e = gl == 0.0f ? (tl == 0.0L ? 0.0 : 1.0) : (double)(fabsl((long double)gl - tl) / ulp);
            if (!(e <= worst_l)) worst_l = e;
        }
    }
    const int edges = cpu_expf_cr(89.0f) == INFINITY && cpu_expf_cr(1e30f) == INFINITY &&
                      cpu_expf_cr(-104.0f) == 0.0f && cpu_expf_cr(-1e30f) == 0.0f &&
                      cpu_expf_cr(-103.0f) == expf(-103.0f) && cpu_expf_cr(INFINITY) == INFINITY &&
                      cpu_expf_cr(-INFINITY) == 0.0f && isnan(cpu_expf_cr(NAN)) &&
                      cpu_logf_cr(0.0f) == -INFINITY && isnan(cpu_logf_cr(-1.0f)) &&
                      cpu_logf_cr(INFINITY) == INFINITY && isnan(cpu_logf_cr(NAN)) &&
                      cpu_logf_cr(1.0f) == 0.0f && cpu_logf_cr(1e-45f) == logf(1e-45f);
    const int ok = worst_e <= 0.500001 && worst_l <= 0.500001 && edges;
    printf("%s cpu_expf_cr / cpu_logf_cr worst %.7f / %.7f ulp from the true value (0.5: correctly "
           "rounded), edges as libm's%s\n", ok ? "ok  " : "FAIL", worst_e, worst_l, edges ? "" : ": NOT");
    failures += !ok;
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    backend *be = test_backend(2);
    test_expf_ulp();
    test_cr_ulp();
    test_xent(be, 7, 37, 33, 0);
    test_xent(be, 1, 19, 19, 0);
    test_xent(be, 6, 50304, 50257, 60);
    backend_destroy(be);
    return test_finish("test_cpu_xent");
}
