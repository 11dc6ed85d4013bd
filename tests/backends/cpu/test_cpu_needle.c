/* test_cpu_needle.c: the CPU ops of Needle's layers (docs/needle.md): the causal conv taps and
 * the sigmoid gates (forward against a double reference, backward against central finite
 * differences of a random linear functional of it; conv decode rows against the forward), and
 * Needle's zero-centred RMSNorm as rmsnorm with weight 1 + scale (checked against the ZC formula
 * itself: dweight is dscale), and the W4 / A8 fake quantisation against needle_quant_ref.h's
 * double reference (with Needle's own codebook; ties, padding, fp16 subnormal norms, zero rows).
 * Accumulated gradients start non-zero so += is checked. */
#include "cpu_test.h"
#include "backends/needle_quant.h"
#include "tests/backends/needle_quant_ref.h"

typedef struct {
    double *x, *w, *wout, *out;
    int B, T, C, K, dil;
} taps_ctx;

/* out[b,t,c] = sum_{j<K, t >= j dil} w[j,c] x[b, t - j dil, c] in double */
static void ref_taps(taps_ctx *c)
{
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int ch = 0; ch < c->C; ch++) {
                double y = 0.0;
                for (int j = 0; j < c->K && j * c->dil <= t; j++)
                    y += c->w[(size_t)j * c->C + ch] *
                         c->x[((size_t)b * c->T + t - (size_t)j * c->dil) * c->C + ch];
                c->out[((size_t)b * c->T + t) * c->C + ch] = y;
            }
}

static double taps_f(void *p)
{
    taps_ctx *c = p;
    ref_taps(c);
    return dot_fd(c->wout, c->out, (size_t)c->B * c->T * c->C);
}

static void test_taps(backend *be, int B, int T, int C, int K, int dil, size_t samples)
{
    const size_t n = (size_t)B * T * C, kc = (size_t)K * C, N = (size_t)B * T;
    float *x = frand(n, 2), *w = frand(kc, 1), *wo = frand(n, 1), *out = frand(n, 1);
    taps_ctx c = {todbl(x, n), todbl(w, kc), todbl(wo, n), malloc(n * sizeof(double)), B, T, C, K, dil};
    ref_taps(&c);
    char name[96];
    backend_conv_taps_forward(be, out, x, w, B, T, C, K, dil);
    snprintf(name, sizeof name, "conv_taps fwd B%d T%d C%d K%d dil%d", B, T, C, K, dil);
    /* K products of |w x| < 2 added in tap order: the sum's bound over S = 2K, one rounding */
    check_close(name, out, c.out, n, tol32(K, 2.0 * K, 1));
    float *dx = frand(n, 1), *dw0 = frand(kc, 1), *dw = fcopy(dw0, kc); /* dx: overwritten */
    backend_conv_taps_backward(be, dx, dw, wo, x, w, B, T, C, K, dil);
    /* dinp: K products |w dout| < 1; dw: dw0 + up to N products |dout x| < 2 (E 1/2) */
    check_grad("conv_taps bwd dinp", taps_f, &c, c.x, n, dx, NULL, samples, tol32(K, K, 1));
    check_grad("conv_taps bwd dw (+=)", taps_f, &c, c.w, kc, dw, dw0, samples,
               tol32(N + 1, 0.5 * N + 1, 1));
    float *dx2 = frand(n, 1);
    backend_conv_taps_backward(be, dx2, NULL, wo, NULL, w, B, T, C, K, dil);
    check_equal("  bwd with NULL dw (frozen): same dinp", dx2, dx, n);
    /* decoding: T steps of one row per sequence from a zero state reproduce the forward (the
     * same terms in the same order; the vector forward may contract into fmas, the row loop
     * not: one rounding of the K-term bound) and leave the last S input rows as the state */
    const size_t S = (size_t)(K - 1) * dil;
    float *st = calloc((size_t)B * (S ? S : 1) * C, sizeof(float)), *xr = malloc((size_t)B * C * 4);
    float *orow = malloc((size_t)B * C * 4), *dec = malloc(n * 4);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xr + (size_t)b * C, x + ((size_t)b * T + t) * C, (size_t)C * 4);
        backend_conv_taps_decode(be, orow, S ? st : NULL, xr, w, B, C, K, dil);
        for (int b = 0; b < B; b++) memcpy(dec + ((size_t)b * T + t) * C, orow + (size_t)b * C, (size_t)C * 4);
    }
    ref_taps(&c); /* c.out again at the unperturbed inputs (the differences moved them) */
    check_close("  decode rows vs the double reference", dec, c.out, n, tol32(K, 2.0 * K, 1));
    double *fw = todbl(out, n);
    check_close("  decode rows == forward", dec, fw, n, tol32(K, 2.0 * K, 1));
    int state_ok = 1;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < S; i++)
            for (int ch = 0; ch < C; ch++) {
                long t = (long)T - (long)S + (long)i;
                float want = t >= 0 ? x[((size_t)b * T + (size_t)t) * C + ch] : 0.0f;
                state_ok &= st[((size_t)b * S + i) * C + ch] == want;
            }
    CHECK(state_ok, "conv_taps decode: the state is not the last %zu input rows", S);
    /* in place: out = x */
    float *xin = fcopy(xr, (size_t)B * C), *o2 = malloc((size_t)B * C * 4);
    float *st2 = S ? fcopy(st, (size_t)B * S * C) : NULL, *st3 = S ? fcopy(st, (size_t)B * S * C) : NULL;
    backend_conv_taps_decode(be, o2, st2, xr, w, B, C, K, dil);
    backend_conv_taps_decode(be, xin, st3, xin, w, B, C, K, dil);
    check_equal("  decode in place (out = x)", xin, o2, (size_t)B * C);
    free(xin), free(o2), free(st2), free(st3);
    free(x), free(w), free(wo), free(out), free(dx), free(dw0), free(dw), free(dx2);
    free(st), free(xr), free(orow), free(dec), free(fw);
    free(c.x), free(c.w), free(c.wout), free(c.out);
}

