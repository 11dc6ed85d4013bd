/* op_suite_needle.c: the op suite's cases for Needle's layers (docs/needle.md): the conv taps
 * (forward, backward, decode rows), the sigmoid gates (element-wise and scalar) and the W4 / A8
 * fake quantisation (against needle_quant_ref.h's bounds), run on the backend under test and the reference with the same
 * seeded inputs and compared element-wise (see op_suite.h). Every one is element-wise fp32 on
 * every backend, so TF32/bf16 modes never loosen them. */
static int needle_failures; /* check.h's counter for this file; each check also counts in s->failed */
#define CHECK_COUNTER needle_failures
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/backends/needle_quant_ref.h"
#include "tests/backends/op_suite_internal.h"

/* An fp32 element-wise result on both sides, bitwise when the sides are one implementation. */
static check_tol needle_tol(const suite *s, double K, double S, double r)
{
    return suite_tol(s, K, S, r, 0);
}

/* Decode rows over a (B, T, C) input on one side: T steps of backend_conv_taps_decode for the B
 * sequences from a zero state, each step's x gathered from and out scattered back to row t. */
static void taps_decode_all(backend *be, float *out, float *state, float *xrow, float *orow,
                            const float *x, const float *w, int B, int T, int C, int K, int dil)
{
    const size_t row = (size_t)C * sizeof(float), S = (size_t)(K - 1) * dil;
    if (S) backend_fill(be, state, 0.0f, (size_t)B * S * C);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++)
            backend_copy_d2d(be, xrow + (size_t)b * C, x + ((size_t)b * T + t) * C, row);
        backend_conv_taps_decode(be, orow, S ? state : NULL, xrow, w, B, C, K, dil);
        for (int b = 0; b < B; b++)
            backend_copy_d2d(be, out + ((size_t)b * T + t) * C, orow + (size_t)b * C, row);
    }
}

