/* needle.metal: Needle's element-wise layers: the causal depthwise conv taps along time
 * (forward, input gradient, tap-gradient chunk partials, one decode row), the sigmoid gates
 * (element-wise; scalar, with its gradient's partial sums) and the W4 / A8 fake quantisation
 * (backends/needle_quant.h's arithmetic, repeated here: MSL cannot include it). One GPU thread
 * per output item; no thread reads what another thread of the same dispatch writes; no atomics. */
#include "metal_shim.h"
#include "metal_params.h"

/* out[n,c] = w[0,c] x[n,c] + sum_{j >= 1, j*dil <= t} w[j,c] x[n - j*dil, c], t = n mod T */
kernel void loom_taps_forward(device float *out LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                              device const float *w LOOM_BUFFER(2), constant metal_p_taps &p LOOM_BUFFER(3),
                              uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint n = gid / p.C, c = gid % p.C, t = n % p.T;
    float y = w[c] * inp[gid];
    for (uint j = 1; j < p.K && j * p.dil <= t; j++) y += w[j * p.C + c] * inp[gid - j * p.dil * p.C];
    out[gid] = y;
}

/* dx[n,c] = w[0,c] dout[n,c] + sum_{j >= 1, t + j*dil < T} w[j,c] dout[n + j*dil, c] */
kernel void loom_taps_backward_dinp(device float *dinp LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                    device const float *w LOOM_BUFFER(2), constant metal_p_taps &p LOOM_BUFFER(3),
                                    uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint n = gid / p.C, c = gid % p.C, t = n % p.T;
    float y = w[c] * dout[gid];
    for (uint j = 1; j < p.K && t + j * p.dil < p.T; j++) y += w[j * p.C + c] * dout[gid + j * p.dil * p.C];
    dinp[gid] = y;
}

/* Tap gradient, step 1: part[k, j*C + c] = sum over the rows n of chunk k (in order) with
 * t >= j*dil of dout[n,c] x[n - j*dil, c]. Step 2 is loom_colsum_final over K*C columns. */
kernel void loom_taps_wpartial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                               device const float *inp LOOM_BUFFER(2), constant metal_p_taps &p LOOM_BUFFER(3),
                               uint gid LOOM_GID)
{
    uint kc = p.K * p.C;
    if (gid >= p.nchunks * kc) return;
    uint k = gid / kc, j = (gid % kc) / p.C, c = gid % p.C;
    uint n0 = k * p.chunk_rows, n1 = metal::min(p.N, n0 + p.chunk_rows), back = j * p.dil;
    float s = 0.0f;
    for (uint n = n0; n < n1; n++)
        if (n % p.T >= back) s += dout[n * p.C + c] * inp[(n - back) * p.C + c];
    part[gid] = s;
}

/* One thread per (r, c) of R = N rows: the forward's sum over the state (R, S, C), S = (K-1) dil,
 * then column c of the state moves on one row and takes x[r, c]. */
kernel void loom_taps_decode(device float *out LOOM_BUFFER(0), device float *state LOOM_BUFFER(1),
                             device const float *x LOOM_BUFFER(2), device const float *w LOOM_BUFFER(3),
                             constant metal_p_taps &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint r = gid / p.C, c = gid % p.C, S = (p.K - 1) * p.dil;
    float xi = x[gid];
    float y = w[c] * xi;
    for (uint j = 1; j < p.K; j++) y += w[j * p.C + c] * state[(r * S + S - j * p.dil) * p.C + c];
    if (S > 0) {
        for (uint i = 0; i + 1 < S; i++) state[(r * S + i) * p.C + c] = state[(r * S + i + 1) * p.C + c];
        state[(r * S + S - 1) * p.C + c] = xi;
    }
    out[gid] = y;
}

/* --- sigmoid gates, s = sigmoid(g) = 1 / (1 + e^-g) --- */

/* out = x s */
kernel void loom_gate_forward(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                              device const float *g LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                              uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float s = 1.0f / (1.0f + metal::exp(-g[gid]));
    out[gid] = x[gid] * s;
}

/* dx = dout s, dg = dout x s (1 - s) */
kernel void loom_gate_backward(device float *dx LOOM_BUFFER(0), device float *dg LOOM_BUFFER(1),
                               device const float *dout LOOM_BUFFER(2), device const float *x LOOM_BUFFER(3),
                               device const float *g LOOM_BUFFER(4), constant metal_p_vec &p LOOM_BUFFER(5),
                               uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float s = 1.0f / (1.0f + metal::exp(-g[gid])), d = dout[gid];
    dx[gid] = d * s;
    dg[gid] = d * x[gid] * s * (1.0f - s);
}

/* out = sigmoid(s[0]) x */
kernel void loom_scalar_gate_forward(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                     device const float *s LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                                     uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float a = 1.0f / (1.0f + metal::exp(-s[0]));
    out[gid] = a * x[gid];
}

/* The scalar gate's sum, step 1: part[gid] = sum_{i = gid mod parts, i < n} dout[i] x[i]. */
kernel void loom_scalar_gate_partial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                     device const float *x LOOM_BUFFER(2), constant metal_p_sumsq &p LOOM_BUFFER(3),
                                     uint gid LOOM_GID)
{
    if (gid >= p.parts) return;
    float acc = 0.0f;
    for (uint i = gid; i < p.n; i += p.parts) acc += dout[i] * x[i];
    part[gid] = acc;
}