typedef struct {
    double *x, *g, *wout, s; /* g: per element (sigmoid_gate) or NULL (scalar gate s) */
    size_t n;
} gate_ctx;

static double ref_sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

static double gate_f(void *p)
{
    gate_ctx *c = p;
    double f = 0.0;
    for (size_t i = 0; i < c->n; i++) f += c->wout[i] * c->x[i] * ref_sigmoid(c->g ? c->g[i] : c->s);
    return f;
}

/* sigmoid on the CPU: cpu_expf (2 ulp, so 4u relative) of -g, the sum and the division: 6u, one
 * more for the product with x; below FLT_MIN (g < -87) its expf saturates at e^88 (1e-38 off).
 * dg = dout x s (1 - s): 1 - s holds s's absolute error 6u as s -> 1, times |dout x| < 2. */
static const check_tol gate_tol = {1e-38, 7 * CHECK_U_FP32};
static const check_tol dgate_tol = {2 * 7 * CHECK_U_FP32, 9 * CHECK_U_FP32};

static void test_gate(backend *be, size_t n, size_t samples)
{
    float *x = frand(n, 2), *g = frand(n, 8), *wo = frand(n, 1), *out = frand(n, 1);
    g[0] = 40.0f, g[1] = -40.0f, g[2] = 0.0f, g[3] = 95.0f, g[4] = -95.0f; /* saturation, 0 */
    gate_ctx c = {todbl(x, n), todbl(g, n), todbl(wo, n), 0.0, n};
    double *want = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = c.x[i] * ref_sigmoid(c.g[i]);
    char name[80];
    backend_sigmoid_gate_forward(be, out, x, g, n);
    snprintf(name, sizeof name, "sigmoid_gate fwd n=%zu", n);
    check_close(name, out, want, n, gate_tol);
    float *dx = frand(n, 1), *dg = frand(n, 1); /* garbage: overwritten */
    backend_sigmoid_gate_backward(be, dx, dg, wo, x, g, n);
    check_grad("sigmoid_gate bwd dx", gate_f, &c, c.x, n, dx, NULL, samples, gate_tol);
    check_grad("sigmoid_gate bwd dg", gate_f, &c, c.g, n, dg, NULL, samples, dgate_tol);
    float *y = fcopy(x, n); /* in place: out = x */
    backend_sigmoid_gate_forward(be, y, y, g, n);
    check_equal("  sigmoid_gate fwd in place", y, out, n);
    free(x), free(g), free(wo), free(out), free(dx), free(dg), free(want), free(y);
    free(c.x), free(c.g), free(c.wout);
}

