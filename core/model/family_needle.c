/* family_needle.c: Needle's architecture (pip cactus-needle 3.x; docs/needle.md section 2), its
 * forward pass on any backend with the needle mix ops (BACKEND_OP_NEEDLE_MIX), in float or with
 * Needle's fine-tune numerics (W4 of the weights, A8 of the activations, KV8; section 3).
 *
 * A needle_net reads a Needle base checkpoint (and optionally an adapter, merged into the
 * weights as Needle's merge_lora does) straight from its files into device tensors in loom's
 * conventions (kernels transposed to (out, in); one layer's slice of every stacked leaf), and runs
 * the forward of SimpleAttentionNetwork.__call__ on B rows of T tokens into logits, with the
 * hidden states of hidden_states() beside them; the loss and the adapters' gradients (whole-layer
 * recompute), Needle's optimiser step, and greedy decoding with and without a KV cache. Checked
 * against Needle's own numbers (tests/core/model/test_needle_net.c). Not yet a model_family: the
 * training room drives it through core/train/finetune_needle.c, not model.c's table.
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
#include "base/rng.h"
#include "checkpoints/needle.h"
#include "core/model/model.h"
#include "core/model/needle_tables.h"

#define NEEDLE_EPS 1e-6f   /* ZCRMSNorm and rmsunit (architecture.py:28-36, 415-417) */
#define NEEDLE_COND_RANK 8 /* HADAMARD_COND_RANK (architecture.py:574) */
#define NEEDLE_MAX_SITES 16
#define NN_HEAD_ROWS 512   /* rows of the head a block in training by default (nn_loss) */

/* A thin pass keeps every span-th stream (n->span, NN_SPAN by default, at most NN_SPAN_MAX); the
 * span - 1 between are rebuilt from it for the backward, an expand each (nn_stream_rebuild). 4: the
 * 200 MB of the default's streams this frees (against every 2nd) pay for keeping attention's
 * output in the blocks, which spares every layer's recompute its attention forward (0.24 s a
 * step) for 6 more expands (0.02 s). */
#define NN_SPAN 4
#define NN_SPAN_MAX 8

typedef struct nn_layer {
    float *phi;           /* (K, lanes d): rows pre | post | res (row 2 lanes + i lanes + j: H[i][j]) */
    float *mhc_bias;      /* (K) the same columns */
    float *mhc_alpha;     /* (3) pre, post, res */
    float *ln1, *post, *ln2; /* ZC gains 1 + scale (d) */
    float *wq, *wk, *wv, *wg, *wo; /* (out, in), LoRA merged; q, k rows permuted per head */
    float *w0[5];         /* the same targets' base weights (= the merged ones without an adapter) */
    float *tq, *tk, *tv;  /* taps (c, width); q, k columns permuted */
    float *qn, *kn;       /* per-head ZC gains 1 + scale (dq), permuted */
    float *gate;          /* (1) attn_gate logit */
    float *w1a, *w1b, *w2a, *w2b, *w3a, *w3b; /* (a, a), (b, b) */
    float *d1, *d2, *b2, *d3, *d4;            /* (n) */
    float *cv, *cu;       /* Needle's layout: cond_v (d, 8), cond_u (8, n) */
    int window;           /* attention window: 0 global, else sliding_window */
    int site;             /* the engram site at this layer, -1 none */
} nn_layer;

/* The LoRA targets (finetune.py:306-315), in the order of the fields wq .. wo. */
enum { NN_Q, NN_K, NN_V, NN_G, NN_O, NN_TARGETS }; /* = needle_lora_path's order */

/* One adapted kernel on the device, in Needle's layout: A [L, in, r], B [L, r, out] (B's columns
 * permuted per head for q and k, as the kernel's output channels), their gradients and AdamW
 * moments of the same shapes, scale s. A NULL: the target has no adapter. */
typedef struct nn_lora {
    float *A, *B, *gA, *gB, *mA, *vA, *mB, *vB;
    int in, out, r, perm_dq;
    float s;
    double scale;         /* s as the adapter's metadata holds it (alpha / r in double) */
} nn_lora;

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
    int32_t *p1i, *p2i;   /* (n) their inverses: the backward's gathers (backend_kron_io) */
    nn_layer *layer;
    nn_lora lora[NN_TARGETS];
    const float *codebook; /* W4's (device), NULL in float */
    nn_site site[NEEDLE_MAX_SITES];
    int nsites;
    char *arena;          /* the last pass's activations, kept for the next (fresh pages cost a */
    size_t arena_bytes;   /* kernel page clear each: ~1 s a step at the default config) */
    size_t owned_bytes;   /* what nn_alloc holds: weights, adapters, their gradients and moments */
    int have_grads;       /* a needle_net_grad ran since the adapters were made */
    int keep_blocks;      /* layers [0, keep_blocks) keep a block from the forward for the backward (nn_point) */
    int span;             /* with every block kept, the streams kept: every span-th (nn_carve) */
    int head_rows;        /* rows of the head a block in a training pass (needle_net_set_head_rows) */
    void **owned;         /* every device allocation, freed by needle_net_close */
    int nowned, capowned;
};

/* Target t's kernel shape: in and out of y = x W'. */
static void nn_target_dims(const needle_net *n, int t, int *in, int *out)
{
    needle_lora_dims(&n->g, n->d, t, in, out);
}

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
    if (p) n->owned[n->nowned++] = p, n->owned_bytes += (floats ? floats : 1) * sizeof(float);
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

/* Columns of a [rows, out] host matrix permuted per head (dq) in place, as the kernels' rows
 * (loom channel j <- Needle channel src(j)); inverse = 1 takes them back. */
static int nn_permute_out(float *x, size_t rows, int out, int dq, int inverse)
{
    float *t = malloc((size_t)out * sizeof(float));
    if (!t) return loom_fail("needle: out of memory");
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * out;
        for (int j = 0; j < out; j++) {
            int src = j / dq * dq + nn_rope_src(j % dq, dq);
            if (inverse) t[src] = row[j];
            else t[j] = row[src];
        }
        memcpy(row, t, (size_t)out * sizeof(float));
    }
    free(t);
    return 0;
}

/* lo's device tensors: A and B from the host (Needle's layout, B already permuted), zeroed
 * gradients and moments. */
static int nn_lora_alloc(needle_net *n, nn_lora *lo, const float *A, const float *Bm)
{
    const size_t na = (size_t)n->L * lo->in * lo->r, nb = (size_t)n->L * lo->r * lo->out;
    return !(lo->A = nn_upload(n, A, na)) || !(lo->B = nn_upload(n, Bm, nb)) || !(lo->gA = nn_alloc(n, na)) ||
                   !(lo->mA = nn_alloc(n, na)) || !(lo->vA = nn_alloc(n, na)) || !(lo->gB = nn_alloc(n, nb)) ||
                   !(lo->mB = nn_alloc(n, nb)) || !(lo->vB = nn_alloc(n, nb))
               ? -1
               : 0;
}

/* The adapter's A [L, in, r] and B [L, r, out] of target t onto the device (n->lora[t]), with
 * zeroed gradients and moments. No tensor for t: the target stays unadapted. */
static int nn_adapter_load(needle_net *n, needle_adapter *a, int t, int in, int out, int perm_dq)
{
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->lora[i].path, needle_lora_path(t))) continue;
        nn_lora *lo = &n->lora[t];
        const int r = a->rank;
        const size_t na = (size_t)n->L * in * r, nb = (size_t)n->L * r * out;
        lo->in = in, lo->out = out, lo->r = r, lo->perm_dq = perm_dq, lo->s = (float)a->scale, lo->scale = a->scale;
        float *A = malloc(na * sizeof(float)), *Bm = malloc(nb * sizeof(float));
        int rc = !A || !Bm ? loom_fail("needle: out of memory reading %s", needle_lora_path(t))
                           : st_read_f32(a->st, a->lora[i].a, A, na) || st_read_f32(a->st, a->lora[i].b, Bm, nb);
        if (rc == 0 && perm_dq) rc = nn_permute_out(Bm, (size_t)n->L * r, out, perm_dq, 0);
        if (rc == 0) rc = nn_lora_alloc(n, lo, A, Bm);
        free(A), free(Bm);
        return rc;
    }
    return 0;
}

/* W4 in place on the device (rows, cols) when the net runs Needle's fine-tune numerics. */
static void nn_w4(needle_net *n, float *w, int rows, int cols, const float *codebook)
{
    if (n->qat & NEEDLE_NUM_W4) backend_cq_w4_quant(n->be, w, w, codebook, rows, cols);
}

/* A stacked kernel [L, in, out] (flax) as L device tensors (out, in), merged with the adapter,
 * W4 under QAT; perm_dq > 0 permutes the output channels per head (q, k). */
static int nn_kernels(needle_net *n, needle_file *f, needle_adapter *ad, int target, int in, int out,
                      int perm_dq, float **dst, size_t stride)
{
    float *h = nn_read(f, needle_lora_path(target), NULL), *t = malloc((size_t)in * out * sizeof(float));
    int rc = !h || !t ? -1 : ad ? nn_adapter_load(n, ad, target, in, out, perm_dq) : 0;
    for (int l = 0; rc == 0 && l < n->L; l++) {
        nn_transpose(t, h + (size_t)l * in * out, out, in, perm_dq);
        float **slot = (float **)((char *)dst + (size_t)l * stride);
        if (!(n->layer[l].w0[target] = nn_upload(n, t, (size_t)in * out)) || !(*slot = nn_alloc(n, (size_t)in * out)))
            rc = -1;
    }
    free(h), free(t);
    return rc;
}

/* The merged targets from the base and the adapters: W' = W + s (A B)^T per layer in loom's
 * layout ((out, in) = W + s B^T A^T, one product of rank r), then W4 under QAT (merge_lora, then
 * cq_ste_params: the merged kernel quantised every step). once = 1 also makes the unadapted
 * targets (the base, through W4 under QAT: at open, as they never change). The base itself is
 * kept apart (w0), so that a later adapter merges into it, not into its W4. */
