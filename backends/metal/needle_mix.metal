/* needle_mix.metal: Needle's mixing layers (backend.h, "Needle's mixing layers"; docs/needle.md
 * 2.2-2.6): the Kronecker product's left factor (the right one is an MPS matmul), column
 * permutations and scales, row softmax, the Hadamard MLP's SiLU middle, mHC's coefficients
 * (Sinkhorn, one thread per row in its own device scratch), collapse and expand, and the engram
 * gate, each with its input gradient. Row reductions are one thread per row into scratch, then
 * one thread per element; every sum runs in backends/cpu/cpu_needle_mix.c's order. No thread
 * reads what another thread of the same dispatch writes; no atomics, barriers or threadgroup
 * memory. */
#include "metal_shim.h"
#include "metal_params.h"

inline float loom_mix_sigmoid(float x) { return 1.0f / (1.0f + metal::exp(-x)); }

/* --- Kronecker-factored products: out[r] = L Z[r] R, Z[r] = z[r] as a x b --- */

/* T[r][k][j] = sum_i L[k][i] Z[r][i][j], i in order; L = A^T (flag 0) or A (flag 1). The host
 * then multiplies T, as (N a, b), by R = Bm (flag 0) or Bm^T (flag 1) on MPS. */
kernel void loom_mix_kron_left(device float *T LOOM_BUFFER(0), device const float *z LOOM_BUFFER(1),
                               device const float *A LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                               uint gid LOOM_GID)
{
    uint ab = p.a * p.b;
    if (gid >= p.N * ab) return;
    uint k = (gid % ab) / p.b, j = gid % p.b;
    device const float *Z = z + (gid / ab) * ab;
    float acc = 0.0f;
    for (uint i = 0; i < p.a; i++) acc += (p.flag ? A[k * p.a + i] : A[i * p.a + k]) * Z[i * p.b + j];
    T[gid] = acc;
}

/* --- column permutations and scales --- */

/* gather out[r][m] = x[r][perm[m]] (flag 0), or scatter out[r][perm[m]] = x[r][m] (flag 1): a
 * permutation, so every thread writes its own element */
kernel void loom_mix_permute_cols(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                  device const int *perm LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                  uint gid LOOM_GID)
{
    if (gid >= p.N * p.n) return;
    uint q = (gid / p.n) * p.n + (uint)perm[gid % p.n];
    if (p.flag)
        out[q] = x[gid];
    else
        out[gid] = x[q];
}

/* out (N, n_out) from x (N, n): out[r][c] = x[r][c] d[c] for c < min(n, n_out), else 0 */
kernel void loom_mix_scale_cols(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                device const float *d LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                uint gid LOOM_GID)
{
    if (gid >= p.N * p.n_out) return;
    uint r = gid / p.n_out, c = gid % p.n_out, m = metal::min(p.n, p.n_out);
    out[gid] = c < m ? x[r * p.n + c] * d[c] : 0.0f;
}

/* --- row softmax --- */

/* Step 1, one thread per row of n: st[2r] = max_c x, st[2r+1] = sum_c exp(x - max), c in order */
kernel void loom_mix_softmax_stats(device float *st LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                   constant metal_p_mix &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    device const float *xr = x + gid * p.n;
    float mx = xr[0], sum = 0.0f;
    for (uint c = 1; c < p.n; c++) mx = xr[c] > mx ? xr[c] : mx;
    for (uint c = 0; c < p.n; c++) sum += metal::exp(xr[c] - mx);
    st[2 * gid] = mx;
    st[2 * gid + 1] = sum;
}

/* Step 2: out = exp(x - max) / sum (out may be x: each thread reads then writes its element) */
kernel void loom_mix_softmax_rows(device float *out LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                  device const float *st LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                  uint gid LOOM_GID)
{
    if (gid >= p.N * p.n) return;
    uint r = gid / p.n;
    out[gid] = metal::exp(x[gid] - st[2 * r]) / st[2 * r + 1];
}

/* Backward, step 1, one thread per row: rdot[r] = <s[r], dout[r]>, c in order */
kernel void loom_mix_softmax_dot(device float *rdot LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                 device const float *s LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                 uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    float acc = 0.0f;
    for (uint c = 0; c < p.n; c++) acc += s[gid * p.n + c] * dout[gid * p.n + c];
    rdot[gid] = acc;
}