static void test_scalar_gate(backend *be, size_t n, float sv, size_t samples)
{
    float *x = frand(n, 2), *wo = frand(n, 1), *out = frand(n, 1), s[1] = {sv};
    gate_ctx c = {todbl(x, n), NULL, todbl(wo, n), sv, n};
    double *want = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = c.x[i] * ref_sigmoid(sv);
    char name[80];
    backend_scalar_gate_forward(be, out, x, s, n);
    snprintf(name, sizeof name, "scalar_gate fwd n=%zu s=%g", n, sv);
    check_close(name, out, want, n, gate_tol);
    float *dx = frand(n, 1), ds0[1] = {0.7f}, ds[1] = {0.7f};
    backend_scalar_gate_backward(be, dx, ds, wo, x, s, n);
    check_grad("scalar_gate bwd dx", gate_f, &c, c.x, n, dx, NULL, samples, gate_tol);
    /* ds0 + s (1 - s) (7u) times n products |dout x| < 2 (E 1/2) */
    check_grad("scalar_gate bwd ds (+=)", gate_f, &c, &c.s, 1, ds, ds0, 0,
               tol32((double)n + 1, 0.5 * n + 1, 10));
    float *d2 = fcopy(wo, n), ds2[1] = {0.7f}; /* dx = dout in place */
    backend_scalar_gate_backward(be, d2, ds2, d2, x, s, n);
    check_equal("  scalar_gate bwd in place (dx = dout): dx", d2, dx, n);
    check_equal("  scalar_gate bwd in place (dx = dout): ds", ds2, ds, 1);
    float *d3 = frand(n, 1);
    backend_scalar_gate_backward(be, d3, NULL, wo, x, s, n);
    check_equal("  scalar_gate bwd with NULL ds (frozen): same dx", d3, dx, n);
    free(x), free(wo), free(out), free(want), free(dx), free(d2), free(d3);
    free(c.x), free(c.wout);
}

/* Needle's ZCNorm(x) = ((1 + s) x) / sqrt(mean(x^2) + eps) per row, in double, from s itself */
typedef struct {
    double *x, *s, *wout, *out, eps;
    int N, C;
} zc_ctx;

static void ref_zc(zc_ctx *c)
{
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double ss = 0.0;
        for (int j = 0; j < c->C; j++) ss += x[j] * x[j];
        double r = sqrt(ss / c->C + c->eps);
        for (int j = 0; j < c->C; j++) c->out[(size_t)n * c->C + j] = (1.0 + c->s[j]) * x[j] / r;
    }
}

static double zc_f(void *p)
{
    zc_ctx *c = p;
    ref_zc(c);
    return dot_fd(c->wout, c->out, (size_t)c->N * c->C);
}

/* The zero-centred norm needs no op of its own: with w = 1 + s built on the device (fill 1, axpy
 * s), rmsnorm_forward is ZCNorm (the same product and root, one more rounding for 1 + s), its
 * dinp (+=) is ZCNorm's input gradient and its dweight (+=) is dscale (dw/ds = 1). */
static void test_zc_norm(backend *be, int N, int C, size_t samples)
{
    const size_t nc = (size_t)N * C;
    float *x = frand(nc, 2), *s = frand((size_t)C, 0.5), *wo = frand(nc, 1), *out = frand(nc, 1);
    float *w = malloc((size_t)C * 4), *rstd = malloc((size_t)N * 4);
    zc_ctx c = {todbl(x, nc), todbl(s, (size_t)C), todbl(wo, nc), malloc(nc * sizeof(double)),
                1e-6, N, C};
    ref_zc(&c);
    backend_fill(be, w, 1.0f, (size_t)C);
    backend_axpy(be, w, 1.0f, s, (size_t)C);
    backend_rmsnorm_forward(be, out, rstd, x, w, N, C, 1e-6f);
    char name[80];
    snprintf(name, sizeof name, "zc-rmsnorm (rmsnorm, w = 1 + s) fwd N%d C%d", N, C);
    /* C positive squares (relative g_C), the root, the reciprocal, two products, 1 + s */
    check_close(name, out, c.out, nc, tol32(C, 0, 7));
    float *dx0 = frand(nc, 1), *dx = fcopy(dx0, nc), *ds0 = frand((size_t)C, 1), *ds = fcopy(ds0, (size_t)C);
    backend_rmsnorm_backward(be, dx, ds, wo, x, w, rstd, N, C);
    /* as test_cpu_layers.c's rmsnorm: dinp = rstd (g - xhat mean(g xhat)), g = dout (1 + s),
     * a C-term cancelling sum of |g xhat| < 1.5 * 2 / 0.6 plus dx0; dscale: ds0 + N terms
     * |dout xhat| < 2 / 0.6 (E ~ 0.5) */
    check_grad("zc-rmsnorm bwd dinp (+=)", zc_f, &c, c.x, nc, dx, dx0, samples, tol32(C, 14, 7));
    check_grad("zc-rmsnorm bwd dscale = rmsnorm dweight (+=)", zc_f, &c, c.s, (size_t)C, ds, ds0,
               samples, tol32(N + 1, N + 1, 5));
    free(x), free(s), free(wo), free(out), free(w), free(rstd), free(dx0), free(dx), free(ds0), free(ds);
    free(c.x), free(c.s), free(c.wout), free(c.out);
}

