/* op_suite.c: every op of backend.h run on a backend under test and on a reference backend with
 * the same seeded inputs, outputs compared elementwise (see op_suite.h). Only the vtable is used:
 * device memory is touched through alloc/copy_h2d/copy_d2h, never dereferenced. */
#include "tests/backends/op_suite.h"

static int suite_failures; /* check.h's counter for this file; each run also counts its own */
#define CHECK_COUNTER suite_failures
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/backends/op_suite_internal.h"

double suite_rnd(suite *s) /* uniform [-1, 1) */
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (double)(s->rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

float *host_rand(suite *s, size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n && x; i++) x[i] = (float)(suite_rnd(s) * scale);
    return x;
}

/* Both copies of host[0..bytes) (zeros when host is NULL). */
pair pair_new(suite *s, const void *host, size_t bytes)
{
    pair p = {backend_alloc(s->t, bytes), backend_alloc(s->r, bytes), bytes};
    if (host && p.t && p.r) {
        backend_copy_h2d(s->t, p.t, host, bytes);
        backend_copy_h2d(s->r, p.r, host, bytes);
    }
    return p;
}

pair pair_rand(suite *s, size_t n, double scale)
{
    float *h = host_rand(s, n, scale);
    pair p = pair_new(s, h, n * sizeof(float));
    free(h);
    return p;
}

void pair_free(suite *s, pair *p)
{
    backend_free(s->t, p->t);
    backend_free(s->r, p->r);
}

/* The tolerance of a comparison between the two sides (tests/check.h): each side's own error
 * against the exact result, added. K accumulated terms adding up to about S, r roundings of the
 * result's own; `dot` marks values whose inner products run in the tested side's matmul
 * arithmetic (TF32/bf16 loosen only those). Bitwise when u_dot is 0 (the same implementation). */
check_tol suite_tol(const suite *s, double K, double S, double r, int dot)
{
    if (s->u_dot == 0.0) return CHECK_EXACT;
    check_tol a = check_tol_sum(K, S, r, dot ? s->u_dot : CHECK_U_FP32);
    check_tol b = check_tol_sum(K, S, r, CHECK_U_FP32);
    check_tol t = {a.atol + b.atol, a.rtol + b.rtol};
    return t;
}

/* t scaled by f (a result that carries an earlier one's difference, times f) */
check_tol tol_times(check_tol t, double f)
{
    check_tol r = {t.atol * f, t.rtol * f};
    return r;
}

void suite_count(suite *s, int ok)
{
    if (!ok) s->failed++;
}

/* Download both copies and compare element-wise under t: the reference side is `want`. */
void pair_check(suite *s, const char *op, pair *p, check_tol t)
{
    size_t n = p->bytes / sizeof(float);
    float *a = malloc(p->bytes ? p->bytes : 1), *b = malloc(p->bytes ? p->bytes : 1);
    double *want = malloc((n ? n : 1) * sizeof(double));
    backend_sync(s->t);
    backend_sync(s->r);
    backend_copy_d2h(s->t, a, p->t, p->bytes);
    backend_copy_d2h(s->r, b, p->r, p->bytes);
    for (size_t i = 0; i < n; i++) want[i] = b[i];
    char name[120];
    snprintf(name, sizeof name, "op_suite %s", op);
    suite_count(s, check_allclose_v(name, a, want, n, t, s->verbose));
    free(a);
    free(b);
    free(want);
}

