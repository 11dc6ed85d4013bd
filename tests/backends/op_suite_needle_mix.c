/* op_suite_needle_mix.c: the op suite's cases for Needle's mixing layers (backend.h, "Needle's
 * mixing layers"; docs/needle.md 2.3, 2.4, 2.6): every op on both sides against a double
 * reference written here, each backward against the reference's analytic gradient, which is
 * itself checked against central finite differences of the reference forward (so a wrong
 * reference cannot pass a wrong op); and the two sides against each other bit for bit where
 * they are one implementation. Odd shapes, N = 7, both kron orientations, permutation inverse,
 * scale pad and truncate, in-place calls where allowed. Skipped, and said so, where a side lacks
 * BACKEND_OP_NEEDLE_MIX. Only kron_apply is a matmul (loosened by u_dot); the rest is fp32. */
static int mix_failures; /* check.h's counter for this file; each check also counts in s->failed */
#define CHECK_COUNTER mix_failures
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/backends/op_suite_internal.h"

#define U32 CHECK_U_FP32
#define SINK_STEPS 40 /* Sinkhorn: 20 rounds of a row and a column normalisation */

/* --- helpers --- */

static double *to_d(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* n floats uniform in [lo, hi) */
static float *rand_in(suite *s, size_t n, double lo, double hi)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * 0.5 * (suite_rnd(s) + 1.0));
    return x;
}

static check_tol tol_sum(double K, double S, double r) { return check_tol_sum(K, S, r, U32); }

static check_tol tol_mk(double atol, double rtol)
{
    check_tol t = {atol, rtol};
    return t;
}

/* Both sides' p against `want` (the double reference) under t (an fp32 bound; scaled to the tested
 * side's u_dot for a matmul, dot = 1), then the sides against each other bit for bit when they
 * are one implementation (u_dot 0). */
static void mix_check(suite *s, const char *op, const pair *p, const double *want, check_tol t,
                      int dot)
{
    const size_t n = p->bytes / sizeof(float);
    float *a = malloc(p->bytes ? p->bytes : 1), *b = malloc(p->bytes ? p->bytes : 1);
    backend_sync(s->t), backend_sync(s->r);
    backend_copy_d2h(s->t, a, p->t, p->bytes);
    backend_copy_d2h(s->r, b, p->r, p->bytes);
    const check_tol tt = dot && s->u_dot > U32 ? tol_times(t, s->u_dot / U32) : t;
    char name[160];
    snprintf(name, sizeof name, "op_suite %s: tested vs double", op);
    suite_count(s, check_allclose_v(name, a, want, n, tt, s->verbose));
    snprintf(name, sizeof name, "op_suite %s: reference vs double", op);
    suite_count(s, check_allclose_v(name, b, want, n, t, s->verbose));
    if (s->u_dot == 0.0) {
        double *bw = to_d(b, n);
        snprintf(name, sizeof name, "op_suite %s: tested == reference", op);
        suite_count(s, check_allclose_v(name, a, bw, n, CHECK_EXACT, s->verbose));
        free(bw);
    }
    free(a), free(b);
}

/* The reference's own check: a loss L = <w, f(inputs)> in double, f a reference forward. */
typedef struct mix_ctx mix_ctx;
struct mix_ctx {
    double *in[4];   /* the forward's inputs (finite differences move these) */
    double *w, *out; /* the loss's weights; the forward's output */
    size_t nout;
    int N, a, b, n, L, lane, tr, hs;
    const double *par;
    void (*fwd)(mix_ctx *c);
};

static double mix_loss(mix_ctx *c)
{
    c->fwd(c);
    double l = 0.0;
    for (size_t i = 0; i < c->nout; i++) l += c->w[i] * c->out[i];
    return l;
}

/* grad (the reference's analytic dL/d in[which], n values) against central differences of the
 * reference forward, step 1e-5 (double: the differences are good to ~1e-9 relative; the
 * comparison rounds grad to float, 6e-8): atol 1e-6 of the gradient's scale, rtol 1e-5. */
static void mix_fd(suite *s, const char *what, mix_ctx *c, int which, size_t n,
                   const double *grad, double gscale)
{
    double *x = c->in[which], *fd = malloc(n * sizeof(double));
    float *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[i] = x0 + h;
        double lp = mix_loss(c);
        x[i] = x0 - h;
        double lm = mix_loss(c);
        x[i] = x0;
        fd[i] = (lp - lm) / (2 * h);
        g[i] = (float)grad[i];
    }
    char name[160];
    snprintf(name, sizeof name, "op_suite reference %s vs finite differences", what);
    suite_count(s, check_allclose_v(name, g, fd, n, tol_mk(1e-6 * gscale, 1e-5), s->verbose));
    free(fd), free(g);
}

/* --- kron_apply --- */

/* out[r] = A^T Z B (tr 0) or A Z B^T (tr 1), Z = z[r] as a x b, in double */
static void ref_kron(double *out, const double *z, const double *A, const double *B, int N, int a,
                     int b, int tr)
{
    double *T = malloc((size_t)a * b * sizeof(double));
    for (int r = 0; r < N; r++) {
        const double *Z = z + (size_t)r * a * b;
        for (size_t k = 0; k < (size_t)a; k++)
            for (size_t j = 0; j < (size_t)b; j++) {
                double acc = 0.0;
                for (size_t i = 0; i < (size_t)a; i++)
                    acc += (tr ? A[k * a + i] : A[i * a + k]) * Z[i * b + j];
                T[k * b + j] = acc;
            }
        for (size_t k = 0; k < (size_t)a; k++)
            for (size_t l = 0; l < (size_t)b; l++) {
                double acc = 0.0;
                for (size_t j = 0; j < (size_t)b; j++)
                    acc += T[k * b + j] * (tr ? B[l * b + j] : B[j * b + l]);
                out[(size_t)r * a * b + k * b + l] = acc;
            }
    }
    free(T);
}

static void fwd_kron(mix_ctx *c)
{
    ref_kron(c->out, c->in[0], c->in[1], c->in[2], c->N, c->a, c->b, c->tr);
}

static void suite_kron_one(suite *s, int N, int a, int b, int fd)
{
    const size_t n = (size_t)N * a * b;
    float *zh = host_rand(s, n, 1), *Ah = host_rand(s, (size_t)a * a, 1);
    float *Bh = host_rand(s, (size_t)b * b, 1);
    double *zd = to_d(zh, n), *Ad = to_d(Ah, (size_t)a * a), *Bd = to_d(Bh, (size_t)b * b);
    double *want = malloc(n * sizeof(double));
    pair z = pair_new(s, zh, n * 4), A = pair_new(s, Ah, (size_t)a * a * 4);
    pair B = pair_new(s, Bh, (size_t)b * b * 4), out = pair_rand(s, n, 1);
    /* a b products of |A Z B| (E 1/8) in any order of the two contractions, and a rounding */
    const check_tol t = tol_sum((double)a * b, a * b / 8.0, 2);
    for (int tr = 0; tr < 2; tr++) {
        FOR_SIDES (be)
            backend_kron_apply(be, PF(out, side), PF(z, side), PF(A, side), PF(B, side), N, a, b,
                               tr, NULL);
        ref_kron(want, zd, Ad, Bd, N, a, b, tr);
        char name[96];
        snprintf(name, sizeof name, "kron_apply N%d a%d b%d transpose %d", N, a, b, tr);
        mix_check(s, name, &out, want, t, 1);
    }
    if (fd) { /* transpose 1 is the input gradient of transpose 0 (the reference's adjoint) */
        double *g = malloc(n * sizeof(double)), *gz = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) g[i] = suite_rnd(s);
        mix_ctx c = {{zd, Ad, Bd, NULL}, g, want, n, N, a, b, 0, 0, 0, 0, 0, NULL, fwd_kron};
        ref_kron(gz, g, Ad, Bd, N, a, b, 1);
        mix_fd(s, "kron_apply transpose 1 = d<g, kron(z)>/dz", &c, 0, n, gz, a * b / 8.0);
        free(g), free(gz);
    }
    free(zh), free(Ah), free(Bh), free(zd), free(Ad), free(Bd), free(want);
    pair_free(s, &z), pair_free(s, &A), pair_free(s, &B), pair_free(s, &out);
}

