/* norm.metal: LayerNorm and RMSNorm over the last dim C of (N, C), forward and backward.
 * Row statistics are reduced in two dispatches (per-lane partials, then one thread per row) so
 * every thread's work is independent; weight gradients go through per-chunk column partials. */
#include "metal_shim.h"
#include "metal_params.h"

/* LayerNorm statistics, step 1: lane j of row n runs Welford over c = j, j+lanes, ...:
 * cnt += 1; d = x - mean; mean += d / cnt; m2 += d (x - mean).
 * part[(n*lanes + j)*3 + {0,1,2}] = (cnt, mean, m2). */
kernel void loom_ln_partial(device float *part LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                            constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N * p.lanes) return;
    uint n = gid / p.lanes, j = gid % p.lanes;
    device const float *x = inp + n * p.C;
    float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (uint c = j; c < p.C; c += p.lanes) {
        cnt += 1.0f;
        float d = x[c] - mean;
        mean += d / cnt;
        m2 += d * (x[c] - mean);
    }
    part[3 * gid] = cnt;
    part[3 * gid + 1] = mean;
    part[3 * gid + 2] = m2;
}

/* LayerNorm statistics, step 2: combine the lanes of row n in order (Chan et al.):
 * n_ab = n_a + n_b, d = mean_b - mean_a, mean = mean_a + d n_b / n_ab,
 * m2 = m2_a + m2_b + d^2 n_a n_b / n_ab; var = m2 / C (biased, as torch), rstd = 1/sqrt(var + eps). */
kernel void loom_ln_stats(device float *mean LOOM_BUFFER(0), device float *rstd LOOM_BUFFER(1),
                          device const float *part LOOM_BUFFER(2), constant metal_p_rows &p LOOM_BUFFER(3),
                          uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    float na = 0.0f, ma = 0.0f, m2a = 0.0f;
    for (uint j = 0; j < p.lanes; j++) {
        uint q = (gid * p.lanes + j) * 3;
        float nb = part[q], mb = part[q + 1], m2b = part[q + 2];
        if (nb == 0.0f) continue;
        float nab = na + nb, d = mb - ma;
        ma += d * (nb / nab);
        m2a += m2b + d * d * (na * nb / nab);
        na = nab;
    }
    mean[gid] = ma;
    rstd[gid] = 1.0f / metal::sqrt(m2a / (float)p.C + p.eps);
}

/* out[n, c] = (x[n, c] - mean[n]) rstd[n] w[c] + b[c]   (b = 0 when flag == 0) */
kernel void loom_layernorm_forward(device float *out LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                                   device const float *mean LOOM_BUFFER(2), device const float *rstd LOOM_BUFFER(3),
                                   device const float *weight LOOM_BUFFER(4), device const float *bias LOOM_BUFFER(5),
                                   constant metal_p_rows &p LOOM_BUFFER(6), uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint n = gid / p.C, c = gid % p.C;
    float y = (inp[gid] - mean[n]) * rstd[n] * weight[c];
    out[gid] = p.flag ? y + bias[c] : y;
}

/* LayerNorm backward, row sums per lane: with xhat = (x - mean) rstd and g = dout w,
 * part[(n*lanes + j)*2 + {0,1}] = (sum g, sum g xhat) over the lane's columns. */
kernel void loom_ln_bwd_partial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                device const float *inp LOOM_BUFFER(2), device const float *weight LOOM_BUFFER(3),
                                device const float *mean LOOM_BUFFER(4), device const float *rstd LOOM_BUFFER(5),
                                constant metal_p_rows &p LOOM_BUFFER(6), uint gid LOOM_GID)
{
    if (gid >= p.N * p.lanes) return;
    uint n = gid / p.lanes, j = gid % p.lanes;
    float mu = mean[n], rs = rstd[n], s1 = 0.0f, s2 = 0.0f;
    for (uint c = j; c < p.C; c += p.lanes) {
        uint i = n * p.C + c;
        float g = dout[i] * weight[c];
        s1 += g;
        s2 += g * (inp[i] - mu) * rs;
    }
    part[2 * gid] = s1;
    part[2 * gid + 1] = s2;
}

/* LayerNorm input gradient (accumulating), with rows[n] = (mean_c g, mean_c g xhat):
 * dinp[n, c] += rstd (g - mean(g) - xhat mean(g xhat)). */
kernel void loom_ln_bwd_dinp(device float *dinp LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                             device const float *inp LOOM_BUFFER(2), device const float *weight LOOM_BUFFER(3),
                             device const float *mean LOOM_BUFFER(4), device const float *rstd LOOM_BUFFER(5),
                             device const float *rows LOOM_BUFFER(6), constant metal_p_rows &p LOOM_BUFFER(7),
                             uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint n = gid / p.C, c = gid % p.C;
    float rs = rstd[n];
    float xhat = (inp[gid] - mean[n]) * rs;
    float g = dout[gid] * weight[c];
    dinp[gid] += rs * (g - rows[2 * n] - xhat * rows[2 * n + 1]);
}

