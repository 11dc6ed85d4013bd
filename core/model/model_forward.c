/* model_forward.c: the forward pass around the layers, and the ops layers are made of:
 *   x = wte[tok] (+ wpe[t]);  per layer: x' = Layer(x) (the family's, family.h);
 *   logits = Norm_f(x_L) W_head^T;  loss = softmax cross-entropy on the targets, the head in chunks
 *   of rows (and, in a training forward, the head's backward with them: model_head_chunks).
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

/* The head and the loss on `rows` rows of x (rows, C) with their targets, the losses into
 * m->losses[0..rows), in chunks of m->head_chunk rows through the (head_chunk, V) logits buffer,
 * so that no (N, V) fp32 buffer exists (vocabularies of 128k-152k included):
 *   logits_c = x_c W^T;  losses_c, dlogits_c = softmax_xent(logits_c)  (in place, * grad_scale)
 * and in a training forward (grad_scale != 0) at once the head's backward of the chunk, while
 * dlogits_c is at hand:
 *   dx_c = dlogits_c W  (into dx (rows, C), which model_backward reads);
 *   dW += dlogits_c^T x_c  (a trainable head only: the embedding's gradient when tied; LoRA's
 *   frozen head has none).
 * The head's gradient views are in place before a training forward and its region is reduced only
 * at model_end(region, 1) in backward (the region hooks' contract, model.h), so dW may be added
 * here, before backward starts. */
static void model_head_chunks(model *m, const float *x, const int32_t *targets, int rows, float grad_scale,
                              float *dx)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int C = c->d_model, V = c->vocab, R = m->head_chunk;
    const float *W = m->p.lm_head;
    float *dW = c->tied_embeddings ? m->g.wte : m->g.lm_head;
    for (int r0 = 0; r0 < rows; r0 += R) {
        int n = rows - r0 < R ? rows - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        model_linear(m, m->logits, xc, W, NULL, n, C, V);
        backend_softmax_xent(be, m->logits, m->losses + r0, targets + r0, n, V, V, grad_scale);
        if (grad_scale == 0.0f) continue;
        /* model_linear_backward's products (model_backward.c), written out here: the layout rule
         * keeps the two pass files from calling each other */
        backend_matmul(be, dx + (size_t)r0 * C, m->logits, W, n, C, V, 0, 0, 1.0f, 0.0f);
        if (dW) backend_matmul(be, dW, m->logits, xc, V, C, n, 1, 0, 1.0f, 1.0f);
    }
}

int model_forward(model *m, float grad_scale, double *loss_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int N = m->B * m->T, M = m->head_rows_n;
    m->head_dx = 0;
    if (model_trunk_forward(m)) return -1;
    m->head_dx = grad_scale != 0.0f;
    if (M < N) {
        /* the compact head: on the M positions with a target only. Their final-norm rows are
         * gathered into m->dln (idle until backward), their dx rows land in m->dres (model_backward
         * puts them back at their positions), and the M losses go back to their positions (a row
         * gather and a row scatter-add: the embedding ops with the activations as the table) */
        backend_fill(be, m->losses, 0.0f, (size_t)N);
        if (M) {
            backend_embedding_forward(be, m->dln, m->head_rows, m->lnf, NULL, 1, M, c->d_model);
            model_head_chunks(m, m->dln, m->head_targets, M, grad_scale, m->dres);
        }
        /* losses[0..M) belong to positions head_rows: the sum is the same positions' in order;
         * the device sum adds each to its own position, as the full path does */
        if (loss_out) *loss_out = model_sum_losses(m, m->losses);
        else if (M) backend_embedding_backward(be, m->loss_acc, NULL, m->losses, m->head_rows, 1, M, 1, N);
        return 0;
    }
    model_head_chunks(m, m->lnf, m->targets, N, grad_scale, m->dln);
    /* the loss sum: sumsq would square it, so per-position losses are summed in fp32 over the
     * micro-batches on the device and over the positions in double on the host */
    if (loss_out) *loss_out = model_sum_losses(m, m->losses);
    else backend_axpy(be, m->loss_acc, 1.0f, m->losses, (size_t)N);
    return 0;
}
