/* metal_ops_nn.c: the model ops of the Metal backend (embedding, norms, activations, rope,
 * attention, softmax cross-entropy, AdamW) as sequences of kernel launches with their scratch.
 * Must never compute on tensors here: the host only plans grids and builds the rope table. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/metal/metal_internal.h"
#include "base/error.h"
#include "base/log.h"

#define MB(p) ((void *)(uintptr_t)(p)) /* a kernel argument from a (possibly const) pointer */

/* --- embeddings --- */

static void metal_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C)
{
    metal_p_embed p = {(unsigned)B, (unsigned)T, (unsigned)C, 0, wpe != NULL, 1};
    metal_launch(metal_c(be), MK_EMBED_FORWARD, (size_t)B * T * C,
                 (void *[]){out, MB(tokens), MB(wte), MB(wpe)}, 4, &p, sizeof p);
}

/* dwte: threads own (token class, channel) columns, so no two threads add to one element. */
static void metal_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T, int C, int V)
{
    metal_ctx *c = metal_c(be);
    unsigned buckets = V < 16 ? (unsigned)(V > 0 ? V : 1) : 16u;
    metal_p_embed p = {(unsigned)B, (unsigned)T, (unsigned)C, (unsigned)V, dwpe != NULL, buckets};
    if (dwte)
        metal_launch(c, MK_EMBED_BACKWARD_WTE, (size_t)buckets * C, (void *[]){dwte, MB(dout), MB(tokens)}, 3,
                     &p, sizeof p);
    if (dwpe) metal_launch(c, MK_EMBED_BACKWARD_WPE, (size_t)T * C, (void *[]){dwpe, MB(dout)}, 2, &p, sizeof p);
}

/* --- normalisation --- */

static void metal_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int N, int C, float eps)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || C <= 0) return;
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C, .lanes = METAL_LANES, .flag = bias != NULL, .eps = eps};
    float *part = metal_scratch(c, (size_t)N * METAL_LANES * 3);
    if (!part) return;
    metal_launch(c, MK_LN_PARTIAL, (size_t)N * METAL_LANES, (void *[]){part, MB(inp)}, 2, &p, sizeof p);
    metal_launch(c, MK_LN_STATS, (size_t)N, (void *[]){mean, rstd, part}, 3, &p, sizeof p);
    metal_launch(c, MK_LN_FORWARD, (size_t)N * C, (void *[]){out, MB(inp), mean, rstd, MB(weight), MB(bias)}, 6,
                 &p, sizeof p);
}

/* Scratch: lane partials (N*lanes*2) | row means (N*2) | weight/bias chunk partials (2*nchunks*C). */
static void metal_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, const float *mean, const float *rstd,
                                     int N, int C)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || C <= 0) return;
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C, .lanes = METAL_LANES, .width = 2,
                      .flag = dbias != NULL, .scale = 1.0f / (float)C};
    metal_colsum_plan(N, C, &p.nchunks, &p.chunk_rows);
    size_t npart = (size_t)N * METAL_LANES * 2, nrows = (size_t)N * 2, nw = 2 * (size_t)p.nchunks * C;
    float *part = metal_scratch(c, npart + nrows + nw);
    if (!part) return;
    float *rows = part + npart, *wpart = rows + nrows;
    if (dinp) {
        metal_launch(c, MK_LN_BWD_PARTIAL, (size_t)N * METAL_LANES,
                     (void *[]){part, MB(dout), MB(inp), MB(weight), MB(mean), MB(rstd)}, 6, &p, sizeof p);
        metal_launch(c, MK_ROW_FINAL, nrows, (void *[]){rows, part}, 2, &p, sizeof p);
        metal_launch(c, MK_LN_BWD_DINP, (size_t)N * C,
                     (void *[]){dinp, MB(dout), MB(inp), MB(weight), MB(mean), MB(rstd), rows}, 7, &p, sizeof p);
    }
    if (dweight || dbias) {
        metal_launch(c, MK_LN_BWD_WPARTIAL, (size_t)p.nchunks * C,
                     (void *[]){wpart, MB(dout), MB(inp), MB(mean), MB(rstd)}, 5, &p, sizeof p);
        if (dweight) metal_launch(c, MK_COLSUM_FINAL, (size_t)C, (void *[]){dweight, wpart}, 2, &p, sizeof p);
        if (dbias)
            metal_launch(c, MK_COLSUM_FINAL, (size_t)C, (void *[]){dbias, wpart + (size_t)p.nchunks * C}, 2, &p,
                         sizeof p);
    }
}