static void nn_merge(needle_net *n, int once)
{
    float **field[NN_TARGETS];
    for (int l = 0; l < n->L; l++) {
        nn_layer *y = &n->layer[l];
        field[NN_Q] = &y->wq, field[NN_K] = &y->wk, field[NN_V] = &y->wv, field[NN_G] = &y->wg, field[NN_O] = &y->wo;
        for (int t = 0; t < NN_TARGETS; t++) {
            const nn_lora *lo = &n->lora[t];
            int in, out;
            nn_target_dims(n, t, &in, &out);
            float *w = *field[t];
            if (!lo->A && !once) continue; /* unadapted: the base (W4 under QAT), made once */
            backend_copy_d2d(n->be, w, y->w0[t], (size_t)in * out * sizeof(float));
            if (!lo->A) {
                if (n->qat & NEEDLE_NUM_W4) backend_cq_w4_quant(n->be, w, w, n->codebook, out, in);
                continue;
            }
            backend_matmul(n->be, w, lo->B + (size_t)l * lo->r * out, lo->A + (size_t)l * in * lo->r, out, in, lo->r,
                           1, 1, lo->s, 1.0f);
            if (n->qat & NEEDLE_NUM_W4) backend_cq_w4_quant(n->be, w, w, n->codebook, out, in);
        }
    }
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

static int nn_load_attention(needle_net *n, needle_file *f, needle_adapter *ad)
{
    const needle_geometry *g = &n->g;
    const int d = n->d, dq = g->qk_head_dim, c = n->c.qkv_conv_taps;
    if (nn_kernels(n, f, ad, NN_Q, d, g->q_dim, dq, NN_LAYER(wq)) ||
        nn_kernels(n, f, ad, NN_K, d, g->k_dim, dq, NN_LAYER(wk)) ||
        nn_kernels(n, f, ad, NN_V, d, g->v_dim, 0, NN_LAYER(wv)) ||
        nn_kernels(n, f, ad, NN_G, d, g->attn_dim, 0, NN_LAYER(wg)) ||
        nn_kernels(n, f, ad, NN_O, g->attn_dim, d, 0, NN_LAYER(wo)) ||
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

static int nn_load(needle_net *n, needle_file *f, needle_adapter *ad)
{
    const needle_config *c = &n->c;
    const needle_geometry *g = &n->g;
    float cb[16];
    float *codebook = NULL;
    if ((n->qat & NEEDLE_NUM_W4) && (needle_cq_codebook(4, 128, cb) || !(codebook = nn_upload(n, cb, 16)))) return -1;
    n->codebook = codebook;
    float *h = nn_read(f, "embedding/embedding", NULL);
    if (!h || !(n->wte = nn_upload(n, h, (size_t)n->V * n->d))) return free(h), -1;
    free(h);
    nn_w4(n, n->wte, n->V, n->d, codebook);
    if (!(h = nn_read(f, "stack/final_norm/scale", NULL))) return -1;
    for (int i = 0; i < n->d; i++) h[i] = 1.0f + h[i];
    n->lnf = nn_upload(n, h, (size_t)n->d);
    free(h);
    if (!n->lnf || nn_load_attention(n, f, ad) || nn_load_mlp(n, f) || nn_load_mhc(n, f, codebook))
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
    int32_t *p = malloc((size_t)4 * g->hada_n * sizeof(int32_t)); /* p1, p2, their inverses */
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
        const int hn = g->hada_n;
        needle_hada_perms(hn, c->ladder_widths.n > 0, p, p + hn);
        for (int m = 0; m < hn; m++) p[2 * hn + p[m]] = m, p[3 * hn + p[hn + m]] = m; /* inverses */
        int32_t **dst[4] = {&n->p1, &n->p2, &n->p1i, &n->p2i};
        for (int k = 0; k < 4; k++)
            if ((*dst[k] = (int32_t *)nn_alloc(n, (size_t)hn)))
                backend_copy_h2d(n->be, *dst[k], p + (size_t)k * hn, (size_t)hn * sizeof(int32_t));
        if (!n->freqs || !n->qpad || !n->ones || !n->lane_mean || !n->p1 || !n->p2 || !n->p1i || !n->p2i) rc = -1;
    }
    free(tmp), free(p);
    if (rc == 0) nn_merge(n, 1);
    return rc;
}

needle_net *needle_net_open(backend *be, const char *base, int layers, const char *adapter, int qat)
{
    needle_net *n = calloc(1, sizeof *n);
    needle_file *f = needle_open_rung(base, layers);
    needle_adapter *ad = adapter ? needle_adapter_open(adapter) : NULL;
    int rc = !n ? loom_fail("needle: out of memory") : !f || (adapter && !ad) ? -1 : 0;
    if (n) n->be = be, n->qat = qat; /* needle_net_close frees through be */
    if (rc == 0 && ad) rc = needle_adapter_check(ad, f);
    if (rc == 0) {
        n->c = *needle_file_config(f);
        needle_geometry_of(&n->c, &n->g);
        n->L = n->c.num_layers, n->d = n->c.d_model, n->V = n->c.vocab_size;
        n->Vout = n->c.out_vocab > 0 ? n->c.out_vocab : n->V;
        n->K = 2 * n->g.lanes + n->g.lanes * n->g.lanes;
        n->keep_blocks = n->L, n->head_rows = NN_HEAD_ROWS, n->span = NN_SPAN;
        n->layer = calloc((size_t)n->L, sizeof *n->layer);
        rc = !n->layer ? loom_fail("needle: out of memory") : nn_check(n, base) || nn_load(n, f, ad);
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
    backend_free(n->be, n->arena);
    free(n->owned), free(n->layer), free(n);
}

const needle_config *needle_net_config(const needle_net *n) { return &n->c; }

void needle_net_set_a8(needle_net *n, int on) { n->qat = on ? n->qat | NEEDLE_NUM_A8 : n->qat & ~NEEDLE_NUM_A8; }

void needle_net_set_recompute(needle_net *n, int whole) { n->keep_blocks = whole ? 0 : n->L; }

void needle_net_set_stream_span(needle_net *n, int span)
{
    n->span = span < 2 ? 2 : span > NN_SPAN_MAX ? NN_SPAN_MAX : span;
}

void needle_net_set_head_rows(needle_net *n, int rows) { n->head_rows = rows > 0 ? rows : NN_HEAD_ROWS; }

/* --- the passes --- */

/* One layer's activations for N rows, from its forward for its backward. The backward recomputes
 * each layer from its input stream (Needle's remat): only the streams, and unless train.recompute
 * a block of the costliest parts per byte (nn_point), are kept per layer. */
typedef struct nn_acts {
    float *xh, *rx;             /* (N, W) x-hat; (N) its rstd */
    float *z, *hc;              /* (N, K) mHC projections, coefficients */
    float *u, *x0, *hq, *r1;    /* (N, d) collapsed, after the engram gate, A8(ln1(x0)); (N) rstd */
    float *q, *k, *v;           /* projections (N, Q), (N, Kw), (N, Vw) */
    float *qt, *kt, *vt;        /* after the taps: the norms' inputs (vt: v as attention reads it) */
    float *qn, *kn, *rq, *rk;   /* normed, rotated, quantised q, k; their rstd (N H), (N Hk) */
    float *qf, *kf, *vf, *att, *lse; /* padded heads, attention out (N, H, F), lse (B, H, T) */
    float *opre, *gt, *og;      /* (N, O) sliced output, gate logits, A8(opre sigmoid(gt)) */
    float *ao, *rp, *ap;        /* (N, d) out projection; (N) post-norm rstd; (N, d) the branch */
    float *x1, *h2, *r2;        /* (N, d) after attention, ln2 of it; (N) rstd */
    float *s8, *cond, *zin;     /* (N, 8) softmax(x Cv), (N, n) cond, the hada middle's input */
    float *z0, *z1;             /* (N, n) scratch */
    float *y;                   /* (N, d) Block(u) - u */
    /* backward scratch */
    float *dxh, *dz, *dh;       /* (N, W), (N, K) x2 */
    float *dy, *dx1, *dh2, *dx0, *dap, *dao, *du, *dhq; /* (N, d) */
    float *dog, *dopre, *dgt;   /* (N, O) */
    float *dqf, *dkf, *dvf, *datt; /* padded as their forwards */
    float *dq, *dk, *dv, *dqt, *dkt, *dvt; /* (N, Q), (N, Kw), (N, Vw), then again before the taps */
    float *dn0, *dn1, *dcond, *ds8;  /* (N, n) x3, (N, 8) */
    float *d3p;                 /* (n) the layer's d3 gathered by p2's inverse (nn_mlp_backward) */
    float *lx, *ly;             /* (N, r) x A and dy B^T of a LoRA target (nn_lora_backward) */
} nn_acts;

/* KV-cached decoding's state for B rows (needle_net_generate): each row's attention cache per
 * layer, the conv taps' input history per layer and per engram site, and the positions. A pass
 * with it either is the prompts' prefill (B rows of T: it fills the state) or one step (B rows of
 * 1 token at positions pos: it reads the state and adds the step to it). */
typedef struct nn_dec {
    int B, cap, prefill;
    const int *len;             /* prefill: each row's prompt length */
    int *pos_h;                 /* step: each row's position (host) ... */
    int32_t *pos, *posw;        /* ... and on the device; posw: within a local layer's window */
    float **kc, **vc;           /* per layer (B, cap, Hk, F): k and v as attention reads them */
    float **hq, **hk, **hv;     /* per layer (B, c, width): the last c inputs of the q, k, v taps */
    float *he[NEEDLE_MAX_SITES];/* per site (B, Le, d): the last Le inputs of the engram's taps */
    int c, Le;
    float *tmp;                 /* (B, max(c, Le), max width) scratch */
    const int32_t *hist_tok;    /* step: every row's tokens so far (B, cap), host */
} nn_dec;

/* A pass over N = B T rows: the streams entering each layer (all L + 1 when a backward follows,
 * else two in turn), the engram's keys and values, the head's buffers, one layer's activations. */
typedef struct nn_pass {
    int B, T, keep;             /* a backward follows */
    int head;                   /* the head runs in nn_loss, on the rows with a target only */
    float **blk;                /* blk[l]: layer l's block kept from the forward (nn_point; layers
                                 * below n->keep_blocks but the last), else NULL; blk[L]: the others' */
    float **X;                  /* X[l] (N, W) the stream entering layer l; X[L] the last (nn_carve) */
    int thin;                   /* only every span-th stream kept, the others in Xr (nn_carve) */
    float *Xr[NN_SPAN_MAX - 1]; /* (N, W) each: X[l] at l % span = 1, 2, .., rebuilt for the backward */
    float *ys;                  /* (N, d) y of a layer whose block has none */
    float *dX, *dX2;            /* (N, W) */
    float *e, *evt;             /* (N, e), (N, d) */
    float *ek[NEEDLE_MAX_SITES], *ev[NEEDLE_MAX_SITES];
    float *xm, *hf, *rf;        /* (N, d) lane mean, A8(ZCNorm(xm)); (N) rstd */
    float *logits, *losses;     /* (N, V'), or (head_rows, V') when p->head; (N) */
    int32_t *tok, *idx, *targets; /* (N lanes), (N tables), (N) */
    int32_t *hrows;             /* when p->head: the rows with a target (nn_loss) */
    float *hblk;                /* when p->head: (head_rows, d) a block of the head's rows */
    nn_acts a;
    char *base;
    float *Xs[2];
    nn_dec *dec;                /* KV-cached decoding (prefill or step), NULL otherwise */
} nn_pass;

/* Attention's head width: q, k and v padded to F = max(dq, dv) (Needle's flash path). */
static inline int nn_head_F(const needle_geometry *g)
{
    return g->qk_head_dim > g->v_head_dim ? g->qk_head_dim : g->v_head_dim;
}

static float *nn_take(char **cur, size_t floats)
{
    float *p = (float *)*cur;
    *cur += ((floats ? floats : 1) * sizeof(float) + 255) & ~(size_t)255;
    return p;
}

/* Layer l's block: what its recompute would redo at the highest cost per byte kept, so a layer with
 * its block kept skips it (nn_layer_forward): the q, k, v, gate and out projections, attention's
 * output and log-sum-exp, the mHC coefficients' chain (z from x-hat's RMSNorm, A8 and product, the
 * coefficients hc, the rstd rx), the MLP's s8, and y = Block(u) - u (the MLP after its hada
 * middle's input; the streams after the layer are rebuilt from it and hc in a thin pass, nn_carve):
 *   q (N, Q) | k (N, Kw) | v (N, Vw) | gt (N, O) | ao (N, d) | att (N, H, F) | lse (N, H) |
 *   z, hc (N, K) | rx (N) | s8 (N, 8) | y (N, d)
 * 3,941 floats a token at the default config, against 3,072 for a stream. with_y 0: the scratch's
 * block, whose y is p->ys. */
static size_t nn_block_floats(const needle_net *n, size_t N, int with_y)
{
    const needle_geometry *g = &n->g;
    const size_t H = (size_t)n->c.num_heads, F = (size_t)nn_head_F(g);
    const size_t w = (size_t)g->q_dim + g->k_dim + g->v_dim + g->attn_dim + n->d + H * F + H + 2 * (size_t)n->K +
                     1 + NEEDLE_COND_RANK;
    return N * (w + (with_y ? (size_t)n->d : 0));
}

/* Point a's parts of layer l's block (nn_block_floats) into its kept block, or the scratch's (with
 * y in p->ys). */
static void nn_point(const needle_net *n, const nn_pass *p, int l, nn_acts *a)
{
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)p->B * p->T, K = (size_t)n->K;
    float *b = p->blk[l] ? p->blk[l] : p->blk[n->L];
    a->q = b, b += N * g->q_dim;
    a->k = b, b += N * g->k_dim;
    a->v = b, b += N * g->v_dim;
    a->gt = b, b += N * g->attn_dim;
    a->ao = b, b += N * n->d;
    const size_t H = (size_t)n->c.num_heads, F = (size_t)nn_head_F(g);
    a->att = b, b += N * H * F;
    a->lse = b, b += N * H;
    a->z = b, b += N * K;
    a->hc = b, b += N * K;
    a->rx = b, b += N;
    a->s8 = b, b += N * NEEDLE_COND_RANK;
    a->y = p->blk[l] ? b : p->ys;
}

/* Carve a pass's buffers from base (NULL: only sizes them); returns the bytes. */
static size_t nn_carve(const needle_net *n, nn_pass *p, char *base)
{
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)p->B * p->T, d = (size_t)n->d, W = (size_t)g->lanes * d;
    const size_t F = (size_t)nn_head_F(g);
    const size_t H = (size_t)n->c.num_heads, Hk = (size_t)n->c.num_kv_heads, nh = (size_t)g->hada_n;
    const size_t e = (size_t)g->engram_tables * g->engram_sub_dim, K = (size_t)n->K;
    const size_t Q = (size_t)g->q_dim, Kw = (size_t)g->k_dim, Vw = (size_t)g->v_dim, O = (size_t)g->attn_dim;
    char *cur = base;
    nn_acts *a = &p->a;
    /* a forward alone keeps two streams in turn; a backward keeps every one, but X[L] shares
     * X[0]'s memory (X[0] is dead once the head's backward ran; the backward embeds it again), and
     * with the layers' blocks kept (thin) only X[0], X[span], .. are kept, X[l] between them in
     * Xr[l % span - 1]: the backward rebuilds X[l] = expand(X[l-1], hc, y) of layer l - 1's
     * block, the forward's bits again */
    const int share = p->keep && n->L >= 2, span = n->span;
    p->thin = share && n->keep_blocks >= n->L;
    const int nr = p->thin ? (n->L - 1 < span - 1 ? n->L - 1 : span - 1) : 0;
    for (int k = 0; k < NN_SPAN_MAX - 1; k++) {
        float *xr = nn_take(&cur, k < nr ? N * W : 0);
        if (base) p->Xr[k] = k < nr ? xr : NULL;
    }
    for (int l = 0; l <= n->L; l++) {
        const int rebuilt = p->thin && l % span != 0 && l < n->L;
        float *x = (p->keep || l < 2) && !(share && l == n->L) && !rebuilt ? nn_take(&cur, N * W) : NULL;
        if (base) p->X[l] = x ? x : rebuilt ? p->Xr[l % span - 1] : share ? p->X[0] : p->X[l % 2];
    }
    p->dX = nn_take(&cur, p->keep ? N * W : 0), p->dX2 = nn_take(&cur, p->keep ? N * W : 0);
    p->e = nn_take(&cur, N * e), p->evt = nn_take(&cur, N * d);
    for (int s = 0; s < n->nsites; s++) p->ek[s] = nn_take(&cur, N * d), p->ev[s] = nn_take(&cur, N * d);
    p->xm = nn_take(&cur, N * d), p->hf = nn_take(&cur, N * d), p->rf = nn_take(&cur, N);
    const size_t lrows = p->head && N > (size_t)n->head_rows ? (size_t)n->head_rows : N;
    p->logits = nn_take(&cur, lrows * (size_t)n->Vout), p->losses = nn_take(&cur, N);
    p->tok = (int32_t *)nn_take(&cur, N * (size_t)g->lanes);
    p->idx = (int32_t *)nn_take(&cur, N * (size_t)g->engram_tables);
    p->targets = (int32_t *)nn_take(&cur, N);
    p->hrows = (int32_t *)nn_take(&cur, p->head ? N : 0);
    p->hblk = nn_take(&cur, p->head ? lrows * d : 0);
    a->xh = nn_take(&cur, N * W);
    a->u = nn_take(&cur, N * d), a->x0 = nn_take(&cur, N * d), a->hq = nn_take(&cur, N * d), a->r1 = nn_take(&cur, N);
    for (int l = 0; l <= n->L; l++) {
        const int kept = l == n->L || (p->keep && l < n->L - 1 && l < n->keep_blocks);
        float *x = kept ? nn_take(&cur, nn_block_floats(n, N, l < n->L)) : NULL;
        if (base) p->blk[l] = x;
    }
    p->ys = nn_take(&cur, N * d);
    a->qt = nn_take(&cur, N * Q), a->kt = nn_take(&cur, N * Kw), a->vt = nn_take(&cur, N * Vw);
    a->qn = nn_take(&cur, N * Q), a->kn = nn_take(&cur, N * Kw), a->rq = nn_take(&cur, N * H), a->rk = nn_take(&cur, N * Hk);
    a->qf = nn_take(&cur, N * H * F), a->kf = nn_take(&cur, N * Hk * F), a->vf = nn_take(&cur, N * Hk * F);
    a->opre = nn_take(&cur, F != (size_t)g->v_head_dim ? N * O : 0), a->og = nn_take(&cur, N * O); /* nn_opre */
    a->rp = nn_take(&cur, N), a->ap = nn_take(&cur, N * d);
    a->x1 = nn_take(&cur, N * d), a->h2 = nn_take(&cur, N * d), a->r2 = nn_take(&cur, N);
    a->cond = nn_take(&cur, N * nh), a->zin = nn_take(&cur, N * nh);
    a->z0 = nn_take(&cur, N * nh), a->z1 = nn_take(&cur, N * nh);
    if (p->keep) {
        /* the backward's scratch; x-hat (read only by the product into z) and the MLP's z0, z1 are
         * dead once the layer's forward ran, so its gradients take their memory */
        a->dxh = a->xh, a->dz = nn_take(&cur, N * K), a->dh = nn_take(&cur, N * K);
        float **dd[8] = {&a->dy, &a->dx1, &a->dh2, &a->dx0, &a->dap, &a->dao, &a->du, &a->dhq};
        for (int i = 0; i < 8; i++) *dd[i] = nn_take(&cur, N * d);
        a->dog = nn_take(&cur, N * O), a->dopre = nn_take(&cur, N * O), a->dgt = nn_take(&cur, N * O);
        a->dqf = nn_take(&cur, N * H * F), a->dkf = nn_take(&cur, N * Hk * F), a->dvf = nn_take(&cur, N * Hk * F);
        a->datt = nn_take(&cur, N * H * F);
        a->dq = nn_take(&cur, N * Q), a->dk = nn_take(&cur, N * Kw), a->dv = nn_take(&cur, N * Vw);
        a->dqt = nn_take(&cur, N * Q), a->dkt = nn_take(&cur, N * Kw), a->dvt = nn_take(&cur, N * Vw);
        a->dn0 = a->z0, a->dn1 = a->z1, a->dcond = nn_take(&cur, N * nh);
        a->ds8 = nn_take(&cur, N * NEEDLE_COND_RANK), a->d3p = nn_take(&cur, nh);
        size_t r = 0;
        for (int t = 0; t < NN_TARGETS; t++) r = (size_t)n->lora[t].r > r ? (size_t)n->lora[t].r : r;
        a->lx = nn_take(&cur, N * r), a->ly = nn_take(&cur, N * r);
    }
    return (size_t)(cur - base);
}

/* The attention output sliced to dv: a->opre, or at F == dv (the default's 64) a->att itself,
 * never written after attention, so no copy. */
static inline float *nn_opre(const nn_acts *a, int F, int dv) { return F != dv ? a->opre : a->att; }

/* The block's input after the engram gate: a->x0 at a layer with an engram site, else u itself
 * (never written after the collapse), so no copy. */
static inline float *nn_x0(const nn_acts *a, const nn_layer *y) { return y->site >= 0 ? a->x0 : a->u; }

static void nn_pass_free(const needle_net *n, nn_pass *p)
{
    (void)n; /* p->base is n->arena, kept */
    free(p->X), free(p->blk);
}

/* Allocate a pass for B x T tokens (keep: for a backward; head: for nn_loss, no logits of every row). */
static int nn_pass_begin(needle_net *n, nn_pass *p, const int32_t *tokens, int B, int T, int keep, int head)
{
    memset(p, 0, sizeof *p);
    if (B <= 0 || T <= 0) return loom_fail("needle: a pass over %d x %d tokens", B, T);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= n->V)
            return loom_fail("needle: token %d at %zu outside the vocabulary (%d)", tokens[i], i, n->V);
    p->B = B, p->T = T, p->keep = keep, p->head = head;
    p->X = calloc((size_t)n->L + 1, sizeof *p->X), p->blk = calloc((size_t)n->L + 1, sizeof *p->blk);
    if (!p->X || !p->blk) return free(p->X), free(p->blk), loom_fail("needle: out of memory");
    const size_t bytes = nn_carve(n, p, NULL);
    if (bytes > n->arena_bytes) {
        backend_free(n->be, n->arena);
        n->arena_bytes = 0;
        if (!(n->arena = backend_alloc(n->be, bytes))) return free(p->X), free(p->blk), -1;
        n->arena_bytes = bytes;
    }
    p->base = n->arena;
    nn_carve(n, p, p->base);
    return 0;
}

