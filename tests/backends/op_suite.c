/* op_suite.c: every op of backend.h run on a backend under test and on a reference backend with
 * the same seeded inputs, outputs compared elementwise (see op_suite.h). Only the vtable is used:
 * device memory is touched through alloc/copy_h2d/copy_d2h, never dereferenced. */
#include "tests/backends/op_suite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    backend *t, *r;
    double tol_scale;
    int verbose, failed;
    uint64_t rng;
} suite;

/* One host array mirrored on both backends. */
typedef struct {
    void *t, *r;
    size_t bytes;
} pair;

static double suite_rnd(suite *s) /* uniform [-1, 1) */
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (double)(s->rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *host_rand(suite *s, size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n && x; i++) x[i] = (float)(suite_rnd(s) * scale);
    return x;
}

/* Both copies of host[0..bytes) (zeros when host is NULL). */
static pair pair_new(suite *s, const void *host, size_t bytes)
{
    pair p = {s->t->ops->alloc(s->t, bytes), s->r->ops->alloc(s->r, bytes), bytes};
    if (host && p.t && p.r) {
        s->t->ops->copy_h2d(s->t, p.t, host, bytes);
        s->r->ops->copy_h2d(s->r, p.r, host, bytes);
    }
    return p;
}

static pair pair_rand(suite *s, size_t n, double scale)
{
    float *h = host_rand(s, n, scale);
    pair p = pair_new(s, h, n * sizeof(float));
    free(h);
    return p;
}

static void pair_free(suite *s, pair *p)
{
    s->t->ops->free(s->t, p->t);
    s->r->ops->free(s->r, p->r);
}

static void suite_report(suite *s, const char *op, double abs_err, double rel, double tol)
{
    int bad = !(rel <= tol);
    if (bad) s->failed++;
    if (bad || s->verbose)
        printf("op_suite %s %-44s max abs %.3e rel %.3e (tol %.1e)\n", bad ? "FAIL" : "ok  ", op,
               abs_err, rel, tol);
}

/* Download both copies and compare: max |t - r| / max |r| <= tol * tol_scale. */
static void pair_check(suite *s, const char *op, pair *p, double tol)
{
    size_t n = p->bytes / sizeof(float);
    float *a = malloc(p->bytes ? p->bytes : 1), *b = malloc(p->bytes ? p->bytes : 1);
    s->t->ops->sync(s->t);
    s->r->ops->sync(s->r);
    s->t->ops->copy_d2h(s->t, a, p->t, p->bytes);
    s->r->ops->copy_d2h(s->r, b, p->r, p->bytes);
    /* magnitude floor 1e-2: outputs that are exactly 0 in exact arithmetic (dq, dk at T = 1)
     * hold only rounding noise on both sides and are compared absolutely */
    double err = 0.0, mag = tol > 0.0 ? 1e-2 : 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= err)) err = e;
        if (fabs(b[i]) > mag) mag = fabs(b[i]);
    }
    suite_report(s, op, err, err / mag, tol * s->tol_scale);
    free(a);
    free(b);
}

/* The device pointer of pair p on side 0 (test) or 1 (reference), and that side's backend. */
#define PF(p, side) ((float *)((side) ? (p).r : (p).t))
#define PI(p, side) ((const int32_t *)((side) ? (p).r : (p).t))
#define FOR_SIDES(be)                                                                              \
    for (int side = 0; side < 2; side++)                                                           \
        for (backend *be = side ? s->r : s->t; be; be = NULL)

static void suite_matmul(suite *s, int M, int N, int K)
{
    pair A = pair_rand(s, (size_t)M * K, 1), B = pair_rand(s, (size_t)K * N, 1);
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (int beta = 0; beta < 2; beta++) {
                pair C = pair_rand(s, (size_t)M * N, 1);
                FOR_SIDES (be)
                    be->ops->matmul(be, PF(C, side), PF(A, side), PF(B, side), M, N, K, tA, tB,
                                    0.5f, (float)beta);
                char name[96];
                snprintf(name, sizeof name, "matmul %dx%dx%d tA=%d tB=%d beta=%d", M, N, K, tA, tB,
                         beta);
                pair_check(s, name, &C, 1e-5);
                pair_free(s, &C);
            }
    pair_free(s, &A);
    pair_free(s, &B);
}

