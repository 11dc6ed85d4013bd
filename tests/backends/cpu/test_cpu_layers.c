/* test_cpu_layers.c: CPU LayerNorm, RMSNorm, GELU, SwiGLU, RoPE and embeddings: forward against
 * double references, backward against central finite differences of a random linear functional
 * of the reference output. Accumulated gradients start non-zero so += is checked, not assumed. */
#include "cpu_test.h"

typedef struct {
    double *x, *w, *b, *wout, *out;
    int N, C, rms;
    double eps;
} norm_ctx;

static void ref_norm(norm_ctx *c, double *mean, double *rstd)
{
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double m = 0.0, v = 0.0;
        for (int j = 0; j < c->C; j++) m += x[j];
        m = c->rms ? 0.0 : m / c->C;
        for (int j = 0; j < c->C; j++) v += (x[j] - m) * (x[j] - m);
        double rs = 1.0 / sqrt(v / c->C + c->eps);
        for (int j = 0; j < c->C; j++)
            c->out[(size_t)n * c->C + j] = (x[j] - m) * rs * c->w[j] + (c->rms ? 0.0 : c->b[j]);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = rs;
    }
}

static double norm_f(void *p)
{
    norm_ctx *c = p;
    ref_norm(c, NULL, NULL);
    return dot_fd(c->wout, c->out, (size_t)c->N * c->C);
}

static void test_norm(backend *be, int N, int C, int rms, size_t samples)
{
    size_t nc = (size_t)N * C;
    float *x = frand(nc, 2), *w = frand((size_t)C, 1), *b = frand((size_t)C, 1), *wo = frand(nc, 1);
    for (int n = 0; n < N; n++) x[(size_t)n * C] += 3.0f; /* a non-zero mean per row */
    float *out = frand(nc, 1), *mean = frand((size_t)N, 1), *rstd = frand((size_t)N, 1);
    norm_ctx c = {todbl(x, nc),
                  todbl(w, (size_t)C),
                  todbl(b, (size_t)C),
                  todbl(wo, nc),
                  malloc(nc * sizeof(double)),
                  N,
                  C,
                  rms,
                  1e-5};
    double *rm = malloc(N * sizeof(double)), *rr = malloc(N * sizeof(double));
    ref_norm(&c, rm, rr);
    char name[96];
    const char *kind = rms ? "rmsnorm" : "layernorm";
    if (rms)
        backend_rmsnorm_forward(be, out, rstd, x, w, N, C, 1e-5f);
    else
        backend_layernorm_forward(be, out, mean, rstd, x, w, b, N, C, 1e-5f);
    snprintf(name, sizeof name, "%s fwd N=%d C=%d", kind, N, C);
    /* x in (-2, 2) (+3 in column 0), w, b in (-1, 1). The mean sums C terms of |x| <= 5
     * (cancelling; its error is g_C * E|x|, E|x| < 2), the variance C positive terms (relative);
     * out = (x - mean) * rstd * w + b: the centred value carries the mean's error over |x - mean|
     * < 5 and rstd < 1/0.9, b's add cancels: S = 2 * 5 / 0.9 per element, ~6 roundings. */
    check_close(name, out, c.out, nc, tol32(C, 12, 6));
    check_close("  rstd", rstd, rr, (size_t)N, tol32(C, 0, 4));
    if (!rms) check_close("  mean", mean, rm, (size_t)N, tol32(C, 2, 2));
    float *dx0 = frand(nc, 1), *dw0 = frand((size_t)C, 1), *db0 = frand((size_t)C, 1);
    float *dx = fcopy(dx0, nc), *dw = fcopy(dw0, (size_t)C), *db = fcopy(db0, (size_t)C);
    if (rms)
        backend_rmsnorm_backward(be, dx, dw, wo, x, w, rstd, N, C);
    else
        backend_layernorm_backward(be, dx, dw, db, wo, x, w, mean, rstd, N, C);
    snprintf(name, sizeof name, "%s bwd dinp (+=)", kind);
    /* dinp = rstd (g - mean(g) - xhat mean(g xhat)) with g = w dout: two C-term sums of |g xhat|
     * < 5 / 0.9 (cancelling), scaled by rstd, plus dx0 (|dx0| < 1) */
    check_grad(name, norm_f, &c, c.x, nc, dx, dx0, samples, tol32(C, 14, 6));
    snprintf(name, sizeof name, "%s bwd dweight (+=)", kind);
    /* dweight = dw0 + sum over N rows of dout xhat (|dout xhat| < 5 / 0.9, E ~ 0.5) */
    check_grad(name, norm_f, &c, c.w, (size_t)C, dw, dw0, samples, tol32(N + 1, N + 1, 4));
    if (!rms) /* dbias = db0 + sum over N rows of dout (E|dout| = 1/2) */
        check_grad("layernorm bwd dbias (+=)", norm_f, &c, c.b, (size_t)C, db, db0, samples,
                   tol32(N + 1, N + 1, 1));
    /* frozen weights: dweight/dbias NULL, dinp unchanged */
    float *dx2 = fcopy(dx0, nc);
    if (rms)
        backend_rmsnorm_backward(be, dx2, NULL, wo, x, w, rstd, N, C);
    else
        backend_layernorm_backward(be, dx2, NULL, NULL, wo, x, w, mean, rstd, N, C);
    check_equal("  bwd with NULL dweight/dbias: same dinp", dx2, dx, nc);
    free(dx2);
    free(x), free(w), free(b), free(wo), free(out), free(mean), free(rstd), free(rm), free(rr);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
    free(c.x), free(c.w), free(c.b), free(c.wout), free(c.out);
}