static void suite_matmul(suite *s, int M, int N, int K)
{
    pair A = pair_rand(s, (size_t)M * K, 1), B = pair_rand(s, (size_t)K * N, 1);
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (int beta = 0; beta < 2; beta++) {
                pair C = pair_rand(s, (size_t)M * N, 1);
                FOR_SIDES (be)
                    backend_matmul(be, PF(C, side), PF(A, side), PF(B, side), M, N, K, tA, tB,
                                   0.5f, (float)beta);
                char name[96];
                snprintf(name, sizeof name, "matmul %dx%dx%d tA=%d tB=%d beta=%d", M, N, K, tA, tB,
                         beta);
                /* K products of U(-1,1) entries (E|ab| = 1/4, x2), times 0.5, plus beta C */
                pair_check(s, name, &C, suite_tol(s, K, 0.25 * K + 1, 3, 1));
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
    FOR_SIDES (be) backend_add(be, PF(out, side), PF(a, side), PF(b, side), n);
    pair_check(s, "add", &out, suite_tol(s, 1, 0, 1, 0)); /* correctly rounded on both sides */
    FOR_SIDES (be) backend_axpy(be, PF(out, side), -0.3f, PF(a, side), n);
    /* with or without an FMA: the product's rounding cancels against |out| < 4 */
    const check_tol axpy_tol = suite_tol(s, 2, 4.6, 2, 0);
    pair_check(s, "axpy", &out, axpy_tol);
    FOR_SIDES (be) backend_scale(be, PF(out, side), 1.7f, n);
    check_tol scale_tol = tol_times(axpy_tol, 1.7); /* the axpy difference, scaled */
    scale_tol.rtol += 2 * CHECK_U_FP32;
    pair_check(s, "scale", &out, scale_tol);
    /* exact ops on identical data (a is still as uploaded): bit-equal on both sides */
    FOR_SIDES (be) backend_copy_d2d(be, PF(b, side), PF(a, side), n * 4);
    pair_check(s, "copy_d2d", &b, CHECK_EXACT);
    FOR_SIDES (be) backend_fill(be, PF(b, side) + 5, -2.25f, n - 7);
    pair_check(s, "fill (offset range)", &b, CHECK_EXACT);
    double ss[2] = {0.0, 0.0};
    FOR_SIDES (be) ss[side] = backend_sumsq(be, PF(a, side), n);
    /* n positive terms: relative on both sides (a double-accumulating side only does better);
     * the comparison itself rounds the tested side's double to float: one more u */
    float ss_got = (float)ss[0];
    if (s->u_dot == 0.0) {
        int same = ss[0] == ss[1];
        if (!same || s->verbose)
            printf("%s op_suite sumsq %.17g vs %.17g\n", same ? "ok  " : "FAIL", ss[0], ss[1]);
        suite_count(s, same);
    } else {
        suite_count(s, check_allclose_v("op_suite sumsq", &ss_got, &ss[1], 1,
                                        suite_tol(s, (double)n, 0, 3, 0), s->verbose));
    }
    pair_free(s, &a), pair_free(s, &b), pair_free(s, &out);
}

static void suite_bias(suite *s)
{
    const int N = 300, C = 259;
    pair out = pair_rand(s, (size_t)N * C, 1), bias = pair_rand(s, C, 1), db = pair_rand(s, C, 1);
    FOR_SIDES (be) backend_bias_add(be, PF(out, side), PF(bias, side), N, C);
    pair_check(s, "bias_add", &out, suite_tol(s, 1, 0, 1, 0));
    FOR_SIDES (be) backend_bias_backward(be, PF(db, side), PF(out, side), N, C);
    /* db + N terms of |out| < 2 (E 1, x2); the inputs already differ by bias_add's rounding */
    pair_check(s, "bias_backward (+=)", &db, suite_tol(s, N + 1, 2.0 * N + 1, 2, 0));
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
        backend_embedding_forward(be, PF(out, side), PI(tk, side), PF(wte, side),
                                  with_wpe ? PF(wpe, side) : NULL, B, T, C);
    /* wte + wpe rounds once (correctly, the same on both sides); a plain gather is exact */
    pair_check(s, with_wpe ? "embedding_forward (wpe)" : "embedding_forward (no wpe)", &out,
               with_wpe ? suite_tol(s, 1, 0, 1, 0) : CHECK_EXACT);
    FOR_SIDES (be)
        backend_embedding_backward(be, PF(dwte, side), with_wpe ? PF(dwpe, side) : NULL,
                                   PF(out, side), PI(tk, side), B, T, C, V);
    /* dwte + one term per occurrence (B*T positions over V/3 tokens), |out| < 2; dwpe + B */
    pair_check(s, "embedding_backward dwte (+=)", &dwte,
               suite_tol(s, (double)B * T + 1, 2.0 * B * T + 1, 1, 0));
    pair_check(s, "embedding_backward dwpe (+=)", &dwpe, suite_tol(s, B + 1, 2.0 * B + 1, 1, 0));
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
            backend_rmsnorm_forward(be, PF(out, side), PF(rstd, side), PF(x, side), PF(w, side), N,
                                    C, 1e-5f);
        else
            backend_layernorm_forward(be, PF(out, side), PF(mean, side), PF(rstd, side),
                                      PF(x, side), PF(w, side), PF(b, side), N, C, 1e-5f);
    /* as tests/backends/cpu/test_cpu_layers.c: x in (-2, 2), w, b in (-1, 1); the mean cancels
     * (g_C E|x|), the variance is relative, out carries the mean's error over |x - mean| < 2
     * and rstd < 1/0.9, b's add cancels */
    pair_check(s, rms ? "rmsnorm_forward out" : "layernorm_forward out", &out,
               suite_tol(s, C, 5, 6, 0));
    pair_check(s, rms ? "rmsnorm_forward rstd" : "layernorm_forward rstd", &rstd,
               suite_tol(s, C, 0, 4, 0));
    if (!rms) pair_check(s, "layernorm_forward mean", &mean, suite_tol(s, C, 1, 2, 0));
    FOR_SIDES (be)
        if (rms)
            backend_rmsnorm_backward(be, PF(dx, side), PF(dw, side), PF(dout, side), PF(x, side),
                                     PF(w, side), PF(rstd, side), N, C);
        else
            backend_layernorm_backward(be, PF(dx, side), PF(dw, side), PF(db, side),
                                       PF(dout, side), PF(x, side), PF(w, side), PF(mean, side),
                                       PF(rstd, side), N, C);
    /* dinp: two C-term sums of |w dout xhat| < 2.2, times rstd, + dx; dweight: N rows of
     * |dout xhat| < 2.2 (E 0.4); dbias: N rows of |dout| < 1; each side's own rstd and mean */
    const check_tol dx_tol = suite_tol(s, C, 8, 8, 0);
    pair_check(s, rms ? "rmsnorm_backward dinp (+=)" : "layernorm_backward dinp (+=)", &dx,
               dx_tol);
    pair_check(s, rms ? "rmsnorm_backward dweight (+=)" : "layernorm_backward dweight (+=)", &dw,
               suite_tol(s, N + 1, N + 1, 6, 0));
    if (!rms)
        pair_check(s, "layernorm_backward dbias (+=)", &db, suite_tol(s, N + 1, N + 1, 1, 0));
    pair dx2 = pair_new(s, NULL, nc * 4); /* frozen weights: NULL dweight/dbias */
    FOR_SIDES (be) {
        if (rms)
            backend_rmsnorm_backward(be, PF(dx2, side), NULL, PF(dout, side), PF(x, side),
                                     PF(w, side), PF(rstd, side), N, C);
        else
            backend_layernorm_backward(be, PF(dx2, side), NULL, NULL, PF(dout, side), PF(x, side),
                                       PF(w, side), PF(mean, side), PF(rstd, side), N, C);
    }
    pair_check(s,
               rms ? "rmsnorm_backward frozen (NULL dweight)"
                   : "layernorm_backward frozen (NULL dweight, dbias)",
               &dx2, dx_tol);
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
    FOR_SIDES (be) backend_gelu_forward(be, PF(out, side), PF(x, side), n);
    /* element-wise, ~10-15 roundings; the cancellations of test_cpu_layers.c at |x| < 5:
     * gelu 0.5 |x| (1 + tanh) and silu's 1 - sigmoid hold tanh's / expf's 4u absolute times
     * |x|, gelu' times 0.5 + |x| z'(|x|) (z' = 0.798 (1 + 0.134 x^2)); times |u| < 2, |dout| < 1 */
    const double u32 = CHECK_U_FP32, zmax = 0.79788456 * (1 + 3 * 0.044715 * 25);
    const check_tol gelu_tol = {2 * 4 * u32 * 5, 2 * 10 * u32};
    const check_tol dgelu_tol = {2 * 4 * u32 * (0.5 + 5 * zmax), 2 * 15 * u32};
    const check_tol swiglu_tol = {2 * 4 * u32 * 6 * 2, 2 * 15 * u32};
    pair_check(s, "gelu_forward", &out, s->u_dot == 0.0 ? CHECK_EXACT : gelu_tol);
    FOR_SIDES (be) backend_gelu_backward(be, PF(dx, side), PF(x, side), PF(dout, side), n);
    pair_check(s, "gelu_backward", &dx, s->u_dot == 0.0 ? CHECK_EXACT : dgelu_tol);
    FOR_SIDES (be) backend_swiglu_forward(be, PF(out, side), PF(x, side), PF(u, side), n);
    pair_check(s, "swiglu_forward", &out, s->u_dot == 0.0 ? CHECK_EXACT : swiglu_tol);
    FOR_SIDES (be)
        backend_swiglu_backward(be, PF(dx, side), PF(du, side), PF(dout, side), PF(x, side),
                                PF(u, side), n);
    pair_check(s, "swiglu_backward dgate", &dx, s->u_dot == 0.0 ? CHECK_EXACT : swiglu_tol);
    pair_check(s, "swiglu_backward dup", &du, s->u_dot == 0.0 ? CHECK_EXACT : swiglu_tol);
    pair_free(s, &x), pair_free(s, &u), pair_free(s, &dout), pair_free(s, &out);
    pair_free(s, &dx), pair_free(s, &du);
}

static void suite_rope(suite *s)
{
    const int B = 2, T = 100, H = 3, D = 64;
    pair x = pair_rand(s, (size_t)B * T * H * D, 1);
    FOR_SIDES (be) backend_rope(be, PF(x, side), B, T, H, D, 10000.0f, 0);
    /* cos, sin rounded once (a side computing them in fp32 also rounds the angle t freq, up to
     * T = 100 rad: 100u absolute), two products and a cancelling sum of |x| < 1 */
    check_tol rope_tol = suite_tol(s, 2, 2, 3, 0);
    if (s->u_dot != 0.0) rope_tol.atol += 2 * 100 * CHECK_U_FP32;
    pair_check(s, "rope", &x, rope_tol);
    FOR_SIDES (be) backend_rope(be, PF(x, side), B, T, H, D, 500000.0f, 1);
    pair_check(s, "rope inverse (theta 5e5)", &x, tol_times(rope_tol, 2)); /* both rotations */
    pair_free(s, &x);
}

/* Attention's bound on each side: p's relative error (the scores' D-term dots in that side's
 * matmul arithmetic, then g_T and expf) plus the final T + D-term sums, over magnitude S. */
static check_tol attention_tol(const suite *s, int T, int D, double S)
{
    if (s->u_dot == 0.0) return CHECK_EXACT;
    double tot = 0.0;
    for (int side = 0; side < 2; side++) {
        double u = side ? CHECK_U_FP32 : s->u_dot;
        double gD = CHECK_LAMBDA * sqrt((double)D) * u, gTD = CHECK_LAMBDA * sqrt((double)T + D) * u;
        double gT = CHECK_LAMBDA * sqrt((double)T) * CHECK_U_FP32;
        tot += (gD * 0.5625 * sqrt((double)D) + gT + 3 * CHECK_U_FP32 + gTD) * S;
    }
    check_tol t = {tot, 8 * (s->u_dot + CHECK_U_FP32)};
    return t;
}

/* rope_freqs: a frequency table (Llama 3's scaled one, say) instead of theta; with the plain
 * table theta^(-2i/D) it must also agree with rope itself on the backend under test. */
static void suite_rope_freqs(suite *s)
{
    const int B = 2, T = 100, H = 3, D = 64;
    float f[32];
    for (int i = 0; i < D / 2; i++) f[i] = (float)(pow(500000.0, -2.0 * i / D) / (i % 3 ? 1.0 : 8.0));
    pair fr = pair_new(s, f, sizeof f), x = pair_rand(s, (size_t)B * T * H * D, 1);
    /* as suite_rope: cos, sin of t freq (double angles, or fp32 on a side: T rad), two products
     * and a cancelling sum of |x| < 1 */
    check_tol rope_freqs_tol = suite_tol(s, 2, 2, 3, 0);
    if (s->u_dot != 0.0) rope_freqs_tol.atol += 2 * T * CHECK_U_FP32;
    FOR_SIDES (be) backend_rope_freqs(be, PF(x, side), B, T, H, D, PF(fr, side), 0);
    pair_check(s, "rope_freqs (scaled table)", &x, rope_freqs_tol);
    FOR_SIDES (be) backend_rope_freqs(be, PF(x, side), B, T, H, D, PF(fr, side), 1);
    pair_check(s, "rope_freqs inverse", &x, tol_times(rope_freqs_tol, 2));
    pair_free(s, &fr);
    for (int i = 0; i < D / 2; i++) f[i] = (float)pow(10000.0, -2.0 * i / D);
    fr = pair_new(s, f, sizeof f);
    /* both sides on the test backend: rope_freqs(plain table) vs rope(theta) */
    pair y = pair_new(s, NULL, x.bytes);
    backend_copy_d2d(s->t, y.t, x.t, x.bytes);
    float *orig = malloc(x.bytes);
    backend_copy_d2h(s->t, orig, x.t, x.bytes);
    backend_rope_freqs(s->t, (float *)x.t, B, T, H, D, (const float *)fr.t, 0);
    backend_rope(s->t, (float *)y.t, B, T, H, D, 10000.0f, 0);
    float *a = malloc(x.bytes), *b = malloc(x.bytes);
    backend_copy_d2h(s->t, a, x.t, x.bytes);
    backend_copy_d2h(s->t, b, y.t, x.bytes);
    /* on one backend, so no u_dot: the float table differs from theta^(-2i/D) in double by an
     * ulp, i.e. t u rad at position t < T, times |x| < 1 on both outputs, plus rope's roundings */
    size_t n = x.bytes / 4;
    double *want = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) want[i] = b[i];
    check_tol same = check_tol_sum(2, 2, 3, CHECK_U_FP32);
    same.atol += 2 * T * CHECK_U_FP32;
    suite_count(s, check_allclose_v("op_suite rope_freqs(theta table) == rope(theta)", a, want, n,
                                    same, s->verbose));
    free(want);
    /* rope_rows with the table (batched generation at per-row positions): row r at position
     * pos[r] gets exactly the bits rope_freqs gives that position (the same angles, same math) */
    if (backend_has(s->t, BACKEND_OP_ROPE_ROWS)) {
        const int R = 4;
        int32_t ph[4] = {0, 1, T / 2, T - 1};
        const size_t w = (size_t)H * D;
        float *rows = malloc((size_t)R * w * sizeof(float));
        for (int r = 0; r < R; r++) memcpy(rows + r * w, orig + (size_t)ph[r] * w, w * sizeof(float)); /* batch row 0 */
        float *dr = backend_alloc(s->t, (size_t)R * w * sizeof(float));
        int32_t *dp = backend_alloc(s->t, sizeof ph);
        backend_copy_h2d(s->t, dr, rows, (size_t)R * w * sizeof(float));
        backend_copy_h2d(s->t, dp, ph, sizeof ph);
        backend_rope_rows(s->t, dr, dp, R, H, D, 0.0f, (const float *)fr.t);
        backend_copy_d2h(s->t, rows, dr, (size_t)R * w * sizeof(float));
        int same_bits = 1;
        for (int r = 0; r < R; r++) same_bits &= memcmp(rows + r * w, a + (size_t)ph[r] * w, w * sizeof(float)) == 0;
        printf("op_suite %s rope_rows(freqs) at positions 0, 1, %d, %d == rope_freqs' rows, bit for bit\n",
               same_bits ? "ok  " : "FAIL", T / 2, T - 1);
        suite_count(s, same_bits);
        backend_free(s->t, dr), backend_free(s->t, dp);
        free(rows);
    }
    free(a), free(b), free(orig);
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
        backend_attention_forward(be, PF(out, side), PF(lse, side), PF(q, side), PF(k, side),
                                  PF(v, side), B, T, H, Hkv, D, 0);
    snprintf(name, sizeof name, "attention_forward B%d T%d H%d Hkv%d D%d out", B, T, H, Hkv, D);
    /* as tests/backends/cpu/test_cpu_attention.c, for each side's arithmetic: the scores' D-term
     * dots (|qk| E 0.5625, over sqrt(D)) set p's relative error, the softmax adds g_T and expf's
     * ulps; out = sum_j p_j v_j (sum p |v| < 1) and lse carry it absolutely */
    const check_tol out_tol = attention_tol(s, T, D, 1.0);
    pair_check(s, name, &out, out_tol);
    pair_check(s, "attention_forward lse", &lse, out_tol);
    /* the backward runs on each side's own forward results (out, lse), as in training */
    FOR_SIDES (be)
        backend_attention_backward(be, PF(dq, side), PF(dk, side), PF(dv, side), PF(dout, side),
                                   PF(q, side), PF(k, side), PF(v, side), PF(out, side),
                                   PF(lse, side), B, T, H, Hkv, D, 0);
    /* dv sums p dout over the queries of a head group (sum_i p_ij < 1 + ln T per head); dq, dk
     * sum dS = p (dP - delta) times k or q (|.| < 1.5, |dP - delta| < sqrt(D) + 1) */
    const double lnT = (1.0 + log((double)T)) * H / Hkv;
    pair_check(s, "attention_backward dq", &dq, attention_tol(s, T, D, lnT * 1.5 * (sqrt(D) + 1)));
    pair_check(s, "attention_backward dk", &dk, attention_tol(s, T, D, lnT * 1.5 * (sqrt(D) + 1)));
    pair_check(s, "attention_backward dv", &dv, attention_tol(s, T, D, lnT));
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

/* --- sliding-window attention: query i sees keys i - W < j <= i --- */

/* The inputs of a window case and the reference's results in double, with the magnitudes its
 * error bounds are made of (att_win_tol): maxima over the case, from the inputs only. */
typedef struct {
    int B, T, H, Hkv, D, W;
    float *q, *k, *v, *dout;          /* inputs (the same on both sides), bf16-representable */
    double *out, *lse, *dq, *dk, *dv; /* the reference */
    double a, m_out, m_dq, m_dk, m_dv; /* max scale sum_d |q k|; max of each result's M (below) */
} att_win;

/* The window's attention and its gradients in double, written from the definition (no blocks):
 *   s_ij = q_i.k_j / sqrt(D) over lo(i) = max(0, i - W + 1) <= j <= i, p = softmax_j(s),
 *   out_i = sum_j p_ij v_j, lse_i = log sum_j e^(s_ij);
 *   dp_ij = dout_i.v_j, ds_ij = p_ij (dp_ij - sum_j' p_ij' dp_ij'),
 *   dq_i = sum_j ds_ij k_j / sqrt(D), dk_j = sum_i ds_ij q_i / sqrt(D), dv_j = sum_i p_ij dout_i
 * (dk, dv summed over the query heads of kv head h / (H / Hkv)).
 * And the magnitudes through which a side's relative errors reach each result (first order):
 *   M_out_i = sum_j p_ij |v_j|,  M_dv_j = sum_i p_ij |dout_i|,
 *   M_dq_i = scale sum_j p_ij r_ij |k_j|,  M_dk_j = scale sum_i p_ij r_ij |q_i|, with
 *   r_ij = |dp_ij - delta_i| + sum_d |dout_id v_jd| + sum_d |dout_id| M_out_id
 * (ds's own size, dp's terms, and delta = dout.out's terms with out's error, bounded by M_out). */
static void att_win_ref(att_win *a)
{
    const int T = a->T, H = a->H, Hkv = a->Hkv, D = a->D, G = H / Hkv;
    const double scale = 1.0 / sqrt((double)D);
    const size_t nk = (size_t)a->B * T * Hkv * D;
    double *mk = calloc(nk, sizeof(double)), *mv = calloc(nk, sizeof(double));
    double *p = malloc((size_t)T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    double *sdv = malloc((size_t)T * sizeof(double)), *mo = malloc((size_t)D * sizeof(double));
    double *mq = malloc((size_t)D * sizeof(double));
    memset(a->dk, 0, nk * sizeof(double));
    memset(a->dv, 0, nk * sizeof(double));
    a->a = a->m_out = a->m_dq = a->m_dk = a->m_dv = 0.0;
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const size_t qi = (((size_t)b * T + i) * H + h) * D;
                const float *qr = a->q + qi, *dor = a->dout + qi;
                const int lo = a->W > 0 && i - a->W + 1 > 0 ? i - a->W + 1 : 0;
                double m = -INFINITY, sum = 0.0, delta = 0.0, odo = 0.0;
                for (int j = lo; j <= i; j++) {
                    const float *kr = a->k + (((size_t)b * T + j) * Hkv + h / G) * D;
                    const float *vr = a->v + (((size_t)b * T + j) * Hkv + h / G) * D;
                    double x = 0.0, y = 0.0, ax = 0.0, ay = 0.0;
                    for (int d = 0; d < D; d++) {
                        x += (double)qr[d] * kr[d], ax += fabs((double)qr[d] * kr[d]);
                        y += (double)dor[d] * vr[d], ay += fabs((double)dor[d] * vr[d]);
                    }
                    p[j] = x * scale, dp[j] = y, sdv[j] = ay;
                    a->a = ax * scale > a->a ? ax * scale : a->a;
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = lo; j <= i; j++) sum += (p[j] = exp(p[j] - m));
                for (int d = 0; d < D; d++) a->out[qi + d] = a->dq[qi + d] = mo[d] = mq[d] = 0.0;
                for (int j = lo; j <= i; j++) {
                    const float *vr = a->v + (((size_t)b * T + j) * Hkv + h / G) * D;
                    p[j] /= sum;
                    delta += p[j] * dp[j];
                    for (int d = 0; d < D; d++) {
                        a->out[qi + d] += p[j] * vr[d];
                        mo[d] += p[j] * fabs((double)vr[d]);
                    }
                }
                a->lse[((size_t)b * H + h) * T + i] = m + log(sum);
                for (int d = 0; d < D; d++) {
                    odo += fabs((double)dor[d]) * mo[d];
                    a->m_out = mo[d] > a->m_out ? mo[d] : a->m_out;
                }
                for (int j = lo; j <= i; j++) {
                    const size_t kj = (((size_t)b * T + j) * Hkv + h / G) * D;
                    const double ds = p[j] * (dp[j] - delta);
                    const double r = p[j] * (fabs(dp[j] - delta) + sdv[j] + odo) * scale;
                    for (int d = 0; d < D; d++) {
                        a->dq[qi + d] += ds * a->k[kj + d] * scale;
                        a->dk[kj + d] += ds * qr[d] * scale;
                        a->dv[kj + d] += p[j] * dor[d];
                        mq[d] += r * fabs((double)a->k[kj + d]);
                        mk[kj + d] += r * fabs((double)qr[d]);
                        mv[kj + d] += p[j] * fabs((double)dor[d]);
                    }
                }
                for (int d = 0; d < D; d++) a->m_dq = mq[d] > a->m_dq ? mq[d] : a->m_dq;
            }
    for (size_t e = 0; e < nk; e++) {
        a->m_dk = mk[e] > a->m_dk ? mk[e] : a->m_dk;
        a->m_dv = mv[e] > a->m_dv ? mv[e] : a->m_dv;
    }
    free(mk), free(mv), free(p), free(dp), free(sdv), free(mo), free(mq);
}

/* One side against the reference, its dot unit u (the unit p and ds are rounded to before the
 * second products: TF32, bf16; fp32 elsewhere). The inputs are bf16 values, so no path rounds
 * them: a score's error is its fp32 sum's, g_D a (a = the case's largest scale sum_d |q k|); p's
 * relative error is two of those (s and lse) plus the softmax sum's g_T and expf's; the second
 * products add u (p or ds rounded once) and g_(T+D). That relative error e times M (att_win_ref)
 * bounds a result to first order; atol = 2 e max M leaves the second order room. */
static check_tol att_win_tol(double u, const att_win *a, double M)
{
    const double u32 = CHECK_U_FP32;
    const double e_s = (CHECK_LAMBDA * sqrt((double)a->D) + 2) * u32 * a->a;
    const double e = 2 * e_s + CHECK_LAMBDA * sqrt((double)a->T) * u32 + 3 * u32 + u +
                     CHECK_LAMBDA * sqrt((double)a->T + a->D) * u32;
    check_tol t = {2 * e * M, 4 * (u + u32)};
    return t;
}

static void att_win_check(suite *s, int side, const char *what, const pair *p, const double *want,
                          check_tol t)
{
    size_t n = p->bytes / sizeof(float);
    float *got = malloc(p->bytes);
    backend *be = side ? s->r : s->t;
    backend_sync(be);
    backend_copy_d2h(be, got, side ? p->r : p->t, p->bytes);
    char name[120];
    snprintf(name, sizeof name, "op_suite %s %s", side ? "ref " : "test", what);
    suite_count(s, check_allclose_v(name, got, want, n, t, s->verbose));
    free(got);
}

/* Forward and backward with window W on both sides: each side against the double reference, and
 * the sides against each other as suite_attention_one does. */
static void suite_attention_window_one(suite *s, int B, int T, int H, int Hkv, int D, int W)
{
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
    att_win a = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .W = W};
    float **in[4] = {&a.q, &a.k, &a.v, &a.dout};
    const size_t nin[4] = {nq, nk, nk, nq};
    for (int i = 0; i < 4; i++) { /* bf16 values: exact in every path's operands */
        *in[i] = host_rand(s, nin[i], i < 2 ? 1.5 : 1);
        for (size_t e = 0; e < nin[i]; e++) (*in[i])[e] = check_bf16_round((*in[i])[e]);
    }
    a.out = malloc(nq * sizeof(double)), a.lse = malloc(nl * sizeof(double));
    a.dq = malloc(nq * sizeof(double));
    a.dk = malloc(nk * sizeof(double)), a.dv = malloc(nk * sizeof(double));
    att_win_ref(&a);
    pair q = pair_new(s, a.q, nq * 4), k = pair_new(s, a.k, nk * 4), v = pair_new(s, a.v, nk * 4);
    pair dout = pair_new(s, a.dout, nq * 4), out = pair_rand(s, nq, 1), lse = pair_rand(s, nl, 1);
    pair dq = pair_rand(s, nq, 1), dk = pair_rand(s, nk, 1), dv = pair_rand(s, nk, 1);
    FOR_SIDES (be) {
        backend_attention_forward(be, PF(out, side), PF(lse, side), PF(q, side), PF(k, side),
                                  PF(v, side), B, T, H, Hkv, D, W);
        backend_attention_backward(be, PF(dq, side), PF(dk, side), PF(dv, side), PF(dout, side),
                                   PF(q, side), PF(k, side), PF(v, side), PF(out, side),
                                   PF(lse, side), B, T, H, Hkv, D, W);
    }
    char name[120];
    for (int side = 0; side < 2; side++) {
        double u = side || s->u_dot == 0.0 ? CHECK_U_FP32 : s->u_dot;
        snprintf(name, sizeof name, "attention W%d T%d H%d/%d D%d out", W, T, H, Hkv, D);
        att_win_check(s, side, name, &out, a.out, att_win_tol(u, &a, a.m_out));
        att_win_check(s, side, "attention window lse", &lse, a.lse, att_win_tol(u, &a, 1.0));
        att_win_check(s, side, "attention window dq", &dq, a.dq, att_win_tol(u, &a, a.m_dq));
        att_win_check(s, side, "attention window dk", &dk, a.dk, att_win_tol(u, &a, a.m_dk));
        att_win_check(s, side, "attention window dv", &dv, a.dv, att_win_tol(u, &a, a.m_dv));
    }
    /* and the sides against each other under the suite's own rule (suite_attention_one) */
    const double lnT = (1.0 + log((double)T)) * H / Hkv, Sqk = lnT * 1.5 * (sqrt(D) + 1);
    snprintf(name, sizeof name, "attention_forward W%d B%d T%d out (test vs ref)", W, B, T);
    pair_check(s, name, &out, attention_tol(s, T, D, 1.0));
    pair_check(s, "attention window lse (test vs ref)", &lse, attention_tol(s, T, D, 1.0));
    pair_check(s, "attention window dq (test vs ref)", &dq, attention_tol(s, T, D, Sqk));
    pair_check(s, "attention window dk (test vs ref)", &dk, attention_tol(s, T, D, Sqk));
    pair_check(s, "attention window dv (test vs ref)", &dv, attention_tol(s, T, D, lnT));
    free(a.q), free(a.k), free(a.v), free(a.dout);
    free(a.out), free(a.lse), free(a.dq), free(a.dk), free(a.dv);
    pair_free(s, &q), pair_free(s, &k), pair_free(s, &v), pair_free(s, &dout), pair_free(s, &out);
    pair_free(s, &lse), pair_free(s, &dq), pair_free(s, &dk), pair_free(s, &dv);
}

