/* elementwise.metal: the memory-bound kernels: fill, add, axpy, scale, sum of squares, bias, and
 * the deterministic column/row reductions other ops build on. One GPU thread per output item;
 * no thread reads what another thread of the same dispatch writes, and no atomics are used. */
#include "metal_shim.h"
#include "metal_params.h"

/* x[i] = a */
kernel void loom_fill(device float *x LOOM_BUFFER(0), constant metal_p_vec &p LOOM_BUFFER(1),
                      uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    x[gid] = p.a;
}

/* out[i] = a[i] + b[i] */
kernel void loom_add(device float *out LOOM_BUFFER(0), device const float *a LOOM_BUFFER(1),
                     device const float *b LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                     uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    out[gid] = a[gid] + b[gid];
}

/* y[i] += alpha x[i]   (alpha = p.a) */
kernel void loom_axpy(device float *y LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                      constant metal_p_vec &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    y[gid] += p.a * x[gid];
}

/* x[i] *= alpha   (alpha = p.a) */
kernel void loom_scale(device float *x LOOM_BUFFER(0), constant metal_p_vec &p LOOM_BUFFER(1),
                       uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    x[gid] *= p.a;
}

/* Partial sums of squares: part[2g] + part[2g+1] = sum_{i = g mod parts} x[i]^2, kept as an
 * unevaluated float pair (hi, lo) so the host's double sum loses almost nothing (Metal has no
 * double). Each square is split exactly, sq + e = x*x with e = fma(x, x, -sq), and added with
 * TwoSum: s' = s + y, b = s' - s, err = (s - (s' - b)) + (y - b). Strided visits keep
 * neighbouring threads on neighbouring addresses. A NaN/Inf in hi is reported as it is. */
kernel void loom_sumsq_partial(device float *part LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                               constant metal_p_sumsq &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.parts) return;
    float hi = 0.0f, lo = 0.0f;
    for (uint i = gid; i < p.n; i += p.parts) {
        float xi = x[i];
        float sq = xi * xi;
        float e = metal::fma(xi, xi, -sq);
        float s = hi + sq;
        float bv = s - hi;
        lo += (hi - (s - bv)) + (sq - bv) + e;
        hi = s;
    }
    part[2 * gid] = hi;
    part[2 * gid + 1] = metal::isfinite(hi) ? lo : 0.0f;
}

/* out[n, c] += bias[c]   over (N, C) */
kernel void loom_bias_add(device float *out LOOM_BUFFER(0), device const float *bias LOOM_BUFFER(1),
                          constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    out[gid] += bias[gid % p.C];
}

/* Column sums, step 1: part[k, c] = sum_{n in chunk k} x[n, c], chunk k = rows
 * [k*chunk_rows, min(N, (k+1)*chunk_rows)). One thread per (k, c), rows in increasing order. */
kernel void loom_colsum_partial(device float *part LOOM_BUFFER(0), device const float *x LOOM_BUFFER(1),
                                constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.nchunks * p.C) return;
    uint k = gid / p.C, c = gid % p.C;
    uint n0 = k * p.chunk_rows, n1 = metal::min(p.N, n0 + p.chunk_rows);
    float s = 0.0f;
    for (uint n = n0; n < n1; n++) s += x[n * p.C + c];
    part[gid] = s;
}

/* Column sums, step 2 (accumulating): dst[c] += sum_k part[k, c], k in increasing order, so the
 * result is the same on every run (the deterministic replacement for atomics). */
kernel void loom_colsum_final(device float *dst LOOM_BUFFER(0), device const float *part LOOM_BUFFER(1),
                              constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.C) return;
    float s = 0.0f;
    for (uint k = 0; k < p.nchunks; k++) s += part[k * p.C + gid];
    dst[gid] += s;
}

/* Row reductions, last step: dst[n, w] = scale * sum_j part[(n*lanes + j)*width + w] for the
 * `lanes` partial sums of row n (lane order fixed). One thread per (n, w). */
kernel void loom_row_final(device float *dst LOOM_BUFFER(0), device const float *part LOOM_BUFFER(1),
                           constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N * p.width) return;
    uint n = gid / p.width, w = gid % p.width;
    float s = 0.0f;
    for (uint j = 0; j < p.lanes; j++) s += part[(n * p.lanes + j) * p.width + w];
    dst[gid] = p.scale * s;
}