typedef struct {
    double *x, *u, *w;
    size_t n;
    int swiglu;
} act_ctx;

static double ref_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

static double ref_act(const act_ctx *c, size_t i)
{
    double g = c->x[i];
    return c->swiglu ? g / (1.0 + exp(-g)) * c->u[i] : ref_gelu(g);
}

static double act_f(void *p)
{
    act_ctx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) s += c->w[i] * ref_act(c, i);
    return s;
}

static void test_act(backend *be, size_t n, int swiglu, size_t samples)
{
    float *x = frand(n, 6), *u = frand(n, 2), *w = frand(n, 1), *out = frand(n, 1);
    x[0] = 40.0f, x[1] = -40.0f, x[2] = 0.0f, x[3] = 1e-4f; /* saturation and the origin */
    act_ctx c = {todbl(x, n), todbl(u, n), todbl(w, n), n, swiglu};
    double *want = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = ref_act(&c, i);
    char name[80];
    const char *kind = swiglu ? "swiglu" : "gelu";
    if (swiglu)
        backend_swiglu_forward(be, out, x, u, n);
    else
        backend_gelu_forward(be, out, x, n);
    snprintf(name, sizeof name, "%s fwd n=%zu", kind, n);
    /* element-wise, ~10 roundings (the cube, tanh or exp, products); gelu's 1 + tanh(z) cancels
     * for x < 0 (and silu's x * sigmoid(x) is tiny there): an absolute u per unit of |x| < 6
     * (40 at the saturation points, where both are exact), times 4 for expf/tanh's ulps */
    const check_tol act_tol = {4 * 6 * CHECK_U_FP32 * (swiglu ? 2 : 1), 10 * CHECK_U_FP32};
    check_close(name, out, want, n, act_tol);
    float *dx = frand(n, 1), *du = frand(n, 1); /* garbage: the backward overwrites */
    if (swiglu)
        backend_swiglu_backward(be, dx, du, w, x, u, n);
    else
        backend_gelu_backward(be, dx, x, w, n);
    snprintf(name, sizeof name, "%s bwd dinp/dgate", kind);
    /* the derivative's ~15 roundings, and its cancellations times |dout| < 1: gelu' =
     * 0.5 (1 + t) + 0.5 x (1 - t^2) z' with t = tanh(z) -> -1 for x < 0 holds tanh's absolute
     * error (4u through expf) times 0.5 + |x| z'(|x|) (z' = 0.798 (1 + 0.134 x^2), |x| < 6);
     * silu' = s (1 + g (1 - s)) cancels in 1 - s for g > 0: 4u times (1 + |g|), times |u| < 2 */
    const double zmax = 0.79788456 * (1 + 3 * 0.044715 * 36);
    const check_tol dact_tol = {4 * CHECK_U_FP32 * (swiglu ? 2 * 7 : 0.5 + 6 * zmax),
                                15 * CHECK_U_FP32};
    check_grad(name, act_f, &c, c.x, n, dx, NULL, samples, dact_tol);
    if (swiglu) check_grad("swiglu bwd dup", act_f, &c, c.u, n, du, NULL, samples, dact_tol);
    free(x), free(u), free(w), free(out), free(dx), free(du), free(want);
    free(c.x), free(c.u), free(c.w);
}

typedef struct {
    double *x, *w, *out, *cs; /* cs: (T, D/2) cos, sin pairs */
    int B, T, H, D;
    double theta;
} rope_ctx;