/* Step 2: dx = s (dout - rdot[r]) (dx may be dout) */
kernel void loom_mix_softmax_backward(device float *dx LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                      device const float *s LOOM_BUFFER(2), device const float *rdot LOOM_BUFFER(3),
                                      constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.n) return;
    dx[gid] = s[gid] * (dout[gid] - rdot[gid / p.n]);
}

/* --- the Hadamard MLP's middle, rows of n --- */

/* u = (d2 cond) z1 + b2, out = u sigmoid(u) (out may be z1) */
kernel void loom_mix_hada_forward(device float *out LOOM_BUFFER(0), device const float *z1 LOOM_BUFFER(1),
                                  device const float *cond LOOM_BUFFER(2), device const float *d2 LOOM_BUFFER(3),
                                  device const float *b2 LOOM_BUFFER(4), constant metal_p_mix &p LOOM_BUFFER(5),
                                  uint gid LOOM_GID)
{
    if (gid >= p.N * p.n) return;
    uint c = gid % p.n;
    float u = (d2[c] * cond[gid]) * z1[gid] + b2[c];
    out[gid] = u * loom_mix_sigmoid(u);
}

/* du = dout s (1 + u (1 - s)), s = sigmoid(u); dz1 = (d2 cond) du, dcond = d2 (z1 du) */
kernel void loom_mix_hada_backward(device float *dz1 LOOM_BUFFER(0), device float *dcond LOOM_BUFFER(1),
                                   device const float *dout LOOM_BUFFER(2), device const float *z1 LOOM_BUFFER(3),
                                   device const float *cond LOOM_BUFFER(4), device const float *d2 LOOM_BUFFER(5),
                                   device const float *b2 LOOM_BUFFER(6), constant metal_p_mix &p LOOM_BUFFER(7),
                                   uint gid LOOM_GID)
{
    if (gid >= p.N * p.n) return;
    uint c = gid % p.n;
    float dc = d2[c] * cond[gid];
    float u = dc * z1[gid] + b2[c], s = loom_mix_sigmoid(u);
    float du = dout[gid] * (s * (1.0f + u * (1.0f - s)));
    dz1[gid] = dc * du;
    dcond[gid] = d2[c] * (z1[gid] * du);
}

/* --- mHC coefficients: rows of K = 2L + L^2 columns (pre, post, res as L x L) --- */

/* logsumexp of n values at stride st: max + log(sum exp(z - max)), in order */
inline float loom_mix_lse(device const float *z, uint st, uint n)
{
    float mx = z[0], sum = 0.0f;
    for (uint i = 1; i < n; i++) mx = z[i * st] > mx ? z[i * st] : mx;
    for (uint i = 0; i < n; i++) sum += metal::exp(z[i * st] - mx);
    return mx + metal::log(sum);
}

/* Sinkhorn step t on the L x L matrix Z in place: t even, every row minus its logsumexp; t odd,
 * every column */
inline void loom_mix_sink_step(device float *Z, uint L, uint t)
{
    uint along = t % 2u ? L : 1u, across = t % 2u ? 1u : L;
    for (uint i = 0; i < L; i++) {
        device float *line = Z + i * across;
        float lse = loom_mix_lse(line, along, L);
        for (uint j = 0; j < L; j++) line[j * along] -= lse;
    }
}

/* The pre and post gates' arguments (k < L: pre; L <= k < 2L: post):
 * pre: (alpha0 z + b) + (8 [k == lane] - 4);  post: (alpha1 z + b) - 4 [k - L != lane] */
inline float loom_mix_gate_arg(device const float *z, device const float *alpha, device const float *bias,
                               uint k, uint L, uint lane)
{
    if (k < L) return (alpha[0] * z[k] + bias[k]) + (k == lane ? 4.0f : -4.0f);
    return (alpha[1] * z[k] + bias[k]) - (k - L != lane ? 4.0f : 0.0f);
}

/* One thread per row: h_pre = sigmoid(.), h_post = 2 sigmoid(.), and H = exp(Sinkhorn(alpha2
 * z_res + b_res)), the steps run in place in h's res columns (the thread's own row) */