/* A random permutation of [0, n) (Fisher-Yates on the suite's stream). */
static int32_t *mix_perm(suite *s, int n)
{
    int32_t *perm = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)((suite_rnd(s) + 1.0) * 0.5 * (i + 1));
        j = j > i ? i : j;
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    return perm;
}

/* The sides' copies of p and q equal bit for bit, each side on its own. */
static void mix_check_same(suite *s, const char *op, const pair *p, const pair *q)
{
    const size_t n = p->bytes / sizeof(float);
    float *a = malloc(p->bytes), *b = malloc(p->bytes);
    for (int side = 0; side < 2; side++) {
        backend *be = side ? s->r : s->t;
        backend_sync(be);
        backend_copy_d2h(be, a, side ? p->r : p->t, p->bytes);
        backend_copy_d2h(be, b, side ? q->r : q->t, q->bytes);
        double *bw = to_d(b, n);
        char name[160];
        snprintf(name, sizeof name, "op_suite %s: %s side == its separate ops", op, side ? "reference" : "tested");
        suite_count(s, check_allclose_v(name, a, bw, n, CHECK_EXACT, s->verbose));
        free(bw);
    }
    free(a), free(b);
}

/* kron_apply with io (backend_kron_io): the Needle MLP's five uses (the forward's three and the
 * backward's two, docs/needle.md 2.6) on each side, against the double reference and bit for bit
 * against the same side's permute_cols / scale_cols around a plain product. which: bit 0 in_perm,
 * 1 in_scale, 2 out_perm, 3 out_scale; n_in, n_out: the rows' widths. */
static void suite_kron_io_one(suite *s, int N, int a, int b, int tr, int which, int n_in, int n_out)
{
    const int ab = a * b;
    const size_t nz = (size_t)N * n_in, no = (size_t)N * n_out, nab = (size_t)N * ab;
    float *zh = host_rand(s, nz, 1), *Ah = host_rand(s, (size_t)a * a, 1);
    float *Bh = host_rand(s, (size_t)b * b, 1), *ish = host_rand(s, (size_t)n_in, 1.5);
    float *osh = host_rand(s, (size_t)n_out, 1.5);
    int32_t *iph = mix_perm(s, ab), *oph = mix_perm(s, ab);
    pair z = pair_new(s, zh, nz * 4), A = pair_new(s, Ah, (size_t)a * a * 4), B = pair_new(s, Bh, (size_t)b * b * 4);
    pair is = pair_new(s, ish, (size_t)n_in * 4), os = pair_new(s, osh, (size_t)n_out * 4);
    pair ip = pair_new(s, iph, (size_t)ab * 4), op = pair_new(s, oph, (size_t)ab * 4);
    pair out = pair_rand(s, no, 1), sep = pair_rand(s, no, 1);
    pair t1 = pair_rand(s, nab, 1), t2 = pair_rand(s, nab, 1), t3 = pair_rand(s, nab, 1);
    FOR_SIDES (be) {
        const backend_kron_io io = {which & 1 ? PI(ip, side) : NULL, which & 2 ? PF(is, side) : NULL, n_in,
                                    which & 4 ? PI(op, side) : NULL, which & 8 ? PF(os, side) : NULL, n_out};
        backend_kron_apply(be, PF(out, side), PF(z, side), PF(A, side), PF(B, side), N, a, b, tr, &io);
        /* the same as separate ops: gather, scale (with its pad), product, gather, scale */
        const float *zc = PF(z, side);
        if (which & 1) backend_permute_cols(be, PF(t1, side), zc, PI(ip, side), N, ab, 0), zc = PF(t1, side);
        if (which & 2) backend_scale_cols(be, PF(t2, side), zc, PF(is, side), N, n_in, ab), zc = PF(t2, side);
        float *pc = which & 12 ? PF(t3, side) : PF(sep, side);
        backend_kron_apply(be, pc, zc, PF(A, side), PF(B, side), N, a, b, tr, NULL);
        if (which & 4) backend_permute_cols(be, which & 8 ? PF(t1, side) : PF(sep, side), pc, PI(op, side), N, ab, 0),
            pc = which & 8 ? PF(t1, side) : PF(sep, side);
        if (which & 8) backend_scale_cols(be, PF(sep, side), pc, PF(os, side), N, ab, n_out);
    }
    /* the reference: z' in double, the product, out's gather and scale */
    double *zd = malloc(nab * sizeof(double)), *pd = malloc(nab * sizeof(double)), *want = malloc(no * sizeof(double));
    double *Ad = to_d(Ah, (size_t)a * a), *Bd = to_d(Bh, (size_t)b * b);
    for (size_t r = 0; r < (size_t)N; r++) {
        for (int j = 0; j < ab; j++) {
            const double v = j < n_in ? zh[r * n_in + (which & 1 ? iph[j] : j)] : 0.0;
            zd[r * ab + j] = which & 2 && j < n_in ? v * ish[j] : v;
        }
    }
    ref_kron(pd, zd, Ad, Bd, N, a, b, tr);
    for (size_t r = 0; r < (size_t)N; r++)
        for (int m = 0; m < n_out; m++) {
            const double v = pd[r * ab + (which & 4 ? oph[m] : m)];
            want[r * n_out + m] = which & 8 ? v * osh[m] : v;
        }
    char name[128];
    snprintf(name, sizeof name, "kron_apply io N%d a%d b%d tr %d (%s%s%s%s) %d -> %d", N, a, b, tr,
             which & 1 ? "in_perm " : "", which & 2 ? "in_scale " : "", which & 4 ? "out_perm " : "",
             which & 8 ? "out_scale" : "", n_in, n_out);
    /* the plain product's bound, the scales' factors (|d| < 1.5) each a rounding more */
    mix_check(s, name, &out, want, tol_times(tol_sum((double)ab, ab / 8.0, 4), 2.25), 1);
    mix_check_same(s, name, &out, &sep);
    free(zh), free(Ah), free(Bh), free(ish), free(osh), free(iph), free(oph);
    free(zd), free(pd), free(want), free(Ad), free(Bd);
    pair *ps[] = {&z, &A, &B, &is, &os, &ip, &op, &out, &sep, &t1, &t2, &t3};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) pair_free(s, ps[i]);
}

/* --- permute_cols, scale_cols --- */

static void ref_permute(double *out, const double *x, const int32_t *perm, int N, int n, int inv)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int m = 0; m < n; m++) {
            if (inv)
                out[r * n + perm[m]] = x[r * n + m];
            else
                out[r * n + m] = x[r * n + perm[m]];
        }
}

