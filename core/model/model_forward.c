/* model_forward.c: the forward pass, one explicit function per block, pre-norm residual:
 *   x = wte[tok] (+ wpe[t]);  per layer: xm = x + Attn(Norm1(x));  x' = xm + MLP(Norm2(xm))
 *   logits = Norm_f(x_L) W_head^T;  loss = softmax cross-entropy on the targets.
 * Calls only backend ops: it never reads a device pointer. */
#include "core/model/model.h"
#include "core/model/model_internal.h"

#include <string.h>

#include "base/error.h"

/* y(N, out) = x(N, in) W^T (+ b) for a weight W stored (out, in). */
void model_linear(model *m, float *y, const float *x, const float *W, const float *b, int N,
                  int in, int out)
{
    backend *be = m->be;
    backend_matmul(be, y, x, W, N, out, in, 0, 1, 1.0f, 0.0f);
    if (b) backend_bias_add(be, y, b, N, out);
}

/* LoRA on projection t of layer l: xa = x A^T (kept for backward); y += s xa B^T. */
void model_adapt(model *m, int l, int t, float *y, const float *x, int N)
{
    if (!m->lora.rank || !(m->lora.targets & (1u << t))) return;
    backend *be = m->be;
    const lora_pair *ad = &m->lp[l].t[t];
    int in, out, r = m->lora.rank;
    lora_dims(&m->cfg, t, &in, &out);
    float *xa = m->acts[l].xa[t];
    backend_matmul(be, xa, x, ad->A, N, r, in, 0, 1, 1.0f, 0.0f);
    backend_matmul(be, y, xa, ad->B, N, out, r, 0, 1, m->lora_scale, 1.0f);
}

void model_norm_forward(model *m, float *out, float *mean, float *rstd, const float *x,
                        const float *w, const float *b, int N)
{
    backend *be = m->be;
    int C = m->cfg.d_model;
    if (mean) backend_layernorm_forward(be, out, mean, rstd, x, w, b, N, C, m->cfg.norm_eps);
    else backend_rmsnorm_forward(be, out, rstd, x, w, N, C, m->cfg.norm_eps);
}

/* Layer l from a->x to the layer's activations; writes x_out (the next residual) when non-NULL. */
void model_layer_forward(model *m, int l, float *x_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_acts *a = &m->acts[l];
    int N = m->B * m->T, C = c->d_model;
    int H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c), qC = D * H, kvC = D * Hkv;

    /* attention block */
    model_qkv_forward(m, l, a, a->x, N);
    /* RoPE and causal attention per sequence (a ragged pass's packed rows carry no padding) */
    for (int s = 0, off = 0; s < model_seq_count(m); s++) {
        int Bs, Ts;
        model_seq_shape(m, s, &Bs, &Ts);
        float *q = a->q + (size_t)off * qC, *k = a->k + (size_t)off * kvC, *v = a->v + (size_t)off * kvC;
        if (model_uses_rope(c)) {
            model_rope(m, q, Bs, Ts, H, 0);
            model_rope(m, k, Bs, Ts, Hkv, 0);
        }
        backend_attention_forward(be, a->att + (size_t)off * qC, a->lse + (size_t)off * H, q, k, v,
                                  Bs, Ts, H, Hkv, D);
        off += Bs * Ts;
    }
    /* xm = x + att W_o^T + b_o: the projection accumulates onto a copy of the residual */
    backend_copy_d2d(be, a->xm, a->x, (size_t)N * C * sizeof(float));
    backend_matmul(be, a->xm, a->att, p->o_w, N, C, qC, 0, 1, 1.0f, 1.0f);
    if (p->o_b) backend_bias_add(be, a->xm, p->o_b, N, C);
    model_adapt(m, l, LORA_O, a->xm, a->att, N);

    model_mlp_forward(m, l, a, x_out, N);
}

/* The attention block's inputs of layer l on N rows of x:  ln1 = Norm1(x);  q, k, v = ln1 W^T + b
 * (LoRA terms added where targeted, through m->acts[l]'s xa scratch); with qk_norm the
 * projections land in qr, kr and each head's D values are RMS-normalised into q, k. Before RoPE.
 * The training forward and model_gen's decode step share it. */
void model_qkv_forward(model *m, int l, const layer_acts *a, const float *x, int N)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    int C = c->d_model, H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c), qC = D * H, kvC = D * Hkv;
    model_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1_w, p->ln1_b, N);
    float *q = c->qk_norm ? a->qr : a->q, *k = c->qk_norm ? a->kr : a->k;
    model_linear(m, q, a->ln1, p->q_w, p->q_b, N, C, qC);
    model_adapt(m, l, LORA_Q, q, a->ln1, N);
    model_linear(m, k, a->ln1, p->k_w, p->k_b, N, C, kvC);
    model_adapt(m, l, LORA_K, k, a->ln1, N);
    model_linear(m, a->v, a->ln1, p->v_w, p->v_b, N, C, kvC);
    model_adapt(m, l, LORA_V, a->v, a->ln1, N);
    if (c->qk_norm) { /* rows of D in the (N*H, D) view */
        backend_rmsnorm_forward(be, a->q, a->q_rstd, a->qr, p->lnq_w, N * H, D, c->norm_eps);
        backend_rmsnorm_forward(be, a->k, a->k_rstd, a->kr, p->lnk_w, N * Hkv, D, c->norm_eps);
    }
}

/* The MLP block of layer l on N rows, a->xm in:  ln2 = Norm2(xm);  act = SwiGLU(ln2 Wg^T, ln2 Wu^T)
 * or GELU(ln2 Wfc^T + b);  x_out = xm + act Wproj^T + b, skipped when x_out is NULL (backward's
 * recompute needs only the activations). LoRA terms are added where targeted, through
 * m->acts[l]'s xa scratch. The training forward and model_gen's decode step share it. */