static void suite_dense(suite *s)
{
    suite_matmul(s, 64, 96, 80);
    suite_matmul(s, 37, 131, 67);
    suite_matmul(s, 1, 7, 5);
}

static void suite_vector(suite *s)
{
    const size_t n = 100003;
    pair a = pair_rand(s, n, 2), b = pair_rand(s, n, 2), out = pair_new(s, NULL, n * 4);
    FOR_SIDES (be) be->ops->add(be, PF(out, side), PF(a, side), PF(b, side), n);
    pair_check(s, "add", &out, 1e-6);
    FOR_SIDES (be) be->ops->axpy(be, PF(out, side), -0.3f, PF(a, side), n);
    pair_check(s, "axpy", &out, 1e-6);
    FOR_SIDES (be) be->ops->scale(be, PF(out, side), 1.7f, n);
    pair_check(s, "scale", &out, 1e-6);
    /* exact ops on identical data (a is still as uploaded): bit-equal on both sides */
    FOR_SIDES (be) be->ops->copy_d2d(be, PF(b, side), PF(a, side), n * 4);
    pair_check(s, "copy_d2d", &b, 0.0);
    FOR_SIDES (be) be->ops->fill(be, PF(b, side) + 5, -2.25f, n - 7);
    pair_check(s, "fill (offset range)", &b, 0.0);
    double ss[2] = {0.0, 0.0};
    FOR_SIDES (be) ss[side] = be->ops->sumsq(be, PF(a, side), n);
    suite_report(s, "sumsq", fabs(ss[0] - ss[1]), fabs(ss[0] - ss[1]) / ss[1], 1e-6 * s->tol_scale);
    pair_free(s, &a), pair_free(s, &b), pair_free(s, &out);
}

static void suite_bias(suite *s)
{
    const int N = 300, C = 259;
    pair out = pair_rand(s, (size_t)N * C, 1), bias = pair_rand(s, C, 1), db = pair_rand(s, C, 1);
    FOR_SIDES (be) be->ops->bias_add(be, PF(out, side), PF(bias, side), N, C);
    pair_check(s, "bias_add", &out, 1e-6);
    FOR_SIDES (be) be->ops->bias_backward(be, PF(db, side), PF(out, side), N, C);
    pair_check(s, "bias_backward (+=)", &db, 1e-5);
    pair_free(s, &out), pair_free(s, &bias), pair_free(s, &db);
}

static void suite_embedding_one(suite *s, int B, int T, int C, int V, int with_wpe)
{
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)((suite_rnd(s) + 1) * 0.5 * (V / 3)); /* repeats */
    pair tk = pair_new(s, tok, (size_t)B * T * sizeof(int32_t));
    pair wte = pair_rand(s, (size_t)V * C, 1), wpe = pair_rand(s, (size_t)T * C, 1);
    pair out = pair_new(s, NULL, (size_t)B * T * C * 4);
    pair dwte = pair_rand(s, (size_t)V * C, 1), dwpe = pair_rand(s, (size_t)T * C, 1);
    FOR_SIDES (be)
        be->ops->embedding_forward(be, PF(out, side), PI(tk, side), PF(wte, side),
                                   with_wpe ? PF(wpe, side) : NULL, B, T, C);
    pair_check(s, with_wpe ? "embedding_forward (wpe)" : "embedding_forward (no wpe)", &out, 1e-6);
    FOR_SIDES (be)
        be->ops->embedding_backward(be, PF(dwte, side), with_wpe ? PF(dwpe, side) : NULL,
                                    PF(out, side), PI(tk, side), B, T, C, V);
    pair_check(s, "embedding_backward dwte (+=)", &dwte, 1e-5);
    pair_check(s, "embedding_backward dwpe (+=)", &dwpe, 1e-5);
    free(tok);
    pair_free(s, &tk), pair_free(s, &wte), pair_free(s, &wpe), pair_free(s, &out);
    pair_free(s, &dwte), pair_free(s, &dwpe);
}

static void suite_embedding(suite *s)
{
    suite_embedding_one(s, 4, 64, 200, 97, 1);
    suite_embedding_one(s, 2, 33, 48, 50, 0);
}