static void ref_rope(rope_ctx *c)
{
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int h = 0; h < c->H; h++)
                for (int i = 0; i < c->D / 2; i++) {
                    size_t o = (((size_t)b * c->T + t) * c->H + h) * c->D + 2 * i;
                    const double *cs = c->cs + ((size_t)t * c->D / 2 + i) * 2;
                    double x0 = c->x[o], x1 = c->x[o + 1];
                    c->out[o] = x0 * cs[0] - x1 * cs[1];
                    c->out[o + 1] = x0 * cs[1] + x1 * cs[0];
                }
}

static double rope_f(void *p)
{
    rope_ctx *c = p;
    ref_rope(c);
    return dot_fd(c->w, c->out, (size_t)c->B * c->T * c->H * c->D);
}

static void test_rope(backend *be, int B, int T, int H, int D, size_t samples)
{
    size_t n = (size_t)B * T * H * D;
    float *x = frand(n, 1), *w = frand(n, 1), *y = fcopy(x, n);
    rope_ctx c = {todbl(x, n),
                  todbl(w, n),
                  malloc(n * sizeof(double)),
                  malloc((size_t)T * D * sizeof(double)),
                  B,
                  T,
                  H,
                  D,
                  10000.0};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D / 2; i++) {
            double a = t * pow(c.theta, -2.0 * i / D);
            c.cs[((size_t)t * D / 2 + i) * 2] = cos(a);
            c.cs[((size_t)t * D / 2 + i) * 2 + 1] = sin(a);
        }
    ref_rope(&c);
    char name[80];
    backend_rope(be, y, B, T, H, D, 10000.0f, 0);
    snprintf(name, sizeof name, "rope fwd B=%d T=%d H=%d D=%d", B, T, H, D);
    /* x0 cos - x1 sin: cos and sin rounded to fp32 from double (u each), two products and a
     * cancelling sum of terms |x| < 1: S = 2, 3 roundings */
    const check_tol rope_tol = tol32(2, 2, 3);
    check_close(name, y, c.out, n, rope_tol);
    backend_rope(be, y, B, T, H, D, 10000.0f, 1);
    const check_tol twice = {2 * rope_tol.atol, 2 * rope_tol.rtol};
    check_close("rope inverse undoes forward", y, c.x, n, twice);
    /* rope is linear and orthogonal: its backward is the inverse rotation applied to dout */
    backend_rope(be, w, B, T, H, D, 10000.0f, 1);
    check_grad("rope bwd = inverse(dout)", rope_f, &c, c.x, n, w, NULL, samples, rope_tol);
    free(x), free(w), free(y), free(c.x), free(c.w), free(c.out), free(c.cs);
}

/* rope_freqs: a given frequency table (Llama 3's scaled one here: every third frequency slowed
 * 8x) against the double reference, its inverse, and its backward against finite differences;
 * then plain rope again, which must not reuse the frequency table's cached angles. */
static void test_rope_freqs(backend *be, int B, int T, int H, int D, size_t samples)
{
    size_t n = (size_t)B * T * H * D;
    float *x = frand(n, 1), *w = frand(n, 1), *y = fcopy(x, n), *f = malloc((size_t)D / 2 * sizeof(float));
    for (int i = 0; i < D / 2; i++) f[i] = (float)(pow(500000.0, -2.0 * i / D) / (i % 3 ? 1.0 : 8.0));
    rope_ctx c = {todbl(x, n), todbl(w, n), malloc(n * sizeof(double)), malloc((size_t)T * D * sizeof(double)),
                  B, T, H, D, 0.0};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D / 2; i++) {
            double a = t * (double)f[i];
            c.cs[((size_t)t * D / 2 + i) * 2] = cos(a);
            c.cs[((size_t)t * D / 2 + i) * 2 + 1] = sin(a);
        }
    ref_rope(&c);
    char name[80];
    /* as test_rope: cos, sin rounded once from double, two products, a cancelling sum */
    const check_tol rope_tol = tol32(2, 2, 3), twice = {2 * rope_tol.atol, 2 * rope_tol.rtol};
    backend_rope_freqs(be, y, B, T, H, D, f, 0);
    snprintf(name, sizeof name, "rope_freqs fwd B=%d T=%d H=%d D=%d", B, T, H, D);
    check_close(name, y, c.out, n, rope_tol);
    backend_rope_freqs(be, y, B, T, H, D, f, 1);
    check_close("rope_freqs inverse undoes forward", y, c.x, n, twice);
    backend_rope_freqs(be, w, B, T, H, D, f, 1);
    check_grad("rope_freqs bwd = inverse(dout)", rope_f, &c, c.x, n, w, NULL, samples, rope_tol);
    free(y);
    y = fcopy(x, n);
    backend_rope(be, y, B, T, H, D, 500000.0f, 0);
    backend_rope_freqs(be, y, B, T, H, D, f, 1); /* differs: the tables must not be confused */
    double diff = 0;
    for (size_t i = 0; i < n; i++) diff = fmax(diff, fabs((double)y[i] - x[i]));
    int stale = T >= 2 && diff <= 1e-3;
    printf("%s rope(theta) then rope_freqs inverse differ from x by %.3g (a stale table would give 0)\n",
           stale ? "FAIL" : "ok  ", diff);
    failures += stale;
    free(x), free(w), free(y), free(f), free(c.x), free(c.w), free(c.out), free(c.cs);
}