static void metal_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp, const float *weight,
                                  int N, int C, float eps)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || C <= 0) return;
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C, .lanes = METAL_LANES, .eps = eps};
    float *part = metal_scratch(c, (size_t)N * METAL_LANES);
    if (!part) return;
    metal_launch(c, MK_RMS_PARTIAL, (size_t)N * METAL_LANES, (void *[]){part, MB(inp)}, 2, &p, sizeof p);
    metal_launch(c, MK_RMS_STATS, (size_t)N, (void *[]){rstd, part}, 2, &p, sizeof p);
    metal_launch(c, MK_RMS_FORWARD, (size_t)N * C, (void *[]){out, MB(inp), rstd, MB(weight)}, 4, &p, sizeof p);
}

/* Scratch: lane partials (N*lanes) | row means (N) | weight chunk partials (nchunks*C). */
static void metal_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                   const float *weight, const float *rstd, int N, int C)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || C <= 0) return;
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C, .lanes = METAL_LANES, .width = 1,
                      .scale = 1.0f / (float)C};
    metal_colsum_plan(N, C, &p.nchunks, &p.chunk_rows);
    size_t npart = (size_t)N * METAL_LANES, nw = (size_t)p.nchunks * C;
    float *part = metal_scratch(c, npart + (size_t)N + nw);
    if (!part) return;
    float *rows = part + npart, *wpart = rows + N;
    if (dinp) {
        metal_launch(c, MK_RMS_BWD_PARTIAL, (size_t)N * METAL_LANES, (void *[]){part, MB(dout), MB(inp), MB(weight)},
                     4, &p, sizeof p);
        metal_launch(c, MK_ROW_FINAL, (size_t)N, (void *[]){rows, part}, 2, &p, sizeof p);
        metal_launch(c, MK_RMS_BWD_DINP, (size_t)N * C, (void *[]){dinp, MB(dout), MB(inp), MB(weight), MB(rstd), rows},
                     6, &p, sizeof p);
    }
    if (dweight) {
        metal_launch(c, MK_RMS_BWD_WPARTIAL, (size_t)p.nchunks * C, (void *[]){wpart, MB(dout), MB(inp), MB(rstd)}, 4,
                     &p, sizeof p);
        metal_launch(c, MK_COLSUM_FINAL, (size_t)C, (void *[]){dweight, wpart}, 2, &p, sizeof p);
    }
}

/* --- activations (elementwise, chunked like the dense ops) --- */

static void metal_ew(backend *be, int k, void *const *ptrs, int nptrs, size_t n)
{
    metal_ctx *c = metal_c(be);
    for (size_t o = 0; o < n; o += METAL_CHUNK) {
        size_t m = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
        void *bufs[8];
        for (int i = 0; i < nptrs; i++) bufs[i] = (float *)ptrs[i] + o;
        metal_p_vec p = {(unsigned)m, 0.0f, 0.0f};
        metal_launch(c, k, m, bufs, nptrs, &p, sizeof p);
    }
}

static void metal_gelu_forward(backend *be, float *out, const float *inp, size_t n)
{
    metal_ew(be, MK_GELU_FORWARD, (void *[]){out, MB(inp)}, 2, n);
}

static void metal_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    metal_ew(be, MK_GELU_BACKWARD, (void *[]){dinp, MB(inp), MB(dout)}, 3, n);
}

static void metal_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n)
{
    metal_ew(be, MK_SWIGLU_FORWARD, (void *[]){out, MB(gate), MB(up)}, 3, n);
}

static void metal_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                  const float *up, size_t n)
{
    metal_ew(be, MK_SWIGLU_BACKWARD, (void *[]){dgate, dup, MB(dout), MB(gate), MB(up)}, 5, n);
}

/* --- rotary positions --- */

/* The (T, D/2) table of (cos, sin)(t f_i) in double, rounded to float, f_i = theta^(-2i/D) or
 * freqs[i] (unified memory: the host reads it). Rebuilt only when D, theta or the frequencies
 * change or T grows (then queued work is waited for, since it may read the table). */