static void suite_norm_one(suite *s, int N, int C, int rms)
{
    size_t nc = (size_t)N * C;
    pair x = pair_rand(s, nc, 2), w = pair_rand(s, C, 1), b = pair_rand(s, C, 1);
    pair out = pair_new(s, NULL, nc * 4), mean = pair_new(s, NULL, N * 4),
         rstd = pair_new(s, NULL, N * 4);
    pair dout = pair_rand(s, nc, 1), dx = pair_rand(s, nc, 1), dw = pair_rand(s, C, 1),
         db = pair_rand(s, C, 1);
    FOR_SIDES (be)
        if (rms)
            be->ops->rmsnorm_forward(be, PF(out, side), PF(rstd, side), PF(x, side), PF(w, side), N,
                                     C, 1e-5f);
        else
            be->ops->layernorm_forward(be, PF(out, side), PF(mean, side), PF(rstd, side),
                                       PF(x, side), PF(w, side), PF(b, side), N, C, 1e-5f);
    pair_check(s, rms ? "rmsnorm_forward out" : "layernorm_forward out", &out, 1e-5);
    pair_check(s, rms ? "rmsnorm_forward rstd" : "layernorm_forward rstd", &rstd, 1e-5);
    if (!rms) pair_check(s, "layernorm_forward mean", &mean, 1e-5);
    FOR_SIDES (be)
        if (rms)
            be->ops->rmsnorm_backward(be, PF(dx, side), PF(dw, side), PF(dout, side), PF(x, side),
                                      PF(w, side), PF(rstd, side), N, C);
        else
            be->ops->layernorm_backward(be, PF(dx, side), PF(dw, side), PF(db, side),
                                        PF(dout, side), PF(x, side), PF(w, side), PF(mean, side),
                                        PF(rstd, side), N, C);
    pair_check(s, rms ? "rmsnorm_backward dinp (+=)" : "layernorm_backward dinp (+=)", &dx, 1e-5);
    pair_check(s, rms ? "rmsnorm_backward dweight (+=)" : "layernorm_backward dweight (+=)", &dw,
               1e-5);
    if (!rms) pair_check(s, "layernorm_backward dbias (+=)", &db, 1e-5);
    pair dx2 = pair_new(s, NULL, nc * 4); /* frozen weights: NULL dweight/dbias */
    FOR_SIDES (be) {
        if (rms)
            be->ops->rmsnorm_backward(be, PF(dx2, side), NULL, PF(dout, side), PF(x, side),
                                      PF(w, side), PF(rstd, side), N, C);
        else
            be->ops->layernorm_backward(be, PF(dx2, side), NULL, NULL, PF(dout, side), PF(x, side),
                                        PF(w, side), PF(mean, side), PF(rstd, side), N, C);
    }
    pair_check(s,
               rms ? "rmsnorm_backward frozen (NULL dweight)"
                   : "layernorm_backward frozen (NULL dweight, dbias)",
               &dx2, 1e-5);
    pair_free(s, &dx2);
    pair_free(s, &x), pair_free(s, &w), pair_free(s, &b), pair_free(s, &out), pair_free(s, &mean);
    pair_free(s, &rstd), pair_free(s, &dout), pair_free(s, &dx), pair_free(s, &dw),
        pair_free(s, &db);
}

static void suite_norms(suite *s)
{
    suite_norm_one(s, 67, 768, 0);
    suite_norm_one(s, 67, 768, 1);
    suite_norm_one(s, 3, 37, 0);
    suite_norm_one(s, 3, 37, 1);
}

static void suite_activations(suite *s)
{
    const size_t n = 65539;
    pair x = pair_rand(s, n, 5), u = pair_rand(s, n, 2), dout = pair_rand(s, n, 1);
    pair out = pair_new(s, NULL, n * 4), dx = pair_new(s, NULL, n * 4),
         du = pair_new(s, NULL, n * 4);
    FOR_SIDES (be) be->ops->gelu_forward(be, PF(out, side), PF(x, side), n);
    pair_check(s, "gelu_forward", &out, 1e-5);
    FOR_SIDES (be) be->ops->gelu_backward(be, PF(dx, side), PF(x, side), PF(dout, side), n);
    pair_check(s, "gelu_backward", &dx, 1e-5);
    FOR_SIDES (be) be->ops->swiglu_forward(be, PF(out, side), PF(x, side), PF(u, side), n);
    pair_check(s, "swiglu_forward", &out, 1e-5);
    FOR_SIDES (be)
        be->ops->swiglu_backward(be, PF(dx, side), PF(du, side), PF(dout, side), PF(x, side),
                                 PF(u, side), n);
    pair_check(s, "swiglu_backward dgate", &dx, 1e-5);
    pair_check(s, "swiglu_backward dup", &du, 1e-5);
    pair_free(s, &x), pair_free(s, &u), pair_free(s, &dout), pair_free(s, &out);
    pair_free(s, &dx), pair_free(s, &du);
}