/* A8 (and KV8: the same rule per head vector) in place, under QAT only. */
static void nn_a8(const needle_net *n, float *x, size_t rows, int cols)
{
    if (n->qat & NEEDLE_NUM_A8) backend_fake_quant_a8(n->be, x, x, (int)rows, cols);
}

/* y (N, out) = x (N, in) W^T, W (out, in). */
static void nn_linear(const needle_net *n, float *y, const float *x, const float *W, size_t N, int in, int out)
{
    backend_matmul(n->be, y, x, W, (int)N, out, in, 0, 1, 1.0f, 0.0f);
}

/* Its backward: dx (N, in) = dy W (+= when acc). */
static void nn_linear_backward(const needle_net *n, float *dx, const float *dy, const float *W, size_t N, int in,
                               int out, int acc)
{
    backend_matmul(n->be, dx, dy, W, (int)N, in, out, 0, 0, 1.0f, acc ? 1.0f : 0.0f);
}

/* Prefill: the last h rows before each row's end (len[b]) of x (B, T, w) into hist (B, h, w),
 * zeros where they would reach before position 0. */
static void nn_hist_fill(const needle_net *n, const nn_dec *dc, float *hist, const float *x, int T, int h, int w)
{
    backend_fill(n->be, hist, 0.0f, (size_t)dc->B * h * w);
    for (int b = 0; b < dc->B; b++) {
        const int from = dc->len[b] - h > 0 ? dc->len[b] - h : 0, k = dc->len[b] - from;
        backend_copy_d2d(n->be, hist + ((size_t)b * h + (h - k)) * w, x + ((size_t)b * T + from) * w,
                         (size_t)k * w * sizeof(float));
    }
}

/* A step: each row's history (B, h, w) moves up one with the step's row x (B, w) as its last, and
 * the taps w_taps (K, w) at dilation dil over it give the step's output row into out (B, w). */
static void nn_hist_conv(const needle_net *n, const nn_dec *dc, float *hist, const float *x, const float *taps,
                         int K, int dil, int h, int w, float *out)
{
    backend *be = n->be;
    for (int b = 0; b < dc->B; b++) {
        float *r = hist + (size_t)b * h * w;
        backend_copy_d2d(be, dc->tmp, r + w, (size_t)(h - 1) * w * sizeof(float));
        backend_copy_d2d(be, r, dc->tmp, (size_t)(h - 1) * w * sizeof(float));
        backend_copy_d2d(be, r + (size_t)(h - 1) * w, x + (size_t)b * w, (size_t)w * sizeof(float));
    }
    backend_conv_taps_forward(be, dc->tmp, hist, taps, dc->B, h, w, K, dil);
    for (int b = 0; b < dc->B; b++)
        backend_copy_d2d(be, out + (size_t)b * w, dc->tmp + ((size_t)b * h + h - 1) * w, (size_t)w * sizeof(float));
}

/* X[0]: every lane the token's embedding row times sqrt(d), from p->tok. */
static void nn_embed_stream(const needle_net *n, nn_pass *p)
{
    const size_t rows = (size_t)p->B * p->T * n->g.lanes;
    backend_embedding_forward(n->be, p->X[0], p->tok, n->wte, NULL, 1, (int)rows, n->d);
    backend_scale(n->be, p->X[0], (float)sqrt((double)n->d), rows * n->d);
}

/* The embedding: x0 = E[t] sqrt(d) on every lane of X[0] (embed_scale: the Python float
 * math.sqrt(d) in f32); and the engram's keys and values of every site (docs/needle.md 2.2). */