static const float *metal_rope_table(metal_ctx *c, int T, int D, float theta, const float *freqs)
{
    int half = D / 2;
    if (freqs && half > (int)(sizeof c->rope_key / sizeof c->rope_key[0])) {
        log_warn("metal: rope_freqs with head dim %d above 1024", D);
        return NULL;
    }
    if (freqs) c->dev->sync(c->ds); /* the frequencies may still be in flight */
    int same = freqs ? c->rope_keyed && memcmp(c->rope_key, freqs, (size_t)half * sizeof(float)) == 0
                     : !c->rope_keyed && c->rope_theta == theta;
    if (c->rope_tab && c->rope_d == D && same && (size_t)T <= c->rope_tcap) return c->rope_tab;
    size_t tcap = (size_t)T;
    if (c->rope_d == D && same && c->rope_tcap > tcap) tcap = c->rope_tcap;
    c->dev->sync(c->ds);
    if (c->rope_tab) c->dev->free(c->ds, c->rope_tab);
    c->rope_tab = c->dev->alloc(c->ds, tcap * (size_t)half * 2 * sizeof(float));
    c->rope_tcap = c->rope_tab ? tcap : 0;
    if (!c->rope_tab) {
        log_warn("metal: cannot allocate the rope table (%zu x %d): %s", tcap, half, loom_error());
        return NULL;
    }
    c->rope_d = D;
    c->rope_theta = theta;
    c->rope_keyed = freqs != NULL;
    if (freqs) memcpy(c->rope_key, freqs, (size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        double inv_freq = freqs ? (double)freqs[i] : pow((double)theta, -2.0 * i / (double)D);
        for (size_t t = 0; t < tcap; t++) {
            double a = (double)t * inv_freq;
            c->rope_tab[(t * half + i) * 2] = (float)cos(a);
            c->rope_tab[(t * half + i) * 2 + 1] = (float)sin(a);
        }
    }
    return c->rope_tab;
}

static void metal_rope_run(backend *be, float *x, int B, int T, int H, int D, float theta,
                           const float *freqs, int inverse)
{
    metal_ctx *c = metal_c(be);
    if (B <= 0 || T <= 0 || H <= 0 || D < 2) return;
    if (D % 2) log_warn("metal: rope with odd head dim %d: the last element is left as it is", D);
    const float *tab = metal_rope_table(c, T, D, theta, freqs);
    if (!tab) return;
    metal_p_rope p = {(unsigned)B, (unsigned)T, (unsigned)H, (unsigned)D, inverse != 0};
    metal_launch(c, MK_ROPE, (size_t)B * T * H * (D / 2), (void *[]){x, MB(tab)}, 2, &p, sizeof p);
}

/* Rows at their own positions: the table must reach the largest position, which the host reads
 * from pos once queued work is done (pos arrives by copy_h2d; shared storage). */
static void metal_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta,
                            const float *freqs)
{
    metal_ctx *c = metal_c(be);
    if (R <= 0 || H <= 0 || D < 2) return;
    c->dev->sync(c->ds);
    int top = 0;
    for (int r = 0; r < R; r++)
        if (pos[r] > top) top = pos[r];
    const float *tab = metal_rope_table(c, top + 1, D, theta, freqs);
    if (!tab) return;
    metal_p_decode p = {(unsigned)R, 0, (unsigned)H, 0, (unsigned)D, 0, 0.0f};
    metal_launch(c, MK_ROPE_ROWS, (size_t)R * H * (D / 2), (void *[]){x, MB(tab), MB(pos)}, 3, &p, sizeof p);
}

static void metal_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse)
{
    metal_rope_run(be, x, B, T, H, D, theta, NULL, inverse);
}

static void metal_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs,
                             int inverse)
{
    metal_rope_run(be, x, B, T, H, D, 0.0f, freqs, inverse);
}

/* --- attention --- */

static int metal_attn_check(int H, int Hkv)
{
    if (Hkv > 0 && H % Hkv == 0) return 0;
    log_warn("metal: attention needs H %% Hkv == 0 (H=%d, Hkv=%d); skipped", H, Hkv);
    return loom_fail("metal: attention with H=%d not a multiple of Hkv=%d", H, Hkv);
}

/* The kernels' window: 0 (every key before the query) for none or one of T keys or more. */
static unsigned metal_attn_window(int window, int T)
{
    return window > 0 && window < T ? (unsigned)window : 0u;
}

static void metal_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                                    const float *v, int B, int T, int H, int Hkv, int D, int window)
{
    if (B <= 0 || T <= 0 || D <= 0 || metal_attn_check(H, Hkv)) return;
    unsigned nchunk = ((unsigned)D + METAL_ATT_DC - 1) / METAL_ATT_DC;
    metal_p_attn p = {(unsigned)B, (unsigned)T, (unsigned)H, (unsigned)Hkv, (unsigned)D, nchunk,
                      (float)(1.0 / sqrt((double)D)), metal_attn_window(window, T)};
    metal_launch(metal_c(be), MK_ATTN_FORWARD, (size_t)B * H * nchunk * T,
                 (void *[]){out, lse, MB(q), MB(k), MB(v)}, 5, &p, sizeof p);
}

