/* family_needle.c: Needle's architecture (pip cactus-needle 3.x; docs/needle.md section 2), its
 * forward pass on any backend with the needle mix ops (BACKEND_OP_NEEDLE_MIX), in float or with
 * Needle's fine-tune numerics (W4 of the weights, A8 of the activations, KV8; section 3).
 *
 * A needle_net reads a Needle base checkpoint (and optionally an adapter, merged into the
 * weights as Needle's merge_lora does) straight from its files into device tensors in loom's
 * conventions (kernels transposed to (out, in); one layer's slice of every stacked leaf), and runs
 * the forward of SimpleAttentionNetwork.__call__ on B rows of T tokens into logits, with the
 * hidden states of hidden_states() beside them. Not yet a model_family: training (backward, LoRA
 * as trainable tensors, the optimiser) and decoding go through model.c once this pass is checked
 * against Needle's own numbers (tests/core/model/test_needle_forward.c).
 *
 * Two layout choices make loom's ops compute Needle's math:
 *  - Half-split RoPE. Needle rotates (x[i], x[i + dq/2]) of each head; backend_rope_freqs rotates
 *    adjacent pairs. The q and k output channels of each head are stored permuted, loom channel
 *    2i <- Needle i and 2i+1 <- Needle i + dq/2 (rows of Wq and Wk, columns of the taps, the q/k
 *    norm scales): every later step on q and k (the per-head norm, the per-head A8/KV8, the scores'
 *    dot product) is invariant under a permutation within the head, and v is not touched.
 *  - dq != dv. Needle's flash path pads q (times f32(sqrt(F / dq))), k and v to F = max(dq, dv)
 *    and scales the scores by 1/sqrt(F); so does this file (backend_scale_cols), running
 *    attention at head dim F, then keeping the first dv columns of each head's output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/needle.h"
#include "core/model/model.h"
#include "core/model/needle_tables.h"

#define NEEDLE_EPS 1e-6f   /* ZCRMSNorm and rmsunit (architecture.py:28-36, 415-417) */
#define NEEDLE_COND_RANK 8 /* HADAMARD_COND_RANK (architecture.py:574) */
#define NEEDLE_MAX_SITES 16

typedef struct nn_layer {
    float *phi;           /* (K, lanes d): rows pre | post | res (row 2 lanes + i lanes + j: H[i][j]) */
    float *mhc_bias;      /* (K) the same columns */
    float *mhc_alpha;     /* (3) pre, post, res */
    float *ln1, *post, *ln2; /* ZC gains 1 + scale (d) */
    float *wq, *wk, *wv, *wg, *wo; /* (out, in), LoRA merged; q, k rows permuted per head */
    float *tq, *tk, *tv;  /* taps (c, width); q, k columns permuted */
    float *qn, *kn;       /* per-head ZC gains 1 + scale (dq), permuted */
    float *gate;          /* (1) attn_gate logit */
    float *w1a, *w1b, *w2a, *w2b, *w3a, *w3b; /* (a, a), (b, b) */
    float *d1, *d2, *b2, *d3, *d4;            /* (n) */
    float *cv, *cu;       /* Needle's layout: cond_v (d, 8), cond_u (8, n) */
    int window;           /* attention window: 0 global, else sliding_window */
    int site;             /* the engram site at this layer, -1 none */
} nn_layer;

typedef struct nn_site {
    float *table;         /* (tables slots + 1, sub): the last row zero (an n-gram before position 0) */
    float *wk, *wv;       /* (d, e) */
    float *taps;          /* (ntaps, d) */
    int ntaps;
} nn_site;

struct needle_net {
    backend *be;
    needle_config c;
    needle_geometry g;
    int qat;
    int L, d, V, Vout, K;  /* K: mHC coefficient columns 2 lanes + lanes^2 */
    float *wte;           /* (V, d), W4 under QAT (the tied head too) */
    float *lnf;           /* (d) 1 + final_norm scale */
    float *freqs;         /* (dq / 2) RoPE inverse frequencies */
    float *ones, *qpad;   /* (max width) ones; (dq) f32(sqrt(F / dq)) */
    float *lane_mean;     /* (lanes) 1 / lanes */
    int32_t *p1, *p2;     /* (n) the Hadamard MLP's permutations */
    nn_layer *layer;
    nn_site site[NEEDLE_MAX_SITES];
    int nsites;
    void **owned;         /* every device allocation, freed by needle_net_close */
    int nowned, capowned;
};

/* --- loading --- */

static float *nn_alloc(needle_net *n, size_t floats)
{
    if (n->nowned == n->capowned) {
        int cap = n->capowned ? 2 * n->capowned : 256;
        void **p = realloc(n->owned, (size_t)cap * sizeof *p);
        if (!p) return loom_fail("needle: out of memory"), NULL;
        n->owned = p, n->capowned = cap;
    }
    float *p = backend_alloc(n->be, (floats ? floats : 1) * sizeof(float));
    if (p) n->owned[n->nowned++] = p;
    return p;
}

static float *nn_upload(needle_net *n, const float *host, size_t floats)
{
    float *p = nn_alloc(n, floats);
    if (p) backend_copy_h2d(n->be, p, host, floats * sizeof(float));
    return p;
}

