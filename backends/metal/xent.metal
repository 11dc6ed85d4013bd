/* xent.metal: fused softmax + cross-entropy over logits (N, V) in three dispatches: per-lane
 * online max/sum-exp partials, one thread per row for lse and loss, one thread per logit for
 * the gradient (written over the logits). Columns >= V_real are padding: probability 0. */
#include "metal_shim.h"
#include "metal_params.h"

/* Lane j of row n visits v = j, j+lanes, ... < V_real with an online softmax:
 * x > m: s = s e^(m - x) + 1, m = x; else s += e^(x - m).
 * part[(n*lanes + j)*2 + {0,1}] = (m, s); a lane with no columns leaves (-inf, 0). */
kernel void loom_xent_partial(device float *part LOOM_BUFFER(0), device const float *logits LOOM_BUFFER(1),
                              constant metal_p_xent &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.N * p.lanes) return;
    uint n = gid / p.lanes, j = gid % p.lanes;
    device const float *x = logits + n * p.V;
    float m = -INFINITY, s = 0.0f;
    for (uint v = j; v < p.V_real; v += p.lanes) {
        float xv = x[v];
        if (xv > m) {
            s = s * metal::exp(m - xv) + 1.0f;
            m = xv;
        } else {
            s += metal::exp(xv - m);
        }
    }
    part[2 * gid] = m;
    part[2 * gid + 1] = s;
}

/* Row n: M = max_j m_j, S = sum_j s_j e^(m_j - M) over lanes with s_j != 0 (in order; a NaN
 * s_j is kept so NaN logits give a NaN loss), lse = M + log S;
 * rowlse[n] = lse; losses[n] = lse - logits[n, target] for target >= 0, else 0. */
kernel void loom_xent_row(device float *rowlse LOOM_BUFFER(0), device float *losses LOOM_BUFFER(1),
                          device const float *part LOOM_BUFFER(2), device const float *logits LOOM_BUFFER(3),
                          device const int *targets LOOM_BUFFER(4), constant metal_p_xent &p LOOM_BUFFER(5),
                          uint gid LOOM_GID)
{
    if (gid >= p.N) return;
    device const float *pr = part + gid * p.lanes * 2;
    float mx = -INFINITY;
    for (uint j = 0; j < p.lanes; j++)
        if (pr[2 * j + 1] != 0.0f) mx = metal::max(mx, pr[2 * j]);
    float s = 0.0f;
    for (uint j = 0; j < p.lanes; j++)
        if (pr[2 * j + 1] != 0.0f) s += pr[2 * j + 1] * metal::exp(pr[2 * j] - mx);
    float l = mx + metal::log(s);
    rowlse[gid] = l;
    int tgt = targets[gid];
    if (p.has_losses) losses[gid] = tgt >= 0 ? l - logits[gid * p.V + (uint)tgt] : 0.0f;
}

/* dlogits[n, v] = grad_scale (e^(x - lse_n) - [v == target]) for v < V_real and target >= 0;
 * 0 for padded columns and masked rows. Overwrites the logits; one thread per element. */
kernel void loom_xent_grad(device float *logits LOOM_BUFFER(0), device const float *rowlse LOOM_BUFFER(1),
                           device const int *targets LOOM_BUFFER(2), constant metal_p_xent &p LOOM_BUFFER(3),
                           uint gid LOOM_GID)
{
    if (gid >= p.N * p.V) return;
    uint n = gid / p.V, v = gid % p.V;
    int tgt = targets[n];
    if (tgt < 0 || v >= p.V_real) {
        logits[gid] = 0.0f;
        return;
    }
    float pv = metal::exp(logits[gid] - rowlse[n]);
    logits[gid] = p.grad_scale * (v == (uint)tgt ? pv - 1.0f : pv);
}