kernel void loom_mix_coeffs_forward(device float *h LOOM_BUFFER(0), device const float *z LOOM_BUFFER(1),
                                    device const float *alpha LOOM_BUFFER(2), device const float *bias LOOM_BUFFER(3),
                                    constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    uint L = p.L, LL = L * L, K = 2 * L + LL;
    device float *hr = h + gid * K, *Z = hr + 2 * L;
    device const float *zr = z + gid * K;
    for (uint k = 0; k < 2 * L; k++) {
        float s = loom_mix_sigmoid(loom_mix_gate_arg(zr, alpha, bias, k, L, p.lane));
        hr[k] = k < L ? s : 2.0f * s;
    }
    for (uint q = 0; q < LL; q++) Z[q] = alpha[2] * zr[2 * L + q] + bias[2 * L + q];
    for (uint t = 0; t < METAL_MIX_SINK_STEPS; t++) loom_mix_sink_step(Z, L, t);
    for (uint q = 0; q < LL; q++) Z[q] = metal::exp(Z[q]);
}

/* One thread per row, dz from dh. Gates: dz = alpha sigmoid'(.) dh (times 2 for post). Sinkhorn:
 * the steps recomputed in dz's res columns, each step's input kept in trace (this row's
 * 40 L^2 floats of scratch); dZ = dh exp(Z_final) in place, then back through the steps, last
 * first: along a step's axis din = dout - softmax(in) sum(dout); dz_res = alpha2 dZ. */
kernel void loom_mix_coeffs_backward(device float *dz LOOM_BUFFER(0), device float *trace LOOM_BUFFER(1),
                                     device const float *dh LOOM_BUFFER(2), device const float *z LOOM_BUFFER(3),
                                     device const float *alpha LOOM_BUFFER(4), device const float *bias LOOM_BUFFER(5),
                                     constant metal_p_mix &p LOOM_BUFFER(6), uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    uint L = p.L, LL = L * L, K = 2 * L + LL;
    device float *dzr = dz + gid * K, *Z = dzr + 2 * L, *tr = trace + gid * METAL_MIX_SINK_STEPS * LL;
    device const float *zr = z + gid * K, *g = dh + gid * K;
    for (uint k = 0; k < 2 * L; k++) {
        float s = loom_mix_sigmoid(loom_mix_gate_arg(zr, alpha, bias, k, L, p.lane));
        float dv = k < L ? g[k] * (s * (1.0f - s)) : g[k] * (2.0f * (s * (1.0f - s)));
        dzr[k] = alpha[k < L ? 0 : 1] * dv;
    }
    for (uint q = 0; q < LL; q++) Z[q] = alpha[2] * zr[2 * L + q] + bias[2 * L + q];
    for (uint t = 0; t < METAL_MIX_SINK_STEPS; t++) {
        for (uint q = 0; q < LL; q++) tr[t * LL + q] = Z[q];
        loom_mix_sink_step(Z, L, t);
    }
    for (uint q = 0; q < LL; q++) Z[q] = g[2 * L + q] * metal::exp(Z[q]); /* now dZ */
    for (uint t = METAL_MIX_SINK_STEPS; t-- > 0;) {
        uint along = t % 2u ? L : 1u, across = t % 2u ? 1u : L;
        for (uint i = 0; i < L; i++) {
            device const float *x = tr + t * LL + i * across;
            device float *d = Z + i * across;
            float mx = x[0], sum = 0.0f, gs = 0.0f;
            for (uint j = 1; j < L; j++) mx = x[j * along] > mx ? x[j * along] : mx;
            for (uint j = 0; j < L; j++) {
                sum += metal::exp(x[j * along] - mx);
                gs += d[j * along];
            }
            for (uint j = 0; j < L; j++) d[j * along] -= (metal::exp(x[j * along] - mx) / sum) * gs;
        }
    }
    for (uint q = 0; q < LL; q++) Z[q] = alpha[2] * Z[q];
}

/* --- mHC collapse and expand: X (N, L, d); h rows of stride hs (collapse) or K (expand) --- */

/* u[r][c] = sum_k h[r hs + k] X[r][k][c], k in order (hs 0: one h for every row) */
kernel void loom_mix_collapse(device float *u LOOM_BUFFER(0), device const float *X LOOM_BUFFER(1),
                              device const float *h LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                              uint gid LOOM_GID)
{
    if (gid >= p.N * p.d) return;
    uint r = gid / p.d, c = gid % p.d;
    device const float *hr = h + r * p.hs, *x = X + r * p.L * p.d + c;
    float o = hr[0] * x[0];
    for (uint k = 1; k < p.L; k++) o += hr[k] * x[k * p.d];
    u[gid] = o;
}

