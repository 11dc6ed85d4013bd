/* embedding.metal: token (+ learned position) embedding lookup and its deterministic backward.
 * The backward never uses atomics: each thread owns whole columns of the gradient tables and
 * adds the rows that hit them in token order, so results are identical run to run. */
#include "metal_shim.h"
#include "metal_params.h"

/* out[b, t, c] = wte[tok[b, t], c] + wpe[t, c]   (no wpe term when has_wpe == 0; a negative
 * token reads row 0, as the CPU backend does) */
kernel void loom_embedding_forward(device float *out LOOM_BUFFER(0), device const int *tokens LOOM_BUFFER(1),
                                   device const float *wte LOOM_BUFFER(2), device const float *wpe LOOM_BUFFER(3),
                                   constant metal_p_embed &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.B * p.T * p.C) return;
    uint bt = gid / p.C, c = gid % p.C, t = bt % p.T;
    int tok = tokens[bt];
    float y = wte[(uint)(tok < 0 ? 0 : tok) * p.C + c];
    out[gid] = p.has_wpe ? y + wpe[t * p.C + c] : y;
}

/* dwte[v, c] += sum_{i : tok[i] = v} dout[i, c], i = b*T + t in increasing order.
 * Parallel over channels (and `buckets` token classes v mod buckets per channel): thread
 * (bucket, c) scans every token and owns column c of the rows v with v mod buckets = bucket, so
 * no two threads touch the same element. Tokens outside [0, V) are skipped. */
kernel void loom_embedding_backward_wte(device float *dwte LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                        device const int *tokens LOOM_BUFFER(2),
                                        constant metal_p_embed &p LOOM_BUFFER(3), uint gid LOOM_GID)
{
    if (gid >= p.buckets * p.C) return;
    uint bucket = gid / p.C, c = gid % p.C, BT = p.B * p.T;
    for (uint i = 0; i < BT; i++) {
        int v = tokens[i];
        if (v < 0 || (uint)v >= p.V || (uint)v % p.buckets != bucket) continue;
        dwte[(uint)v * p.C + c] += dout[i * p.C + c];
    }
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in increasing order; one thread per (t, c). */
kernel void loom_embedding_backward_wpe(device float *dwpe LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                        constant metal_p_embed &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.T * p.C) return;
    float s = 0.0f;
    for (uint b = 0; b < p.B; b++) s += dout[b * p.T * p.C + gid];
    dwpe[gid] += s;
}
