/* needle_quant.h: Needle's fake quantisation (docs/needle.md section 3) written once for the
 * backends that can include C: cpu_needle_quant.c and cuda_needle.cu run exactly this arithmetic,
 * in this order, with no contracted multiply-adds (the CPU file builds with -ffp-contract=off, the
 * GPU uses __fmul_rn & co.), so the two give the same bits; Metal (needle.metal) cannot include it
 * and repeats it. Header-only, no state; it must never depend on a backend. */
#ifndef LOOM_NEEDLE_QUANT_H
#define LOOM_NEEDLE_QUANT_H

#include <math.h>

#include "backends/loom_hd.h"

/* Single IEEE operations, never fused with a neighbour. */
#if defined(__CUDA_ARCH__)
#define NQ_MUL(a, b) __fmul_rn((a), (b))
#define NQ_ADD(a, b) __fadd_rn((a), (b))
#define NQ_SUB(a, b) __fsub_rn((a), (b))
#define NQ_DIV(a, b) __fdiv_rn((a), (b))
#else
#define NQ_MUL(a, b) ((a) * (b))
#define NQ_ADD(a, b) ((a) + (b))
#define NQ_SUB(a, b) ((a) - (b))
#define NQ_DIV(a, b) ((a) / (b))
#endif

#define CQ_GROUP 128          /* W4 group: the weights a Hadamard rotation mixes */
#define CQ_CODES 16           /* the codebook's entries (ascending) */
#define CQ_HS 0.0883883461f   /* f32(1 / sqrt(128)) = 0x3db504f3: every entry of Needle's H */

/* x rounded to fp16 (to nearest even; beyond 65504 to inf, under 2^-14 to fp16's subnormal
 * steps of 2^-24) and back to float: x = m 2^e, m in [0.5, 1), fp16 keeps 11 bits, so the step
 * is 2^max(e - 11, -24); the scalings are exact. */
static inline LOOM_HD float cq_round_fp16(float x)
{
    int e;
    (void)frexpf(fabsf(x), &e);
    const int q = e - 11 < -24 ? -24 : e - 11;
    float r = ldexpf(rintf(ldexpf(fabsf(x), -q)), q);
    if (r > 65504.0f) r = INFINITY;
    return copysignf(r, x);
}

/* The code of u in the ascending codebook cb: pos = clip(#{k : cb[k] < u}, 1, 15) (numpy's
 * searchsorted, side left), then pos - 1 when |u - cb[pos-1]| <= |u - cb[pos]| (a tie takes the
 * lower code), else pos. */
static inline LOOM_HD int cq_code(float u, const float *cb)
{
    int pos = 0;
    for (int k = 0; k < CQ_CODES; k++) pos += cb[k] < u;
    pos = pos < 1 ? 1 : pos > CQ_CODES - 1 ? CQ_CODES - 1 : pos;
    return fabsf(NQ_SUB(u, cb[pos - 1])) <= fabsf(NQ_SUB(u, cb[pos])) ? pos - 1 : pos;
}

/* Walsh-Hadamard butterflies on v[0..128), stages h = 1, 2, ..., 64: for i with bit h clear,
 * (v[i], v[i+h]) <- (v[i] + v[i+h], v[i] - v[i+h]). v H_sylvester, unscaled. */
static inline LOOM_HD void cq_fwht(float *v)
{
    for (int h = 1; h < CQ_GROUP; h <<= 1)
        for (int i = 0; i < CQ_GROUP; i++)
            if (!(i & h)) {
                const float a = v[i], b = v[i + h];
                v[i] = NQ_ADD(a, b);
                v[i + h] = NQ_SUB(a, b);
            }
}

/* sum_k r[k]^2 in the order a warp adds it (lane l owns r[4l .. 4l+3]): per lane
 * ((r0^2 + r1^2) + r2^2) + r3^2, then the 32 lane sums by xor butterfly, offsets 16, 8, 4, 2, 1
 * (a + b == b + a, so every lane holds the same bits). */
static inline LOOM_HD float cq_sumsq(const float *r)
{
    float p[32];
    for (int l = 0; l < 32; l++) {
        const float *q = r + 4 * l;
        float s = NQ_ADD(NQ_MUL(q[0], q[0]), NQ_MUL(q[1], q[1]));
        s = NQ_ADD(s, NQ_MUL(q[2], q[2]));
        p[l] = NQ_ADD(s, NQ_MUL(q[3], q[3]));
    }
    for (int off = 16; off > 0; off >>= 1) {
        float n[32];
        for (int l = 0; l < 32; l++) n[l] = NQ_ADD(p[l], p[l ^ off]);
        for (int l = 0; l < 32; l++) p[l] = n[l];
    }
    return p[0];
}

/* One W4 group in place: v (128 values, the group zero-padded) becomes what:
 *   rho = FWHT(v) HS;  nu = sqrt(sum rho^2);  u = rho / max(nu, 1e-12);  c = cq_code(u);
 *   nu16 = cq_round_fp16(nu);  what = FWHT(cb[c] nu16) HS.
 * The caller forms w + (what - w) for the group's real values. */
static inline LOOM_HD void cq_group(float *v, const float *cb)
{
    cq_fwht(v);
    for (int k = 0; k < CQ_GROUP; k++) v[k] = NQ_MUL(v[k], CQ_HS);
    const float nu = sqrtf(cq_sumsq(v));
    const float den = nu > 1e-12f ? nu : 1e-12f, nu16 = cq_round_fp16(nu);
    for (int k = 0; k < CQ_GROUP; k++) v[k] = NQ_MUL(cb[cq_code(NQ_DIV(v[k], den), cb)], nu16);
    cq_fwht(v);
    for (int k = 0; k < CQ_GROUP; k++) v[k] = NQ_MUL(v[k], CQ_HS);
}

/* Needle's straight-through form x + (q - x), evaluated in f32 as written. */
static inline LOOM_HD float nq_ste(float x, float q) { return NQ_ADD(x, NQ_SUB(q, x)); }

/* A8 / KV8 on one element of a row whose absolute maximum is amax:
 * s = amax / 127 (1 when amax is 0), q = clip(rint(x / s), -128, 127) s (rint: half to even). */
static inline LOOM_HD float a8_scale(float amax) { return amax > 0.0f ? NQ_DIV(amax, 127.0f) : 1.0f; }
static inline LOOM_HD float a8_quant(float x, float s)
{
    float r = rintf(NQ_DIV(x, s));
    r = r < -128.0f ? -128.0f : r > 127.0f ? 127.0f : r;
    return nq_ste(x, NQ_MUL(r, s));
}

#endif