/* dX[r][k][c] += h[r hs + k] du[r][c] */
kernel void loom_mix_collapse_dx(device float *dX LOOM_BUFFER(0), device const float *du LOOM_BUFFER(1),
                                 device const float *h LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                 uint gid LOOM_GID)
{
    if (gid >= p.N * p.L * p.d) return;
    uint r = gid / (p.L * p.d), k = (gid / p.d) % p.L, c = gid % p.d;
    dX[gid] += h[r * p.hs + k] * du[r * p.d + c];
}

/* dh[r hs + k] = <du[r], X[r][k]>, one thread per (r, k), c in order */
kernel void loom_mix_collapse_dh(device float *dh LOOM_BUFFER(0), device const float *du LOOM_BUFFER(1),
                                 device const float *X LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                 uint gid LOOM_GID)
{
    if (gid >= p.N * p.L) return;
    uint r = gid / p.L, k = gid % p.L;
    device const float *g = du + r * p.d, *x = X + gid * p.d;
    float acc = 0.0f;
    for (uint c = 0; c < p.d; c++) acc += g[c] * x[c];
    dh[r * p.hs + k] = acc;
}

/* Xo[r][i][c] = sum_j H[i][j] X[r][j][c] (j in order) + h_post[i] y[r][c] */
kernel void loom_mix_expand(device float *Xo LOOM_BUFFER(0), device const float *X LOOM_BUFFER(1),
                            device const float *h LOOM_BUFFER(2), device const float *y LOOM_BUFFER(3),
                            constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.L * p.d) return;
    uint L = p.L, r = gid / (L * p.d), i = (gid / p.d) % L, c = gid % p.d;
    device const float *hr = h + r * (2 * L + L * L), *Hi = hr + 2 * L + i * L, *x = X + r * L * p.d + c;
    float o = Hi[0] * x[0];
    for (uint j = 1; j < L; j++) o += Hi[j] * x[j * p.d];
    Xo[gid] = o + hr[L + i] * y[r * p.d + c];
}

/* Thread (r, j, c) of N x (L + 1) x d, g = dL/dXo: j < L, dX[r][j][c] = sum_i H[i][j] g[r][i][c];
 * j = L, dy[r][c] = sum_i h_post[i] g[r][i][c] (i in order) */
kernel void loom_mix_expand_dx(device float *dX LOOM_BUFFER(0), device float *dy LOOM_BUFFER(1),
                               device const float *g LOOM_BUFFER(2), device const float *h LOOM_BUFFER(3),
                               constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    uint L = p.L;
    if (gid >= p.N * (L + 1) * p.d) return;
    uint r = gid / ((L + 1) * p.d), j = (gid / p.d) % (L + 1), c = gid % p.d;
    device const float *hr = h + r * (2 * L + L * L), *gr = g + r * L * p.d + c;
    /* column j of H (stride L), or h_post (stride 1) */
    device const float *w = j < L ? hr + 2 * L + j : hr + L;
    uint ws = j < L ? L : 1u;
    float o = w[0] * gr[0];
    for (uint i = 1; i < L; i++) o += w[i * ws] * gr[i * p.d];
    if (j < L)
        dX[(r * L + j) * p.d + c] = o;
    else
        dy[r * p.d + c] = o;
}

/* Thread (r, i, j) of N x L x (L + 1): j < L, dh res[i][j] = <g[r][i], X[r][j]>; j = L, dh
 * post[i] = <g[r][i], y[r]> (c in order; the pre columns are not touched) */
kernel void loom_mix_expand_dh(device float *dh LOOM_BUFFER(0), device const float *g LOOM_BUFFER(1),
                               device const float *X LOOM_BUFFER(2), device const float *y LOOM_BUFFER(3),
                               constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    uint L = p.L;
    if (gid >= p.N * L * (L + 1)) return;
    uint r = gid / (L * (L + 1)), i = (gid / (L + 1)) % L, j = gid % (L + 1);
    device const float *gi = g + (r * L + i) * p.d, *o = j < L ? X + (r * L + j) * p.d : y + r * p.d;
    float acc = 0.0f;
    for (uint c = 0; c < p.d; c++) acc += gi[c] * o[c];
    dh[r * (2 * L + L * L) + (j < L ? 2 * L + i * L + j : L + i)] = acc;
}