typedef struct {
    double *wte, *wpe, *w;
    const int32_t *tok;
    int B, T, C;
} emb_ctx;

static double emb_f(void *p)
{
    emb_ctx *c = p;
    double s = 0.0;
    for (int n = 0; n < c->B * c->T; n++)
        for (int j = 0; j < c->C; j++)
            s += c->w[(size_t)n * c->C + j] *
                 (c->wte[(size_t)c->tok[n] * c->C + j] +
                  (c->wpe ? c->wpe[(size_t)(n % c->T) * c->C + j] : 0.0));
    return s;
}

static void test_embedding(backend *be, int B, int T, int C, int V, int with_wpe, size_t samples)
{
    size_t n = (size_t)B * T * C, nv = (size_t)V * C, np = (size_t)T * C;
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)((rnd() + 1) * 0.5 * (V / 2)); /* repeats */
    tok[0] = tok[1] = tok[B * T - 1];
    float *wte = frand(nv, 1), *wpe = frand(np, 1), *w = frand(n, 1), *out = frand(n, 1);
    emb_ctx c = {todbl(wte, nv), with_wpe ? todbl(wpe, np) : NULL, todbl(w, n), tok, B, T, C};
    double *want = malloc(n * sizeof(double));
    for (int i = 0; i < B * T; i++)
        for (int j = 0; j < C; j++)
            want[(size_t)i * C + j] =
                wte[(size_t)tok[i] * C + j] + (with_wpe ? wpe[(size_t)(i % T) * C + j] : 0.0);
    backend_embedding_forward(be, out, tok, wte, with_wpe ? wpe : NULL, B, T, C);
    char name[96];
    snprintf(name, sizeof name, "embedding fwd B=%d T=%d C=%d wpe=%d", B, T, C, with_wpe);
    /* wte + wpe: one rounding (a gather alone would be exact) */
    check_close(name, out, want, n, tol32(1, 0, 1));
    float *dwte0 = frand(nv, 1), *dwpe0 = frand(np, 1);
    float *dwte = fcopy(dwte0, nv), *dwpe = fcopy(dwpe0, np);
    backend_embedding_backward(be, dwte, with_wpe ? dwpe : NULL, w, tok, B, T, C, V);
    /* dwte0 plus one term per occurrence of the token (at most B*T, |w| < 1); dwpe0 plus B */
    check_grad("embedding bwd dwte (+=, repeated tokens)", emb_f, &c, c.wte, nv, dwte, dwte0,
               samples, tol32(B * T + 1, B * T + 1, 1));
    if (with_wpe)
        check_grad("embedding bwd dwpe (+=)", emb_f, &c, c.wpe, np, dwpe, dwpe0, samples,
                   tol32(B + 1, B + 1, 1));
    else
        check_equal("embedding bwd leaves dwpe alone", dwpe, dwpe0, np);
    free(tok), free(wte), free(wpe), free(w), free(out), free(want);
    free(dwte0), free(dwpe0), free(dwte), free(dwpe), free(c.wte), free(c.wpe), free(c.w);
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    backend *be = test_backend(2);
    for (int rms = 0; rms < 2; rms++) {
        test_norm(be, 5, 37, rms, 0);
        test_norm(be, 64, 600, rms, 300);
    }
    for (int sw = 0; sw < 2; sw++) {
        test_act(be, 1003, sw, 0);
        test_act(be, 100003, sw, 200);
    }
    test_rope(be, 2, 7, 3, 8, 0);
    test_rope(be, 2, 300, 4, 64, 200);
    test_rope(be, 1, 33, 2, 64, 0); /* a shorter T after a longer one: the cached table serves */
    test_rope_freqs(be, 2, 40, 3, 16, 200);
    test_rope(be, 2, 7, 3, 8, 0); /* plain theta again after a frequency table */
    test_embedding(be, 2, 5, 9, 7, 1, 0);
    test_embedding(be, 2, 5, 9, 7, 0, 0);
    test_embedding(be, 4, 64, 256, 50, 1, 200);
    backend_destroy(be);
    return test_finish("test_cpu_layers");
}