/* A window of T keys or more hides nothing: on the tested side the same bits as window 0. */
static void suite_attention_window_whole(suite *s, int B, int T, int H, int Hkv, int D)
{
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
    backend *be = s->t;
    size_t n[9] = {nq, nk, nk, nq, nq, nl, nq, nk, nk}; /* q k v dout | out lse dq dk dv */
    float *h[4];
    for (int i = 0; i < 4; i++) h[i] = host_rand(s, n[i], i < 2 ? 1.5 : 1);
    float *d[9], *res[2][5];
    for (int i = 0; i < 9; i++) d[i] = backend_alloc(be, n[i] * sizeof(float));
    for (int i = 0; i < 4; i++) backend_copy_h2d(be, d[i], h[i], n[i] * sizeof(float));
    for (int r = 0; r < 2; r++) {
        int W = r ? T : 0;
        backend_attention_forward(be, d[4], d[5], d[0], d[1], d[2], B, T, H, Hkv, D, W);
        backend_attention_backward(be, d[6], d[7], d[8], d[3], d[0], d[1], d[2], d[4], d[5], B, T,
                                   H, Hkv, D, W);
        backend_sync(be);
        for (int i = 0; i < 5; i++) {
            res[r][i] = malloc(n[4 + i] * sizeof(float));
            backend_copy_d2h(be, res[r][i], d[4 + i], n[4 + i] * sizeof(float));
        }
    }
    const char *what[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        char name[96];
        double *want = malloc(n[4 + i] * sizeof(double));
        for (size_t e = 0; e < n[4 + i]; e++) want[e] = res[0][i][e];
        snprintf(name, sizeof name, "op_suite attention window T == none (%s)", what[i]);
        suite_count(s, check_allclose_v(name, res[1][i], want, n[4 + i], CHECK_EXACT, s->verbose));
        free(want), free(res[0][i]), free(res[1][i]);
    }
    for (int i = 0; i < 9; i++) backend_free(be, d[i]);
    for (int i = 0; i < 4; i++) free(h[i]);
}