static void suite_rope(suite *s)
{
    const int B = 2, T = 100, H = 3, D = 64;
    pair x = pair_rand(s, (size_t)B * T * H * D, 1);
    FOR_SIDES (be) be->ops->rope(be, PF(x, side), B, T, H, D, 10000.0f, 0);
    pair_check(s, "rope", &x, 1e-5);
    FOR_SIDES (be) be->ops->rope(be, PF(x, side), B, T, H, D, 500000.0f, 1);
    pair_check(s, "rope inverse (theta 5e5)", &x, 1e-5);
    pair_free(s, &x);
}

/* rope_freqs: a frequency table (Llama 3's scaled one, say) instead of theta; with the plain
 * table theta^(-2i/D) it must also agree with rope itself on the backend under test. */
static void suite_rope_freqs(suite *s)
{
    const int B = 2, T = 100, H = 3, D = 64;
    float f[32];
    for (int i = 0; i < D / 2; i++) f[i] = (float)(pow(500000.0, -2.0 * i / D) / (i % 3 ? 1.0 : 8.0));
    pair fr = pair_new(s, f, sizeof f), x = pair_rand(s, (size_t)B * T * H * D, 1);
    FOR_SIDES (be) be->ops->rope_freqs(be, PF(x, side), B, T, H, D, PF(fr, side), 0);
    pair_check(s, "rope_freqs (scaled table)", &x, 1e-5);
    FOR_SIDES (be) be->ops->rope_freqs(be, PF(x, side), B, T, H, D, PF(fr, side), 1);
    pair_check(s, "rope_freqs inverse", &x, 1e-5);
    pair_free(s, &fr);
    for (int i = 0; i < D / 2; i++) f[i] = (float)pow(10000.0, -2.0 * i / D);
    fr = pair_new(s, f, sizeof f);
    /* both sides on the test backend: rope_freqs(plain table) vs rope(theta) */
    pair y = pair_new(s, NULL, x.bytes);
    s->t->ops->copy_d2d(s->t, y.t, x.t, x.bytes);
    s->t->ops->rope_freqs(s->t, (float *)x.t, B, T, H, D, (const float *)fr.t, 0);
    s->t->ops->rope(s->t, (float *)y.t, B, T, H, D, 10000.0f, 0);
    float *a = malloc(x.bytes), *b = malloc(x.bytes);
    s->t->ops->copy_d2h(s->t, a, x.t, x.bytes);
    s->t->ops->copy_d2h(s->t, b, y.t, x.bytes);
    double err = 0;
    for (size_t i = 0; i < x.bytes / 4; i++) err = fmax(err, fabs((double)a[i] - b[i]));
    /* not scaled by tol_scale: the float table differs from theta^(-2i/D) in double by an ulp,
     * i.e. t * 6e-8 rad at position t < 100 */
    suite_report(s, "rope_freqs(theta table) == rope(theta)", err, err, 2e-5);
    free(a), free(b);
    pair_free(s, &fr), pair_free(s, &x), pair_free(s, &y);
}

/* Qwen3's per-head q/k RMSNorm is rmsnorm over (N * heads, head_dim) rows with a head_dim
 * weight: the shapes the model uses (short rows, many of them). */
static void suite_qk_norm(suite *s)
{
    suite_norm_one(s, 2 * 16 * 8, 64, 1);
    suite_norm_one(s, 3 * 5 * 2, 128, 1);
    suite_norm_one(s, 12 * 4, 8, 1);
}