static int nn_embed(const needle_net *n, nn_pass *p, const int32_t *tokens)
{
    const needle_config *c = &n->c;
    const needle_geometry *g = &n->g;
    const int B = p->B, T = p->T, lanes = g->lanes;
    const size_t N = (size_t)B * T, tables = (size_t)g->engram_tables;
    const int heads = g->engram_heads, e = (int)tables * g->engram_sub_dim;
    int32_t *rep = malloc(N * (lanes > (int)tables ? (size_t)lanes : tables) * sizeof(int32_t));
    if (!rep) return loom_fail("needle: out of memory");
    for (size_t i = 0; i < N; i++)
        for (int k = 0; k < lanes; k++) rep[i * lanes + k] = tokens[i];
    backend_copy_h2d(n->be, p->tok, rep, N * (size_t)lanes * sizeof(int32_t));
    nn_embed_stream(n, p);
    int32_t *idx = rep;
    for (int b = 0; b < B; b++) {
        int32_t *row = idx + (size_t)b * T * tables;
        if (p->dec && !p->dec->prefill) { /* a step at position t: the n-grams ending there */
            const int t = p->dec->pos_h[b], maxo = g->engram_dilation, win = t + 1 < maxo ? t + 1 : maxo;
            int32_t last[64], *hw = malloc((size_t)win * tables * sizeof(int32_t));
            if (!hw || win > 64) return free(hw), free(rep), loom_fail("needle: engram orders above 64");
            for (int i = 0; i < win; i++) last[i] = p->dec->hist_tok[(size_t)b * p->dec->cap + t - win + 1 + i];
            needle_engram_indices(last, win, c->engram_orders.v, c->engram_orders.n, heads, c->engram_seed_heads,
                                  (uint32_t)c->engram_slots, hw);
            for (size_t k = 0; k < tables; k++) {
                const int o = (int)(k / (size_t)heads);
                const int32_t q = hw[(size_t)(win - 1) * tables + k];
                row[k] = t < c->engram_orders.v[o] - 1 ? (int32_t)(tables * c->engram_slots)
                                                       : (int32_t)(k * c->engram_slots) + q;
            }
            free(hw);
            continue;
        }
        needle_engram_indices(tokens + (size_t)b * T, T, c->engram_orders.v, c->engram_orders.n, heads,
                              c->engram_seed_heads, (uint32_t)c->engram_slots, row);
        for (int i = 0; i < T; i++)
            for (int o = 0; o < c->engram_orders.n; o++)
                for (int hh = 0; hh < heads; hh++) {
                    size_t tau = (size_t)o * heads + hh;
                    int32_t *q = row + (size_t)i * tables + tau;
                    /* an n-gram reaching before position 0 reads the zero row (ngram_ok = 0) */
                    *q = i < c->engram_orders.v[o] - 1 ? (int32_t)(tables * c->engram_slots)
                                                         : (int32_t)(tau * c->engram_slots) + *q;
                }
    }
    backend_copy_h2d(n->be, p->idx, idx, N * tables * sizeof(int32_t));
    free(rep);
    for (int s = 0; s < n->nsites; s++) {
        const nn_site *S = &n->site[s];
        backend_embedding_forward(n->be, p->e, p->idx, S->table, NULL, 1, (int)(N * tables), g->engram_sub_dim);
        nn_a8(n, p->e, N, e);
        nn_linear(n, p->ek[s], p->e, S->wk, N, e, n->d);
        nn_linear(n, p->evt, p->e, S->wv, N, e, n->d);
        nn_dec *dc = p->dec;
        if (dc && !dc->prefill) { /* a step: its row through the taps over the kept rows */
            nn_hist_conv(n, dc, dc->he[s], p->evt, S->taps, S->ntaps, g->engram_dilation, dc->Le, n->d, p->ev[s]);
            continue;
        }
        backend_conv_taps_forward(n->be, p->ev[s], p->evt, S->taps, B, T, n->d, S->ntaps, g->engram_dilation);
        if (dc) nn_hist_fill(n, dc, dc->he[s], p->evt, T, dc->Le, n->d);
    }
    return 0;
}

/* A step's attention: each row's new k, v (B, Hk, F) stored at its position in layer l's cache,
 * its query over the cache: every position so far in a global layer; in a local one the last
 * `window` (keys t - window < j <= t, as the prefill's mask), through a view of the row's cache
 * that starts there (one row a call). */
static void nn_attention_step(const needle_net *n, const nn_layer *y, nn_dec *dc, int l, float *out, const float *q,
                              const float *k, const float *v)
{
    const int H = n->c.num_heads, Hk = n->c.num_kv_heads;
    const int F = n->g.qk_head_dim > n->g.v_head_dim ? n->g.qk_head_dim : n->g.v_head_dim;
    if (y->window <= 0) {
        backend_attention_decode_rows(n->be, out, q, k, v, dc->kc[l], dc->vc[l], dc->pos, dc->B, dc->cap, H, Hk, F);
        return;
    }
    const size_t row = (size_t)Hk * F;
    for (int b = 0; b < dc->B; b++) {
        const int t = dc->pos_h[b], start = t - y->window + 1 > 0 ? t - y->window + 1 : 0;
        const size_t at = ((size_t)b * dc->cap + start) * row;
        backend_attention_decode_rows(n->be, out + (size_t)b * H * F, q + (size_t)b * H * F, k + (size_t)b * row,
                                      v + (size_t)b * row, dc->kc[l] + at, dc->vc[l] + at, dc->posw + b, 1,
                                      dc->cap - start, H, Hk, F);
    }
}

/* Attention on a->hq (the normed, quantised block input) into a->ao (its out projection, before
 * the post norm): docs/needle.md 2.5. project 0: a->q, k, v, gt and a->ao are already there (a
 * recompute with the layer's block kept), so neither the projections nor the out projection run. */
static void nn_attention(const needle_net *n, const nn_layer *y, nn_acts *a, int B, int T, nn_dec *dc, int l,
                         int project)
{
    backend *be = n->be;
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)B * T;
    const int d = n->d, H = n->c.num_heads, Hk = n->c.num_kv_heads, dq = g->qk_head_dim, dv = g->v_head_dim;
    const int F = nn_head_F(g), c = n->c.qkv_conv_taps;
    if (project) {
        nn_linear(n, a->q, a->hq, y->wq, N, d, g->q_dim);
        nn_linear(n, a->k, a->hq, y->wk, N, d, g->k_dim);
        nn_linear(n, a->v, a->hq, y->wv, N, d, g->v_dim);
        nn_linear(n, a->gt, a->hq, y->wg, N, d, g->attn_dim);
    }
    const int step = dc && !dc->prefill;
    if (dc && dc->prefill && c > 0) {
        nn_hist_fill(n, dc, dc->hq[l], a->q, T, c, g->q_dim);
        nn_hist_fill(n, dc, dc->hk[l], a->k, T, c, g->k_dim);
        nn_hist_fill(n, dc, dc->hv[l], a->v, T, c, g->v_dim);
    }
    if (step && c > 0) {
        nn_hist_conv(n, dc, dc->hq[l], a->q, y->tq, c, 1, c, g->q_dim, a->qt);
        nn_hist_conv(n, dc, dc->hk[l], a->k, y->tk, c, 1, c, g->k_dim, a->kt);
        nn_hist_conv(n, dc, dc->hv[l], a->v, y->tv, c, 1, c, g->v_dim, a->vt);
    } else if (c > 0) {
        backend_conv_taps_forward(be, a->qt, a->q, y->tq, B, T, g->q_dim, c, 1);
        backend_conv_taps_forward(be, a->kt, a->k, y->tk, B, T, g->k_dim, c, 1);
        backend_conv_taps_forward(be, a->vt, a->v, y->tv, B, T, g->v_dim, c, 1);
    } else {
        backend_copy_d2d(be, a->qt, a->q, N * g->q_dim * sizeof(float));
        backend_copy_d2d(be, a->kt, a->k, N * g->k_dim * sizeof(float));
        backend_copy_d2d(be, a->vt, a->v, N * g->v_dim * sizeof(float));
    }
    backend_rmsnorm_forward(be, a->qn, a->rq, a->qt, y->qn, (int)N * H, dq, NEEDLE_EPS);
    backend_rmsnorm_forward(be, a->kn, a->rk, a->kt, y->kn, (int)N * Hk, dq, NEEDLE_EPS);
    if (step) { /* each row at its own position, the same angles */
        backend_rope_rows(be, a->qn, dc->pos, B, H, dq, 0.0f, n->freqs);
        backend_rope_rows(be, a->kn, dc->pos, B, Hk, dq, 0.0f, n->freqs);
    } else {
        backend_rope_freqs(be, a->qn, B, T, H, dq, n->freqs, 0);
        backend_rope_freqs(be, a->kn, B, T, Hk, dq, n->freqs, 0);
    }
    nn_a8(n, a->qn, N * H, dq);
    nn_a8(n, a->kn, N * Hk, dq);
    nn_a8(n, a->vt, N * Hk, dv);
    backend_scale_cols(be, a->qf, a->qn, n->qpad, (int)N * H, dq, F);
    const float *kf = a->kn, *vf = a->vt;
    if (F != dq) backend_scale_cols(be, a->kf, a->kn, n->ones, (int)N * Hk, dq, F), kf = a->kf;
    if (F != dv) backend_scale_cols(be, a->vf, a->vt, n->ones, (int)N * Hk, dv, F), vf = a->vf;
    if (step)
        nn_attention_step(n, y, dc, l, a->att, a->qf, kf, vf);
    else if (project) /* else a kept block's att and lse: the forward's */
        backend_attention_forward(be, a->att, a->lse, a->qf, kf, vf, B, T, H, Hk, F, y->window);
    if (dc && dc->prefill) /* the prompts' keys and values, as attention read them, into the caches */
        for (int b = 0; b < B; b++) {
            const size_t row = (size_t)Hk * F;
            backend_copy_d2d(be, dc->kc[l] + (size_t)b * dc->cap * row, kf + (size_t)b * T * row, (size_t)T * row * sizeof(float));
            backend_copy_d2d(be, dc->vc[l] + (size_t)b * dc->cap * row, vf + (size_t)b * T * row, (size_t)T * row * sizeof(float));
        }
    if (F != dv) backend_scale_cols(be, a->opre, a->att, n->ones, (int)N * H, F, dv);
    backend_sigmoid_gate_forward(be, a->og, nn_opre(a, F, dv), a->gt, N * (size_t)g->attn_dim);
    nn_a8(n, a->og, N, g->attn_dim);
    if (project) nn_linear(n, a->ao, a->og, y->wo, N, g->attn_dim, d);
}

/* The Monarch-Hadamard MLP on a->h2 (the normed stream) into out (N, d): docs/needle.md 2.6.
 * kept: a recompute with the layer's block kept, which holds s8 and the layer's y: only what the
 * backward reads (cond, zin) is computed, and out is not written. */
static void nn_mlp(const needle_net *n, const nn_layer *y, nn_acts *a, size_t N, float *out, int kept)
{
    backend *be = n->be;
    const int d = n->d, nh = n->g.hada_n, A = n->g.hada_a, Bb = n->g.hada_b;
    /* cond = 1 + softmax(x Cv) Cu */
    if (!kept) {
        backend_matmul(be, a->s8, a->h2, y->cv, (int)N, NEEDLE_COND_RANK, d, 0, 0, 1.0f, 0.0f);
        backend_softmax_rows(be, a->s8, a->s8, (int)N, NEEDLE_COND_RANK);
    }
    backend_fill(be, a->cond, 1.0f, N * (size_t)nh);
    backend_matmul(be, a->cond, a->s8, y->cu, (int)N, nh, NEEDLE_COND_RANK, 0, 0, 1.0f, 1.0f);
    /* the diagonals and permutations ride on the products (backend_kron_io): zin = P1 K1 (D1 h2,
     * padded), z1 = D3 P2 K2 SiLU(..), out = D4 K3 z1 (truncated) */
    const backend_kron_io first = {NULL, y->d1, d, n->p1, NULL, nh};
    backend_kron_apply(be, a->zin, a->h2, y->w1a, y->w1b, (int)N, A, Bb, 0, &first);
    if (kept) return;
    backend_hada_mid_forward(be, a->z0, a->zin, a->cond, y->d2, y->b2, (int)N, nh);
    const backend_kron_io mid = {NULL, NULL, nh, n->p2, y->d3, nh};
    backend_kron_apply(be, a->z1, a->z0, y->w2a, y->w2b, (int)N, A, Bb, 0, &mid);
    const backend_kron_io last = {NULL, NULL, nh, NULL, y->d4, d};
    backend_kron_apply(be, out, a->z1, y->w3a, y->w3b, (int)N, A, Bb, 0, &last);
}

/* Layer l: the stream X (N, lanes, d) into Xo (NULL: a recompute, which needs only the
 * activations, and skips what the layer's kept block holds), its activations in p->a (docs/needle.md
 * 2.3-2.4). */