/* A whole tensor of the base file as fp32 host memory (malloc'd), its element count in *numel. */
static float *nn_read(needle_file *f, const char *path, size_t *numel)
{
    int i = needle_file_find(f, path);
    if (i < 0) return loom_fail("needle: tensor %s missing", path), NULL;
    const st_tensor *t = needle_file_tensor(f, i);
    float *h = malloc((t->numel ? t->numel : 1) * sizeof(float));
    if (!h) return loom_fail("needle: out of memory reading %s", path), NULL;
    if (needle_file_read(f, i, h, t->numel)) return free(h), NULL;
    if (numel) *numel = t->numel;
    return h;
}

/* Channel j of a head in loom's order reads Needle's channel nn_rope_src(j) (file comment). */
static int nn_rope_src(int j, int dq) { return j % 2 ? j / 2 + dq / 2 : j / 2; }

/* out (rows, cols) = the (cols, rows) matrix in^T, with out's row r read from in's column
 * src(r) when perm_dq > 0 (the per-head RoPE permutation of output channels). */
static void nn_transpose(float *out, const float *in, int rows, int cols, int perm_dq)
{
    for (int r = 0; r < rows; r++) {
        int s = perm_dq ? r / perm_dq * perm_dq + nn_rope_src(r % perm_dq, perm_dq) : r;
        for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = in[(size_t)c * rows + s];
    }
}

/* Columns of each of `rows` rows of width w permuted per head (dq): taps and norm scales. */
static void nn_permute_cols(float *out, const float *in, int rows, int w, int dq)
{
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < w; j++)
            out[(size_t)r * w + j] = in[(size_t)r * w + j / dq * dq + nn_rope_src(j % dq, dq)];
}

/* The adapter's A [L, in, r] and B [L, r, out] of kernel `path`, merged into w [L, in, out]:
 * w += s (A B) per layer, (A B) an f32 product summed over r in order (merge_lora). */
static int nn_merge(needle_adapter *a, const char *path, float *w, int L, int in, int out)
{
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->lora[i].path, path)) continue;
        int r = a->rank;
        size_t na = (size_t)L * in * r, nb = (size_t)L * r * out;
        float *A = malloc(na * sizeof(float)), *Bm = malloc(nb * sizeof(float));
        int rc = !A || !Bm ? loom_fail("needle: out of memory merging %s", path)
                           : st_read_f32(a->st, a->lora[i].a, A, na) || st_read_f32(a->st, a->lora[i].b, Bm, nb);
        const float s = (float)a->scale;
        for (int l = 0; rc == 0 && l < L; l++)
            for (int x = 0; x < in; x++)
                for (int y = 0; y < out; y++) {
                    float ab = 0.0f;
                    for (int k = 0; k < r; k++)
                        ab += A[((size_t)l * in + x) * r + k] * Bm[((size_t)l * r + k) * out + y];
                    w[((size_t)l * in + x) * out + y] += s * ab;
                }
        free(A), free(Bm);
        return rc ? -1 : 0;
    }
    return 0;
}

/* W4 in place on the device (rows, cols) when the net runs Needle's fine-tune numerics. */
static void nn_w4(needle_net *n, float *w, int rows, int cols, const float *codebook)
{
    if (n->qat) backend_cq_w4_quant(n->be, w, w, codebook, rows, cols);
}

/* A stacked kernel [L, in, out] (flax) as L device tensors (out, in), merged with the adapter,
 * W4 under QAT; perm_dq > 0 permutes the output channels per head (q, k). */
static int nn_kernels(needle_net *n, needle_file *f, needle_adapter *ad, const char *path, int in,
                      int out, int perm_dq, float **dst, size_t stride, const float *cb)
{
    float *h = nn_read(f, path, NULL), *t = malloc((size_t)in * out * sizeof(float));
    int rc = !h || !t ? -1 : ad ? nn_merge(ad, path, h, n->L, in, out) : 0;
    for (int l = 0; rc == 0 && l < n->L; l++) {
        nn_transpose(t, h + (size_t)l * in * out, out, in, perm_dq);
        float **slot = (float **)((char *)dst + (size_t)l * stride);
        if (!(*slot = nn_upload(n, t, (size_t)in * out))) rc = -1;
        else nn_w4(n, *slot, out, in, cb);
    }
    free(h), free(t);
    return rc;
}

/* A stacked leaf [L, ...] of `per` floats per layer as L device tensors; gain = 1 adds one (a ZC
 * scale becomes its gain 1 + s); perm_dq > 0 permutes columns per head (rows of width `w`). */
static int nn_slices(needle_net *n, needle_file *f, const char *path, size_t per, int gain, int w,
                     int perm_dq, float **dst, size_t stride)
{
    size_t numel = 0;
    float *h = nn_read(f, path, &numel), *t = malloc(per * sizeof(float));
    int rc = !h || !t ? -1 : numel != per * (size_t)n->L ? loom_fail("needle: %s has %zu values, not %d x %zu", path, numel, n->L, per) : 0;
    for (int l = 0; rc == 0 && l < n->L; l++) {
        const float *s = h + (size_t)l * per;
        if (perm_dq) nn_permute_cols(t, s, (int)(per / (size_t)w), w, perm_dq);
        else memcpy(t, s, per * sizeof(float));
        if (gain)
            for (size_t i = 0; i < per; i++) t[i] = 1.0f + t[i];
        float **slot = (float **)((char *)dst + (size_t)l * stride);
        if (!(*slot = nn_upload(n, t, per))) rc = -1;
    }
    free(h), free(t);
    return rc;
}