static void suite_taps_one(suite *s, int B, int T, int C, int K, int dil)
{
    const size_t N = (size_t)B * T, n = N * C, kc = (size_t)K * C;
    const size_t S = (size_t)(K - 1) * dil, ns = (size_t)B * (S ? S : 1) * C;
    pair x = pair_rand(s, n, 1), w = pair_rand(s, kc, 1), out = pair_new(s, NULL, n * 4);
    pair dout = pair_rand(s, n, 1), dx = pair_rand(s, n, 1), dw = pair_rand(s, kc, 1);
    char name[112];
    FOR_SIDES (be)
        backend_conv_taps_forward(be, PF(out, side), PF(x, side), PF(w, side), B, T, C, K, dil);
    snprintf(name, sizeof name, "conv_taps_forward B%d T%d C%d K%d dil%d", B, T, C, K, dil);
    /* K products of |w x| < 1 added in tap order (with or without an fma) */
    const check_tol fwd_tol = needle_tol(s, K, K, 1);
    pair_check(s, name, &out, fwd_tol);
    FOR_SIDES (be)
        backend_conv_taps_backward(be, PF(dx, side), PF(dw, side), PF(dout, side), PF(x, side),
                                   PF(w, side), B, T, C, K, dil);
    /* dinp: K products |w dout| < 1; dw: its start (|dw0| < 1, E 1/2) + N products
     * |dout x| < 1 (E 1/4), one pass of each side's own order */
    pair_check(s, "conv_taps_backward dinp", &dx, fwd_tol);
    pair_check(s, "conv_taps_backward dw (+=)", &dw, needle_tol(s, N + 1, 0.25 * N + 0.5, 1));
    pair dx2 = pair_rand(s, n, 1);
    FOR_SIDES (be)
        backend_conv_taps_backward(be, PF(dx2, side), NULL, PF(dout, side), NULL, PF(w, side), B,
                                   T, C, K, dil);
    pair_check(s, "conv_taps_backward frozen (NULL dw, inp)", &dx2, fwd_tol);
    /* decoding row by row from a zero state: the forward's sums, compared across the sides and
     * with the forward on the tested side (same terms in the same order; an fma contracted in
     * one and not the other is a rounding of the K-term bound); the state ends as the last S
     * rows (exact copies) */
    pair st = pair_new(s, NULL, ns * 4), xr = pair_new(s, NULL, (size_t)B * C * 4);
    pair orow = pair_new(s, NULL, (size_t)B * C * 4), dec = pair_new(s, NULL, n * 4);
    FOR_SIDES (be)
        taps_decode_all(be, PF(dec, side), PF(st, side), PF(xr, side), PF(orow, side),
                        PF(x, side), PF(w, side), B, T, C, K, dil);
    pair_check(s, "conv_taps_decode (T rows)", &dec, fwd_tol);
    if (S) pair_check(s, "conv_taps_decode state", &st, CHECK_EXACT);
    float *a = malloc(n * 4), *f = malloc(n * 4);
    double *want = malloc(n * sizeof(double));
    backend_copy_d2h(s->t, a, dec.t, n * 4);
    backend_copy_d2h(s->t, f, out.t, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = f[i];
    suite_count(s, check_allclose_v("op_suite conv_taps_decode == conv_taps_forward (tested side)",
                                    a, want, n, check_tol_sum(K, K, 1, CHECK_U_FP32),
                                    s->verbose));
    free(a), free(f), free(want);
    pair_free(s, &x), pair_free(s, &w), pair_free(s, &out), pair_free(s, &dout);
    pair_free(s, &dx), pair_free(s, &dw), pair_free(s, &dx2), pair_free(s, &st);
    pair_free(s, &xr), pair_free(s, &orow), pair_free(s, &dec);
}

static void suite_taps(suite *s)
{
    suite_taps_one(s, 2, 37, 70, 3, 1);  /* Needle's q/k/v taps */
    suite_taps_one(s, 3, 20, 33, 4, 3);  /* the engram's value taps, dilated */
    suite_taps_one(s, 1, 5, 16, 4, 3);   /* T shorter than the taps reach */
    suite_taps_one(s, 2, 9, 8, 1, 1);    /* one tap: a per-channel scale */
    suite_taps_one(s, 4, 96, 100, 3, 1); /* enough rows for several CPU threads */
}

/* The gates: sigmoid(g) = 1 / (1 + e^-g) on each side is within 4u (expf's ulps: 2 on the CPU's
 * own, at most 2 for CUDA's and Metal's precise exp, as e^-g's relative error becomes s's) + 2u
 * (the sum, the division) of the exact s; a product adds u. Below FLT_MIN (g < -87) the CPU's
 * expf saturates at e^88 where another is inf: s differs by < 1e-38 there, hence the tiny atol.
 * dg's s (1 - s) cancels as s -> 1: the absolute error of 1 - s is s's, 6u, times |dout x| < 2. */
static void suite_gates(suite *s)
{
    const size_t n = 65539;
    const double u = CHECK_U_FP32;
    float *gh = host_rand(s, n, 8);
    gh[0] = 40.0f, gh[1] = -40.0f, gh[2] = 0.0f, gh[3] = 95.0f, gh[4] = -95.0f, gh[5] = 1e-3f;
    pair g = pair_new(s, gh, n * 4), x = pair_rand(s, n, 2), dout = pair_rand(s, n, 1);
    pair out = pair_new(s, NULL, n * 4), dx = pair_rand(s, n, 1), dg = pair_rand(s, n, 1);
    free(gh);
    const int exact = s->u_dot == 0.0;
    const check_tol prod_tol = {2 * 1e-38, 2 * 7 * u}; /* s times one factor, each side */
    const check_tol dg_tol = {2 * 2 * 8 * u, 2 * 9 * u};
    FOR_SIDES (be) backend_sigmoid_gate_forward(be, PF(out, side), PF(x, side), PF(g, side), n);
    pair_check(s, "sigmoid_gate_forward", &out, exact ? CHECK_EXACT : prod_tol);
    FOR_SIDES (be)
        backend_sigmoid_gate_backward(be, PF(dx, side), PF(dg, side), PF(dout, side), PF(x, side),
                                      PF(g, side), n);
    pair_check(s, "sigmoid_gate_backward dx", &dx, exact ? CHECK_EXACT : prod_tol);
    pair_check(s, "sigmoid_gate_backward dg", &dg, exact ? CHECK_EXACT : dg_tol);
    const float gates[2] = {0.3f, -2.5f};
    for (int k = 0; k < 2; k++) {
        const size_t m = k ? 999 : n; /* a short sum too: its bound is tight enough to matter */
        float ds0 = 0.7f;
        pair sc = pair_new(s, &gates[k], 4), ds = pair_new(s, &ds0, 4);
        char name[96];
        FOR_SIDES (be) backend_scalar_gate_forward(be, PF(out, side), PF(x, side), PF(sc, side), m);
        snprintf(name, sizeof name, "scalar_gate_forward (s %g, n %zu)", gates[k], m);
        pair_check(s, name, &out, exact ? CHECK_EXACT : prod_tol);
        FOR_SIDES (be)
            backend_scalar_gate_backward(be, PF(dx, side), PF(ds, side), PF(dout, side),
                                         PF(x, side), PF(sc, side), m);
        pair_check(s, "scalar_gate_backward dx", &dx, exact ? CHECK_EXACT : prod_tol);
        /* ds0 + s (1 - s) times n products |dout x| < 2 (E 1/2), summed in each side's order */
        pair_check(s, "scalar_gate_backward ds (+=)", &ds, needle_tol(s, m + 1, 0.5 * m + 1, 10));
        pair dx2 = pair_rand(s, m, 1);
        FOR_SIDES (be)
            backend_scalar_gate_backward(be, PF(dx2, side), NULL, PF(dout, side), PF(x, side),
                                         PF(sc, side), m);
        pair_check(s, "scalar_gate_backward frozen (NULL ds)", &dx2, exact ? CHECK_EXACT : prod_tol);
        pair_free(s, &sc), pair_free(s, &ds), pair_free(s, &dx2);
    }
    pair_free(s, &g), pair_free(s, &x), pair_free(s, &dout), pair_free(s, &out);
    pair_free(s, &dx), pair_free(s, &dg);
}

/* A fake quantisation's output on both sides against the double reference's bounds: each side
 * within bound of the exact result, so the two within twice that; an ambiguous decision (bound
 * INFINITY) may go either way. Bitwise where the sides are one implementation. The backends
 * share one arithmetic (backends/needle_quant.h), so how many elements differ at all is shown. */
static void quant_check(suite *s, const char *what, pair *p, const double *bound, size_t n)
{
    float *a = malloc(n * 4), *b = malloc(n * 4);
    double *want = malloc(n * sizeof(double)), *two = malloc(n * sizeof(double));
    backend_sync(s->t), backend_sync(s->r);
    backend_copy_d2h(s->t, a, p->t, n * 4);
    backend_copy_d2h(s->r, b, p->r, n * 4);
    size_t diff = 0, out = 0;
    for (size_t i = 0; i < n; i++) {
        want[i] = b[i], two[i] = 2 * bound[i];
        diff += memcmp(&a[i], &b[i], 4) != 0;
        out += !(fabs((double)a[i] - want[i]) <= two[i]);
    }
    char name[120];
    snprintf(name, sizeof name, "op_suite %s (%zu differ in any bit)", what, diff);
    if (s->u_dot == 0.0)
        suite_count(s, check_allclose_v(name, a, want, n, CHECK_EXACT, s->verbose));
    else if (out || s->verbose) /* prints its line */
        suite_count(s, check_within(name, a, want, two, n));
    free(a), free(b), free(want), free(two);
}

static void suite_quant(suite *s)
{
    float cb[16];
    nqref_needle_codebook(cb);
    pair pcb = pair_new(s, cb, sizeof cb);
    const int shapes[3][2] = {{37, 300}, {64, 24}, {200, 768}}; /* padded groups; engram rows */
    for (int k = 0; k < 3; k++) {
        const int rows = shapes[k][0], cols = shapes[k][1];
        const size_t n = (size_t)rows * cols;
        float *w = host_rand(s, n, k == 2 ? 0.05 : 1.0);
        double *want = malloc(n * sizeof(double)), *bound = malloc(n * sizeof(double));
        size_t amb = nqref_cq(w, rows, cols, cb, want, bound);
        pair pw = pair_new(s, w, n * 4), out = pair_new(s, NULL, n * 4);
        FOR_SIDES (be) backend_cq_w4_quant(be, PF(out, side), PF(pw, side), PF(pcb, side), rows, cols);
        char name[96];
        snprintf(name, sizeof name, "cq_w4_quant %dx%d, %zu groups ambiguous", rows, cols, amb);
        quant_check(s, name, &out, bound, n);
        free(w), free(want), free(bound);
        pair_free(s, &pw), pair_free(s, &out);
    }
    pair_free(s, &pcb);
    const int ashapes[2][2] = {{200, 96}, {1500, 16}}; /* tokens; head vectors (KV8) */
    for (int k = 0; k < 2; k++) {
        const int rows = ashapes[k][0], cols = ashapes[k][1];
        const size_t n = (size_t)rows * cols;
        float *x = host_rand(s, n, 3);
        for (int c = 0; c < cols; c++) x[c] = 0.0f; /* a zero row */
        double *want = malloc(n * sizeof(double)), *bound = malloc(n * sizeof(double));
        size_t amb = 0;
        for (int r = 0; r < rows; r++)
            amb += nqref_a8_row(x + (size_t)r * cols, cols, want + (size_t)r * cols,
                                bound + (size_t)r * cols);
        pair px = pair_new(s, x, n * 4), out = pair_new(s, NULL, n * 4);
        FOR_SIDES (be) backend_fake_quant_a8(be, PF(out, side), PF(px, side), rows, cols);
        char name[96];
        snprintf(name, sizeof name, "fake_quant_a8 %dx%d, %zu ambiguous", rows, cols, amb);
        quant_check(s, name, &out, bound, n);
        free(x), free(want), free(bound);
        pair_free(s, &px), pair_free(s, &out);
    }
}

void suite_needle(suite *s)
{
    suite_taps(s);
    suite_gates(s);
    suite_quant(s);
}
