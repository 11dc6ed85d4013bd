/* attention.metal: causal grouped-query attention, forward and backward, flash-style, optionally
 * within a sliding window (p.window > 0: query t sees keys t - window < s <= t; a thread walks only
 * those).
 * One thread owns one query row (or one key row in dk/dv) and a METAL_ATT_DC-wide slice of the
 * head dim; it streams over keys with an online softmax, so memory stays O(T) per head and no
 * (T, T) matrix exists. The backward recomputes probabilities from the saved lse and gives dk,
 * dv without atomics (each key row is summed by the one thread that owns it, in a fixed order).
 * Layouts: q, out, dq (B, T, H, D); k, v, dk, dv (B, T, Hkv, D); lse, delta (B, H, T).
 * Head h reads kv head h / (H / Hkv). Scores s = scale q.k with scale = 1/sqrt(D). */
#include "metal_shim.h"
#include "metal_params.h"

/* sum_d a[d] b[d] in order */
inline float loom_att_dot(device const float *a, device const float *b, uint n)
{
    float s = 0.0f;
    for (uint d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* The first key query t sees: 0, or t - window + 1 within a window. */
inline uint loom_att_first_key(uint t, uint window)
{
    return window > 0 && t >= window ? t - window + 1 : 0;
}

/* One past the last query that sees key s: T, or s + window within a window. */
inline uint loom_att_end_query(uint s, uint T, uint window)
{
    return window > 0 && window < T - s ? s + window : T;
}

/* Forward for query row (b, h, t), head-dim slice [d0, d0 + DC):
 * for key blocks of METAL_ATT_BK from its first key: s_j = scale q.k_j (j <= t), mb = max(m, max_j s_j),
 * l = l e^(m - mb) + sum_j e^(s_j - mb), acc = acc e^(m - mb) + sum_j e^(s_j - mb) v_j, m = mb.
 * out = acc / l; the chunk-0 thread writes lse = m + log l.
 * Grid: gid = ((b*H + h)*nchunk + chunk)*T + t, so a SIMD group shares (b, h) and reads the
 * same key rows at the same time. */
kernel void loom_attention_forward(device float *out LOOM_BUFFER(0), device float *lse LOOM_BUFFER(1),
                                   device const float *q LOOM_BUFFER(2), device const float *k LOOM_BUFFER(3),
                                   device const float *v LOOM_BUFFER(4), constant metal_p_attn &p LOOM_BUFFER(5),
                                   uint gid LOOM_GID)
{
    uint T = p.T, D = p.D;
    if (gid >= p.B * p.H * p.nchunk * T) return;
    uint t = gid % T, r = gid / T;
    uint chunk = r % p.nchunk;
    r /= p.nchunk;
    uint h = r % p.H, b = r / p.H;
    uint g = h / (p.H / p.Hkv);
    uint d0 = chunk * METAL_ATT_DC;
    device const float *qr = q + ((b * T + t) * p.H + h) * D;

    float acc[METAL_ATT_DC];
    for (uint j = 0; j < METAL_ATT_DC; j++) acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (uint s0 = loom_att_first_key(t, p.window); s0 <= t; s0 += METAL_ATT_BK) {
        uint s1 = metal::min(s0 + METAL_ATT_BK, t + 1);
        float sc[METAL_ATT_BK];
        float mb = m;
        for (uint s = s0; s < s1; s++) {
            float x = p.scale * loom_att_dot(qr, k + ((b * T + s) * p.Hkv + g) * D, D);
            sc[s - s0] = x;
            mb = metal::max(mb, x);
        }
        float corr = metal::exp(m - mb);
        l *= corr;
        for (uint j = 0; j < METAL_ATT_DC; j++) acc[j] *= corr;
        for (uint s = s0; s < s1; s++) {
            float pr = metal::exp(sc[s - s0] - mb);
            l += pr;
            device const float *vr = v + ((b * T + s) * p.Hkv + g) * D + d0;
            for (uint j = 0; j < METAL_ATT_DC; j++)
                if (d0 + j < D) acc[j] += pr * vr[j];
        }
        m = mb;
    }
    device float *orow = out + ((b * T + t) * p.H + h) * D + d0;
    for (uint j = 0; j < METAL_ATT_DC; j++)
        if (d0 + j < D) orow[j] = acc[j] / l;
    if (chunk == 0) lse[(b * p.H + h) * T + t] = m + metal::log(l);
}

/* delta[b, h, t] = sum_d dout[b, t, h, d] out[b, t, h, d]  (= sum_s P_ts dP_ts, used by both
 * backward kernels). One thread per row. */
kernel void loom_attention_delta(device float *delta LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                 device const float *out LOOM_BUFFER(2), constant metal_p_attn &p LOOM_BUFFER(3),
                                 uint gid LOOM_GID)
{
    uint T = p.T;
    if (gid >= p.B * p.H * T) return;
    uint t = gid % T, h = (gid / T) % p.H, b = gid / (T * p.H);
    uint o = ((b * T + t) * p.H + h) * p.D;
    delta[gid] = loom_att_dot(dout + o, out + o, p.D);
}

/* dq for query row (b, h, t), slice [d0, d0 + DC): with P_ts = e^(scale q_t.k_s - lse_t),
 * dP_ts = dout_t.v_s and dS_ts = P_ts (dP_ts - delta_t):
 * dq_t = scale sum_{s <= t} dS_ts k_s (within the window)   (overwrites). Grid as the forward. */
kernel void loom_attention_backward_dq(device float *dq LOOM_BUFFER(0), device const float *dout LOOM_BUFFER(1),
                                       device const float *q LOOM_BUFFER(2), device const float *k LOOM_BUFFER(3),
                                       device const float *v LOOM_BUFFER(4), device const float *lse LOOM_BUFFER(5),
                                       device const float *delta LOOM_BUFFER(6), constant metal_p_attn &p LOOM_BUFFER(7),
                                       uint gid LOOM_GID)
{
    uint T = p.T, D = p.D;
    if (gid >= p.B * p.H * p.nchunk * T) return;
    uint t = gid % T, r = gid / T;
    uint chunk = r % p.nchunk;
    r /= p.nchunk;
    uint h = r % p.H, b = r / p.H;
    uint g = h / (p.H / p.Hkv);
    uint d0 = chunk * METAL_ATT_DC;
    uint row = ((b * T + t) * p.H + h) * D;
    float lt = lse[(b * p.H + h) * T + t], dt = delta[(b * p.H + h) * T + t];

    float acc[METAL_ATT_DC];
    for (uint j = 0; j < METAL_ATT_DC; j++) acc[j] = 0.0f;
    for (uint s = loom_att_first_key(t, p.window); s <= t; s++) {
        device const float *kr = k + ((b * T + s) * p.Hkv + g) * D;
        device const float *vr = v + ((b * T + s) * p.Hkv + g) * D;
        float pr = metal::exp(p.scale * loom_att_dot(q + row, kr, D) - lt);
        float ds = pr * (loom_att_dot(dout + row, vr, D) - dt);
        for (uint j = 0; j < METAL_ATT_DC; j++)
            if (d0 + j < D) acc[j] += ds * kr[d0 + j];
    }
    for (uint j = 0; j < METAL_ATT_DC; j++)
        if (d0 + j < D) dq[row + d0 + j] = p.scale * acc[j];
}

/* dk, dv for key row (b, g, s), slice [d0, d0 + DC_KV), summed over the heads h of group g
 * (h = g*rep .. g*rep + rep - 1, rep = H / Hkv) and the queries t >= s that see it, heads in order
 * and t from the last such down to s (so a SIMD group of neighbouring s reads the same query row
 * together):
 * dv_s = sum P_ts dout_t,  dk_s = scale sum dS_ts q_t   (overwrite).
 * Grid: gid = ((b*Hkv + g)*nchunk + chunk)*T + s, nchunk = ceil(D / DC_KV). */
kernel void loom_attention_backward_dkv(device float *dk LOOM_BUFFER(0), device float *dv LOOM_BUFFER(1),
                                        device const float *dout LOOM_BUFFER(2), device const float *q LOOM_BUFFER(3),
                                        device const float *k LOOM_BUFFER(4), device const float *v LOOM_BUFFER(5),
                                        device const float *lse LOOM_BUFFER(6), device const float *delta LOOM_BUFFER(7),
                                        constant metal_p_attn &p LOOM_BUFFER(8), uint gid LOOM_GID)
{
    uint T = p.T, D = p.D;
    if (gid >= p.B * p.Hkv * p.nchunk * T) return;
    uint s = gid % T, r = gid / T;
    uint chunk = r % p.nchunk;
    r /= p.nchunk;
    uint g = r % p.Hkv, b = r / p.Hkv;
    uint rep = p.H / p.Hkv;
    uint d0 = chunk * METAL_ATT_DC_KV;
    uint krow = ((b * T + s) * p.Hkv + g) * D;

    float ak[METAL_ATT_DC_KV], av[METAL_ATT_DC_KV];
    for (uint j = 0; j < METAL_ATT_DC_KV; j++) {
        ak[j] = 0.0f;
        av[j] = 0.0f;
    }
    for (uint h = g * rep; h < (g + 1) * rep; h++) {
        for (uint t = loom_att_end_query(s, T, p.window); t-- > s;) {
            uint row = ((b * T + t) * p.H + h) * D;
            float lt = lse[(b * p.H + h) * T + t], dt = delta[(b * p.H + h) * T + t];
            float pr = metal::exp(p.scale * loom_att_dot(q + row, k + krow, D) - lt);
            float ds = pr * (loom_att_dot(dout + row, v + krow, D) - dt);
            for (uint j = 0; j < METAL_ATT_DC_KV; j++) {
                if (d0 + j < D) {
                    av[j] += pr * dout[row + d0 + j];
                    ak[j] += ds * q[row + d0 + j];
                }
            }
        }
    }
    for (uint j = 0; j < METAL_ATT_DC_KV; j++) {
        if (d0 + j < D) {
            dk[krow + d0 + j] = p.scale * ak[j];
            dv[krow + d0 + j] = av[j];
        }
    }
}

/* Batched generation, step 1: each row's new key and value into its cache row at pos[r].
 * One thread per element of knew (R, Hkv, D). */
kernel void loom_kv_store(device float *kc LOOM_BUFFER(0), device float *vc LOOM_BUFFER(1),
                          device const float *knew LOOM_BUFFER(2), device const float *vnew LOOM_BUFFER(3),
                          device const int *pos LOOM_BUFFER(4), constant metal_p_decode &p LOOM_BUFFER(5),
                          uint gid LOOM_GID)
{
    uint w = p.Hkv * p.D;
    if (gid >= p.R * w) return;
    uint r = gid / w, e = gid % w;
    uint at = (r * p.cap + (uint)pos[r]) * w + e;
    kc[at] = knew[gid];
    vc[at] = vnew[gid];
}

/* Batched generation, step 2: query row r (one token per row) over its cache positions
 * 0..pos[r], online softmax as loom_attention_forward, head-dim slice [d0, d0 + DC).
 * Grid: gid = (r*H + h)*nchunk + chunk. */
kernel void loom_attention_decode_rows(device float *out LOOM_BUFFER(0), device const float *q LOOM_BUFFER(1),
                                       device const float *kc LOOM_BUFFER(2), device const float *vc LOOM_BUFFER(3),
                                       device const int *pos LOOM_BUFFER(4),
                                       constant metal_p_decode &p LOOM_BUFFER(5), uint gid LOOM_GID)
{
    uint D = p.D;
    if (gid >= p.R * p.H * p.nchunk) return;
    uint chunk = gid % p.nchunk, rh = gid / p.nchunk;
    uint h = rh % p.H, r = rh / p.H;
    uint g = h / (p.H / p.Hkv), n = (uint)pos[r] + 1;
    uint d0 = chunk * METAL_ATT_DC;
    device const float *qr = q + rh * D;
    device const float *kr = kc + (r * p.cap * p.Hkv + g) * D, *vr0 = vc + (r * p.cap * p.Hkv + g) * D;
    float acc[METAL_ATT_DC];
    for (uint j = 0; j < METAL_ATT_DC; j++) acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (uint s = 0; s < n; s++) {
        float x = p.scale * loom_att_dot(qr, kr + s * p.Hkv * D, D);
        float mb = metal::max(m, x), corr = metal::exp(m - mb), pr = metal::exp(x - mb);
        l = l * corr + pr;
        device const float *vr = vr0 + s * p.Hkv * D + d0;
        for (uint j = 0; j < METAL_ATT_DC; j++)
            if (d0 + j < D) acc[j] = acc[j] * corr + pr * vr[j];
        m = mb;
    }
    device float *orow = out + rh * D + d0;
    for (uint j = 0; j < METAL_ATT_DC; j++)
        if (d0 + j < D) orow[j] = acc[j] / l;
}