#define NN_LAYER(field) (&n->layer[0].field), sizeof(nn_layer)
#define NN_PATH(p) "stack/layers/block/" p

static int nn_load_attention(needle_net *n, needle_file *f, needle_adapter *ad, const float *cb)
{
    const needle_geometry *g = &n->g;
    const int d = n->d, dq = g->qk_head_dim, c = n->c.qkv_conv_taps;
    if (nn_kernels(n, f, ad, NN_PATH("self_attn/q_proj/kernel"), d, g->q_dim, dq, NN_LAYER(wq), cb) ||
        nn_kernels(n, f, ad, NN_PATH("self_attn/k_proj/kernel"), d, g->k_dim, dq, NN_LAYER(wk), cb) ||
        nn_kernels(n, f, ad, NN_PATH("self_attn/v_proj/kernel"), d, g->v_dim, 0, NN_LAYER(wv), cb) ||
        nn_kernels(n, f, ad, NN_PATH("self_attn/gate_proj/kernel"), d, g->attn_dim, 0, NN_LAYER(wg), cb) ||
        nn_kernels(n, f, ad, NN_PATH("self_attn/out_proj/kernel"), g->attn_dim, d, 0, NN_LAYER(wo), cb) ||
        nn_slices(n, f, NN_PATH("self_attn/q_norm/scale"), (size_t)dq, 1, dq, dq, NN_LAYER(qn)) ||
        nn_slices(n, f, NN_PATH("self_attn/k_norm/scale"), (size_t)dq, 1, dq, dq, NN_LAYER(kn)) ||
        nn_slices(n, f, NN_PATH("attn_gate"), 1, 0, 1, 0, NN_LAYER(gate)))
        return -1;
    if (c > 0 &&
        (nn_slices(n, f, NN_PATH("self_attn/q_taps"), (size_t)c * g->q_dim, 0, g->q_dim, dq, NN_LAYER(tq)) ||
         nn_slices(n, f, NN_PATH("self_attn/k_taps"), (size_t)c * g->k_dim, 0, g->k_dim, dq, NN_LAYER(tk)) ||
         nn_slices(n, f, NN_PATH("self_attn/v_taps"), (size_t)c * g->v_dim, 0, g->v_dim, 0, NN_LAYER(tv))))
        return -1;
    return 0;
}

static int nn_load_mlp(needle_net *n, needle_file *f)
{
    const size_t a = (size_t)n->g.hada_a, b = (size_t)n->g.hada_b, nn = (size_t)n->g.hada_n;
    const size_t cv = (size_t)n->d * NEEDLE_COND_RANK, cu = NEEDLE_COND_RANK * nn;
    return nn_slices(n, f, NN_PATH("ZCRMSNorm_0/scale"), (size_t)n->d, 1, 1, 0, NN_LAYER(ln1)) ||
           nn_slices(n, f, NN_PATH("post_attn_norm/scale"), (size_t)n->d, 1, 1, 0, NN_LAYER(post)) ||
           nn_slices(n, f, NN_PATH("pre_hada_norm/scale"), (size_t)n->d, 1, 1, 0, NN_LAYER(ln2)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w1a"), a * a, 0, 1, 0, NN_LAYER(w1a)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w2a"), a * a, 0, 1, 0, NN_LAYER(w2a)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w3a"), a * a, 0, 1, 0, NN_LAYER(w3a)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w1b"), b * b, 0, 1, 0, NN_LAYER(w1b)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w2b"), b * b, 0, 1, 0, NN_LAYER(w2b)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/w3b"), b * b, 0, 1, 0, NN_LAYER(w3b)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/d1"), nn, 0, 1, 0, NN_LAYER(d1)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/d2"), nn, 0, 1, 0, NN_LAYER(d2)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/b2"), nn, 0, 1, 0, NN_LAYER(b2)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/d3"), nn, 0, 1, 0, NN_LAYER(d3)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/d4"), nn, 0, 1, 0, NN_LAYER(d4)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/cond_v"), cv, 0, 1, 0, NN_LAYER(cv)) ||
           nn_slices(n, f, NN_PATH("hadamard_mlp/cond_u"), cu, 0, 1, 0, NN_LAYER(cu))
               ? -1
               : 0;
}

/* mHC: the three Phi kernels [L, lanes d, .] as one (K, lanes d) matrix per layer (W4 under QAT:
 * Needle quantises each leaf on its own, in groups along lanes d, which are these rows), the
 * biases as one K vector, the alphas as (3). */