/* --- the engram gate on rows of d: r(z) = z rsqrt(mean(z^2) + 1e-6) --- */

/* rsqrt(mean(z^2) + 1e-6) of d values (as 1 / sqrt: the CPU's rounding) */
inline float loom_mix_rms_inv(device const float *z, uint d)
{
    float acc = 0.0f;
    for (uint c = 0; c < d; c++) acc += z[c] * z[c];
    return 1.0f / metal::sqrt(acc / (float)d + 1e-6f);
}

/* sigmoid(c), c = <u su, k sk> / sqrt(d) (su, sk: the rms scales; products as rmsunit forms them) */
inline float loom_mix_engram_s(device const float *u, device const float *k, float su, float sk, uint d)
{
    float acc = 0.0f;
    for (uint c = 0; c < d; c++) acc += (u[c] * su) * (k[c] * sk);
    return loom_mix_sigmoid(acc / metal::sqrt((float)d));
}

/* Forward, step 1, one thread per row: s[r] = sigmoid(c) */
kernel void loom_mix_engram_gate(device float *s LOOM_BUFFER(0), device const float *u LOOM_BUFFER(1),
                                 device const float *k LOOM_BUFFER(2), constant metal_p_mix &p LOOM_BUFFER(3),
                                 uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    device const float *ur = u + gid * p.d, *kr = k + gid * p.d;
    s[gid] = loom_mix_engram_s(ur, kr, loom_mix_rms_inv(ur, p.d), loom_mix_rms_inv(kr, p.d), p.d);
}

/* Step 2: out = u + s[r] v (out may be u) */
kernel void loom_mix_engram_forward(device float *out LOOM_BUFFER(0), device const float *u LOOM_BUFFER(1),
                                    device const float *v LOOM_BUFFER(2), device const float *s LOOM_BUFFER(3),
                                    constant metal_p_mix &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.d) return;
    out[gid] = u[gid] + s[gid / p.d] * v[gid];
}

/* Backward, step 1, one thread per row: dc = s (1 - s) <dout, v>; with w = dc / sqrt(d) the
 * gradient reaching r(u) is w r(k), and r(u) = u su's backward gives
 * du = dout + a k - b u,  a = w su sk,  b = w su^3 <u, r(k)> / d;  ab[2r] = a, ab[2r+1] = b */
kernel void loom_mix_engram_coef(device float *ab LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                 device const float *u LOOM_BUFFER(2), device const float *k LOOM_BUFFER(3),
                                 device const float *v LOOM_BUFFER(4), constant metal_p_mix &p LOOM_BUFFER(5),
                                 uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    uint d = p.d;
    device const float *ur = u + gid * d, *kr = k + gid * d, *vr = v + gid * d, *g = dout + gid * d;
    float su = loom_mix_rms_inv(ur, d), sk = loom_mix_rms_inv(kr, d);
    float s = loom_mix_engram_s(ur, kr, su, sk, d), gv = 0.0f, uk = 0.0f;
    for (uint c = 0; c < d; c++) gv += g[c] * vr[c];
    float w = (s * (1.0f - s)) * gv / metal::sqrt((float)d);
    for (uint c = 0; c < d; c++) uk += ur[c] * (kr[c] * sk);
    ab[2 * gid] = w * su * sk;
    ab[2 * gid + 1] = w * su * su * su * uk / (float)d;
}

/* Step 2: du = dout + a k - b u (du may be dout) */
kernel void loom_mix_engram_backward(device float *du LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                     device const float *u LOOM_BUFFER(2), device const float *k LOOM_BUFFER(3),
                                     device const float *ab LOOM_BUFFER(4), constant metal_p_mix &p LOOM_BUFFER(5),
                                     uint gid LOOM_GID)
{
    if (gid >= p.N * p.d) return;
    uint r = gid / p.d;
    du[gid] = dout[gid] + ab[2 * r] * k[gid] - ab[2 * r + 1] * u[gid];
}