/* Windows of 1 (the diagonal only: out = v), and ones that cut the CPU's query blocks (48 / G
 * queries) and the device tiles (64 keys: whole key tiles skipped in both backward directions)
 * off their boundaries, with T off every block size; GQA throughout. */
static void suite_attention_window(suite *s)
{
    suite_attention_window_one(s, 2, 37, 4, 2, 32, 8);
    suite_attention_window_one(s, 2, 37, 4, 2, 32, 1);
    suite_attention_window_one(s, 1, 150, 4, 2, 64, 20);
    suite_attention_window_one(s, 1, 150, 2, 2, 64, 64);
    suite_attention_window_one(s, 1, 150, 6, 2, 48, 100);
    suite_attention_window_whole(s, 2, 37, 4, 2, 32);
}

/* Generation: one query per head over Tk cached keys (GQA); optional on a backend. */
static void suite_attention_decode_one(suite *s, int Tk, int H, int Hkv, int D)
{
    size_t nq = (size_t)H * D, nk = (size_t)Tk * Hkv * D;
    pair q = pair_rand(s, nq, 1.5), k = pair_rand(s, nk, 1.5), v = pair_rand(s, nk, 1);
    pair out = pair_new(s, NULL, nq * 4);
    FOR_SIDES (be)
        backend_attention_decode(be, PF(out, side), PF(q, side), PF(k, side), PF(v, side), Tk, H,
                                 Hkv, D);
    char name[96];
    snprintf(name, sizeof name, "attention_decode Tk%d H%d Hkv%d D%d", Tk, H, Hkv, D);
    /* the forward's bound for Tk keys (a single query row: the same dots and softmax) */
    pair_check(s, name, &out, attention_tol(s, Tk, D, 1.0));
    pair_free(s, &q), pair_free(s, &k), pair_free(s, &v), pair_free(s, &out);
}

