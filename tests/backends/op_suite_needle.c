/* op_suite_needle.c: the op suite's cases for Needle's layers (docs/needle.md): the conv taps
 * (forward, backward, decode rows), run on the backend under test and the reference with the same
 * seeded inputs and compared element-wise (see op_suite.h). Every one is element-wise fp32 on
 * every backend, so TF32/bf16 modes never loosen them. */
static int needle_failures; /* check.h's counter for this file; each check also counts in s->failed */
#define CHECK_COUNTER needle_failures
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void suite_needle(suite *s)
{
    suite_taps(s);
}