static void nn_layer_forward(const needle_net *n, nn_pass *p, int l, const float *X, float *Xo)
{
    backend *be = n->be;
    const nn_layer *y = &n->layer[l];
    nn_acts *a = &p->a;
    const size_t N = (size_t)p->B * p->T, d = (size_t)n->d;
    const int lanes = n->g.lanes, W = lanes * n->d;
    const int kept = Xo == NULL && p->blk[l]; /* the block is the forward's: not computed again */
    nn_point(n, p, l, a);
    /* mHC coefficients from x-hat = A8(rmsunit(X)), u = their pre-weighted lane sum */
    if (!kept) {
        backend_rmsnorm_forward(be, a->xh, a->rx, X, n->ones, (int)N, W, NEEDLE_EPS);
        nn_a8(n, a->xh, N, W);
        nn_linear(n, a->z, a->xh, y->phi, N, W, n->K);
        backend_mhc_coeffs_forward(be, a->hc, a->z, y->mhc_alpha, y->mhc_bias, (int)N, lanes, l % lanes);
    }
    backend_mhc_collapse(be, a->u, X, a->hc, n->K, (int)N, lanes, n->d);
    /* the block on u: engram gate, attention, MLP */
    if (y->site >= 0)
        backend_engram_gate_forward(be, a->x0, a->u, p->ek[y->site], p->ev[y->site], (int)N, n->d);
    const float *x0 = nn_x0(a, y);
    backend_rmsnorm_forward(be, a->hq, a->r1, x0, y->ln1, (int)N, n->d, NEEDLE_EPS);
    nn_a8(n, a->hq, N, n->d);
    nn_attention(n, y, a, p->B, p->T, p->dec, l, !kept);
    backend_rmsnorm_forward(be, a->ap, a->rp, a->ao, y->post, (int)N, n->d, NEEDLE_EPS);
    backend_scalar_gate_forward(be, a->ap, a->ap, y->gate, N * d);
    backend_add(be, a->x1, x0, a->ap, N * d);
    backend_rmsnorm_forward(be, a->h2, a->r2, a->x1, y->ln2, (int)N, n->d, NEEDLE_EPS);
    nn_mlp(n, y, a, N, a->y, kept);
    if (kept) return;
    /* y = Block(u) - u = (x1 + mlp) - u, then the lanes mix: X' = H_res X + h_post y */
    backend_add(be, a->y, a->x1, a->y, N * d);
    backend_axpy(be, a->y, -1.0f, a->u, N * d);
    if (Xo) backend_mhc_expand(be, Xo, X, a->hc, a->y, (int)N, lanes, n->d);
}

/* A thin pass's stream X[l] (l % span != 0) = H_res X[l-1] + h_post y of layer l - 1's block
 * (nn_carve): the expand of its forward on the same inputs, so the same bits. */
static void nn_stream_rebuild(const needle_net *n, nn_pass *p, int l)
{
    nn_acts t;
    nn_point(n, p, l - 1, &t);
    backend_mhc_expand(n->be, p->X[l], p->X[l - 1], t.hc, t.y, p->B * p->T, n->g.lanes, n->d);
}

/* Every layer, then the head: p->logits (N, V') from the last stream (when p->head, only the
 * head's input p->hf: nn_loss runs the head on the rows with a target). */
static void nn_forward(const needle_net *n, nn_pass *p, float *hidden)
{
    backend *be = n->be;
    const size_t N = (size_t)p->B * p->T, d = (size_t)n->d;
    const int lanes = n->g.lanes;
    for (int l = 0; l < n->L; l++) {
        nn_layer_forward(n, p, l, p->X[l], p->X[l + 1]);
        if (hidden) { /* hidden_states(): the lane mean after each layer */
            backend_mhc_collapse(be, p->xm, p->X[l + 1], n->lane_mean, 0, (int)N, lanes, n->d);
            backend_copy_d2h(be, hidden + (size_t)l * N * d, p->xm, N * d * sizeof(float));
        }
    }
    backend_mhc_collapse(be, p->xm, p->X[n->L], n->lane_mean, 0, (int)N, lanes, n->d);
    backend_rmsnorm_forward(be, p->hf, p->rf, p->xm, n->lnf, (int)N, n->d, NEEDLE_EPS);
    nn_a8(n, p->hf, N, n->d);
    if (!p->head) nn_linear(n, p->logits, p->hf, n->wte, N, n->d, n->Vout);
}

int needle_net_forward(needle_net *n, const int32_t *tokens, int B, int T, float *logits, float *hidden)
{
    nn_pass p;
    if (nn_pass_begin(n, &p, tokens, B, T, 0, 0)) return -1;
    int rc = nn_embed(n, &p, tokens);
    if (rc == 0) {
        nn_forward(n, &p, hidden);
        backend_copy_d2h(n->be, logits, p.logits, (size_t)B * T * n->Vout * sizeof(float));
    }
    nn_pass_free(n, &p);
    return rc;
}

/* argmax of one device row of logits (first index on a tie, as jnp.argmax); lg: host scratch (V'). */
static int32_t nn_argmax(const needle_net *n, const float *row, float *lg)
{
    backend_copy_d2h(n->be, lg, row, (size_t)n->Vout * sizeof(float));
    int best = 0;
    for (int v = 1; v < n->Vout; v++)
        if (lg[v] > lg[best]) best = v;
    return best;
}

/* 1 when row b of a decode may take another token: under its budget, short of cap, not ended. */
static int nn_row_open(const int32_t *tokens, int b, int cap, const int *lens, const int *max_new, int eos,
                       const int *made)
{
    const int len = lens[b] + made[b];
    return made[b] < max_new[b] && len < cap && len > 0 && !(eos >= 0 && made[b] && tokens[(size_t)b * cap + len - 1] == eos);
}

/* Greedy decoding as run.generate does it (run.py:64-99: no cache, the whole row again for every
 * token, argmax of the last position's logits, first index on a tie). Each step runs the rows still
 * going, right-padded with pad_token_id to the longest (causal: padding after a row's end changes
 * none of its logits). */
int needle_net_greedy(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                      int *made)
{
    int *row = malloc((size_t)B * sizeof(int)), rc = 0;
    int32_t *batch = malloc((size_t)B * cap * sizeof(int32_t));
    float *lg = malloc((size_t)n->Vout * sizeof(float));
    if (!row || !batch || !lg) rc = loom_fail("needle: out of memory");
    for (int b = 0; b < B; b++) made[b] = 0;
    while (rc == 0) {
        int R = 0, T = 0;
        for (int b = 0; b < B; b++) {
            const int len = lens[b] + made[b];
            if (!nn_row_open(tokens, b, cap, lens, max_new, eos, made)) continue;
            row[R++] = b;
            T = len > T ? len : T;
        }
        if (R == 0) break;
        T = (T + 15) / 16 * 16 < cap ? (T + 15) / 16 * 16 : cap; /* fewer shapes: the arena is reused */
        for (int i = 0; i < R; i++) {
            const int b = row[i], len = lens[b] + made[b];
            memcpy(batch + (size_t)i * T, tokens + (size_t)b * cap, (size_t)len * sizeof(int32_t));
            for (int j = len; j < T; j++) batch[(size_t)i * T + j] = n->c.pad_token_id;
        }
        nn_pass p;
        if ((rc = nn_pass_begin(n, &p, batch, R, T, 0, 0))) break;
        if ((rc = nn_embed(n, &p, batch)) == 0) nn_forward(n, &p, NULL);
        for (int i = 0; rc == 0 && i < R; i++) {
            const int b = row[i], len = lens[b] + made[b];
            tokens[(size_t)b * cap + len] = nn_argmax(n, p.logits + ((size_t)i * T + len - 1) * n->Vout, lg);
            made[b]++;
        }
        nn_pass_free(n, &p);
    }
    free(row), free(batch), free(lg);
    return rc;
}

static void nn_dec_free(needle_net *n, nn_dec *dc)
{
    float **per[5] = {dc->kc, dc->vc, dc->hq, dc->hk, dc->hv};
    for (int k = 0; k < 5; k++) {
        for (int l = 0; per[k] && l < n->L; l++) backend_free(n->be, per[k][l]);
        free(per[k]);
    }
    for (int s = 0; s < n->nsites; s++) backend_free(n->be, dc->he[s]);
    backend_free(n->be, dc->tmp), backend_free(n->be, dc->pos), backend_free(n->be, dc->posw);
    free(dc->pos_h);
}

/* The caches and histories of B rows of cap positions (device), zeroed where they are read
 * before written. -1 + loom_fail. */
/* The decode caches' shapes for B rows of cap tokens, in floats: each layer's k and v caches
 * (kv each) and q, k, v tap histories (hist[3], none without taps), each site's engram history
 * (he), the scratch (tmp). nn_dec_alloc allocates them; needle_net_plan counts them. */
typedef struct nn_dec_dims {
    size_t kv, hist[3], he, tmp;
    int c, Le;
} nn_dec_dims;

static void nn_dec_dims_of(const needle_net *n, int B, int cap, nn_dec_dims *z)
{
    const needle_geometry *g = &n->g;
    const int c = n->c.qkv_conv_taps;
    int Le = 0;
    for (int s = 0; s < n->nsites; s++) {
        const int le = (n->site[s].ntaps - 1) * g->engram_dilation + 1;
        Le = le > Le ? le : Le;
    }
    int w = n->d;
    const int widths[3] = {g->q_dim, g->k_dim, g->v_dim};
    for (int k = 0; k < 3; k++) w = widths[k] > w ? widths[k] : w;
    const int h = c > Le ? c : Le;
    z->c = c, z->Le = Le;
    z->kv = (size_t)B * cap * n->c.num_kv_heads * nn_head_F(g);
    for (int k = 0; k < 3; k++) z->hist[k] = c > 0 ? (size_t)B * c * widths[k] : 0;
    z->he = (size_t)B * Le * n->d;
    z->tmp = (size_t)B * (h > 0 ? h : 1) * w;
}

static int nn_dec_alloc(needle_net *n, nn_dec *dc, int B, int cap)
{
    nn_dec_dims z;
    nn_dec_dims_of(n, B, cap, &z);
    memset(dc, 0, sizeof *dc);
    dc->B = B, dc->cap = cap, dc->c = z.c, dc->Le = z.Le;
    dc->kc = calloc((size_t)n->L, sizeof(float *)), dc->vc = calloc((size_t)n->L, sizeof(float *));
    dc->hq = calloc((size_t)n->L, sizeof(float *)), dc->hk = calloc((size_t)n->L, sizeof(float *));
    dc->hv = calloc((size_t)n->L, sizeof(float *));
    dc->pos_h = calloc((size_t)B, sizeof(int));
    int ok = dc->kc && dc->vc && dc->hq && dc->hk && dc->hv && dc->pos_h;
    for (int l = 0; ok && l < n->L; l++) {
        ok = (dc->kc[l] = backend_alloc(n->be, z.kv * sizeof(float))) && (dc->vc[l] = backend_alloc(n->be, z.kv * sizeof(float)));
        for (int k = 0; ok && z.c > 0 && k < 3; k++) {
            float **hist = k == 0 ? &dc->hq[l] : k == 1 ? &dc->hk[l] : &dc->hv[l];
            ok = (*hist = backend_alloc(n->be, z.hist[k] * sizeof(float))) != NULL;
        }
    }
    for (int s = 0; ok && s < n->nsites; s++) ok = (dc->he[s] = backend_alloc(n->be, z.he * sizeof(float))) != NULL;
    ok = ok && (dc->tmp = backend_alloc(n->be, z.tmp * sizeof(float))) &&
         (dc->pos = backend_alloc(n->be, (size_t)B * sizeof(int32_t))) && (dc->posw = backend_alloc(n->be, (size_t)B * sizeof(int32_t)));
    if (!ok) {
        nn_dec_free(n, dc);
        return loom_fail("needle: out of memory for the decode caches of %d rows of %d", B, cap);
    }
    return 0;
}

/* The bytes nn_dec_alloc allocates on the device. */
static size_t nn_dec_bytes(const needle_net *n, int B, int cap)
{
    nn_dec_dims z;
    nn_dec_dims_of(n, B, cap, &z);
    size_t f = (size_t)n->L * (2 * z.kv + z.hist[0] + z.hist[1] + z.hist[2]) + (size_t)n->nsites * z.he + z.tmp;
    return f * sizeof(float) + 2 * (size_t)B * sizeof(int32_t);
}

/* KV-cached greedy decoding (needle_net_generate): one prefill pass over the prompts (right-
 * padded: a row never sees the positions after its end), then one pass of B rows of one token a
 * step, every row at its own position; a row that is done steps along unread at its last position. */
/* Row b's next token from its device logits row (copied to host lg): pick's, or argmax. */
static int32_t nn_pick(const needle_net *n, const float *row, float *lg, needle_pick_fn pick, void *ctx, int b, int k)
{
    if (!pick) return nn_argmax(n, row, lg);
    backend_copy_d2h(n->be, lg, row, (size_t)n->Vout * sizeof(float));
    return pick(ctx, b, k, lg, n->Vout);
}

int needle_net_generate(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                        int *made)
{
    return needle_net_sample(n, tokens, B, cap, lens, max_new, eos, NULL, NULL, made);
}