static void fwd_permute(mix_ctx *c)
{
    ref_permute(c->out, c->in[0], (const int32_t *)c->par, c->N, c->n, 0);
}

static void suite_permute_one(suite *s, int N, int n, int fd)
{
    const size_t nn = (size_t)N * n;
    int32_t *perm = mix_perm(s, n);
    float *xh = host_rand(s, nn, 1);
    double *xd = to_d(xh, nn), *want = malloc(nn * sizeof(double));
    pair pp = pair_new(s, perm, (size_t)n * sizeof(int32_t)), x = pair_new(s, xh, nn * 4);
    pair out = pair_rand(s, nn, 1), back = pair_rand(s, nn, 1);
    char name[96];
    for (int inv = 0; inv < 2; inv++) {
        FOR_SIDES (be)
            backend_permute_cols(be, PF(out, side), PF(x, side), PI(pp, side), N, n, inv);
        ref_permute(want, xd, perm, N, n, inv);
        snprintf(name, sizeof name, "permute_cols N%d n%d inverse %d", N, n, inv);
        mix_check(s, name, &out, want, CHECK_EXACT, 0); /* a copy: exact */
        /* and the other direction undoes it */
        FOR_SIDES (be)
            backend_permute_cols(be, PF(back, side), PF(out, side), PI(pp, side), N, n, !inv);
        snprintf(name, sizeof name, "permute_cols N%d n%d inverse %d then %d = x", N, n, inv, !inv);
        mix_check(s, name, &back, xd, CHECK_EXACT, 0);
    }
    if (fd) { /* the scatter is the gather's gradient */
        double *g = malloc(nn * sizeof(double)), *gx = malloc(nn * sizeof(double));
        for (size_t i = 0; i < nn; i++) g[i] = suite_rnd(s);
        mix_ctx c = {{xd, NULL, NULL, NULL}, g, want, nn, N, 0, 0, n, 0, 0, 0, 0,
                     (const double *)(const void *)perm, fwd_permute};
        ref_permute(gx, g, perm, N, n, 1);
        mix_fd(s, "permute_cols inverse 1 = d<g, gather(x)>/dx", &c, 0, nn, gx, 1);
        free(g), free(gx);
    }
    free(perm), free(xh), free(xd), free(want);
    pair_free(s, &pp), pair_free(s, &x), pair_free(s, &out), pair_free(s, &back);
}

static void ref_scale(double *out, const double *x, const double *d, int N, int nin, int nout)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < nout; c++) out[r * nout + c] = c < nin ? x[r * nin + c] * d[c] : 0.0;
}

static void fwd_scale(mix_ctx *c)
{
    ref_scale(c->out, c->in[0], c->in[1], c->N, c->a, c->b);
}

/* in_place: out is x (n_in == n_out only) */
static void suite_scale_one(suite *s, int N, int nin, int nout, int in_place, int fd)
{
    const size_t ni = (size_t)N * nin, no = (size_t)N * nout;
    const int m = nin < nout ? nin : nout;
    float *xh = host_rand(s, ni, 2), *dh = host_rand(s, (size_t)m, 1.5);
    double *xd = to_d(xh, ni), *dd = to_d(dh, (size_t)m), *want = malloc(no * sizeof(double));
    pair x = pair_new(s, xh, ni * 4), d = pair_new(s, dh, (size_t)m * 4);
    pair out = in_place ? x : pair_rand(s, no, 1); /* stale values where the pad must write 0 */
    FOR_SIDES (be)
        backend_scale_cols(be, PF(out, side), PF(x, side), PF(d, side), N, nin, nout);
    ref_scale(want, xd, dd, N, nin, nout);
    char name[96];
    snprintf(name, sizeof name, "scale_cols N%d %d -> %d%s", N, nin, nout,
             in_place ? " in place" : "");
    mix_check(s, name, &out, want, tol_mk(0, U32), 0); /* one product, rounded once */
    if (fd) { /* its own adjoint with the widths swapped */
        double *g = malloc(no * sizeof(double)), *gx = malloc(ni * sizeof(double));
        for (size_t i = 0; i < no; i++) g[i] = suite_rnd(s);
        mix_ctx c = {{xd, dd, NULL, NULL}, g, want, no, N, nin, nout, 0, 0, 0, 0, 0, NULL,
                     fwd_scale};
        ref_scale(gx, g, dd, N, nout, nin);
        snprintf(name, sizeof name, "scale_cols %d -> %d = d<g, scale_cols %d -> %d>/dx", nout,
                 nin, nin, nout);
        mix_fd(s, name, &c, 0, ni, gx, 1.5);
        free(g), free(gx);
    }
    free(xh), free(dh), free(xd), free(dd), free(want);
    pair_free(s, &x), pair_free(s, &d);
    if (!in_place) pair_free(s, &out);
}

/* --- softmax_rows --- */

static void ref_softmax(double *out, const double *x, int N, int n)
{
    for (size_t r = 0; r < (size_t)N; r++) {
        const double *xr = x + r * n;
        double mx = xr[0], sum = 0.0;
        for (int c = 1; c < n; c++) mx = xr[c] > mx ? xr[c] : mx;
        for (int c = 0; c < n; c++) sum += exp(xr[c] - mx);
        for (int c = 0; c < n; c++) out[r * n + c] = exp(xr[c] - mx) / sum;
    }
}

static void ref_softmax_bwd(double *dx, const double *dout, const double *sm, int N, int n)
{
    for (size_t r = 0; r < (size_t)N; r++) {
        double dot = 0.0;
        for (int c = 0; c < n; c++) dot += sm[r * n + c] * dout[r * n + c];
        for (int c = 0; c < n; c++) dx[r * n + c] = sm[r * n + c] * (dout[r * n + c] - dot);
    }
}

static void fwd_softmax(mix_ctx *c) { ref_softmax(c->out, c->in[0], c->N, c->n); }

/* x in (-R, R); in_place: out is x, and dx is dout */
static void suite_softmax_one(suite *s, int N, int n, double R, int in_place, int fd)
{
    const size_t nn = (size_t)N * n;
    float *xh = host_rand(s, nn, R), *gh = host_rand(s, nn, 1);
    double *xd = to_d(xh, nn), *gd = to_d(gh, nn), *want = malloc(nn * sizeof(double));
    pair x = pair_new(s, xh, nn * 4), out = in_place ? x : pair_rand(s, nn, 1);
    FOR_SIDES (be) backend_softmax_rows(be, PF(out, side), PF(x, side), N, n);
    ref_softmax(want, xd, N, n);
    char name[96];
    snprintf(name, sizeof name, "softmax_rows N%d n%d |x| < %g%s", N, n, R,
             in_place ? " in place" : "");
    /* exp(x - max): the difference rounded (2R u relative in the exp), exp's own few ulps; n
     * positive terms summed (relative: g_n, or n - 1 roundings when fewer); the division (or a
     * reciprocal and a product) */
    const double gn = fmin(CHECK_LAMBDA * sqrt((double)n), n - 1.0) * U32;
    mix_check(s, name, &out, want, tol_mk(1e-37, (2 * R + 6) * U32 + gn), 0);
    /* the backward from s = the reference's softmax in float (both sides and the reference read
     * the same s): <s, dout> sums n terms of total |s dout| < 1, dout - it cancels (|.| < 2),
     * times s */
    float *sh = malloc(nn * 4);
    for (size_t i = 0; i < nn; i++) sh[i] = (float)want[i];
    double *sd = to_d(sh, nn), *wdx = malloc(nn * sizeof(double));
    pair sm = pair_new(s, sh, nn * 4), dout = pair_new(s, gh, nn * 4);
    pair dx = in_place ? dout : pair_rand(s, nn, 1);
    FOR_SIDES (be)
        backend_softmax_rows_backward(be, PF(dx, side), PF(dout, side), PF(sm, side), N, n);
    ref_softmax_bwd(wdx, gd, sd, N, n);
    snprintf(name, sizeof name, "softmax_rows_backward N%d n%d%s", N, n,
             in_place ? " (dx = dout)" : "");
    mix_check(s, name, &dx, wdx, tol_mk(gn + 3 * U32, 2 * U32), 0);
    if (fd) {
        double *ws = malloc(nn * sizeof(double));
        ref_softmax(ws, xd, N, n); /* at x itself, not its float rounding */
        ref_softmax_bwd(wdx, gd, ws, N, n);
        mix_ctx c = {{xd, NULL, NULL, NULL}, gd, want, nn, N, 0, 0, n, 0, 0, 0, 0, NULL,
                     fwd_softmax};
        mix_fd(s, "softmax_rows_backward", &c, 0, nn, wdx, 1);
        free(ws);
    }
    free(xh), free(gh), free(xd), free(gd), free(want), free(sh), free(sd), free(wdx);
    pair_free(s, &x), pair_free(s, &sm), pair_free(s, &dout);
    if (!in_place) pair_free(s, &out), pair_free(s, &dx);
}

