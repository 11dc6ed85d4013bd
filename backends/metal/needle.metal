/* needle.metal: Needle's element-wise layers: the causal depthwise conv taps along time
 * (forward, input gradient, tap-gradient chunk partials, one decode row) and the sigmoid gates
 * (element-wise; scalar, with its gradient's partial sums). One GPU thread per output item; no
 * thread reads what another thread of the same dispatch writes; no atomics. */
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