static int nn_load_mhc(needle_net *n, needle_file *f, const float *cb)
{
    const int lanes = n->g.lanes, W = lanes * n->d, K = n->K;
    const char *phi[3] = {"stack/mhc_phi_pre", "stack/mhc_phi_post", "stack/mhc_phi_res"};
    const char *bias[3] = {"stack/mhc_b_pre", "stack/mhc_b_post", "stack/mhc_b_res"};
    const char *alpha[3] = {"stack/mhc_a_pre", "stack/mhc_a_post", "stack/mhc_a_res"};
    const int cols[3] = {lanes, lanes, lanes * lanes}, first[3] = {0, lanes, 2 * lanes};
    float *hp[3] = {0}, *hb[3] = {0}, *ha[3] = {0};
    float *P = malloc((size_t)K * W * sizeof(float)), hbias[64 + 16], halpha[3];
    int rc = P && K <= 64 + 16 ? 0 : loom_fail("needle: mhc_lanes %d too many", lanes);
    for (int i = 0; rc == 0 && i < 3; i++)
        if (!(hp[i] = nn_read(f, phi[i], NULL)) || !(hb[i] = nn_read(f, bias[i], NULL)) ||
            !(ha[i] = nn_read(f, alpha[i], NULL)))
            rc = -1;
    for (int l = 0; rc == 0 && l < n->L; l++) {
        for (int i = 0; i < 3; i++) {
            nn_transpose(P + (size_t)first[i] * W, hp[i] + (size_t)l * W * cols[i], cols[i], W, 0);
            memcpy(hbias + first[i], hb[i] + (size_t)l * cols[i], (size_t)cols[i] * sizeof(float));
            halpha[i] = ha[i][l];
        }
        nn_layer *y = &n->layer[l];
        if (!(y->phi = nn_upload(n, P, (size_t)K * W)) || !(y->mhc_bias = nn_upload(n, hbias, (size_t)K)) ||
            !(y->mhc_alpha = nn_upload(n, halpha, 3)))
            rc = -1;
        else
            for (int i = 0; i < 3; i++) nn_w4(n, y->phi + (size_t)first[i] * W, cols[i], W, cb);
    }
    for (int i = 0; i < 3; i++) free(hp[i]), free(hb[i]), free(ha[i]);
    free(P);
    return rc;
}

/* Engram site s: its tables flattened with a zero row after them, its kernels (d, e), its taps. */
static int nn_load_site(needle_net *n, needle_file *f, int s, const float *cb)
{
    const needle_geometry *g = &n->g;
    const size_t rows = (size_t)g->engram_tables * n->c.engram_slots, sub = (size_t)g->engram_sub_dim;
    const int e = g->engram_tables * g->engram_sub_dim;
    char path[96];
    nn_site *S = &n->site[s];
    snprintf(path, sizeof path, "engrams_%d/embedding", s);
    float *h = nn_read(f, path, NULL);
    if (!h || !(S->table = nn_alloc(n, (rows + 1) * sub))) return free(h), -1;
    backend_copy_h2d(n->be, S->table, h, rows * sub * sizeof(float)); /* the last row stays 0 */
    free(h);
    nn_w4(n, S->table, (int)rows, (int)sub, cb);
    const char *kv[2] = {"key_proj", "value_proj"};
    float **dst[2] = {&S->wk, &S->wv};
    float *t = malloc((size_t)e * n->d * sizeof(float));
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "engrams_%d/%s/kernel", s, kv[i]);
        if (!t || !(h = nn_read(f, path, NULL))) return free(t), -1;
        nn_transpose(t, h, n->d, e, 0);
        free(h);
        if (!(*dst[i] = nn_upload(n, t, (size_t)e * n->d))) return free(t), -1;
        nn_w4(n, *dst[i], n->d, e, cb);
    }
    free(t);
    snprintf(path, sizeof path, "engrams_%d/taps", s);
    size_t numel = 0;
    if (!(h = nn_read(f, path, &numel))) return -1;
    S->ntaps = (int)(numel / (size_t)n->d);
    S->taps = nn_upload(n, h, numel);
    free(h);
    return S->taps ? 0 : -1;
}

static int nn_in_list(const needle_list *x, int v)
{
    for (int i = 0; i < x->n; i++)
        if (x->v[i] == v) return 1;
    return 0;
}

/* The shapes this file computes with, checked once. */
static int nn_check(const needle_net *n, const char *path)
{
    const needle_config *c = &n->c;
    const needle_geometry *g = &n->g;
    if (g->qk_head_dim % 2) return loom_fail("%s: qk_head_dim %d is odd (RoPE pairs)", path, g->qk_head_dim);
    if (c->sliding_window > 0 && c->qkv_conv_taps > c->sliding_window)
        return loom_fail("%s: qkv_conv_taps %d longer than sliding_window %d", path, c->qkv_conv_taps, c->sliding_window);
    if (c->engram_layers.n > NEEDLE_MAX_SITES) return loom_fail("%s: more than %d engram sites", path, NEEDLE_MAX_SITES);
    for (int s = 0; s < c->engram_layers.n; s++)
        for (int t = 0; t < s; t++)
            if (c->engram_layers.v[s] == c->engram_layers.v[t])
                return loom_fail("%s: config field engram_layers: layer %d holds two sites (unsupported)", path, c->engram_layers.v[s]);
    if (!backend_has(n->be, BACKEND_OP_NEEDLE_MIX) || !backend_has(n->be, BACKEND_OP_ROPE_FREQS))
        return loom_fail("%s: backend %s lacks Needle's ops", path, backend_name(n->be));
    return 0;
}