/* --- hada_mid --- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* u = d2 cond z1 + b2, out = u sigmoid(u) */
static void ref_hada(double *out, const double *z1, const double *cond, const double *d2,
                     const double *b2, int N, int n)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < n; c++) {
            const size_t i = r * n + c;
            const double u = d2[c] * cond[i] * z1[i] + b2[c];
            out[i] = u * sigm(u);
        }
}

static void ref_hada_bwd(double *dz1, double *dcond, const double *dout, const double *z1,
                         const double *cond, const double *d2, const double *b2, int N, int n)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < n; c++) {
            const size_t i = r * n + c;
            const double u = d2[c] * cond[i] * z1[i] + b2[c], sg = sigm(u);
            const double du = dout[i] * sg * (1 + u * (1 - sg));
            dz1[i] = d2[c] * cond[i] * du;
            dcond[i] = d2[c] * z1[i] * du;
        }
}

static void fwd_hada(mix_ctx *c)
{
    ref_hada(c->out, c->in[0], c->in[1], c->in[2], c->in[3], c->N, c->n);
}

/* z1 in (-3, 3), cond in (0.5, 1.5) (1 + a softmax's mix), d2 in (-1.5, 1.5), b2 in (-1, 1):
 * |u| < 7.75 */
static void suite_hada_one(suite *s, int N, int n, int in_place, int fd)
{
    const size_t nn = (size_t)N * n;
    float *zh = host_rand(s, nn, 3), *ch = rand_in(s, nn, 0.5, 1.5);
    float *d2h = host_rand(s, (size_t)n, 1.5), *b2h = host_rand(s, (size_t)n, 1);
    float *gh = host_rand(s, nn, 1);
    double *zd = to_d(zh, nn), *cd = to_d(ch, nn), *d2d = to_d(d2h, (size_t)n);
    double *b2d = to_d(b2h, (size_t)n), *gd = to_d(gh, nn);
    double *want = malloc(nn * sizeof(double)), *wz = malloc(nn * sizeof(double));
    double *wc = malloc(nn * sizeof(double));
    pair z1 = pair_new(s, zh, nn * 4), cond = pair_new(s, ch, nn * 4);
    pair d2 = pair_new(s, d2h, (size_t)n * 4), b2 = pair_new(s, b2h, (size_t)n * 4);
    pair dout = pair_new(s, gh, nn * 4), dz1 = pair_rand(s, nn, 1), dcond = pair_rand(s, nn, 1);
    /* the backward first: in place the forward overwrites z1 */
    FOR_SIDES (be)
        backend_hada_mid_backward(be, PF(dz1, side), PF(dcond, side), PF(dout, side),
                                  PF(z1, side), PF(cond, side), PF(d2, side), PF(b2, side), N, n);
    ref_hada_bwd(wz, wc, gd, zd, cd, d2d, b2d, N, n);
    /* u is off by du = 3u |u|max absolute (two products, a sum); silu' < 1.1 carries it into out,
     * silu'' < 0.5 into silu' (whose own roundings are < u (8 + 8 |u|max)); sigmoid's relative
     * error is its exp's few ulps and two roundings; dz1, dcond: |d2 cond| < 2.25, |d2 z1| < 4.5 */
    const double umax = 7.75, du = 3 * umax * U32, dsp = 0.5 * du + U32 * (8 + 8 * umax);
    char name[96];
    snprintf(name, sizeof name, "hada_mid_backward N%d n%d dz1", N, n);
    mix_check(s, name, &dz1, wz, tol_mk(2.25 * (dsp + 1.1 * U32), 3 * U32), 0);
    snprintf(name, sizeof name, "hada_mid_backward N%d n%d dcond", N, n);
    mix_check(s, name, &dcond, wc, tol_mk(4.5 * (dsp + 1.1 * U32), 3 * U32), 0);
    pair out = in_place ? z1 : pair_rand(s, nn, 1);
    FOR_SIDES (be)
        backend_hada_mid_forward(be, PF(out, side), PF(z1, side), PF(cond, side), PF(d2, side),
                                 PF(b2, side), N, n);
    ref_hada(want, zd, cd, d2d, b2d, N, n);
    snprintf(name, sizeof name, "hada_mid_forward N%d n%d%s", N, n, in_place ? " in place" : "");
    mix_check(s, name, &out, want, tol_mk(1.1 * du, 7 * U32), 0);
    if (fd) {
        mix_ctx c = {{zd, cd, d2d, b2d}, gd, want, nn, N, 0, 0, n, 0, 0, 0, 0, NULL, fwd_hada};
        mix_fd(s, "hada_mid_backward dz1", &c, 0, nn, wz, 2.5);
        mix_fd(s, "hada_mid_backward dcond", &c, 1, nn, wc, 5);
    }
    free(zh), free(ch), free(d2h), free(b2h), free(gh), free(zd), free(cd), free(d2d);
    free(b2d), free(gd), free(want), free(wz), free(wc);
    pair_free(s, &z1), pair_free(s, &cond), pair_free(s, &d2), pair_free(s, &b2);
    pair_free(s, &dout), pair_free(s, &dz1), pair_free(s, &dcond);
    if (!in_place) pair_free(s, &out);
}

/* --- mHC coefficients --- */

/* one normalisation step along rows (t even) or columns (t odd), in place */
static void ref_sink_step(double *Z, int L, int t)
{
    const size_t along = t % 2 ? (size_t)L : 1, across = t % 2 ? 1 : (size_t)L;
    for (int i = 0; i < L; i++) {
        double *z = Z + i * across, mx = z[0], sum = 0.0;
        for (int j = 1; j < L; j++) mx = z[j * along] > mx ? z[j * along] : mx;
        for (int j = 0; j < L; j++) sum += exp(z[j * along] - mx);
        const double lse = mx + log(sum);
        for (int j = 0; j < L; j++) z[j * along] -= lse;
    }
}