static void suite_attention_one(suite *s, int B, int T, int H, int Hkv, int D)
{
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
    pair q = pair_rand(s, nq, 1.5), k = pair_rand(s, nk, 1.5), v = pair_rand(s, nk, 1);
    pair out = pair_new(s, NULL, nq * 4), lse = pair_new(s, NULL, (size_t)B * H * T * 4);
    pair dout = pair_rand(s, nq, 1), dq = pair_rand(s, nq, 1), dk = pair_rand(s, nk, 1),
         dv = pair_rand(s, nk, 1);
    char name[96];
    FOR_SIDES (be)
        be->ops->attention_forward(be, PF(out, side), PF(lse, side), PF(q, side), PF(k, side),
                                   PF(v, side), B, T, H, Hkv, D);
    snprintf(name, sizeof name, "attention_forward B%d T%d H%d Hkv%d D%d out", B, T, H, Hkv, D);
    pair_check(s, name, &out, 1e-5);
    pair_check(s, "attention_forward lse", &lse, 1e-5);
    /* the backward runs on each side's own forward results (out, lse), as in training */
    FOR_SIDES (be)
        be->ops->attention_backward(be, PF(dq, side), PF(dk, side), PF(dv, side), PF(dout, side),
                                    PF(q, side), PF(k, side), PF(v, side), PF(out, side),
                                    PF(lse, side), B, T, H, Hkv, D);
    pair_check(s, "attention_backward dq", &dq, 2e-5);
    pair_check(s, "attention_backward dk", &dk, 2e-5);
    pair_check(s, "attention_backward dv", &dv, 2e-5);
    pair_free(s, &q), pair_free(s, &k), pair_free(s, &v), pair_free(s, &out), pair_free(s, &lse);
    pair_free(s, &dout), pair_free(s, &dq), pair_free(s, &dk), pair_free(s, &dv);
}

static void suite_attention(suite *s)
{
    suite_attention_one(s, 2, 130, 4, 2, 64); /* GQA, T off any block size */
    suite_attention_one(s, 1, 256, 4, 4, 32);
    suite_attention_one(s, 3, 1, 2, 1, 16); /* T = 1 */
    suite_attention_one(s, 1, 77, 6, 2, 128);
}

static void suite_xent_one(suite *s, int N, int V, int Vr)
{
    pair logits = pair_rand(s, (size_t)N * V, 4), losses = pair_new(s, NULL, (size_t)N * 4);
    int32_t *tgt = malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++)
        tgt[n] = n % 5 == 2 ? -1 : (int32_t)((suite_rnd(s) + 1) * 0.5 * Vr) % Vr;
    pair tg = pair_new(s, tgt, N * sizeof(int32_t));
    FOR_SIDES (be)
        be->ops->softmax_xent(be, PF(logits, side), PF(losses, side), PI(tg, side), N, V, Vr,
                              1.0f / N);
    char name[96];
    snprintf(name, sizeof name, "softmax_xent N%d V%d V_real%d losses", N, V, Vr);
    pair_check(s, name, &losses, 1e-5);
    pair_check(s, "softmax_xent dlogits", &logits, 1e-5);
    free(tgt);
    pair_free(s, &logits), pair_free(s, &losses), pair_free(s, &tg);
}

static void suite_xent(suite *s)
{
    suite_xent_one(s, 64, 1000, 997);
    suite_xent_one(s, 5, 50304, 50257);
}

static void suite_adamw(suite *s)
{
    const size_t n = 100003;
    pair p = pair_rand(s, n, 1), m = pair_new(s, NULL, n * 4), v = pair_new(s, NULL, n * 4);
    for (int t = 1; t <= 3; t++) {
        pair g = pair_rand(s, n, 3);
        FOR_SIDES (be)
            be->ops->adamw(be, PF(p, side), PF(g, side), PF(m, side), PF(v, side), n, 1e-2f, 0.9f,
                           0.95f, 1e-8f, 0.1f, t, 0.5f);
        pair_free(s, &g);
    }
    pair_check(s, "adamw param (3 steps)", &p, 1e-5);
    pair_check(s, "adamw m", &m, 1e-5);
    pair_check(s, "adamw v", &v, 1e-5);
    pair_free(s, &p), pair_free(s, &m), pair_free(s, &v);
}

int op_suite_run(backend *test, backend *ref, double tol_scale, int verbose)
{
    suite s = {test, ref, tol_scale > 0 ? tol_scale : 1.0, verbose, 0, 0x2545F4914F6CDD1Dull};
    suite_dense(&s);
    suite_vector(&s);
    suite_bias(&s);
    suite_embedding(&s);
    suite_norms(&s);
    suite_activations(&s);
    suite_rope(&s);
    suite_rope_freqs(&s);
    suite_qk_norm(&s);
    suite_attention(&s);
    suite_xent(&s);
    suite_adamw(&s);
    printf("op_suite: %s vs %s: %d failing check%s\n", test->description, ref->description,
           s.failed, s.failed == 1 ? "" : "s");
    return s.failed;
}