/* Step 2, one thread: ds[0] += sigmoid'(s) sum_g part[g], g in order (p.parts partials). */
kernel void loom_scalar_gate_ds(device float *ds LOOM_BUFFER(0), device const float *part LOOM_BUFFER(1),
                                device const float *s LOOM_BUFFER(2), constant metal_p_sumsq &p LOOM_BUFFER(3),
                                uint gid LOOM_GID)
{
    if (gid >= 1u) return;
    float acc = 0.0f;
    for (uint k = 0; k < p.parts; k++) acc += part[k];
    float a = 1.0f / (1.0f + metal::exp(-s[0]));
    ds[0] += a * (1.0f - a) * acc;
}

/* dx = sigmoid(s[0]) dout */
kernel void loom_scalar_gate_dx(device float *dx LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                device const float *s LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                                uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float a = 1.0f / (1.0f + metal::exp(-s[0]));
    dx[gid] = a * dout[gid];
}

/* --- W4 (CQ) and A8 fake quantisation: backends/needle_quant.h, operation for operation --- */

/* v H_sylvester in place, stages h = 1, 2, ..., 64: (v[i], v[i+h]) <- (v[i] + v[i+h], v[i] - v[i+h]) */
inline void loom_cq_fwht(thread float *v)
{
    for (uint h = 1; h < 128u; h <<= 1)
        for (uint i = 0; i < 128u; i++)
            if ((i & h) == 0u) {
                float a = v[i], b = v[i + h];
                v[i] = a + b;
                v[i + h] = a - b;
            }
}

/* sum r^2 as a warp adds it: ((r0^2 + r1^2) + r2^2) + r3^2 per 4, then xor butterfly 16 .. 1 */
inline float loom_cq_sumsq(thread const float *r)
{
    float p[32], n[32];
    for (uint l = 0; l < 32u; l++) {
        float s = r[4 * l] * r[4 * l] + r[4 * l + 1] * r[4 * l + 1];
        s = s + r[4 * l + 2] * r[4 * l + 2];
        p[l] = s + r[4 * l + 3] * r[4 * l + 3];
    }
    for (uint off = 16; off > 0u; off >>= 1) {
        for (uint l = 0; l < 32u; l++) n[l] = p[l] + p[l ^ off];
        for (uint l = 0; l < 32u; l++) p[l] = n[l];
    }
    return p[0];
}

/* x >= 0 rounded to fp16 (nearest even; inf beyond 65504) and back: step 2^max(e - 11, -24) */
inline float loom_cq_round_fp16(float x)
{
    int e = 0;
    (void)metal::frexp(x, e);
    int q = e - 11 < -24 ? -24 : e - 11;
    float r = metal::ldexp(metal::rint(metal::ldexp(x, -q)), q);
    return r > 65504.0f ? INFINITY : r;
}

/* The code nearest u: pos = clip(#{cb[k] < u}, 1, 15), the lower code on a tie. */
inline uint loom_cq_code(float u, thread const float *cb)
{
    uint pos = 0;
    for (uint k = 0; k < 16u; k++) pos += cb[k] < u ? 1u : 0u;
    pos = pos < 1u ? 1u : pos > 15u ? 15u : pos;
    return metal::abs(u - cb[pos - 1]) <= metal::abs(u - cb[pos]) ? pos - 1 : pos;
}

/* One thread per group of 128 along a row: rotate, normalise, nearest codes, fp16 norm, rotate
 * back; out = w + (what - w) on the group's real values (out may be w). */
kernel void loom_cq_w4(device float *out LOOM_BUFFER(0), device const float *w LOOM_BUFFER(1),
                       device const float *codebook LOOM_BUFFER(2), constant metal_p_quant &p LOOM_BUFFER(3),
                       uint gid LOOM_GID)
{
    if (gid >= p.rows * p.gpr) return;
    uint row = gid / p.gpr, c0 = (gid % p.gpr) * 128u;
    uint len = p.cols - c0 < 128u ? p.cols - c0 : 128u;
    float v[128], cb[16];
    for (uint k = 0; k < 16u; k++) cb[k] = codebook[k];
    for (uint k = 0; k < 128u; k++) v[k] = k < len ? w[row * p.cols + c0 + k] : 0.0f;
    loom_cq_fwht(v);
    for (uint k = 0; k < 128u; k++) v[k] = v[k] * 0.0883883461f;
    float nu = metal::sqrt(loom_cq_sumsq(v));
    float den = nu > 1e-12f ? nu : 1e-12f, nu16 = loom_cq_round_fp16(nu);
    for (uint k = 0; k < 128u; k++) v[k] = cb[loom_cq_code(v[k] / den, cb)] * nu16;
    loom_cq_fwht(v);
    for (uint k = 0; k < len; k++) {
        float x = w[row * p.cols + c0 + k], q = v[k] * 0.0883883461f;
        out[row * p.cols + c0 + k] = x + (q - x);
    }
}

/* A8, step 1: scale[r] = max_c |x[r, c]| / 127 (1 for a zero row), one thread per row */
kernel void loom_a8_rowscale(device float *scale LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                             constant metal_p_quant &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.rows) return;
    float amax = 0.0f;
    for (uint c = 0; c < p.cols; c++) amax = metal::abs(x[gid * p.cols + c]) > amax ? metal::abs(x[gid * p.cols + c]) : amax;
    scale[gid] = amax > 0.0f ? amax / 127.0f : 1.0f;
}

/* A8, step 2: out = x + (clip(rint(x / s), -128, 127) s - x), one thread per element */
kernel void loom_a8_quant(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                          device const float *scale LOOM_BUFFER(2), constant metal_p_quant &p LOOM_BUFFER(3),
                          uint gid LOOM_GID)
{
    if (gid >= p.rows * p.cols) return;
    float xi = x[gid], s = scale[gid / p.cols];
    float r = metal::rint(xi / s);
    r = r < -128.0f ? -128.0f : r > 127.0f ? 127.0f : r;
    float q = r * s;
    out[gid] = xi + (q - xi);
}