/* the gate argument of column k < 2L (pre, then post) */
static double ref_gate_arg(const double *z, const double *al, const double *bias, int k, int L,
                           int lane)
{
    if (k < L) return al[0] * z[k] + bias[k] + (k == lane ? 4.0 : -4.0);
    return al[1] * z[k] + bias[k] - (k - L != lane ? 4.0 : 0.0);
}

static void ref_coeffs(double *h, const double *z, const double *al, const double *bias, int N,
                       int L, int lane)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    double *Z = malloc((size_t)L * L * sizeof(double));
    for (size_t r = 0; r < (size_t)N; r++) {
        const double *zr = z + r * K;
        for (int k = 0; k < 2 * L; k++)
            h[r * K + k] = (k < L ? 1.0 : 2.0) * sigm(ref_gate_arg(zr, al, bias, k, L, lane));
        for (int q = 0; q < L * L; q++) Z[q] = al[2] * zr[2 * L + q] + bias[2 * L + q];
        for (int t = 0; t < SINK_STEPS; t++) ref_sink_step(Z, L, t);
        for (int q = 0; q < L * L; q++) h[r * K + 2 * L + q] = exp(Z[q]);
    }
    free(Z);
}

/* dz from dh, the steps recomputed; *dmax: the largest |dZ| on the way back (for the bound) */
static void ref_coeffs_bwd(double *dz, const double *dh, const double *z, const double *al,
                           const double *bias, int N, int L, int lane, double *dmax)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L;
    double *tr = malloc((SINK_STEPS + 2) * LL * sizeof(double)), *Z = tr + SINK_STEPS * LL;
    double *dZ = Z + LL;
    *dmax = 0.0;
    for (size_t r = 0; r < (size_t)N; r++) {
        const double *zr = z + r * K, *g = dh + r * K;
        for (int k = 0; k < 2 * L; k++) {
            const double sg = sigm(ref_gate_arg(zr, al, bias, k, L, lane));
            dz[r * K + k] = al[k < L ? 0 : 1] * (k < L ? 1.0 : 2.0) * sg * (1 - sg) * g[k];
        }
        for (size_t q = 0; q < LL; q++) Z[q] = al[2] * zr[2 * L + q] + bias[2 * L + q];
        for (int t = 0; t < SINK_STEPS; t++) {
            memcpy(tr + t * LL, Z, LL * sizeof(double));
            ref_sink_step(Z, L, t);
        }
        for (size_t q = 0; q < LL; q++) dZ[q] = g[2 * L + q] * exp(Z[q]);
        for (int t = SINK_STEPS - 1; t >= 0; t--) { /* din = dout - softmax(in) sum dout */
            const size_t along = t % 2 ? (size_t)L : 1, across = t % 2 ? 1 : (size_t)L;
            for (int i = 0; i < L; i++) {
                const double *x = tr + t * LL + i * across;
                double *d = dZ + i * across, mx = x[0], sum = 0.0, gs = 0.0;
                for (int j = 1; j < L; j++) mx = x[j * along] > mx ? x[j * along] : mx;
                for (int j = 0; j < L; j++) sum += exp(x[j * along] - mx), gs += d[j * along];
                for (int j = 0; j < L; j++) d[j * along] -= exp(x[j * along] - mx) / sum * gs;
            }
            for (size_t q = 0; q < LL; q++) *dmax = fabs(dZ[q]) > *dmax ? fabs(dZ[q]) : *dmax;
        }
        for (size_t q = 0; q < LL; q++) dz[r * K + 2 * L + q] = al[2] * dZ[q];
    }
    free(tr);
}

static void fwd_coeffs(mix_ctx *c)
{
    ref_coeffs(c->out, c->in[0], c->par, c->in[1], c->N, c->L, c->lane);
}

/* z in (-zs, zs), bias in (-1, 1), alpha (0.8, 1.3, al_res): Sinkhorn's input is within
 * +-(al_res zs + 1) */
static void suite_coeffs_one(suite *s, int N, int L, int lane, double zs, double al_res, int fd)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, nk = (size_t)N * K;
    const float alh[3] = {0.8f, 1.3f, (float)al_res};
    float *zh = host_rand(s, nk, zs), *bh = host_rand(s, K, 1), *gh = host_rand(s, nk, 1);
    double *zd = to_d(zh, nk), *bd = to_d(bh, K), *gd = to_d(gh, nk), *ald = to_d(alh, 3);
    double *want = malloc(nk * sizeof(double)), *wdz = malloc(nk * sizeof(double)), dmax;
    pair z = pair_new(s, zh, nk * 4), al = pair_new(s, alh, sizeof alh);
    pair bias = pair_new(s, bh, K * 4);
    pair h = pair_rand(s, nk, 1), dh = pair_new(s, gh, nk * 4), dz = pair_rand(s, nk, 1);
    FOR_SIDES (be)
        backend_mhc_coeffs_forward(be, PF(h, side), PF(z, side), PF(al, side), PF(bias, side), N,
                                   L, lane);
    ref_coeffs(want, zd, ald, bd, N, L, lane);
    /* gates: the argument (|.| < amax) off by 3 u amax, sigmoid' < 1/4 (x2 post), sigmoid's own
     * few ulps. H = exp(Z), relative to Z's absolute error: every step rounds each difference
     * Z - lse (|Z| < zb on the way: log-probabilities of a matrix whose entries spread over
     * 2 zmax), independent roundings adding up over the 40 steps as sqrt(40); an lse is off by
     * its sum's L roundings, its exps' (their arguments' |.| < zb, and the exp's own), the log and
     * the add, zb + L + ln L + 2 roundings of zb: a constant along the line, which the steps
     * after it normalise away (Sinkhorn's limit ignores row and column shifts) except for the
     * last row's and column's, which stay in H. */
    const double amax = 1.3 * zs + 1 + 4, zmax = al_res * zs + 1, zb = 2 * zmax + log((double)L);
    const double lse = U32 * (2 * zb + L + log((double)L) + 2);
    const double zerr = CHECK_LAMBDA * sqrt((double)SINK_STEPS) * U32 * zb + 2 * lse;
    char name[112];
    snprintf(name, sizeof name, "mhc_coeffs_forward N%d lanes %d lane %d |Z| < %g", N, L, lane,
             zmax);
    mix_check(s, name, &h, want, tol_mk(2 * 0.25 * 3 * U32 * amax + 1e-37, zerr + 6 * U32), 0);
    FOR_SIDES (be)
        backend_mhc_coeffs_backward(be, PF(dz, side), PF(dh, side), PF(z, side), PF(al, side),
                                    PF(bias, side), N, L, lane);
    ref_coeffs_bwd(wdz, gd, zd, ald, bd, N, L, lane, &dmax);
    /* gates: alpha (< 1.3) sigmoid' (x2) with sigmoid'' < 0.1 of the argument's error and its
     * own roundings. Sinkhorn: each step's din = dout - p sum(dout) is off by p's relative
     * error (the forward's zerr in its input, zb + L + 2 roundings of its own) times
     * |sum dout| < L dmax, and 2 roundings of < (L + 1) dmax; the steps' own parts independent
     * (sqrt(40)); times alpha_res */
    const double gate = 1.3 * 2 * (0.1 * 3 * U32 * amax + 0.25 * 6 * U32);
    const double own =
        CHECK_LAMBDA * sqrt((double)SINK_STEPS) * U32 * (L * (zb + L + 2) + 2 * (L + 1));
    const double sink = al_res * dmax * (L * zerr + own);
    snprintf(name, sizeof name, "mhc_coeffs_backward N%d lanes %d lane %d", N, L, lane);
    mix_check(s, name, &dz, wdz, tol_mk(gate > sink ? gate : sink, 4 * U32), 0);
    if (fd) {
        mix_ctx c = {{zd, bd, NULL, NULL}, gd, want, nk, N, 0, 0, 0, L, lane, 0, 0, ald,
                     fwd_coeffs};
        mix_fd(s, "mhc_coeffs_backward", &c, 0, nk, wdz, 1);
    }
    free(zh), free(bh), free(gh), free(zd), free(bd), free(gd), free(ald), free(want), free(wdz);
    pair_free(s, &z), pair_free(s, &al), pair_free(s, &bias), pair_free(s, &h);
    pair_free(s, &dh), pair_free(s, &dz);
}