/* W4 of a random (rows, cols) matrix at the given scale (zero_row: row 0 all zeros) against the
 * double reference; ambiguous groups (a decision within its fp32 error) are left out of the
 * comparison and must be few; in place must give the same bits. */
static void test_cq(backend *be, int rows, int cols, double scale, int zero_row)
{
    const size_t n = (size_t)rows * cols, groups = (size_t)rows * ((cols + 127) / 128);
    float cb[16], *w = frand(n, scale), *out = frand(n, 1);
    nqref_needle_codebook(cb);
    if (zero_row) memset(w, 0, (size_t)cols * sizeof(float));
    double *want = malloc(n * sizeof(double)), *bound = malloc(n * sizeof(double));
    size_t amb = nqref_cq(w, rows, cols, cb, want, bound);
    backend_cq_w4_quant(be, out, w, cb, rows, cols);
    char name[96];
    snprintf(name, sizeof name, "cq_w4 %dx%d scale %g (%zu of %zu groups ambiguous)", rows, cols,
             scale, amb, groups);
    check_within(name, out, want, bound, n);
    /* random data leaves ~5% of groups ambiguous; the check must still compare most of them */
    CHECK(amb * 4 <= groups, "cq_w4: %zu of %zu groups ambiguous (random data: ~5%%)", amb, groups);
    float *y = fcopy(w, n);
    backend_cq_w4_quant(be, y, y, cb, rows, cols);
    check_equal("  cq_w4 in place (out = w)", y, out, n);
    /* the CPU's vectorised layout of the arithmetic is needle_quant.h's, bit for bit (the other
     * backends run the header's; this file builds without contraction, as the CPU's) */
    for (int r = 0; r < rows; r++)
        for (int c0 = 0; c0 < cols; c0 += CQ_GROUP) {
            float v[CQ_GROUP];
            const int len = cols - c0 < CQ_GROUP ? cols - c0 : CQ_GROUP;
            for (int k = 0; k < CQ_GROUP; k++) v[k] = k < len ? w[(size_t)r * cols + c0 + k] : 0.0f;
            cq_group(v, cb);
            for (int k = 0; k < len; k++) y[(size_t)r * cols + c0 + k] = nq_ste(w[(size_t)r * cols + c0 + k], v[k]);
        }
    check_equal("  cq_w4 = needle_quant.h's cq_group bit for bit", out, y, n);
    free(w), free(out), free(want), free(bound), free(y);
}

/* Ties take the lower code: a codebook symmetric about 0 (cb[7] = -cb[8]) and groups w = a e_0 +
 * a e_1, whose rotation is exactly 2 a hs at even i and exactly 0 at odd i: every odd u is an
 * exact tie between cb[7] and cb[8]. The upper code would move what_k by 2 cb[8] nu16 hs times
 * sum_{odd i} H[i][k] (+-64 at k = 0, 1; 0 elsewhere): far outside the bound at those two. */
static void test_cq_ties(backend *be)
{
    float cb[16], w[2 * 128] = {0};
    for (int k = 0; k < 16; k++) cb[k] = (float)((k - 7.5) * 0.05); /* cb[10] = 0.125 = u_even */
    w[0] = w[1] = 0.75f, w[128] = w[129] = -3.0f;
    double want[256], bound[256], up[256];
    int codes[128];
    for (int g = 0; g < 2; g++) {
        nqref_cq_group(w + 128 * g, 128, cb, want + 128 * g, bound + 128 * g, codes);
        CHECK(codes[1] == 7 && codes[0] == (g ? 5 : 10), "cq ties: reference codes %d, %d", codes[0], codes[1]);
        float cu[16];
        memcpy(cu, cb, sizeof cu);
        cu[7] = cb[8]; /* what the upper code would give */
        nqref_cq_group(w + 128 * g, 128, cu, up + 128 * g, bound + 128 * g, NULL);
        for (int k = 0; k < 128; k++) bound[128 * g + k] = 2 * CHECK_U_FP32 * (8 + 4 * fabs(want[128 * g + k]));
    }
    float out[256];
    backend_cq_w4_quant(be, out, w, cb, 2, 128);
    check_within("cq_w4 exact ties take the lower code", out, want, bound, 256);
    int far = 1;
    for (int k = 0; k < 256; k++)
        if (k % 128 < 2) far &= fabs(out[k] - up[k]) > 100 * bound[k];
    CHECK(far, "cq_w4: a tie is not told from the upper code's result");
}