static int nn_load(needle_net *n, needle_file *f, needle_adapter *ad, const char *path)
{
    const needle_config *c = &n->c;
    const needle_geometry *g = &n->g;
    float cb[16];
    float *codebook = NULL;
    if (n->qat && (needle_cq_codebook(4, 128, cb) || !(codebook = nn_upload(n, cb, 16)))) return -1;
    float *h = nn_read(f, "embedding/embedding", NULL);
    if (!h || !(n->wte = nn_upload(n, h, (size_t)n->V * n->d))) return free(h), -1;
    free(h);
    nn_w4(n, n->wte, n->V, n->d, codebook);
    if (!(h = nn_read(f, "stack/final_norm/scale", NULL))) return -1;
    for (int i = 0; i < n->d; i++) h[i] = 1.0f + h[i];
    n->lnf = nn_upload(n, h, (size_t)n->d);
    free(h);
    if (!n->lnf || nn_load_attention(n, f, ad, codebook) || nn_load_mlp(n, f) || nn_load_mhc(n, f, codebook))
        return -1;
    for (int s = 0; s < c->engram_layers.n; s++)
        if (nn_load_site(n, f, s, codebook)) return -1;
    n->nsites = c->engram_layers.n;
    for (int l = 0; l < n->L; l++) {
        n->layer[l].site = -1;
        for (int s = 0; s < n->nsites; s++)
            if (c->engram_layers.v[s] == l) n->layer[l].site = s;
        int global = c->sliding_window <= 0 || nn_in_list(&c->global_layers, l);
        n->layer[l].window = global ? 0 : c->sliding_window;
    }
    /* constants: RoPE's 1 / theta^(2r / dq) in f32 as precompute_rope_freqs, the pads' scales */
    const int dq = g->qk_head_dim, F = dq > g->v_head_dim ? dq : g->v_head_dim;
    int wide = n->d;
    const int widths[6] = {g->q_dim, g->k_dim, g->v_dim, g->attn_dim, g->hada_n, g->lanes * n->d};
    for (int i = 0; i < 6; i++) wide = widths[i] > wide ? widths[i] : wide;
    float *tmp = malloc((size_t)(wide + dq + g->lanes) * sizeof(float));
    int32_t *p = malloc((size_t)2 * g->hada_n * sizeof(int32_t));
    int rc = tmp && p ? 0 : loom_fail("needle: out of memory");
    if (rc == 0) {
        const float theta = (float)c->rope_theta;
        for (int r = 0; r < dq / 2; r++) tmp[r] = 1.0f / powf(theta, (float)(2 * r) / (float)dq);
        n->freqs = nn_upload(n, tmp, (size_t)dq / 2);
        for (int i = 0; i < dq; i++) tmp[i] = (float)sqrt((double)F / dq);
        n->qpad = nn_upload(n, tmp, (size_t)dq);
        for (int i = 0; i < wide; i++) tmp[i] = 1.0f;
        n->ones = nn_upload(n, tmp, (size_t)wide);
        for (int i = 0; i < g->lanes; i++) tmp[i] = 1.0f / (float)g->lanes;
        n->lane_mean = nn_upload(n, tmp, (size_t)g->lanes);
        needle_hada_perms(g->hada_n, c->ladder_widths.n > 0, p, p + g->hada_n);
        n->p1 = (int32_t *)nn_alloc(n, (size_t)g->hada_n), n->p2 = (int32_t *)nn_alloc(n, (size_t)g->hada_n);
        if (n->p1 && n->p2) {
            backend_copy_h2d(n->be, n->p1, p, (size_t)g->hada_n * sizeof(int32_t));
            backend_copy_h2d(n->be, n->p2, p + g->hada_n, (size_t)g->hada_n * sizeof(int32_t));
        }
        if (!n->freqs || !n->qpad || !n->ones || !n->lane_mean || !n->p1 || !n->p2) rc = -1;
    }
    free(tmp), free(p);
    (void)path;
    return rc;
}

needle_net *needle_net_open(backend *be, const char *base, const char *adapter, int qat)
{
    needle_net *n = calloc(1, sizeof *n);
    needle_file *f = needle_open(base);
    needle_adapter *ad = adapter ? needle_adapter_open(adapter) : NULL;
    int rc = !n ? loom_fail("needle: out of memory") : !f || (adapter && !ad) ? -1 : 0;
    if (rc == 0 && ad) rc = needle_adapter_check(ad, f);
    if (rc == 0) {
        n->be = be, n->qat = qat;
        n->c = *needle_file_config(f);
        needle_geometry_of(&n->c, &n->g);
        n->L = n->c.num_layers, n->d = n->c.d_model, n->V = n->c.vocab_size;
        n->Vout = n->c.out_vocab > 0 ? n->c.out_vocab : n->V;
        n->K = 2 * n->g.lanes + n->g.lanes * n->g.lanes;
        n->layer = calloc((size_t)n->L, sizeof *n->layer);
        rc = !n->layer ? loom_fail("needle: out of memory") : nn_check(n, base) || nn_load(n, f, ad, base);
    }
    if (ad) needle_adapter_close(ad);
    if (f) needle_close(f);
    if (rc) {
        needle_net_close(n);
        return NULL;
    }
    return n;
}

void needle_net_close(needle_net *n)
{
    if (!n) return;
    for (int i = 0; i < n->nowned; i++) backend_free(n->be, n->owned[i]);
    free(n->owned), free(n->layer), free(n);
}

const needle_config *needle_net_config(const needle_net *n) { return &n->c; }

/* --- the forward pass --- */

/* One pass's activations (N = B T rows), taken from one device allocation. */
typedef struct nn_acts {
    float *X, *X2, *xh;   /* (N, lanes d) the stream, the next one, x-hat */
    float *z, *hc;        /* (N, K) mHC projections and coefficients */
    float *u, *x, *h, *t; /* (N, d) collapsed input, block stream, normed, scratch */
    float *q, *k, *v, *qt, *kt, *vt, *gt; /* projections before / after the taps */
    float *qf, *kf, *vf, *att, *lse, *o;  /* padded heads, attention out, its lse, gated out */
    float *rstd;          /* (N H) */
    float *s8, *cond, *z0, *z1; /* (N, 8), (N, n) x3 */
    float *e, *ev;        /* (N, e), (N, d) the engram's vector and its value before the taps */
    float *ek[NEEDLE_MAX_SITES], *evs[NEEDLE_MAX_SITES]; /* (N, d) per site */
    float *logits;        /* (N, Vout) */
    int32_t *tok, *idx;   /* (N lanes) the tokens once per lane; (N tables) engram rows */
    float *base;
} nn_acts;