/* --- mHC collapse and expand --- */

static void ref_collapse(double *u, const double *X, const double *h, int hs, int N, int L, int d)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < d; c++) {
            double acc = 0.0;
            for (int k = 0; k < L; k++) acc += h[r * hs + k] * X[(r * L + k) * d + c];
            u[r * d + c] = acc;
        }
}

/* dX += h du; dh (rows of stride hs) = <du, X[k]> */
static void ref_collapse_bwd(double *dX, double *dh, const double *du, const double *X,
                             const double *h, int hs, int N, int L, int d)
{
    for (size_t r = 0; r < (size_t)N; r++)
        for (int k = 0; k < L; k++) {
            double acc = 0.0;
            for (int c = 0; c < d; c++) {
                dX[(r * L + k) * d + c] += h[r * hs + k] * du[r * d + c];
                acc += du[r * d + c] * X[(r * L + k) * d + c];
            }
            if (dh) dh[r * hs + k] = acc;
        }
}

static void fwd_collapse(mix_ctx *c)
{
    ref_collapse(c->out, c->in[0], c->in[1], c->hs, c->N, c->L, c->n);
}

/* hs: K (the coefficients' pre columns) or 0 (one h for every row, dh not asked for) */
static void suite_collapse_one(suite *s, int N, int L, int d, int hs, int fd)
{
    const size_t nx = (size_t)N * L * d, nu = (size_t)N * d;
    const size_t nh = hs ? (size_t)N * hs : (size_t)L;
    float *xh = host_rand(s, nx, 1), *hh = rand_in(s, nh, 0, 1), *gh = host_rand(s, nu, 1);
    float *dxh = host_rand(s, nx, 1), *dhh = host_rand(s, nh, 1);
    double *xd = to_d(xh, nx), *hd = to_d(hh, nh), *gd = to_d(gh, nu), *wdx = to_d(dxh, nx);
    double *wdh = to_d(dhh, nh), *want = malloc(nu * sizeof(double));
    pair X = pair_new(s, xh, nx * 4), h = pair_new(s, hh, nh * 4), du = pair_new(s, gh, nu * 4);
    pair dX = pair_new(s, dxh, nx * 4), dh = pair_new(s, dhh, nh * 4), u = pair_rand(s, nu, 1);
    FOR_SIDES (be)
        backend_mhc_collapse(be, PF(u, side), PF(X, side), PF(h, side), hs, N, L, d);
    ref_collapse(want, xd, hd, hs, N, L, d);
    char name[112];
    snprintf(name, sizeof name, "mhc_collapse N%d lanes %d d%d hs %d", N, L, d, hs);
    mix_check(s, name, &u, want, tol_sum(L, L / 4.0, 1), 0); /* L terms |h x|, E 1/4 */
    FOR_SIDES (be)
        backend_mhc_collapse_backward(be, PF(dX, side), hs ? PF(dh, side) : NULL, PF(du, side),
                                      PF(X, side), PF(h, side), hs, N, L, d);
    ref_collapse_bwd(wdx, hs ? wdh : NULL, gd, xd, hd, hs, N, L, d);
    snprintf(name, sizeof name, "mhc_collapse_backward N%d lanes %d d%d hs %d dX (+=)", N, L, d,
             hs);
    mix_check(s, name, &dX, wdx, tol_sum(2, 2, 1), 0); /* dX + h du, |.| < 1 each */
    snprintf(name, sizeof name, "mhc_collapse_backward N%d lanes %d d%d hs %d dh%s", N, L, d, hs,
             hs ? "" : " (NULL: untouched)");
    mix_check(s, name, &dh, wdh, hs ? tol_sum(d, d / 4.0, 1) : CHECK_EXACT, 0);
    if (fd && hs) {
        double *g0 = calloc(nx, sizeof(double)), *gx = malloc(nh * sizeof(double));
        mix_ctx c = {{xd, hd, NULL, NULL}, gd, want, nu, N, 0, 0, d, L, 0, 0, hs, NULL,
                     fwd_collapse};
        ref_collapse_bwd(g0, gx, gd, xd, hd, hs, N, L, d);
        mix_fd(s, "mhc_collapse_backward dX", &c, 0, nx, g0, 1);
        for (size_t r = 0; r < (size_t)N; r++) /* only the lanes columns are h */
            for (int k = L; k < hs; k++) gx[r * hs + k] = 0.0;
        mix_fd(s, "mhc_collapse_backward dh", &c, 1, nh, gx, d / 2.0);
        free(g0), free(gx);
    }
    free(xh), free(hh), free(gh), free(dxh), free(dhh), free(xd), free(hd), free(gd), free(wdx);
    free(wdh), free(want);
    pair_free(s, &X), pair_free(s, &h), pair_free(s, &du), pair_free(s, &dX), pair_free(s, &dh);
    pair_free(s, &u);
}

static void ref_expand(double *Xo, const double *X, const double *h, const double *y, int N, int L,
                       int d)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    for (size_t r = 0; r < (size_t)N; r++)
        for (int i = 0; i < L; i++)
            for (int c = 0; c < d; c++) {
                double acc = h[r * K + L + i] * y[r * d + c];
                for (int j = 0; j < L; j++)
                    acc += h[r * K + 2 * L + i * L + j] * X[(r * L + j) * d + c];
                Xo[(r * L + i) * d + c] = acc;
            }
}

/* dX, dy overwritten; dh's post and res columns overwritten, pre untouched */
static void ref_expand_bwd(double *dX, double *dh, double *dy, const double *g, const double *X,
                           const double *h, const double *y, int N, int L, int d)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    for (size_t r = 0; r < (size_t)N; r++) {
        for (int c = 0; c < d; c++) {
            double ay = 0.0;
            for (int i = 0; i < L; i++) ay += h[r * K + L + i] * g[(r * L + i) * d + c];
            dy[r * d + c] = ay;
            for (int j = 0; j < L; j++) {
                double ax = 0.0;
                for (int i = 0; i < L; i++)
                    ax += h[r * K + 2 * L + i * L + j] * g[(r * L + i) * d + c];
                dX[(r * L + j) * d + c] = ax;
            }
        }
        for (int i = 0; i < L; i++) {
            double ay = 0.0;
            for (int c = 0; c < d; c++) ay += g[(r * L + i) * d + c] * y[r * d + c];
            dh[r * K + L + i] = ay;
            for (int j = 0; j < L; j++) {
                double ax = 0.0;
                for (int c = 0; c < d; c++) ax += g[(r * L + i) * d + c] * X[(r * L + j) * d + c];
                dh[r * K + 2 * L + i * L + j] = ax;
            }
        }
    }
}