void model_mlp_forward(model *m, int l, const layer_acts *a, float *x_out, int N)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    int C = c->d_model, F = c->d_ff;
    model_norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->xm, p->ln2_w, p->ln2_b, N);
    if (model_uses_swiglu(c)) {
        model_linear(m, a->h, a->ln2, p->gate_w, NULL, N, C, F);
        model_adapt(m, l, LORA_GATE, a->h, a->ln2, N);
        model_linear(m, a->u, a->ln2, p->up_w, NULL, N, C, F);
        model_adapt(m, l, LORA_UP, a->u, a->ln2, N);
        backend_swiglu_forward(be, a->act, a->h, a->u, (size_t)N * F);
    } else {
        model_linear(m, a->h, a->ln2, p->fc_w, p->fc_b, N, C, F);
        model_adapt(m, l, LORA_FC, a->h, a->ln2, N);
        backend_gelu_forward(be, a->act, a->h, (size_t)N * F);
    }
    if (!x_out) return;
    backend_copy_d2d(be, x_out, a->xm, (size_t)N * C * sizeof(float));
    backend_matmul(be, x_out, a->act, p->proj_w, N, C, F, 0, 1, 1.0f, 1.0f);
    if (p->proj_b) backend_bias_add(be, x_out, p->proj_b, N, C);
    model_adapt(m, l, LORA_PROJ, x_out, a->act, N);
}

void model_rope(model *m, float *x, int B, int T, int H, int inverse)
{
    backend *be = m->be;
    int D = config_head_dim(&m->cfg);
    if (m->rope_freq) backend_rope_freqs(be, x, B, T, H, D, m->rope_freq, inverse);
    else backend_rope(be, x, B, T, H, D, m->cfg.rope_theta, inverse);
}

int model_begin(model *m, int region, int backward)
{
    return m->hooks.region_begin ? m->hooks.region_begin(m->hooks.ctx, region, backward) : 0;
}

int model_end(model *m, int region, int backward)
{
    return m->hooks.region_end ? m->hooks.region_end(m->hooks.ctx, region, backward) : 0;
}

void model_embed(model *m, float *x, const int32_t *tokens)
{
    backend *be = m->be;
    int C = m->cfg.d_model;
    for (int s = 0, off = 0; s < model_seq_count(m); s++) {
        int Bs, Ts;
        model_seq_shape(m, s, &Bs, &Ts);
        backend_embedding_forward(be, x + (size_t)off * C, tokens + off, m->p.wte, m->p.wpe, Bs, Ts, C);
        off += Bs * Ts;
    }
}

/* Embeddings, every layer and the final norm, leaving the final normed states in m->lnf. */
int model_trunk_forward(model *m)
{
    const model_config *c = &m->cfg;
    int L = c->n_layer, N = m->B * m->T;
    if (!m->acts[0].x) return loom_fail("model: created without activations (MODEL_ACTS_NONE)");
    if (model_begin(m, 0, 0)) return -1;
    model_embed(m, m->acts[0].x, m->tokens);
    /* the embedding stays needed until backward when tied to the head */
    if (!c->tied_embeddings && model_end(m, 0, 0)) return -1;
    for (int l = 0; l < L; l++) {
        if (model_begin(m, l + 1, 0)) return -1;
        model_layer_forward(m, l, l + 1 < L ? m->acts[l + 1].x : m->x_final);
        if (model_end(m, l + 1, 0)) return -1;
    }
    if (model_begin(m, L + 1, 0)) return -1;
    model_norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->x_final, m->p.lnf_w, m->p.lnf_b, N);
    return 0;
}

/* Head and loss on the M positions with a target only: their final-norm rows are gathered into
 * m->dln (idle until backward, which reads them there for the head's weight gradient), the
 * logits, softmax and xent run on M rows, and the M losses go back to their positions (a row
 * gather and a row scatter-add: the embedding ops with the activations as the table). */
static void model_head_compact(model *m, float grad_scale, int M)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int N = m->B * m->T;
    backend_fill(be, m->losses, 0.0f, (size_t)N);
    if (!M) return;
    backend_embedding_forward(be, m->dln, m->head_rows, m->lnf, NULL, 1, M, c->d_model);
    model_linear(m, m->logits, m->dln, m->p.lm_head, NULL, M, c->d_model, c->vocab);
    backend_softmax_xent(be, m->logits, m->losses, m->head_targets, M, c->vocab, c->vocab, grad_scale);
}

int model_forward(model *m, float grad_scale, double *loss_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int N = m->B * m->T, M = m->head_rows_n;
    if (model_trunk_forward(m)) return -1;
    if (M < N) {
        model_head_compact(m, grad_scale, M);
        /* losses[0..M) belong to positions head_rows: the sum is the same positions' in order;
         * the device sum adds each to its own position, as the full path does */
        if (loss_out) *loss_out = model_sum_losses(m, m->losses);
        else if (M) backend_embedding_backward(be, m->loss_acc, NULL, m->losses, m->head_rows, 1, M, 1, N);
        return 0;
    }
    model_linear(m, m->logits, m->lnf, m->p.lm_head, NULL, N, c->d_model, c->vocab);
    backend_softmax_xent(be, m->logits, m->losses, m->targets, N, c->vocab, c->vocab, grad_scale);
    /* the loss sum: sumsq would square it, so per-position losses are summed in fp32 over the
     * micro-batches on the device and over the positions in double on the host */
    if (loss_out) *loss_out = model_sum_losses(m, m->losses);
    else backend_axpy(be, m->loss_acc, 1.0f, m->losses, (size_t)N);
    return 0;
}