static void suite_attention_decode(suite *s)
{
    int t_has = backend_has(s->t, BACKEND_OP_ATTENTION_DECODE);
    if (!t_has || !backend_has(s->r, BACKEND_OP_ATTENTION_DECODE)) {
        printf("op_suite skip attention_decode (not implemented by %s)\n",
               backend_description(t_has ? s->r : s->t));
        return;
    }
    suite_attention_decode_one(s, 1, 2, 1, 16);    /* the first generated token */
    suite_attention_decode_one(s, 130, 4, 2, 64);  /* GQA, off any block size */
    suite_attention_decode_one(s, 1000, 6, 2, 128);
    suite_attention_decode_one(s, 37, 14, 2, 96); /* 7 heads a group (Qwen2.5), D past 64 */
    suite_attention_decode_one(s, 5, 2, 1, 24);   /* D off 16: the CPU's AVX2 kernel (AVX-512 declines) */
}

/* Batched generation: rows at their own positions (0, mid, last cache slot), GQA; the cache
 * rows the op stores into and the attention output, and rope at per-row positions. */
static void suite_decode_rows_one(suite *s, int R, int cap, int H, int Hkv, int D)
{
    if (!backend_has(s->t, BACKEND_OP_ATTENTION_DECODE_ROWS) ||
        !backend_has(s->t, BACKEND_OP_ROPE_ROWS)) {
        printf("op_suite FAIL %s: attention_decode_rows / rope_rows missing\n",
               backend_description(s->t));
        s->failed++;
        return;
    }
    size_t nq = (size_t)R * H * D, nk = (size_t)R * Hkv * D, nc = (size_t)R * cap * Hkv * D;
    int32_t *ph = malloc((size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++) ph[r] = r == 0 ? 0 : r == R - 1 ? cap - 1 : (int32_t)((suite_rnd(s) + 1) * 0.5 * (cap - 1));
    pair pos = pair_new(s, ph, (size_t)R * sizeof(int32_t));
    pair q = pair_rand(s, nq, 1.5), kn = pair_rand(s, nk, 1.5), vn = pair_rand(s, nk, 1);
    pair kc = pair_rand(s, nc, 1.5), vc = pair_rand(s, nc, 1), out = pair_new(s, NULL, nq * 4);
    char name[96];
    FOR_SIDES (be) {
        backend_rope_rows(be, PF(q, side), PI(pos, side), R, H, D, 10000.0f, NULL);
        backend_rope_rows(be, PF(kn, side), PI(pos, side), R, Hkv, D, 10000.0f, NULL);
    }
    snprintf(name, sizeof name, "rope_rows R%d H%d D%d", R, H, D);
    /* as suite_rope: cos, sin, two products and a cancelling sum; a side computing the angle
     * pos * freq in fp32 rounds it at up to cap rad */
    check_tol rope_tol = suite_tol(s, 2, 2, 3, 0);
    if (s->u_dot != 0.0) rope_tol.atol += 2 * cap * CHECK_U_FP32;
    pair_check(s, name, &q, rope_tol);
    FOR_SIDES (be)
        backend_attention_decode_rows(be, PF(out, side), PF(q, side), PF(kn, side), PF(vn, side),
                                      PF(kc, side), PF(vc, side), PI(pos, side), R, cap, H, Hkv, D);
    snprintf(name, sizeof name, "attention_decode_rows R%d cap%d H%d Hkv%d D%d out", R, cap, H, Hkv, D);
    /* one query row per head over its row's keys: the forward's bound for cap keys, on inputs
     * that already carry the rope difference; the caches only store: the v cache exactly, the k
     * cache each side's own roped keys in the written slots (rope_rows' difference: a GPU
     * compiler contracts x cos - y sin into an fma, the host reference may not) and exact
     * elsewhere. A store to the wrong slot or of unroped keys differs by O(1). */
    check_tol att = attention_tol(s, cap, D, 1.0);
    att.atol += 2 * rope_tol.atol * 1.5 * sqrt((double)D) / sqrt((double)D);
    pair_check(s, name, &out, att);
    pair_check(s, "attention_decode_rows k cache", &kc, rope_tol);
    pair_check(s, "attention_decode_rows v cache", &vc, CHECK_EXACT);
    pair_free(s, &pos), pair_free(s, &q), pair_free(s, &kn), pair_free(s, &vn);
    pair_free(s, &kc), pair_free(s, &vc), pair_free(s, &out);
    free(ph);
}

static void suite_decode_rows(suite *s)
{
    suite_decode_rows_one(s, 3, 40, 4, 2, 32);
    suite_decode_rows_one(s, 5, 300, 9, 3, 64); /* SmolLM2's head layout, a cache off block sizes */
    suite_decode_rows_one(s, 1, 1, 2, 2, 16);   /* one row at position 0 */
}

static void suite_xent_one(suite *s, int N, int V, int Vr)
{
    pair logits = pair_rand(s, (size_t)N * V, 4), losses = pair_new(s, NULL, (size_t)N * 4);
    int32_t *tgt = malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++)
        tgt[n] = n % 5 == 2 ? -1 : (int32_t)((suite_rnd(s) + 1) * 0.5 * Vr) % Vr;
    pair tg = pair_new(s, tgt, N * sizeof(int32_t));
    FOR_SIDES (be)
        backend_softmax_xent(be, PF(logits, side), PF(losses, side), PI(tg, side), N, V, Vr,
                             1.0f / N);
    char name[96];
    snprintf(name, sizeof name, "softmax_xent N%d V%d V_real%d losses", N, V, Vr);
    /* Not a matmul (fp32 on every side): loss = log(sum of Vr positive exps) - (x_y - m) is
     * off by g_Vr + 3u absolute; p_j relatively by g_Vr + (|lse| + 7)u, |lse| < 4 + ln Vr;
     * the target's 1 - p cancels (u absolute, times 1/N). A wrong small entry (p_j ~ 1/Vr) is
     * far outside this. */
    const double g = CHECK_LAMBDA * sqrt((double)Vr) * CHECK_U_FP32, lse = 4 + log((double)Vr);
    const check_tol loss_tol = {2 * (g + 3 * CHECK_U_FP32), 2 * 2 * CHECK_U_FP32};
    const check_tol dlogit_tol = {2 * 2 * CHECK_U_FP32 / N, 2 * (g + (lse + 7) * CHECK_U_FP32)};
    pair_check(s, name, &losses, s->u_dot == 0.0 ? CHECK_EXACT : loss_tol);
    pair_check(s, "softmax_xent dlogits", &logits, s->u_dot == 0.0 ? CHECK_EXACT : dlogit_tol);
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
            backend_adamw(be, PF(p, side), PF(g, side), PF(m, side), PF(v, side), n, 1e-2f, 0.9f,
                          0.95f, 1e-8f, 0.1f, t, 0.5f);
        pair_free(s, &g);
    }
    /* 3 steps of ~10 roundings on |p| < 1 (moving by lr = 1e-2); m sums 3 signed terms of
     * 0.1 |g| 0.5 < 0.15 (cancels), v 3 positive terms (relative) */
    pair_check(s, "adamw param (3 steps)", &p, suite_tol(s, 3, 2, 30, 0));
    pair_check(s, "adamw m", &m, suite_tol(s, 3, 0.5, 30, 0));
    pair_check(s, "adamw v", &v, suite_tol(s, 3, 0, 30, 0));
    pair_free(s, &p), pair_free(s, &m), pair_free(s, &v);
}

