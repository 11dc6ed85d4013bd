/* model_backward.c: the backward pass, the forward read in reverse: from the head's input gradient
 * (the training forward ran the head's backward, chunk by chunk), the family's layer backward
 * (family.h) from the last layer down, the embeddings; and the backward of the ops layers
 * are made of. One buffer, m->dres, carries dL/dx of the residual stream down the layers; norm
 * backward ops accumulate into it, which is exactly the residual's "gradient passes through and
 * adds" rule. Parameter gradients accumulate (+=) into m->grads so micro-batches add up. */
#include "core/model/model.h"
#include "core/model/family.h"
#include "core/model/model_internal.h"

/* For y = x W^T + b with W (out, in):  dx = dy W  (overwrite, or += when accumulate),
 * dW += dy^T x,  db += colsum(dy). */
void model_linear_backward(model *m, float *dx, float *dW, float *db, const float *dy,
                           const float *x, const float *W, int N, int in, int out, int accumulate)
{
    backend *be = m->be;
    if (dx) backend_matmul(be, dx, dy, W, N, in, out, 0, 0, 1.0f, accumulate ? 1.0f : 0.0f);
    if (dW) backend_matmul(be, dW, dy, x, out, in, N, 1, 0, 1.0f, 1.0f);
    if (db) backend_bias_backward(be, db, dy, N, out);
}

/* LoRA backward of projection t of layer l, with xa = x A^T and y += s xa B^T:
 * dB += s dy^T xa;  dxa = s dy B;  dA += dxa^T x;  dx += dxa A. */
void model_adapt_backward(model *m, int l, int t, float *dx, const float *dy, const float *x, int N)
{
    if (!m->lora.rank || !(m->lora.targets & (1u << t))) return;
    backend *be = m->be;
    const lora_pair *ad = &m->lp[l].t[t];
    const lora_pair *gd = &m->lg[l].t[t];
    int in, out, r = m->lora.rank;
    float s = m->lora_scale;
    lora_dims(&m->cfg, t, &in, &out);
    const float *xa = m->acts[l].xa[t];
    backend_matmul(be, gd->B, dy, xa, out, r, N, 1, 0, s, 1.0f);
    backend_matmul(be, m->dxa, dy, ad->B, N, r, out, 0, 0, s, 0.0f);
    backend_matmul(be, gd->A, m->dxa, x, r, in, N, 1, 0, 1.0f, 1.0f);
    backend_matmul(be, dx, m->dxa, ad->A, N, in, r, 0, 0, 1.0f, 1.0f);
}

void model_norm_backward(model *m, float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, const float *mean, const float *rstd, int N)
{
    backend *be = m->be;
    int C = m->cfg.d_model;
    if (mean) backend_layernorm_backward(be, dx, dw, db, dy, x, w, mean, rstd, N, C);
    else backend_rmsnorm_backward(be, dx, dw, dy, x, w, rstd, N, C);
}

int model_backward(model *m)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int L = c->n_layer, N = m->B * m->T, C = c->d_model;

    /* head and final norm: the training forward ran the head's backward chunk by chunk
     * (model_head_chunks): dW is added, dx waits in dln (every position) or, compact, in dres
     * (M rows) to go back to its positions (zeros at those without a target). A forward with
     * grad_scale 0 left none: its dlogits were zeros, so dx is zero and dW unchanged. */
    int M = m->head_rows_n;
    if (!m->head_dx || M < N) backend_fill(be, m->dln, 0.0f, (size_t)N * C);
    if (m->head_dx && M < N && M) backend_embedding_backward(be, m->dln, NULL, m->dres, m->head_rows, 1, M, C, N);
    m->head_dx = 0;
    backend_fill(be, m->dres, 0.0f, (size_t)N * C);
    model_norm_backward(m, m->dres, m->g.lnf_w, m->g.lnf_b, m->dln, m->x_final, m->p.lnf_w, m->lnf_mean,
                  m->lnf_rstd, N);
    if (model_end(m, L + 1, 1)) return -1;

    for (int l = L - 1; l >= 0; l--) {
        if (model_begin(m, l + 1, 1)) return -1;
        if (m->recompute) m->family->layer_forward(m, l, NULL);
        m->family->layer_backward(m, l);
        if (model_end(m, l + 1, 1)) return -1;
    }

    if (!c->tied_embeddings && model_begin(m, 0, 1)) return -1;
    for (int s = 0, off = 0; m->g.wte && s < model_seq_count(m); s++) { /* frozen (LoRA): none */
        int Bs, Ts;
        model_seq_shape(m, s, &Bs, &Ts);
        backend_embedding_backward(be, m->g.wte, m->g.wpe, m->dres + (size_t)off * C, m->tokens + off,
                                   Bs, Ts, C, c->vocab);
        off += Bs * Ts;
    }
    return model_end(m, 0, 1);
}