int needle_net_sample(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                      needle_pick_fn pick, void *ctx, int *made)
{
    nn_dec dc;
    if (nn_dec_alloc(n, &dc, B, cap)) return -1;
    int T = 0;
    for (int b = 0; b < B; b++) {
        made[b] = 0;
        if (lens[b] <= 0 || lens[b] > cap) return nn_dec_free(n, &dc), loom_fail("needle: prompt %d of %d tokens (cap %d)", b, lens[b], cap);
        T = lens[b] > T ? lens[b] : T;
    }
    int32_t *batch = malloc((size_t)B * (T > 1 ? T : 1) * sizeof(int32_t)), *pos = malloc((size_t)B * 2 * sizeof(int32_t));
    float *lg = malloc((size_t)n->Vout * sizeof(float));
    int rc = batch && pos && lg ? 0 : loom_fail("needle: out of memory");
    for (int b = 0; rc == 0 && b < B; b++) {
        memcpy(batch + (size_t)b * T, tokens + (size_t)b * cap, (size_t)lens[b] * sizeof(int32_t));
        for (int j = lens[b]; j < T; j++) batch[(size_t)b * T + j] = n->c.pad_token_id;
    }
    nn_pass p;
    dc.prefill = 1, dc.len = lens;
    /* the prefill runs the head on each row's last prompt position only (head mode: no (B T, V')
     * logits), in blocks of head_rows rows gathered from the head's input */
    if (rc == 0 && (rc = nn_pass_begin(n, &p, batch, B, T, 0, 1)) == 0) {
        p.dec = &dc;
        if ((rc = nn_embed(n, &p, batch)) == 0) nn_forward(n, &p, NULL);
        for (int b = 0; b < B; b++) pos[b] = (int32_t)((size_t)b * T + lens[b] - 1);
        backend_copy_h2d(n->be, p.hrows, pos, (size_t)B * sizeof(int32_t));
        for (int b0 = 0; rc == 0 && b0 < B; b0 += n->head_rows) {
            const int k = B - b0 < n->head_rows ? B - b0 : n->head_rows;
            backend_embedding_forward(n->be, p.hblk, p.hrows + b0, p.hf, NULL, 1, k, n->d); /* gather */
            nn_linear(n, p.logits, p.hblk, n->wte, (size_t)k, n->d, n->Vout);
            for (int b = b0; b < b0 + k; b++)
                if (nn_row_open(tokens, b, cap, lens, max_new, eos, made))
                    tokens[(size_t)b * cap + lens[b]] = nn_pick(n, p.logits + (size_t)(b - b0) * n->Vout, lg, pick, ctx, b, 0), made[b]++;
        }
        nn_pass_free(n, &p);
    }
    dc.prefill = 0, dc.hist_tok = tokens;
    const int win = n->c.sliding_window;
    while (rc == 0) {
        int open = 0;
        for (int b = 0; b < B; b++) {
            open += nn_row_open(tokens, b, cap, lens, max_new, eos, made);
            const int t = lens[b] + made[b] - 1; /* the last token: this step's input */
            dc.pos_h[b] = pos[b] = t;
            pos[B + b] = win > 0 && t - win + 1 > 0 ? win - 1 : t;
            batch[b] = tokens[(size_t)b * cap + t];
        }
        if (!open) break;
        backend_copy_h2d(n->be, dc.pos, pos, (size_t)B * sizeof(int32_t));
        backend_copy_h2d(n->be, dc.posw, pos + B, (size_t)B * sizeof(int32_t));
        if ((rc = nn_pass_begin(n, &p, batch, B, 1, 0, 0))) break;
        p.dec = &dc;
        if ((rc = nn_embed(n, &p, batch)) == 0) nn_forward(n, &p, NULL);
        for (int b = 0; rc == 0 && b < B; b++) /* a row's state changes only after its own check */
            if (nn_row_open(tokens, b, cap, lens, max_new, eos, made)) {
                const int len = lens[b] + made[b];
                tokens[(size_t)b * cap + len] = nn_pick(n, p.logits + (size_t)b * n->Vout, lg, pick, ctx, b, made[b]);
                made[b]++;
            }
        nn_pass_free(n, &p);
    }
    free(batch), free(pos), free(lg);
    nn_dec_free(n, &dc);
    return rc;
}

void needle_net_bytes(const needle_net *n, size_t *held, size_t *activations)
{
    *held = n->owned_bytes, *activations = n->arena_bytes;
}

/* nn_alloc's bytes for a tensor of `floats` (an empty one takes one float). */
static size_t nn_owned(size_t floats) { return (floats ? floats : 1) * sizeof(float); }

/* The bytes nn_load and needle_net_lora_init(rank) allocate through nn_alloc (n->owned_bytes),
 * tensor by tensor in their order; n is a plan's net: its shapes, sites and qat set, nothing
 * loaded. A change to what those two allocate must change this too (test_needle_net checks it). */
static size_t nn_held_bytes(const needle_net *n, int rank)
{
    const needle_geometry *g = &n->g;
    const size_t L = (size_t)n->L, d = (size_t)n->d, dq = (size_t)g->qk_head_dim, c = (size_t)n->c.qkv_conv_taps;
    const size_t a = (size_t)g->hada_a, b = (size_t)g->hada_b, hn = (size_t)g->hada_n, W = (size_t)g->lanes * d;
    size_t s = (n->qat & NEEDLE_NUM_W4) ? nn_owned(16) : 0;
    s += nn_owned((size_t)n->V * d) + nn_owned(d); /* wte, lnf */
    for (int t = 0; t < NN_TARGETS; t++) {
        int in, out;
        nn_target_dims(n, t, &in, &out);
        s += 2 * L * nn_owned((size_t)in * out); /* the base w0 and the merged kernel, per layer */
        if (rank > 0) {                          /* A, B, their gradients and moments */
            s += 4 * nn_owned(L * (size_t)in * rank) + 4 * nn_owned(L * (size_t)rank * out);
        }
    }
    s += L * (2 * nn_owned(dq) + nn_owned(1)); /* q_norm, k_norm, attn_gate */
    if (c > 0) s += L * (nn_owned(c * g->q_dim) + nn_owned(c * g->k_dim) + nn_owned(c * g->v_dim));
    s += L * (3 * nn_owned(d) + 3 * nn_owned(a * a) + 3 * nn_owned(b * b) + 5 * nn_owned(hn) +
              nn_owned(d * NEEDLE_COND_RANK) + nn_owned(NEEDLE_COND_RANK * hn)); /* nn_load_mlp */
    s += L * (nn_owned((size_t)n->K * W) + nn_owned((size_t)n->K) + nn_owned(3)); /* nn_load_mhc */
    const size_t rows = (size_t)g->engram_tables * n->c.engram_slots, e = (size_t)g->engram_tables * g->engram_sub_dim;
    for (int k = 0; k < n->nsites; k++)
        s += nn_owned((rows + 1) * g->engram_sub_dim) + 2 * nn_owned(e * d) + nn_owned((size_t)n->site[k].ntaps * d);
    int wide = n->d;
    const int widths[6] = {g->q_dim, g->k_dim, g->v_dim, g->attn_dim, g->hada_n, g->lanes * n->d};
    for (int i = 0; i < 6; i++) wide = widths[i] > wide ? widths[i] : wide;
    s += nn_owned(dq / 2) + nn_owned(dq) + nn_owned((size_t)wide) + nn_owned((size_t)g->lanes) + 4 * nn_owned(hn);
    return s;
}

/* A pass's arena for B x T with its head in blocks (keep: a training pass; else a decode's
 * prefill), as nn_pass_begin sizes it. */
static size_t nn_pass_bytes(const needle_net *n, int B, int T, int keep)
{
    nn_pass p;
    memset(&p, 0, sizeof p);
    p.B = B, p.T = T, p.keep = keep, p.head = 1;
    return nn_carve(n, &p, NULL);
}

int needle_net_plan(const needle_net_ask *ask, needle_net_size *out)
{
    memset(out, 0, sizeof *out);
    if (ask->B < 1 || ask->T < 1 || ask->lora_rank < 0) return loom_fail("needle: plan of %d x %d tokens, rank %d", ask->B, ask->T, ask->lora_rank);
    needle_file *f = needle_open_rung(ask->base, ask->layers);
    if (!f) return -1;
    needle_net n;
    memset(&n, 0, sizeof n);
    n.c = *needle_file_config(f);
    needle_geometry_of(&n.c, &n.g);
    n.qat = ask->qat;
    n.L = n.c.num_layers, n.d = n.c.d_model, n.V = n.c.vocab_size;
    n.Vout = n.c.out_vocab > 0 ? n.c.out_vocab : n.V;
    n.K = 2 * n.g.lanes + n.g.lanes * n.g.lanes;
    n.head_rows = NN_HEAD_ROWS, n.span = NN_SPAN;
    n.nsites = n.c.engram_layers.n < NEEDLE_MAX_SITES ? n.c.engram_layers.n : NEEDLE_MAX_SITES;
    int rc = 0;
    for (int k = 0; k < n.nsites && rc == 0; k++) { /* each site's tap count is its file tensor's */
        char path[96];
        snprintf(path, sizeof path, "engrams_%d/taps", k);
        int i = needle_file_find(f, path);
        if (i < 0) rc = loom_fail("%s: tensor %s missing", ask->base, path);
        else n.site[k].ntaps = (int)(needle_file_tensor(f, i)->numel / (size_t)(n.d > 0 ? n.d : 1));
    }
    for (int i = 0; rc == 0 && i < needle_file_count(f); i++) out->base_params += needle_file_tensor(f, i)->numel;
    needle_close(f);
    if (rc) return -1;
    out->heads = n.c.num_heads, out->kv_heads = n.c.num_kv_heads, out->head_width = nn_head_F(&n.g);
    out->held = nn_held_bytes(&n, 0);
    if (ask->lora_rank > 0) {
        const size_t with = nn_held_bytes(&n, ask->lora_rank);
        out->lora = (with - out->held) / 4;
        out->held = with;
        for (int t = 0; t < NN_TARGETS; t++) n.lora[t].r = ask->lora_rank;
    }
    n.keep_blocks = ask->recompute ? 0 : n.L;
    out->train_pass = nn_pass_bytes(&n, ask->B, ask->T, 1);
    n.keep_blocks = ask->recompute ? n.L : 0;
    out->other_pass = nn_pass_bytes(&n, ask->B, ask->T, 1);
    if (ask->gen_rows > 0 && ask->gen_cap > 0) {
        const int Tp = ask->T < ask->gen_cap ? ask->T : ask->gen_cap;
        out->gen_pass = nn_pass_bytes(&n, ask->gen_rows, Tp, 0);
        out->gen_caches = nn_dec_bytes(&n, ask->gen_rows, ask->gen_cap);
    }
    return 0;
}

double needle_net_step_flops(const needle_net *n, int B, int T)
{
    const needle_geometry *g = &n->g;
    const double d = n->d, H = n->c.num_heads, lanes = g->lanes, nh = g->hada_n;
    const double proj = 2 * d * (g->q_dim + g->k_dim + g->v_dim + g->attn_dim) + 2.0 * g->attn_dim * d;
    const double attn = 2 * H * T * (double)(g->qk_head_dim + g->v_head_dim); /* dense over T, as Needle */
    const double mhc = 2 * lanes * d * (2 * lanes + lanes * lanes);
    const double mlp = 2 * d * NEEDLE_COND_RANK + 2.0 * NEEDLE_COND_RANK * nh + 3 * 2 * nh * (g->hada_a + g->hada_b);
    const double e = (double)g->engram_tables * g->engram_sub_dim, head = 2 * d * n->Vout;
    const double fwd = n->L * (proj + attn + mhc + mlp) + n->nsites * 2 * 2 * e * d + head;
    const double bwd = n->L * (2 * proj + 2 * attn + mhc + mlp) + head;
    double lora = 0;
    for (int t = 0; t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (lo->A) lora += 3 * 2.0 * lo->in * lo->r * lo->out * n->L; /* the merge, dA and dB */
    }
    return (fwd + bwd) * B * T + lora;
}

/* --- the backward pass (docs/needle.md 2.3-2.7; every base tensor frozen, the adapters' gradients
 * from each target's input and output gradient, nn_lora_backward) --- */

/* Target t's adapter gradients at layer l from its input x (N, in) and output gradient dy (N, out),
 * factored through the rank: with Needle's W' [in, out] = W + s A B, dL/dW' = x^T dy (the straight-
 * through estimator carries it past W4), so
 *     dA [in, r] = s dL/dW' B^T = s x^T (dy B^T),     dB [r, out] = s A^T dL/dW' = s (x A)^T dy,
 * 4 N r (in + out) FLOPs instead of the 2 N in out of dL/dW' itself (docs/needle.md section 7):
 * the same sums in another order. beta 1 adds to the last call's (accumulation). */