/* LayerNorm weight/bias gradients, step 1 per row chunk k (rows in order):
 * part[k, c] = sum_n dout xhat, part[nchunks*C + k*C + c] = sum_n dout (only when flag). */
kernel void loom_ln_bwd_wpartial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                 device const float *inp LOOM_BUFFER(2), device const float *mean LOOM_BUFFER(3),
                                 device const float *rstd LOOM_BUFFER(4), constant metal_p_rows &p LOOM_BUFFER(5),
                                 uint gid LOOM_GID)
{
    if (gid >= p.nchunks * p.C) return;
    uint k = gid / p.C, c = gid % p.C;
    uint n0 = k * p.chunk_rows, n1 = metal::min(p.N, n0 + p.chunk_rows);
    float sw = 0.0f, sb = 0.0f;
    for (uint n = n0; n < n1; n++) {
        uint i = n * p.C + c;
        sw += dout[i] * (inp[i] - mean[n]) * rstd[n];
        sb += dout[i];
    }
    part[gid] = sw;
    if (p.flag) part[p.nchunks * p.C + gid] = sb;
}

/* RMSNorm statistics, step 1: part[n*lanes + j] = sum x^2 over the lane's columns. */
kernel void loom_rms_partial(device float *part LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                             constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N * p.lanes) return;
    uint n = gid / p.lanes, j = gid % p.lanes;
    device const float *x = inp + n * p.C;
    float s = 0.0f;
    for (uint c = j; c < p.C; c += p.lanes) s += x[c] * x[c];
    part[gid] = s;
}

/* RMSNorm statistics, step 2: rstd[n] = 1 / sqrt(sum_j part[n, j] / C + eps). */
kernel void loom_rms_stats(device float *rstd LOOM_BUFFER(0), device const float *part LOOM_BUFFER(1),
                           constant metal_p_rows &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    float s = 0.0f;
    for (uint j = 0; j < p.lanes; j++) s += part[gid * p.lanes + j];
    rstd[gid] = 1.0f / metal::sqrt(s / (float)p.C + p.eps);
}

/* out[n, c] = x[n, c] rstd[n] w[c] */
kernel void loom_rmsnorm_forward(device float *out LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                                 device const float *rstd LOOM_BUFFER(2), device const float *weight LOOM_BUFFER(3),
                                 constant metal_p_rows &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    out[gid] = inp[gid] * rstd[gid / p.C] * weight[gid % p.C];
}

/* RMSNorm backward, row sums per lane: part[n*lanes + j] = sum dout w x over the lane's columns. */
kernel void loom_rms_bwd_partial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                 device const float *inp LOOM_BUFFER(2), device const float *weight LOOM_BUFFER(3),
                                 constant metal_p_rows &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.N * p.lanes) return;
    uint n = gid / p.lanes, j = gid % p.lanes;
    float s = 0.0f;
    for (uint c = j; c < p.C; c += p.lanes) {
        uint i = n * p.C + c;
        s += dout[i] * weight[c] * inp[i];
    }
    part[gid] = s;
}

/* RMSNorm input gradient (accumulating). y = x r w with r = (mean(x^2) + eps)^-1/2, so
 * dx_c = r w_c g_c - r^3 x_c (1/C) sum_i g_i w_i x_i; rows[n] holds that mean.
 * dinp[n, c] += r w g - r^3 x rows[n]. */
kernel void loom_rms_bwd_dinp(device float *dinp LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                              device const float *inp LOOM_BUFFER(2), device const float *weight LOOM_BUFFER(3),
                              device const float *rstd LOOM_BUFFER(4), device const float *rows LOOM_BUFFER(5),
                              constant metal_p_rows &p LOOM_BUFFER(6), uint gid LOOM_GID)
{
    if (gid >= p.N * p.C) return;
    uint n = gid / p.C, c = gid % p.C;
    float r = rstd[n];
    dinp[gid] += r * weight[c] * dout[gid] - r * r * r * inp[gid] * rows[n];
}

/* RMSNorm weight gradient, step 1 per row chunk k: part[k, c] = sum_n dout x rstd[n]. */
kernel void loom_rms_bwd_wpartial(device float *part LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                  device const float *inp LOOM_BUFFER(2), device const float *rstd LOOM_BUFFER(3),
                                  constant metal_p_rows &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.nchunks * p.C) return;
    uint k = gid / p.C, c = gid % p.C;
    uint n0 = k * p.chunk_rows, n1 = metal::min(p.N, n0 + p.chunk_rows);
    float s = 0.0f;
    for (uint n = n0; n < n1; n++) s += dout[n * p.C + c] * inp[n * p.C + c] * rstd[n];
    part[gid] = s;
}