static void fwd_expand(mix_ctx *c)
{
    ref_expand(c->out, c->in[0], c->in[1], c->in[2], c->N, c->L, c->n);
}

/* X, y, g in (-1, 1); h's columns in (0, 1) (sigmoids, 2 sigmoids, a doubly stochastic H) */
static void suite_expand_one(suite *s, int N, int L, int d, int fd)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, nx = (size_t)N * L * d, ny = (size_t)N * d;
    const size_t nh = (size_t)N * K;
    float *xh = host_rand(s, nx, 1), *hh = rand_in(s, nh, 0, 1), *yh = host_rand(s, ny, 1);
    float *gh = host_rand(s, nx, 1), *dhh = host_rand(s, nh, 1);
    double *xd = to_d(xh, nx), *hd = to_d(hh, nh), *yd = to_d(yh, ny), *gd = to_d(gh, nx);
    double *want = malloc(nx * sizeof(double)), *wdx = malloc(nx * sizeof(double));
    double *wdh = to_d(dhh, nh), *wdy = malloc(ny * sizeof(double));
    pair X = pair_new(s, xh, nx * 4), h = pair_new(s, hh, nh * 4), y = pair_new(s, yh, ny * 4);
    pair g = pair_new(s, gh, nx * 4), Xo = pair_rand(s, nx, 1), dX = pair_rand(s, nx, 1);
    pair dh = pair_new(s, dhh, nh * 4), dy = pair_rand(s, ny, 1);
    FOR_SIDES (be)
        backend_mhc_expand(be, PF(Xo, side), PF(X, side), PF(h, side), PF(y, side), N, L, d);
    ref_expand(want, xd, hd, yd, N, L, d);
    char name[112];
    snprintf(name, sizeof name, "mhc_expand N%d lanes %d d%d", N, L, d);
    mix_check(s, name, &Xo, want, tol_sum(L + 1, (L + 1) / 4.0, 1), 0); /* L + 1 terms, E 1/4 */
    FOR_SIDES (be)
        backend_mhc_expand_backward(be, PF(dX, side), PF(dh, side), PF(dy, side), PF(g, side),
                                    PF(X, side), PF(h, side), PF(y, side), N, L, d);
    ref_expand_bwd(wdx, wdh, wdy, gd, xd, hd, yd, N, L, d);
    snprintf(name, sizeof name, "mhc_expand_backward N%d lanes %d d%d dX", N, L, d);
    mix_check(s, name, &dX, wdx, tol_sum(L, L / 4.0, 1), 0);
    snprintf(name, sizeof name, "mhc_expand_backward N%d lanes %d d%d dy", N, L, d);
    mix_check(s, name, &dy, wdy, tol_sum(L, L / 4.0, 1), 0);
    /* d products |g x| (E 1/4); the pre columns keep their old values exactly */
    snprintf(name, sizeof name, "mhc_expand_backward N%d lanes %d d%d dh (pre kept)", N, L, d);
    mix_check(s, name, &dh, wdh, tol_sum(d, d / 4.0, 1), 0);
    if (fd) {
        mix_ctx c = {{xd, hd, yd, NULL}, gd, want, nx, N, 0, 0, d, L, 0, 0, 0, NULL, fwd_expand};
        mix_fd(s, "mhc_expand_backward dX", &c, 0, nx, wdx, 1);
        mix_fd(s, "mhc_expand_backward dy", &c, 2, ny, wdy, 1);
        for (size_t r = 0; r < (size_t)N; r++) /* the pre columns are not expand's */
            for (int k = 0; k < L; k++) wdh[r * K + k] = 0.0;
        mix_fd(s, "mhc_expand_backward dh", &c, 1, nh, wdh, d / 2.0);
    }
    free(xh), free(hh), free(yh), free(gh), free(dhh), free(xd), free(hd), free(yd), free(gd);
    free(want), free(wdx), free(wdh), free(wdy);
    pair_free(s, &X), pair_free(s, &h), pair_free(s, &y), pair_free(s, &g), pair_free(s, &Xo);
    pair_free(s, &dX), pair_free(s, &dh), pair_free(s, &dy);
}

/* --- the engram gate --- */

/* r(z) = z / sqrt(mean z^2 + 1e-6); c = <r(u), r(k)> / sqrt(d); out = u + sigmoid(c) v */
static void ref_engram(double *out, const double *u, const double *k, const double *v, int N,
                       int d)
{
    for (size_t r = 0; r < (size_t)N; r++) {
        const double *ur = u + r * d, *kr = k + r * d;
        double su = 0.0, sk = 0.0, dot = 0.0;
        for (int c = 0; c < d; c++) su += ur[c] * ur[c], sk += kr[c] * kr[c];
        su = 1 / sqrt(su / d + 1e-6), sk = 1 / sqrt(sk / d + 1e-6);
        for (int c = 0; c < d; c++) dot += ur[c] * su * kr[c] * sk;
        const double g = sigm(dot / sqrt((double)d));
        for (int c = 0; c < d; c++) out[r * d + c] = ur[c] + g * v[r * d + c];
    }
}

/* du = dout + dc (dr(u)/du)^T r(k) / sqrt(d), dc = sigmoid'(c) <dout, v>, with
 * dr_i/du_j = s delta_ij - s^3 u_i u_j / d. *bound: the fp32 error of the gate term, the largest
 * over the rows, from c's absolute error ec and g = g_d: with w = dc / sqrt(d) and
 * M_j = s r(k)_j - s^3 u_j <u, r(k)> / d, w is off relatively by ec (sigmoid''/sigmoid' is within
 * +-1) and a few u, absolutely by sigmoid' g sum|dout v| / sqrt(d); M_j by 2 g + 10 u of its
 * terms' magnitudes and g s |r(u)|max of the <u, r(k)> sum's. */
static void ref_engram_bwd(double *du, const double *dout, const double *u, const double *k,
                           const double *v, int N, int d, double ec, double g, double *bound)
{
    *bound = 0.0;
    for (size_t r = 0; r < (size_t)N; r++) {
        const double *ur = u + r * d, *kr = k + r * d, *dr = dout + r * d, *vr = v + r * d;
        double su = 0.0, sk = 0.0, dot = 0.0, gv = 0.0, gva = 0.0, uk = 0.0;
        for (int c = 0; c < d; c++) su += ur[c] * ur[c], sk += kr[c] * kr[c];
        su = 1 / sqrt(su / d + 1e-6), sk = 1 / sqrt(sk / d + 1e-6);
        for (int c = 0; c < d; c++) {
            dot += ur[c] * su * kr[c] * sk, uk += ur[c] * kr[c] * sk;
            gv += dr[c] * vr[c], gva += fabs(dr[c] * vr[c]);
        }
        const double sg = sigm(dot / sqrt((double)d)), sp = sg * (1 - sg);
        const double w = sp * gv / sqrt((double)d);
        double mmax = 0.0, rmax = 0.0;
        for (int c = 0; c < d; c++) {
            du[r * d + c] = dr[c] + w * (su * kr[c] * sk - su * su * su * ur[c] * uk / d);
            const double m = su * fabs(kr[c]) * sk + su * su * su * fabs(ur[c] * uk) / d;
            mmax = m > mmax ? m : mmax;
            rmax = fabs(ur[c]) * su > rmax ? fabs(ur[c]) * su : rmax;
        }
        const double ew = fabs(w) * (ec + 8 * U32) + sp * g * gva / sqrt((double)d);
        const double e = ew * mmax + fabs(w) * ((2 * g + 10 * U32) * mmax + g * su * rmax);
        *bound = e > *bound ? e : *bound;
    }
}