static void nn_lora_backward(const needle_net *n, nn_acts *a, int t, int l, const float *dy, const float *x,
                             size_t N, float beta)
{
    const nn_lora *lo = &n->lora[t];
    if (!lo->A) return;
    float *gA = lo->gA + (size_t)l * lo->in * lo->r, *gB = lo->gB + (size_t)l * lo->r * lo->out;
    const float *A = lo->A + (size_t)l * lo->in * lo->r, *Bm = lo->B + (size_t)l * lo->r * lo->out;
    backend_matmul(n->be, a->ly, dy, Bm, (int)N, lo->r, lo->out, 0, 1, 1.0f, 0.0f);
    backend_matmul(n->be, gA, x, a->ly, lo->in, lo->r, (int)N, 1, 0, lo->s, beta);
    backend_matmul(n->be, a->lx, x, A, (int)N, lo->r, lo->in, 0, 0, 1.0f, 0.0f);
    backend_matmul(n->be, gB, a->lx, dy, lo->r, lo->out, (int)N, 1, 0, lo->s, beta);
}

/* Attention's backward from a->dao (dL/d ao) into a->dhq (dL/d hq, overwritten; not when !dx), the
 * adapters' gradients of layer l (beta: nn_lora_backward's). */
static void nn_attention_backward(const needle_net *n, const nn_layer *y, nn_acts *a, int l, int B, int T,
                                  float beta, int dx)
{
    backend *be = n->be;
    const needle_geometry *g = &n->g;
    const size_t N = (size_t)B * T;
    const int d = n->d, H = n->c.num_heads, Hk = n->c.num_kv_heads, dq = g->qk_head_dim, dv = g->v_head_dim;
    const int F = nn_head_F(g), c = n->c.qkv_conv_taps, O = g->attn_dim;
    /* ao = A8(opre sigmoid(gt)) Wo^T */
    nn_linear_backward(n, a->dog, a->dao, y->wo, N, O, d, 0);
    nn_lora_backward(n, a, NN_O, l, a->dao, a->og, N, beta);
    backend_sigmoid_gate_backward(be, a->dopre, a->dgt, a->dog, nn_opre(a, F, dv), a->gt, N * (size_t)O);
    /* the heads' output sliced from F to dv, attention at F, the pads taken back */
    const float *datt = a->dopre, *kf = a->kn, *vf = a->vt;
    if (F != dv) backend_scale_cols(be, a->datt, a->dopre, n->ones, (int)N * H, dv, F), datt = a->datt;
    if (F != dq) kf = a->kf;
    if (F != dv) vf = a->vf;
    backend_attention_backward(be, a->dqf, a->dkf, a->dvf, datt, a->qf, kf, vf, a->att, a->lse, B, T, H,
                               Hk, F, y->window);
    backend_scale_cols(be, a->dq, a->dqf, n->qpad, (int)N * H, F, dq);
    if (F != dq) backend_scale_cols(be, a->dk, a->dkf, n->ones, (int)N * Hk, F, dq);
    else backend_copy_d2d(be, a->dk, a->dkf, N * g->k_dim * sizeof(float));
    if (F != dv) backend_scale_cols(be, a->dv, a->dvf, n->ones, (int)N * Hk, F, dv);
    else backend_copy_d2d(be, a->dv, a->dvf, N * g->v_dim * sizeof(float));
    /* A8 / KV8: straight through; RoPE rotated back; the per-head norms */
    backend_rope_freqs(be, a->dq, B, T, H, dq, n->freqs, 1);
    backend_rope_freqs(be, a->dk, B, T, Hk, dq, n->freqs, 1);
    backend_fill(be, a->dqt, 0.0f, N * g->q_dim);
    backend_fill(be, a->dkt, 0.0f, N * g->k_dim);
    backend_rmsnorm_backward(be, a->dqt, NULL, a->dq, a->qt, y->qn, a->rq, (int)N * H, dq);
    backend_rmsnorm_backward(be, a->dkt, NULL, a->dk, a->kt, y->kn, a->rk, (int)N * Hk, dq);
    /* the taps (frozen), into dq, dk, dv of the projections' outputs */
    const float *dqp = a->dqt, *dkp = a->dkt, *dvp = a->dv;
    if (c > 0) {
        backend_conv_taps_backward(be, a->dq, NULL, a->dqt, NULL, y->tq, B, T, g->q_dim, c, 1);
        backend_conv_taps_backward(be, a->dk, NULL, a->dkt, NULL, y->tk, B, T, g->k_dim, c, 1);
        backend_conv_taps_backward(be, a->dvt, NULL, a->dv, NULL, y->tv, B, T, g->v_dim, c, 1);
        dqp = a->dq, dkp = a->dk, dvp = a->dvt;
    }
    if (dx) {
        nn_linear_backward(n, a->dhq, a->dgt, y->wg, N, d, O, 0);
        nn_linear_backward(n, a->dhq, dqp, y->wq, N, d, g->q_dim, 1);
        nn_linear_backward(n, a->dhq, dkp, y->wk, N, d, g->k_dim, 1);
        nn_linear_backward(n, a->dhq, dvp, y->wv, N, d, g->v_dim, 1);
    }
    nn_lora_backward(n, a, NN_G, l, a->dgt, a->hq, N, beta);
    nn_lora_backward(n, a, NN_Q, l, dqp, a->hq, N, beta);
    nn_lora_backward(n, a, NN_K, l, dkp, a->hq, N, beta);
    nn_lora_backward(n, a, NN_V, l, dvp, a->hq, N, beta);
}

/* The MLP's backward from dout (dL/d its output) into a->dh2 (dL/d h2, overwritten). */
static void nn_mlp_backward(const needle_net *n, const nn_layer *y, nn_acts *a, size_t N, const float *dout)
{
    backend *be = n->be;
    const int d = n->d, nh = n->g.hada_n, A = n->g.hada_a, Bb = n->g.hada_b;
    /* the forward's adjoints, each scatter by a permutation a gather by its inverse: dn0 = P2^T D3
     * K3^T (D4 dout, padded), so out's scale is d3 gathered by p2's inverse (d3p); dh2 = D1 K1^T
     * P1^T dn0 (truncated) */
    backend_permute_cols(be, a->d3p, y->d3, n->p2, 1, nh, 1);
    const backend_kron_io last = {NULL, y->d4, d, n->p2i, a->d3p, nh};
    backend_kron_apply(be, a->dn0, dout, y->w3a, y->w3b, (int)N, A, Bb, 1, &last);
    backend_kron_apply(be, a->dn1, a->dn0, y->w2a, y->w2b, (int)N, A, Bb, 1, NULL);
    backend_hada_mid_backward(be, a->dn0, a->dcond, a->dn1, a->zin, a->cond, y->d2, y->b2, (int)N, nh);
    const backend_kron_io first = {n->p1i, NULL, nh, NULL, y->d1, d};
    backend_kron_apply(be, a->dh2, a->dn0, y->w1a, y->w1b, (int)N, A, Bb, 1, &first);
    /* cond = 1 + s8 Cu, s8 = softmax(h2 Cv) */
    backend_matmul(be, a->ds8, a->dcond, y->cu, (int)N, NEEDLE_COND_RANK, nh, 0, 1, 1.0f, 0.0f);
    backend_softmax_rows_backward(be, a->ds8, a->ds8, a->s8, (int)N, NEEDLE_COND_RANK);
    backend_matmul(be, a->dh2, a->ds8, y->cv, (int)N, d, NEEDLE_COND_RANK, 0, 1, 1.0f, 1.0f);
}

/* Layer l backward: recompute it from X = p->X[l] (not the last layer: the forward left its
 * activations in p->a), then from g = dL/dX' (p->dX) into p->dX2 = dL/dX; the two then swap
 * (layer 0 stops at its adapters' gradients: nothing reads dL/dX[0]). beta: nn_lora_backward's. */
static void nn_layer_backward(const needle_net *n, nn_pass *p, int l, float beta)
{
    backend *be = n->be;
    const nn_layer *y = &n->layer[l];
    nn_acts *a = &p->a;
    const size_t N = (size_t)p->B * p->T, d = (size_t)n->d;
    const int lanes = n->g.lanes, W = lanes * n->d;
    const float *X = p->X[l];
    if (l < n->L - 1) nn_layer_forward(n, p, l, X, NULL);
    /* X' = H_res X + h_post y */
    backend_mhc_expand_backward(be, p->dX2, a->dh, a->dy, p->dX, X, a->hc, a->y, (int)N, lanes, n->d);
    /* y = x1 + mlp(ln2(x1)) - u */
    nn_mlp_backward(n, y, a, N, a->dy);
    backend_copy_d2d(be, a->dx1, a->dy, N * d * sizeof(float));
    backend_rmsnorm_backward(be, a->dx1, NULL, a->dh2, a->x1, y->ln2, a->r2, (int)N, n->d);
    /* x1 = x0 + sigmoid(gate) post(ao) */
    backend_scalar_gate_backward(be, a->dap, NULL, a->dx1, a->ap, y->gate, N * d);
    backend_fill(be, a->dao, 0.0f, N * d);
    backend_rmsnorm_backward(be, a->dao, NULL, a->dap, a->ao, y->post, a->rp, (int)N, n->d);
    nn_attention_backward(n, y, a, l, p->B, p->T, beta, l > 0);
    if (l == 0) return; /* dL/dX[0] would reach only the frozen embedding */
    backend_copy_d2d(be, a->dx0, a->dx1, N * d * sizeof(float));
    backend_rmsnorm_backward(be, a->dx0, NULL, a->dhq, nn_x0(a, y), y->ln1, a->r1, (int)N, n->d);
    /* x0 = engram gate of u; the block's u also enters y with -1 */
    if (y->site >= 0)
        backend_engram_gate_backward(be, a->du, a->dx0, a->u, p->ek[y->site], p->ev[y->site], (int)N, n->d);
    else
        backend_copy_d2d(be, a->du, a->dx0, N * d * sizeof(float));
    backend_axpy(be, a->du, -1.0f, a->dy, N * d);
    /* u = sum_k h_pre[k] X[k]; the coefficients from x-hat = A8(rmsunit(X)) */
    backend_mhc_collapse_backward(be, p->dX2, a->dh, a->du, X, a->hc, n->K, (int)N, lanes, n->d);
    backend_mhc_coeffs_backward(be, a->dz, a->dh, a->z, y->mhc_alpha, y->mhc_bias, (int)N, lanes, l % lanes);
    backend_matmul(be, a->dxh, a->dz, y->phi, (int)N, W, n->K, 0, 0, 1.0f, 0.0f);
    backend_rmsnorm_backward(be, p->dX2, NULL, a->dxh, X, n->ones, a->rx, (int)N, W);
    float *t = p->dX;
    p->dX = p->dX2, p->dX2 = t;
}

/* The masked mean loss of a pass already embedded (docs/needle.md 2.7): position i's next-token
 * loss counts where weights[i + 1] (host (B, T), 0 or 1; the last position of a row has none) is
 * non-zero, divided by denom (> 0) or else by the count of such positions. Runs the forward; *scale
 * the divisor's inverse, *loss the mean. The head runs only on the rows with a target (gathered;
 * a fine-tune's prompts have none: Needle computes their logits anyway), in blocks of
 * n->head_rows rows, each block's logits, loss and dL/dlogits in p->logits (no (N, V') buffer: 268
 * MB at the default config and B 16 T 256); with a backward to follow (p->keep), dL/dhf =
 * dL/dlogits E scattered into p->a.dy (zero elsewhere). */
static int nn_loss(needle_net *n, nn_pass *p, const int32_t *tokens, const float *weights, double denom,
                   float *scale, double *loss)
{
    backend *be = n->be;
    const int B = p->B, T = p->T;
    const size_t N = (size_t)B * T, d = (size_t)n->d;
    int32_t *tg = calloc(N, sizeof(int32_t)), *rows = calloc(N, sizeof(int32_t)); /* calloc: gcc cannot see B, T > 0 */
    float *host = malloc(N * sizeof(float));
    if (!tg || !rows || !host) {
        free(tg), free(rows), free(host);
        return loom_fail("needle: out of memory");
    }
    size_t m = 0; /* the rows with a target, ascending, and their targets */
    for (int b = 0; b < B; b++)
        for (int i = 0; i + 1 < T; i++) {
            const size_t r = (size_t)b * T + i;
            if (weights[r + 1] != 0.0f) rows[m] = (int32_t)r, tg[m++] = tokens[r + 1];
        }
    backend_copy_h2d(be, p->targets, tg, m * sizeof(int32_t));
    backend_copy_h2d(be, p->hrows, rows, m * sizeof(int32_t));
    nn_forward(n, p, NULL);
    *scale = (float)(1.0 / (denom > 0 ? denom : m > 1 ? (double)m : 1));
    /* logits = A8(ZCNorm(mean_k X[k])) E^T for the rows with a target, a block at a time */
    if (p->keep) backend_fill(be, p->a.dy, 0.0f, N * d);
    for (size_t r0 = 0; r0 < m; r0 += (size_t)n->head_rows) {
        const int k = (int)(m - r0 < (size_t)n->head_rows ? m - r0 : (size_t)n->head_rows);
        backend_embedding_forward(be, p->hblk, p->hrows + r0, p->hf, NULL, 1, k, n->d); /* gather */
        nn_linear(n, p->logits, p->hblk, n->wte, (size_t)k, n->d, n->Vout);
        backend_softmax_xent(be, p->logits, p->losses + r0, p->targets + r0, k, n->Vout, n->Vout, *scale);
        if (!p->keep) continue;
        backend_matmul(be, p->hblk, p->logits, n->wte, k, n->d, n->Vout, 0, 0, 1.0f, 0.0f);
        backend_embedding_backward(be, p->a.dy, NULL, p->hblk, p->hrows + r0, 1, k, n->d, (int)N); /* scatter */
    }
    backend_copy_d2h(be, host, p->losses, m * sizeof(float));
    double sum = 0;
    for (size_t r = 0; r < m; r++) sum += host[r];
    *loss = sum * *scale;
    free(tg), free(rows), free(host);
    return 0;
}