static float *nn_take(char **cur, size_t floats)
{
    float *p = (float *)*cur;
    *cur += ((floats ? floats : 1) * sizeof(float) + 255) & ~(size_t)255;
    return p;
}

/* Carve the activations of N rows; NULL base sizes them (returns the bytes). */
static size_t nn_carve(const needle_net *n, nn_acts *a, char *base, size_t N)
{
    const needle_geometry *g = &n->g;
    const size_t d = (size_t)n->d, W = (size_t)g->lanes * d, F = (size_t)(g->qk_head_dim > g->v_head_dim ? g->qk_head_dim : g->v_head_dim);
    const size_t H = (size_t)n->c.num_heads, Hk = (size_t)n->c.num_kv_heads, nh = (size_t)g->hada_n;
    const size_t e = (size_t)g->engram_tables * g->engram_sub_dim;
    char *cur = base;
    a->X = nn_take(&cur, N * W), a->X2 = nn_take(&cur, N * W), a->xh = nn_take(&cur, N * W);
    a->z = nn_take(&cur, N * n->K), a->hc = nn_take(&cur, N * n->K);
    a->u = nn_take(&cur, N * d), a->x = nn_take(&cur, N * d), a->h = nn_take(&cur, N * d), a->t = nn_take(&cur, N * d);
    a->q = nn_take(&cur, N * g->q_dim), a->k = nn_take(&cur, N * g->k_dim), a->v = nn_take(&cur, N * g->v_dim);
    a->qt = nn_take(&cur, N * g->q_dim), a->kt = nn_take(&cur, N * g->k_dim), a->vt = nn_take(&cur, N * g->v_dim);
    a->gt = nn_take(&cur, N * g->attn_dim);
    a->qf = nn_take(&cur, N * H * F), a->kf = nn_take(&cur, N * Hk * F), a->vf = nn_take(&cur, N * Hk * F);
    a->att = nn_take(&cur, N * H * F), a->lse = nn_take(&cur, N * H), a->o = nn_take(&cur, N * g->attn_dim);
    a->rstd = nn_take(&cur, N * (H > (size_t)g->lanes ? H : (size_t)g->lanes));
    a->s8 = nn_take(&cur, N * NEEDLE_COND_RANK), a->cond = nn_take(&cur, N * nh);
    a->z0 = nn_take(&cur, N * nh), a->z1 = nn_take(&cur, N * nh);
    a->e = nn_take(&cur, N * e), a->ev = nn_take(&cur, N * d);
    for (int s = 0; s < n->nsites; s++) a->ek[s] = nn_take(&cur, N * d), a->evs[s] = nn_take(&cur, N * d);
    a->logits = nn_take(&cur, N * (size_t)n->Vout);
    a->tok = (int32_t *)nn_take(&cur, N * (size_t)g->lanes);
    a->idx = (int32_t *)nn_take(&cur, N * (size_t)g->engram_tables);
    return (size_t)(cur - base);
}

/* A8 (and KV8: the same rule per head vector) in place, under QAT only. */
static void nn_a8(const needle_net *n, float *x, size_t rows, int cols)
{
    if (n->qat) backend_fake_quant_a8(n->be, x, x, (int)rows, cols);
}

/* y (N, out) = x (N, in) W^T, W (out, in). */
static void nn_linear(const needle_net *n, float *y, const float *x, const float *W, size_t N, int in, int out)
{
    backend_matmul(n->be, y, x, W, (int)N, out, in, 0, 1, 1.0f, 0.0f);
}

/* The engram's keys and values of every site (docs/needle.md 2.2), from the host tokens. */
static int nn_engram(const needle_net *n, nn_acts *a, const int32_t *tokens, int B, int T)
{
    const needle_config *c = &n->c;
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)B * T, tables = (size_t)g->engram_tables;
    const int heads = g->engram_heads, e = (int)tables * g->engram_sub_dim;
    int32_t *idx = malloc(N * tables * sizeof(int32_t));
    if (!idx) return loom_fail("needle: out of memory");
    for (int b = 0; b < B; b++) {
        int32_t *row = idx + (size_t)b * T * tables;
        needle_engram_indices(tokens + (size_t)b * T, T, c->engram_orders.v, c->engram_orders.n, heads,
                              c->engram_seed_heads, (uint32_t)c->engram_slots, row);
        for (int i = 0; i < T; i++)
            for (int o = 0; o < c->engram_orders.n; o++)
                for (int hh = 0; hh < heads; hh++) {
                    size_t tau = (size_t)o * heads + hh;
                    int32_t *p = row + (size_t)i * tables + tau;
                    /* an n-gram reaching before position 0 reads the zero row (ngram_ok = 0) */
                    *p = i < c->engram_orders.v[o] - 1 ? (int32_t)(tables * c->engram_slots)
                                                         : (int32_t)(tau * c->engram_slots) + *p;
                }
    }
    backend_copy_h2d(n->be, a->idx, idx, N * tables * sizeof(int32_t));
    free(idx);
    for (int s = 0; s < n->nsites; s++) {
        const nn_site *S = &n->site[s];
        backend_embedding_forward(n->be, a->e, a->idx, S->table, NULL, 1, (int)(N * tables), g->engram_sub_dim);
        nn_a8(n, a->e, N, e);
        nn_linear(n, a->ek[s], a->e, S->wk, N, e, n->d);
        nn_linear(n, a->ev, a->e, S->wv, N, e, n->d);
        backend_conv_taps_forward(n->be, a->evs[s], a->ev, S->taps, B, T, n->d, S->ntaps, g->engram_dilation);
    }
    return 0;
}

