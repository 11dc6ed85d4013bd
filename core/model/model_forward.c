/* model_forward.c: the forward pass around the layers, and the ops layers are made of:
 *   x = wte[tok] (+ wpe[t]);  per layer: x' = Layer(x) (the family's, family.h);
 *   logits = Norm_f(x_L) W_head^T;  loss = softmax cross-entropy on the targets.
 * Calls only backend ops: it never reads a device pointer. */
#include "core/model/model.h"
#include "core/model/family.h"
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
        m->family->layer_forward(m, l, l + 1 < L ? m->acts[l + 1].x : m->x_final);
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
