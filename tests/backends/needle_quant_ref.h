/* needle_quant_ref.h: Needle's W4 (CQ) and A8 fake quantisation (docs/needle.md section 3) in
 * double precision, written from the math, not from backends/needle_quant.h: the reference of
 * tests/backends/cpu/test_cpu_needle.c and of the op suite. Each result comes with the bound an
 * fp32 evaluation meets, or INFINITY where a rounding decision (a code, the fp16 norm, an
 * integer) lies too close to its boundary for fp32 to be sure of it. Test-only (static). */
#ifndef LOOM_NEEDLE_QUANT_REF_H
#define LOOM_NEEDLE_QUANT_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tests/check.h"

/* f32(1 / sqrt(128)): every entry of Needle's f32 Hadamard matrix is +- this */
#define NQREF_HS ((double)0.0883883461f)

/* How far (absolute, on u ~ N(0, 1/128)) a normalised value may be off in fp32: the rotation's
 * 7 butterfly levels (7u of sum |w| hs <= ||w|| = nu), the scaling, nu's own C-term sum and root:
 * under 16u; 64u keeps a margin. The same, relative, for nu against an fp16 rounding boundary. */
#define NQREF_MARGIN (64 * CHECK_U_FP32)

/* Needle's CQ codebook, LloydMax16 / sqrt(128) in f32 (tests/fixtures/needle/model_ref.json,
 * cq_codebook_f32_hex) */
static void nqref_needle_codebook(float *cb)
{
    static const uint32_t bits[16] = {
        0xbe7547c2, 0xbe390b02, 0xbe105747, 0xbddf41f9, 0xbda6f045, 0xbd67898a, 0xbd06eb34,
        0xbc25be0a, 0x3c5040f6, 0x3d124277, 0x3d738a80, 0x3dae086f, 0x3de6e514, 0x3e142b6e,
        0x3e3ca926, 0x3e781699};
    for (int k = 0; k < 16; k++) memcpy(&cb[k], &bits[k], sizeof(float));
}

static int nqref_popcount(unsigned v)
{
    int c = 0;
    for (; v; v &= v - 1) c++;
    return c;
}

/* nu (>= 0) rounded to fp16, to nearest even, in double; *near = 1 when nu lies within
 * NQREF_MARGIN (relative) of a rounding midpoint. */
static double nqref_fp16(double nu, int *near)
{
    if (nu == 0.0) return 0.0;
    int e;
    frexp(nu, &e);
    const double step = ldexp(1.0, e - 11 < -24 ? -24 : e - 11);
    const double r = nu / step, fl = floor(r), mid = fl + 0.5;
    if (fabs(r - mid) * step < NQREF_MARGIN * nu) *near = 1;
    const double q = (r < mid ? fl : r > mid ? fl + 1 : (fmod(fl, 2.0) == 0.0 ? fl : fl + 1)) * step;
    return q > 65504.0 ? INFINITY : q;
}

/* One W4 group: w[0..len) (len <= 128, zero-padded to 128), codebook cb (16 ascending).
 * want[k] = what_k = hs sum_i +-cb[c_i] nu16 (Needle's out = w + (what - w) is what exactly);
 * bound[k]: fp32's error in the butterflies (7u), the products (u) and the scalings and the
 * final w + (what - w) (4u of |what| + |w|), doubled; INFINITY for every k when the group is
 * ambiguous. codes (may be NULL) receives c. Returns 1 if the group was ambiguous. */
static int nqref_cq_group(const float *w, int len, const float *cb, double *want, double *bound,
                          int *codes)
{
    double rho[128], nu = 0.0;
    for (int i = 0; i < 128; i++) {
        double s = 0.0;
        for (int k = 0; k < len; k++) s += (nqref_popcount((unsigned)(i & k)) & 1) ? -w[k] : w[k];
        rho[i] = s * NQREF_HS;
        nu += rho[i] * rho[i];
    }
    nu = sqrt(nu);
    const double den = nu > 1e-12 ? nu : 1e-12;
    int near = 0, c[128];
    for (int i = 0; i < 128; i++) {
        const double u = rho[i] / den;
        int pos = 0;
        for (int k = 0; k < 16; k++) pos += cb[k] < u;
        pos = pos < 1 ? 1 : pos > 15 ? 15 : pos;
        c[i] = fabs(u - cb[pos - 1]) <= fabs(u - cb[pos]) ? pos - 1 : pos;
        for (int k = 0; k < 15; k++) /* the decisions switch at the midpoints */
            if (fabs(u - 0.5 * ((double)cb[k] + cb[k + 1])) < NQREF_MARGIN) near = 1;
        if (codes) codes[i] = c[i];
    }
    const double nu16 = nqref_fp16(nu, &near);
    double S = 0.0;
    for (int i = 0; i < 128; i++) S += fabs((double)cb[c[i]]) * nu16;
    for (int k = 0; k < len; k++) {
        double s = 0.0;
        for (int i = 0; i < 128; i++) {
            const double t = (double)cb[c[i]] * nu16;
            s += (nqref_popcount((unsigned)(i & k)) & 1) ? -t : t;
        }
        want[k] = s * NQREF_HS;
        bound[k] = near ? INFINITY
                        : 2 * CHECK_U_FP32 * (8 * NQREF_HS * S + 4 * (fabs(want[k]) + fabs((double)w[k])));
    }
    return near;
}

/* W4 of w (rows, cols): want and bound (rows * cols each) as nqref_cq_group, group by group.
 * Returns the number of ambiguous groups. */
static size_t nqref_cq(const float *w, int rows, int cols, const float *cb, double *want,
                       double *bound)
{
    size_t amb = 0;
    for (int r = 0; r < rows; r++)
        for (int c0 = 0; c0 < cols; c0 += 128) {
            const size_t o = (size_t)r * cols + c0;
            const int len = cols - c0 < 128 ? cols - c0 : 128;
            amb += (size_t)nqref_cq_group(w + o, len, cb, want + o, bound + o, NULL);
        }
    return amb;
}

/* A8 of one row x[0..cols): s = f32(max|x| / 127) (1 for a zero row; the double quotient rounds
 * to the same float: 127 = 2^7 - 1 never leaves a double on a float midpoint), q = clip(round
 * half even(x / s), -128, 127) s exactly. bound: fp32 rounds r s, q - x and x + (q - x), doubled;
 * INFINITY where x / s lies within 2 ulp of a half-integer (fp32's quotient may round across).
 * Returns the number of such elements. */
static size_t nqref_a8_row(const float *x, int cols, double *want, double *bound)
{
    double amax = 0.0;
    for (int c = 0; c < cols; c++) amax = fabs((double)x[c]) > amax ? fabs((double)x[c]) : amax;
    const double s = amax > 0.0 ? (double)(float)(amax / 127.0) : 1.0;
    size_t amb = 0;
    for (int c = 0; c < cols; c++) {
        const double d = x[c] / s, fl = floor(d), mid = fl + 0.5;
        double r = d < mid ? fl : d > mid ? fl + 1 : (fmod(fl, 2.0) == 0.0 ? fl : fl + 1);
        r = r < -128 ? -128 : r > 127 ? 127 : r;
        want[c] = r * s;
        const int near = fabs(d - mid) <= 2 * ldexp(fabs(d), -23);
        amb += (size_t)near;
        bound[c] = near ? INFINITY : 2 * CHECK_U_FP32 * (2 * fabs(want[c]) + fabs(want[c] - x[c]));
    }
    return amb;
}

#endif