/* Attention on a->h (the normed block input) into a->t (its output projection, before the post
 * norm): docs/needle.md 2.5. */
static void nn_attention(const needle_net *n, const nn_layer *y, nn_acts *a, int B, int T)
{
    backend *be = n->be;
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)B * T;
    const int d = n->d, H = n->c.num_heads, Hk = n->c.num_kv_heads, dq = g->qk_head_dim, dv = g->v_head_dim;
    const int F = dq > dv ? dq : dv, c = n->c.qkv_conv_taps;
    nn_a8(n, a->h, N, d);
    nn_linear(n, a->q, a->h, y->wq, N, d, g->q_dim);
    nn_linear(n, a->k, a->h, y->wk, N, d, g->k_dim);
    nn_linear(n, a->v, a->h, y->wv, N, d, g->v_dim);
    nn_linear(n, a->gt, a->h, y->wg, N, d, g->attn_dim);
    /* taps from q, k, v into qt, kt, vt (when the config has them), then the per-head norms back
     * into q, k (no op runs in place where its spec does not allow it) */
    float *q = a->qt, *k = a->kt, *v = a->v;
    if (c > 0) {
        backend_conv_taps_forward(be, a->qt, a->q, y->tq, B, T, g->q_dim, c, 1);
        backend_conv_taps_forward(be, a->kt, a->k, y->tk, B, T, g->k_dim, c, 1);
        backend_conv_taps_forward(be, a->vt, a->v, y->tv, B, T, g->v_dim, c, 1);
        q = a->q, k = a->k, v = a->vt;
    }
    backend_rmsnorm_forward(be, q, a->rstd, c > 0 ? a->qt : a->q, y->qn, (int)N * H, dq, NEEDLE_EPS);
    backend_rmsnorm_forward(be, k, a->rstd, c > 0 ? a->kt : a->k, y->kn, (int)N * Hk, dq, NEEDLE_EPS);
    backend_rope_freqs(be, q, B, T, H, dq, n->freqs, 0);
    backend_rope_freqs(be, k, B, T, Hk, dq, n->freqs, 0);
    nn_a8(n, q, N * H, dq);
    nn_a8(n, k, N * Hk, dq);
    nn_a8(n, v, N * Hk, dv);
    backend_scale_cols(be, a->qf, q, n->qpad, (int)N * H, dq, F);
    const float *kf = k, *vf = v;
    if (F != dq) backend_scale_cols(be, a->kf, k, n->ones, (int)N * Hk, dq, F), kf = a->kf;
    if (F != dv) backend_scale_cols(be, a->vf, v, n->ones, (int)N * Hk, dv, F), vf = a->vf;
    backend_attention_forward(be, a->att, a->lse, a->qf, kf, vf, B, T, H, Hk, F, y->window);
    const float *o = a->att;
    if (F != dv) backend_scale_cols(be, a->o, a->att, n->ones, (int)N * H, F, dv), o = a->o;
    backend_sigmoid_gate_forward(be, a->o, o, a->gt, N * (size_t)g->attn_dim);
    nn_a8(n, a->o, N, g->attn_dim);
    nn_linear(n, a->t, a->o, y->wo, N, g->attn_dim, d);
}

/* The Monarch-Hadamard MLP on a->h (the normed stream) into a->t: docs/needle.md 2.6. */
static void nn_mlp(const needle_net *n, const nn_layer *y, nn_acts *a, size_t N)
{
    backend *be = n->be;
    const int d = n->d, nh = n->g.hada_n, A = n->g.hada_a, Bb = n->g.hada_b;
    /* cond = 1 + softmax(x Cv) Cu */
    backend_matmul(be, a->s8, a->h, y->cv, (int)N, NEEDLE_COND_RANK, d, 0, 0, 1.0f, 0.0f);
    backend_softmax_rows(be, a->s8, a->s8, (int)N, NEEDLE_COND_RANK);
    backend_fill(be, a->cond, 1.0f, N * (size_t)nh);
    backend_matmul(be, a->cond, a->s8, y->cu, (int)N, nh, NEEDLE_COND_RANK, 0, 0, 1.0f, 1.0f);
    backend_scale_cols(be, a->z0, a->h, y->d1, (int)N, d, nh);
    backend_kron_apply(be, a->z1, a->z0, y->w1a, y->w1b, (int)N, A, Bb, 0);
    backend_permute_cols(be, a->z0, a->z1, n->p1, (int)N, nh, 0);
    backend_hada_mid_forward(be, a->z0, a->z0, a->cond, y->d2, y->b2, (int)N, nh);
    backend_kron_apply(be, a->z1, a->z0, y->w2a, y->w2b, (int)N, A, Bb, 0);
    backend_permute_cols(be, a->z0, a->z1, n->p2, (int)N, nh, 0);
    backend_scale_cols(be, a->z0, a->z0, y->d3, (int)N, nh, nh);
    backend_kron_apply(be, a->z1, a->z0, y->w3a, y->w3b, (int)N, A, Bb, 0);
    backend_scale_cols(be, a->t, a->z1, y->d4, (int)N, nh, d);
}