int needle_net_loss(needle_net *n, const int32_t *tokens, const float *weights, int B, int T, double denom,
                    double *loss)
{
    nn_pass p;
    if (nn_pass_begin(n, &p, tokens, B, T, 0, 1)) return -1;
    float scale;
    int rc = nn_embed(n, &p, tokens);
    if (rc == 0) rc = nn_loss(n, &p, tokens, weights, denom, &scale, loss);
    nn_pass_free(n, &p);
    return rc;
}

/* The loss and the adapters' gradients (added to the last call's when accumulate). */
int needle_net_grad(needle_net *n, const int32_t *tokens, const float *weights, int B, int T, double denom,
                    int accumulate, double *loss)
{
    backend *be = n->be;
    const needle_geometry *g = &n->g;
    nn_pass p;
    if (nn_pass_begin(n, &p, tokens, B, T, 1, 1)) return -1;
    const size_t N = (size_t)B * T, d = (size_t)n->d;
    float scale;
    int rc = nn_embed(n, &p, tokens);
    if (rc == 0) rc = nn_loss(n, &p, tokens, weights, denom, &scale, loss);
    if (rc == 0) { /* from dL/dhf (nn_loss) */
        backend_fill(be, p.a.dx1, 0.0f, N * d);
        backend_rmsnorm_backward(be, p.a.dx1, NULL, p.a.dy, p.xm, n->lnf, p.rf, (int)N, n->d);
        backend_fill(be, p.dX, 0.0f, N * (size_t)g->lanes * d);
        backend_mhc_collapse_backward(be, p.dX, NULL, p.a.dx1, p.X[n->L], n->lane_mean, 0, (int)N, g->lanes, n->d);
        if (p.X[0] == p.X[n->L]) nn_embed_stream(n, &p); /* X[L] is dead now (nn_carve) */
        for (int l = n->L - 1; l >= 0; l--) {
            /* entering a thin pass's group of layers from its top: its streams after the first are
             * rebuilt (the last group's are still the forward's) */
            const int S = n->span, top = l % S == S - 1 && l / S < (n->L - 1) / S;
            if (p.thin && top)
                for (int m = l - S + 2; m <= l; m++) nn_stream_rebuild(n, &p, m);
            nn_layer_backward(n, &p, l, accumulate ? 1.0f : 0.0f);
        }
        n->have_grads = 1;
    }
    nn_pass_free(n, &p);
    return rc;
}

const char *needle_net_lora_info(const needle_net *n, int i, int *in, int *out, int *rank, double *scale)
{
    for (int t = 0; t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (!lo->A || i-- > 0) continue;
        if (in) *in = lo->in;
        if (out) *out = lo->out;
        if (rank) *rank = lo->r;
        if (scale) *scale = lo->scale;
        return needle_lora_path(t);
    }
    return NULL;
}

int needle_net_lora_grad_buffers(needle_net *n, float **bufs, size_t *counts, int cap)
{
    int k = 0;
    for (int t = 0; t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (!lo->A) continue;
        if (k + 2 > cap) return loom_fail("needle: more than %d gradient buffers", cap);
        bufs[k] = lo->gA, counts[k++] = (size_t)n->L * lo->in * lo->r;
        bufs[k] = lo->gB, counts[k++] = (size_t)n->L * lo->r * lo->out;
    }
    return k;
}

static int nn_target_of(const needle_net *n, const char *path)
{
    int t = 0;
    while (t < NN_TARGETS && strcmp(needle_lora_path(t), path)) t++;
    if (t == NN_TARGETS || !n->lora[t].A) return loom_fail("needle: no adapter on %s", path);
    return t;
}

/* An [L, rows, out] device tensor to host, B's columns taken back to Needle's order when permuted;
 * or the other way (to_device). */
static int nn_lora_xfer(needle_net *n, const nn_lora *lo, float *dev, float *host, int rows, int is_b, int to_device)
{
    const size_t cols = is_b ? (size_t)lo->out : (size_t)lo->r, count = (size_t)n->L * rows * cols;
    if (to_device) {
        float *t = malloc(count * sizeof(float));
        if (!t) return loom_fail("needle: out of memory");
        memcpy(t, host, count * sizeof(float));
        int rc = is_b && lo->perm_dq ? nn_permute_out(t, (size_t)n->L * rows, lo->out, lo->perm_dq, 0) : 0;
        if (rc == 0) backend_copy_h2d(n->be, dev, t, count * sizeof(float));
        free(t);
        return rc;
    }
    backend_copy_d2h(n->be, host, dev, count * sizeof(float));
    return is_b && lo->perm_dq ? nn_permute_out(host, (size_t)n->L * rows, lo->out, lo->perm_dq, 1) : 0;
}

int needle_net_lora_grad(needle_net *n, const char *path, float *dA, float *dB)
{
    int t = nn_target_of(n, path);
    if (t < 0) return -1;
    if (!n->have_grads) return loom_fail("needle: no gradient yet (needle_net_grad)");
    const nn_lora *lo = &n->lora[t];
    return nn_lora_xfer(n, lo, lo->gA, dA, lo->in, 0, 0) || nn_lora_xfer(n, lo, lo->gB, dB, lo->r, 1, 0) ? -1 : 0;
}

int needle_net_lora_state(needle_net *n, const char *path, int set, float *A, float *B, float *mA, float *vA,
                          float *mB, float *vB)
{
    int t = nn_target_of(n, path);
    if (t < 0) return -1;
    const nn_lora *lo = &n->lora[t];
    float *dev[6] = {lo->A, lo->B, lo->mA, lo->vA, lo->mB, lo->vB}, *host[6] = {A, B, mA, vA, mB, vB};
    for (int i = 0; i < 6; i++) {
        const int is_b = i == 1 || i >= 4;
        if (host[i] && nn_lora_xfer(n, lo, dev[i], host[i], is_b ? lo->r : lo->in, is_b, set)) return -1;
    }
    if (set && (A || B)) nn_merge(n, 0);
    return 0;
}

/* Needle's optimiser on every adapter (ft:443-465): optax.chain(clip_by_global_norm(clip),
 * adamw(lr)) from the gradients of the last needle_net_grad times o->grad_mult: the global 2-norm
 * over every A and B, g (clip / norm) when norm >= clip, then AdamW with the count after the
 * step's increment; the merged targets follow. */
int needle_net_step(needle_net *n, const needle_adamw *o, double *grad_norm)
{
    double ss = 0;
    for (int t = 0; t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (!lo->A) continue;
        if (!n->have_grads) return loom_fail("needle: no gradient yet (needle_net_grad)");
        ss += backend_sumsq(n->be, lo->gA, (size_t)n->L * lo->in * lo->r);
        ss += backend_sumsq(n->be, lo->gB, (size_t)n->L * lo->r * lo->out);
    }
    const double norm = sqrt(ss) * fabs((double)o->grad_mult);
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(norm)) return 1; /* a skipped step: nothing moves */
    /* optax: (g / norm) clip; here one factor on the way into AdamW */
    const float gs = o->clip > 0 && norm >= o->clip ? (float)(o->grad_mult * (o->clip / norm)) : o->grad_mult;
    for (int t = 0; t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (!lo->A) continue;
        backend_adamw(n->be, lo->A, lo->gA, lo->mA, lo->vA, (size_t)n->L * lo->in * lo->r, o->lr, o->beta1,
                      o->beta2, o->eps, o->weight_decay, o->count, gs);
        backend_adamw(n->be, lo->B, lo->gB, lo->mB, lo->vB, (size_t)n->L * lo->r * lo->out, o->lr, o->beta1,
                      o->beta2, o->eps, o->weight_decay, o->count, gs);
    }
    nn_merge(n, 0);
    return 0;
}

/* A fresh adapter on every target without one, Needle's init (finetune.py:318-333): A = N(0, 1) / r,
 * B = 0, scale alpha / r; N(0, 1) from loom's counter-based generator (seed; element e of target t
 * draws counter t 2^40 + e), not jax's PRNG, so the values are Needle's distribution, not its
 * numbers. */
int needle_net_lora_init(needle_net *n, int rank, float alpha, uint64_t seed)
{
    if (rank <= 0) return loom_fail("needle: LoRA rank %d", rank);
    for (int t = 0; t < NN_TARGETS; t++) {
        nn_lora *lo = &n->lora[t];
        if (lo->A) continue;
        nn_target_dims(n, t, &lo->in, &lo->out);
        lo->r = rank, lo->s = alpha / (float)rank, lo->scale = (double)alpha / rank, lo->perm_dq = t == NN_Q || t == NN_K ? n->g.qk_head_dim : 0;
        const size_t na = (size_t)n->L * lo->in * rank, nb = (size_t)n->L * rank * lo->out;
        float *A = malloc(na * sizeof(float)), *Bm = calloc(nb, sizeof(float));
        int rc = A && Bm ? 0 : loom_fail("needle: out of memory");
        for (size_t e = 0; rc == 0 && e < na; e++) A[e] = rng_normal(seed, ((uint64_t)t << 40) + e) / (float)rank;
        if (rc == 0) rc = nn_lora_alloc(n, lo, A, Bm);
        free(A), free(Bm);
        if (rc) {
            lo->A = NULL;
            return -1;
        }
    }
    nn_merge(n, 0);
    return 0;
}

/* Every adapter as Needle's write_adapter writes it (checkpoints/needle.h): lora/<path>/A [L, in, r]
 * and /B [L, r, out] in Needle's layout (B's columns back in Needle's order), metadata scale, base,
 * rank, seed (< 0: null). The targets' scales and ranks must agree (Needle's file has one of each). */
int needle_net_save_adapter(needle_net *n, const char *path, const char *base_name, int64_t seed)
{
    const char *paths[NN_TARGETS];
    needle_wtensor w[2 * NN_TARGETS];
    float *host[2 * NN_TARGETS] = {0};
    int np = 0, rc = 0, rank = 0;
    double scale = 0;
    for (int t = 0; rc == 0 && t < NN_TARGETS; t++) {
        const nn_lora *lo = &n->lora[t];
        if (!lo->A) continue;
        if (np && (lo->r != rank || lo->scale != scale))
            return loom_fail("%s: adapters of rank %d / scale %g and %d / %g: one file holds one", path, rank, scale, lo->r, lo->scale);
        rank = lo->r, scale = lo->scale;
        paths[np] = needle_lora_path(t);
        for (int ab = 0; rc == 0 && ab < 2; ab++) {
            const int rows = ab ? lo->r : lo->in, cols = ab ? lo->out : lo->r;
            float *h = host[2 * np + ab] = malloc((size_t)n->L * rows * cols * sizeof(float));
            rc = !h ? loom_fail("needle: out of memory") : nn_lora_xfer(n, lo, ab ? lo->B : lo->A, h, rows, ab, 0);
            needle_wtensor *x = &w[2 * np + ab];
            x->name = NULL, x->dtype = ST_F32, x->ndim = 3, x->data = h;
            x->shape[0] = n->L, x->shape[1] = rows, x->shape[2] = cols;
        }
        np++;
    }
    if (rc == 0 && np == 0) rc = loom_fail("%s: no adapter to write", path);
    if (rc == 0) rc = needle_write_adapter(path, paths, w, np, scale, base_name, rank, seed);
    for (int i = 0; i < 2 * NN_TARGETS; i++) free(host[i]);
    return rc;
}