/* delta = rowwise dout.out in scratch (B*H*T), then dq per query row and dk/dv per key row. */
static void metal_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                                     const float *q, const float *k, const float *v, const float *out,
                                     const float *lse, int B, int T, int H, int Hkv, int D, int window)
{
    metal_ctx *c = metal_c(be);
    if (B <= 0 || T <= 0 || D <= 0 || metal_attn_check(H, Hkv)) return;
    float scale = (float)(1.0 / sqrt((double)D));
    float *delta = metal_scratch(c, (size_t)B * H * T);
    if (!delta) return;
    metal_p_attn p = {(unsigned)B, (unsigned)T, (unsigned)H, (unsigned)Hkv, (unsigned)D, 1, scale,
                      metal_attn_window(window, T)};
    metal_launch(c, MK_ATTN_DELTA, (size_t)B * H * T, (void *[]){delta, MB(dout), MB(out)}, 3, &p, sizeof p);
    p.nchunk = ((unsigned)D + METAL_ATT_DC - 1) / METAL_ATT_DC;
    metal_launch(c, MK_ATTN_DQ, (size_t)B * H * p.nchunk * T,
                 (void *[]){dq, MB(dout), MB(q), MB(k), MB(v), MB(lse), delta}, 7, &p, sizeof p);
    p.nchunk = ((unsigned)D + METAL_ATT_DC_KV - 1) / METAL_ATT_DC_KV;
    metal_launch(c, MK_ATTN_DKV, (size_t)B * Hkv * p.nchunk * T,
                 (void *[]){dk, dv, MB(dout), MB(q), MB(k), MB(v), MB(lse), delta}, 8, &p, sizeof p);
}

/* Batched generation: store the new keys/values, then each row attends over its own cache. */
static void metal_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                                        const float *vnew, float *kc, float *vc, const int32_t *pos, int R,
                                        int cap, int H, int Hkv, int D)
{
    metal_ctx *c = metal_c(be);
    if (R <= 0 || cap <= 0 || D <= 0 || metal_attn_check(H, Hkv)) return;
    unsigned nchunk = ((unsigned)D + METAL_ATT_DC - 1) / METAL_ATT_DC;
    metal_p_decode p = {(unsigned)R, (unsigned)cap, (unsigned)H, (unsigned)Hkv, (unsigned)D, nchunk,
                        (float)(1.0 / sqrt((double)D))};
    metal_launch(c, MK_KV_STORE, (size_t)R * Hkv * D, (void *[]){kc, vc, MB(knew), MB(vnew), MB(pos)}, 5, &p,
                 sizeof p);
    metal_launch(c, MK_ATTN_DECODE_ROWS, (size_t)R * H * nchunk, (void *[]){out, MB(q), kc, vc, MB(pos)}, 5, &p,
                 sizeof p);
}

/* --- softmax cross-entropy: lane partials (N*lanes*2) | row lse (N) in scratch --- */

static void metal_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets, int N, int V,
                               int V_real, float grad_scale)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || V <= 0) return;
    if (V_real <= 0 || V_real > V) V_real = V;
    metal_p_xent p = {(unsigned)N, (unsigned)V, (unsigned)V_real, METAL_LANES, losses != NULL, grad_scale};
    size_t npart = (size_t)N * METAL_LANES * 2;
    float *part = metal_scratch(c, npart + (size_t)N);
    if (!part) return;
    float *rowlse = part + npart;
    metal_launch(c, MK_XENT_PARTIAL, (size_t)N * METAL_LANES, (void *[]){part, logits}, 2, &p, sizeof p);
    metal_launch(c, MK_XENT_ROW, (size_t)N, (void *[]){rowlse, losses, part, logits, MB(targets)}, 5, &p, sizeof p);
    metal_launch(c, MK_XENT_GRAD, (size_t)N * V, (void *[]){logits, rowlse, MB(targets)}, 3, &p, sizeof p);
}

/* --- AdamW: bias corrections in double on the host --- */

static void metal_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale)
{
    metal_ctx *c = metal_c(be);
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    for (size_t o = 0; o < n; o += METAL_CHUNK) {
        size_t cnt = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
        metal_p_adamw p = {(unsigned)cnt, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale};
        metal_launch(c, MK_ADAMW, cnt, (void *[]){param + o, MB(grad + o), m + o, v + o}, 4, &p, sizeof p);
    }
}

void metal_ops_nn_fill(backend_ops *o)
{
    o->embedding_forward = metal_embedding_forward;
    o->embedding_backward = metal_embedding_backward;
    o->layernorm_forward = metal_layernorm_forward;
    o->layernorm_backward = metal_layernorm_backward;
    o->rmsnorm_forward = metal_rmsnorm_forward;
    o->rmsnorm_backward = metal_rmsnorm_backward;
    o->gelu_forward = metal_gelu_forward;
    o->gelu_backward = metal_gelu_backward;
    o->swiglu_forward = metal_swiglu_forward;
    o->swiglu_backward = metal_swiglu_backward;
    o->rope = metal_rope;
    o->rope_freqs = metal_rope_freqs;
    o->attention_forward = metal_attention_forward;
    o->attention_backward = metal_attention_backward;
    o->rope_rows = metal_rope_rows;
    o->attention_decode_rows = metal_attention_decode_rows;
    o->softmax_xent = metal_softmax_xent;
    o->adamw = metal_adamw;
}