/* Layer l: the stream a->X (N, lanes, d) into a->X2 (docs/needle.md 2.3-2.4). */
static void nn_layer_forward(const needle_net *n, int l, nn_acts *a, int B, int T)
{
    backend *be = n->be;
    const nn_layer *y = &n->layer[l];
    const size_t N = (size_t)B * T, d = (size_t)n->d;
    const int lanes = n->g.lanes, W = lanes * n->d;
    /* mHC coefficients from x-hat = A8(rmsunit(X)) */
    backend_rmsnorm_forward(be, a->xh, a->rstd, a->X, n->ones, (int)N, W, NEEDLE_EPS);
    nn_a8(n, a->xh, N, W);
    nn_linear(n, a->z, a->xh, y->phi, N, W, n->K);
    backend_mhc_coeffs_forward(be, a->hc, a->z, y->mhc_alpha, y->mhc_bias, (int)N, lanes, l % lanes);
    backend_mhc_collapse(be, a->u, a->X, a->hc, n->K, (int)N, lanes, n->d);
    /* the block on u: engram gate, attention, MLP */
    if (y->site >= 0)
        backend_engram_gate_forward(be, a->x, a->u, a->ek[y->site], a->evs[y->site], (int)N, n->d);
    else
        backend_copy_d2d(be, a->x, a->u, N * d * sizeof(float));
    backend_rmsnorm_forward(be, a->h, a->rstd, a->x, y->ln1, (int)N, n->d, NEEDLE_EPS);
    nn_attention(n, y, a, B, T);
    backend_rmsnorm_forward(be, a->h, a->rstd, a->t, y->post, (int)N, n->d, NEEDLE_EPS);
    backend_scalar_gate_forward(be, a->h, a->h, y->gate, N * d);
    backend_add(be, a->x, a->x, a->h, N * d);
    backend_rmsnorm_forward(be, a->h, a->rstd, a->x, y->ln2, (int)N, n->d, NEEDLE_EPS);
    nn_mlp(n, y, a, N);
    backend_add(be, a->x, a->x, a->t, N * d);
    /* y = Block(u) - u, then the lanes mix: X' = H_res X + h_post y */
    backend_axpy(be, a->x, -1.0f, a->u, N * d);
    backend_mhc_expand(be, a->X2, a->X, a->hc, a->x, (int)N, lanes, n->d);
}

int needle_net_forward(needle_net *n, const int32_t *tokens, int B, int T, float *logits, float *hidden)
{
    backend *be = n->be;
    const size_t N = (size_t)B * T, d = (size_t)n->d;
    const int lanes = n->g.lanes;
    if (B <= 0 || T <= 0) return loom_fail("needle: forward on %d x %d tokens", B, T);
    for (size_t i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= n->V)
            return loom_fail("needle: token %d at %zu outside the vocabulary (%d)", tokens[i], i, n->V);
    nn_acts a;
    size_t bytes = nn_carve(n, &a, NULL, N);
    char *base = backend_alloc(be, bytes);
    if (!base) return -1;
    nn_carve(n, &a, base, N);
    int32_t *rep = malloc(N * (size_t)lanes * sizeof(int32_t));
    if (!rep) return backend_free(be, base), loom_fail("needle: out of memory");
    for (size_t i = 0; i < N; i++)
        for (int k = 0; k < lanes; k++) rep[i * lanes + k] = tokens[i];
    backend_copy_h2d(be, a.tok, rep, N * (size_t)lanes * sizeof(int32_t));
    free(rep);
    /* x0 = E[t] sqrt(d) on every lane (embed_scale: the Python float math.sqrt(d) in f32) */
    backend_embedding_forward(be, a.X, a.tok, n->wte, NULL, 1, (int)N * lanes, n->d);
    backend_scale(be, a.X, (float)sqrt((double)n->d), N * lanes * d);
    int rc = nn_engram(n, &a, tokens, B, T);
    for (int l = 0; rc == 0 && l < n->L; l++) {
        nn_layer_forward(n, l, &a, B, T);
        float *sw = a.X;
        a.X = a.X2, a.X2 = sw;
        if (hidden) { /* hidden_states(): the lane mean after each layer */
            backend_mhc_collapse(be, a.u, a.X, n->lane_mean, 0, (int)N, lanes, n->d);
            backend_copy_d2h(be, hidden + (size_t)l * N * d, a.u, N * d * sizeof(float));
        }
    }
    if (rc == 0) {
        backend_mhc_collapse(be, a.u, a.X, n->lane_mean, 0, (int)N, lanes, n->d);
        backend_rmsnorm_forward(be, a.h, a.rstd, a.u, n->lnf, (int)N, n->d, NEEDLE_EPS);
        nn_a8(n, a.h, N, n->d);
        nn_linear(n, a.logits, a.h, n->wte, N, n->d, n->Vout);
        backend_copy_d2h(be, logits, a.logits, N * (size_t)n->Vout * sizeof(float));
    }
    backend_free(be, base);
    return rc;
}