int op_suite_run_parts(backend *test, backend *ref, double u_dot, int verbose, unsigned parts)
{
    suite s = {test, ref, u_dot > 0 ? u_dot : 0.0, verbose, 0, 0x2545F4914F6CDD1Dull};
    if (parts & OP_SUITE_PRODUCTS) suite_dense(&s);
    if (parts & OP_SUITE_REST) {
        suite_vector(&s);
        suite_bias(&s);
        suite_embedding(&s);
        suite_norms(&s);
        suite_activations(&s);
        suite_rope(&s);
        suite_rope_freqs(&s);
        suite_qk_norm(&s);
    }
    if (parts & OP_SUITE_PRODUCTS) {
        suite_attention(&s);
        suite_attention_window(&s);
    }
    if (parts & OP_SUITE_REST) {
        suite_attention_decode(&s);
        suite_decode_rows(&s);
        suite_xent(&s);
        suite_adamw(&s);
        suite_needle(&s);
        suite_needle_mix(&s);
    }
    if ((parts & OP_SUITE_ALL) != OP_SUITE_ALL)
        printf("op_suite: %s only (left out: %s)\n",
               parts & OP_SUITE_PRODUCTS ? "matmul and attention" : "the ops other than matmul and attention",
               parts & OP_SUITE_PRODUCTS ? "every other op" : "matmul and attention");
    printf("op_suite: %s vs %s: %d failing check%s\n", backend_description(test),
           backend_description(ref), s.failed, s.failed == 1 ? "" : "s");
    return s.failed;
}

int op_suite_run(backend *test, backend *ref, double u_dot, int verbose)
{
    return op_suite_run_parts(test, ref, u_dot, verbose, OP_SUITE_ALL);
}