/* A8 rows against the double reference (element-wise, ambiguous half-integers left out), exact
 * half-to-even ties, a zero row, and in place. */
static void test_a8(backend *be, int rows, int cols)
{
    const size_t n = (size_t)rows * cols;
    float *x = frand(n, 3), *out = frand(n, 1);
    for (int c = 0; c < cols; c++) x[c] = 0.0f; /* row 0: zeros (s = 1) */
    for (int c = 0; c < cols; c++) x[(size_t)cols + c] *= (float)(1 + c % 7) * 1e3f; /* wide range */
    double *want = malloc(n * sizeof(double)), *bound = malloc(n * sizeof(double));
    size_t amb = 0;
    for (int r = 0; r < rows; r++)
        amb += nqref_a8_row(x + (size_t)r * cols, cols, want + (size_t)r * cols, bound + (size_t)r * cols);
    backend_fake_quant_a8(be, out, x, rows, cols);
    char name[96];
    snprintf(name, sizeof name, "a8 %dx%d (%zu ambiguous)", rows, cols, amb);
    check_within(name, out, want, bound, n);
    CHECK(amb * 1000 <= n, "a8: %zu of %zu elements ambiguous", amb, n);
    float *y = fcopy(x, n);
    backend_fake_quant_a8(be, y, y, rows, cols);
    check_equal("  a8 in place (out = x)", y, out, n);
    /* s = 127 / 127 = 1: x / s is exact, so the half-integers are true ties (to even) */
    float t[9] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f, -126.5f}, tq[9];
    /* -0.5 -> q = -0, and x + (q - x) = -0.5 + 0.5 = +0, as Needle's f32 expression gives */
    const float te[9] = {127.0f, 0.0f, 2.0f, 2.0f, 0.0f, -2.0f, -2.0f, 4.0f, -126.0f};
    backend_fake_quant_a8(be, tq, t, 1, 9);
    check_equal("  a8 ties to even", tq, te, 9);
    free(x), free(out), free(want), free(bound), free(y);
}

int main(int argc, char **argv)
{
    cpu_blas_ensure_fast_kernel(argv);
    (void)argc;
    backend *be = test_backend(2);
    test_taps(be, 2, 37, 70, 3, 1, 300);  /* Needle's q/k/v taps */
    test_taps(be, 3, 20, 33, 4, 3, 300);  /* the engram's value taps (dilation 3) */
    test_taps(be, 1, 5, 16, 4, 3, 0);     /* T shorter than the taps reach */
    test_taps(be, 2, 9, 8, 1, 1, 0);      /* one tap */
    test_taps(be, 4, 96, 100, 3, 1, 200); /* several threads (rows split, dw partials) */
    test_gate(be, 1003, 0);
    test_gate(be, 100003, 500); /* several threads */
    test_scalar_gate(be, 1003, 0.3f, 0);
    test_scalar_gate(be, 100003, -2.5f, 500);
    test_zc_norm(be, 37, 96, 300); /* a residual row (d 96, the fixtures') */
    test_zc_norm(be, 64 * 4, 16, 300); /* q/k heads: rows of dq 16 */
    test_cq(be, 40, 300, 1.0, 1);   /* two full groups and a padded one a row; a zero row */
    test_cq(be, 64, 24, 0.05, 0);   /* engram table rows (sub 24): one short group */
    test_cq(be, 12, 768, 300.0, 0); /* large norms (fp16 steps of 1 and more) */
    test_cq(be, 30, 128, 1e-7, 0);  /* norms under 2^-14: fp16's subnormal steps */
    test_cq(be, 300, 256, 0.02, 0); /* several threads */
    test_cq_ties(be);
    test_a8(be, 50, 96);
    test_a8(be, 4096, 16); /* KV8: head vectors */
    backend_destroy(be);
    return test_finish("test_cpu_needle");
}