static void fwd_engram(mix_ctx *c) { ref_engram(c->out, c->in[0], c->in[1], c->in[2], c->N, c->n); }

/* u in (-2, 2), k in (-0.5, 0.5) (the norms cancel the scales), v in (-1, 1), dout in (-1, 1);
 * in_place: out is u, and du is dout */
static void suite_engram_one(suite *s, int N, int d, int in_place, int fd)
{
    const size_t n = (size_t)N * d;
    float *uh = host_rand(s, n, 2), *kh = host_rand(s, n, 0.5), *vh = host_rand(s, n, 1);
    float *gh = host_rand(s, n, 1);
    double *ud = to_d(uh, n), *kd = to_d(kh, n), *vd = to_d(vh, n), *gd = to_d(gh, n);
    double *want = malloc(n * sizeof(double)), *wdu = malloc(n * sizeof(double));
    pair u = pair_new(s, uh, n * 4), k = pair_new(s, kh, n * 4), v = pair_new(s, vh, n * 4);
    pair dout = pair_new(s, gh, n * 4), du = in_place ? dout : pair_rand(s, n, 1);
    /* c's error: the d-term sums of squares (relative, g_d) set every product's relative error
     * (2 g_d + 8 u with the rsqrts' and products' roundings), and the d-term dot adds g_d of its
     * terms, whose magnitudes add up to < d (Cauchy-Schwarz); over sqrt(d), and |c| < sqrt(d) */
    const double gd_ = CHECK_LAMBDA * sqrt((double)d) * U32;
    const double dc = (3 * gd_ + 9 * U32) * sqrt((double)d);
    double ebwd;
    FOR_SIDES (be)
        backend_engram_gate_backward(be, PF(du, side), PF(dout, side), PF(u, side), PF(k, side),
                                     PF(v, side), N, d);
    ref_engram_bwd(wdu, gd, ud, kd, vd, N, d, dc, gd_, &ebwd);
    char name[96];
    snprintf(name, sizeof name, "engram_gate_backward N%d d%d%s", N, d,
             in_place ? " (du = dout)" : "");
    mix_check(s, name, &du, wdu, tol_mk(ebwd + U32, 2 * U32), 0); /* + dout, rounded */
    pair out = in_place ? u : pair_rand(s, n, 1);
    FOR_SIDES (be)
        backend_engram_gate_forward(be, PF(out, side), PF(u, side), PF(k, side), PF(v, side), N,
                                    d);
    ref_engram(want, ud, kd, vd, N, d);
    snprintf(name, sizeof name, "engram_gate_forward N%d d%d%s", N, d, in_place ? " in place" : "");
    mix_check(s, name, &out, want, tol_mk(0.25 * dc + 6 * U32, 2 * U32), 0);
    if (fd) {
        mix_ctx c = {{ud, kd, vd, NULL}, gd, want, n, N, 0, 0, d, 0, 0, 0, 0, NULL, fwd_engram};
        mix_fd(s, "engram_gate_backward", &c, 0, n, wdu, 1);
    }
    free(uh), free(kh), free(vh), free(gh), free(ud), free(kd), free(vd), free(gd), free(want);
    free(wdu);
    pair_free(s, &u), pair_free(s, &k), pair_free(s, &v), pair_free(s, &dout);
    if (!in_place) pair_free(s, &du), pair_free(s, &out);
}

void suite_needle_mix(suite *s)
{
    const int t_has = backend_has(s->t, BACKEND_OP_NEEDLE_MIX);
    if (!t_has || !backend_has(s->r, BACKEND_OP_NEEDLE_MIX)) {
        printf("op_suite skip Needle's mixing layers (no BACKEND_OP_NEEDLE_MIX on %s): 15 ops "
               "unchecked\n",
               backend_description(t_has ? s->r : s->t));
        return;
    }
    suite_kron_one(s, 7, 8, 16, 1); /* a != b, N = 7 */
    suite_kron_one(s, 5, 16, 8, 0);
    suite_kron_one(s, 9, 3, 5, 1); /* nothing a multiple of a vector */
    suite_kron_one(s, 64, 32, 32, 0); /* Needle's 1024 = 32 x 32, several threads' rows */
    /* with io: the MLP's uses, forward (scale-pad + gather; gather + scale; scale-truncate) and
     * backward (scale-pad, gather + scale; gather in, scale-truncate), odd widths, then Needle's */
    suite_kron_io_one(s, 7, 8, 6, 0, 2 | 4, 37, 48);
    suite_kron_io_one(s, 7, 8, 6, 0, 4 | 8, 48, 48);
    suite_kron_io_one(s, 7, 8, 6, 0, 8, 48, 37);
    suite_kron_io_one(s, 7, 8, 6, 1, 2 | 4 | 8, 37, 48);
    suite_kron_io_one(s, 7, 8, 6, 1, 1 | 8, 48, 37);
    suite_kron_io_one(s, 9, 3, 5, 1, 1 | 2 | 4 | 8, 15, 15);
    suite_kron_io_one(s, 40, 32, 32, 0, 2 | 4, 768, 1024);
    suite_kron_io_one(s, 40, 32, 32, 1, 1 | 8, 1024, 768);
    suite_permute_one(s, 7, 37, 1);
    suite_permute_one(s, 40, 1024, 0);
    suite_scale_one(s, 7, 37, 50, 0, 1); /* zero pad */
    suite_scale_one(s, 7, 50, 37, 0, 1); /* truncation */
    suite_scale_one(s, 7, 37, 37, 1, 0); /* in place */
    suite_scale_one(s, 40, 768, 1024, 0, 0);
    suite_softmax_one(s, 7, 8, 3, 0, 1); /* the conditioner's rank 8 */
    suite_softmax_one(s, 7, 37, 20, 1, 0);
    suite_softmax_one(s, 300, 37, 5, 0, 0);
    suite_hada_one(s, 7, 37, 0, 1);
    suite_hada_one(s, 40, 1024, 1, 0);
    /* Sinkhorn's inputs spread wide enough that 20 rounds have not converged to fp32 */
    suite_coeffs_one(s, 7, 4, 1, 2, 2.5, 1); /* Needle's 4 lanes */
    suite_coeffs_one(s, 300, 4, 0, 1.5, 3, 0);
    suite_coeffs_one(s, 5, 3, 2, 1.5, 2.5, 1);
    suite_coeffs_one(s, 3, 9, 8, 1.5, 2.5, 0); /* more lanes than 8 */
    suite_collapse_one(s, 7, 4, 37, 2 * 4 + 16, 1);
    suite_collapse_one(s, 7, 4, 37, 0, 0); /* the final lane mean's shared h */
    suite_collapse_one(s, 8, 4, 768, 2 * 4 + 16, 0); /* Needle's width; few rows: the emulator's time */
    suite_expand_one(s, 7, 4, 37, 1);
    suite_expand_one(s, 5, 3, 20, 0);
    suite_expand_one(s, 8, 4, 768, 0);
    suite_engram_one(s, 7, 37, 0, 1);
    suite_engram_one(s, 33, 768, 1, 0);
}
