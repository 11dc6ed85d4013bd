/* needle.metal: Needle's element-wise layers: the causal depthwise conv taps along time
 * (forward, input gradient, tap-gradient chunk partials, one decode row). One GPU thread per
 * output item; no thread reads what another thread of the same dispatch writes; no atomics. */
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
