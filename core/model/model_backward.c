/* model_backward.c: the backward pass, the forward read in reverse. One buffer, m->dres, carries
 * dL/dx of the residual stream down the layers; norm backward ops accumulate into it, which is
 * exactly the residual's "gradient passes through and adds" rule. Parameter gradients accumulate
 * (+=) into m->grads so micro-batches add up. */
#include "core/model/model.h"
#include "core/model/model_internal.h"

/* For y = x W^T + b with W (out, in):  dx = dy W  (overwrite, or += when accumulate),
 * dW += dy^T x,  db += colsum(dy). */
static void linear_backward(model *m, float *dx, float *dW, float *db, const float *dy,
                            const float *x, const float *W, int N, int in, int out, int accumulate)
{
    backend *be = m->be;
    if (dx) backend_matmul(be, dx, dy, W, N, in, out, 0, 0, 1.0f, accumulate ? 1.0f : 0.0f);
    if (dW) backend_matmul(be, dW, dy, x, out, in, N, 1, 0, 1.0f, 1.0f);
    if (db) backend_bias_backward(be, db, dy, N, out);
}

/* LoRA backward of projection t of layer l, with xa = x A^T and y += s xa B^T:
 * dB += s dy^T xa;  dxa = s dy B;  dA += dxa^T x;  dx += dxa A. */
static void adapt_backward(model *m, int l, int t, float *dx, const float *dy, const float *x, int N)
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

static void norm_backward(model *m, float *dx, float *dw, float *db, const float *dy,
                          const float *x, const float *w, const float *mean, const float *rstd, int N)
{
    backend *be = m->be;
    int C = m->cfg.d_model;
    if (mean) backend_layernorm_backward(be, dx, dw, db, dy, x, w, mean, rstd, N, C);
    else backend_rmsnorm_backward(be, dx, dw, dy, x, w, rstd, N, C);
}

/* dres enters as dL/d(layer output) and leaves as dL/d(layer input). */
static void model_layer_backward(model *m, int l)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_params *g = &m->g.layer[l];
    layer_acts *a = &m->acts[l];
    int N = m->B * m->T, C = c->d_model, F = c->d_ff;
    int H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c), qC = D * H, kvC = D * Hkv;

    /* MLP block: x' = xm + act W_proj^T + b_proj */
    linear_backward(m, m->dact, g->proj_w, g->proj_b, m->dres, a->act, p->proj_w, N, F, C, 0);
    adapt_backward(m, l, LORA_PROJ, m->dact, m->dres, a->act, N);
    if (model_uses_swiglu(c)) {
        backend_swiglu_backward(be, m->dh, m->du, m->dact, a->h, a->u, (size_t)N * F);
        linear_backward(m, m->dln, g->gate_w, NULL, m->dh, a->ln2, p->gate_w, N, C, F, 0);
        adapt_backward(m, l, LORA_GATE, m->dln, m->dh, a->ln2, N);
        linear_backward(m, m->dln, g->up_w, NULL, m->du, a->ln2, p->up_w, N, C, F, 1);
        adapt_backward(m, l, LORA_UP, m->dln, m->du, a->ln2, N);
    } else {
        backend_gelu_backward(be, m->dh, a->h, m->dact, (size_t)N * F);
        linear_backward(m, m->dln, g->fc_w, g->fc_b, m->dh, a->ln2, p->fc_w, N, C, F, 0);
        adapt_backward(m, l, LORA_FC, m->dln, m->dh, a->ln2, N);
    }
    /* dres (= dL/dxm through the skip) += Norm2 backward */
    norm_backward(m, m->dres, g->ln2_w, g->ln2_b, m->dln, a->xm, p->ln2_w, a->ln2_mean, a->ln2_rstd, N);

    /* attention block: xm = x + att W_o^T + b_o */
    linear_backward(m, m->datt, g->o_w, g->o_b, m->dres, a->att, p->o_w, N, qC, C, 0);
    adapt_backward(m, l, LORA_O, m->datt, m->dres, a->att, N);
    for (int s = 0, off = 0; s < model_seq_count(m); s++) { /* per sequence, as the forward */
        int Bs, Ts;
        model_seq_shape(m, s, &Bs, &Ts);
        size_t oq = (size_t)off * qC, ok = (size_t)off * kvC;
        backend_attention_backward(be, m->dq + oq, m->dk + ok, m->dv + ok, m->datt + oq, a->q + oq,
                                   a->k + ok, a->v + ok, a->att + oq, a->lse + (size_t)off * H, Bs, Ts,
                                   H, Hkv, D);
        if (model_uses_rope(c)) { /* q, k were rotated after the projection: rotate dq, dk back */
            model_rope(m, m->dq + oq, Bs, Ts, H, 1);
            model_rope(m, m->dk + ok, Bs, Ts, Hkv, 1);
        }
        off += Bs * Ts;
    }
    float *dq = m->dq, *dk = m->dk;
    if (c->qk_norm) { /* through the per-head norms: their backward accumulates into dqr, dkr */
        backend_fill(be, m->dqr, 0.0f, (size_t)N * qC);
        backend_fill(be, m->dkr, 0.0f, (size_t)N * kvC);
        backend_rmsnorm_backward(be, m->dqr, g->lnq_w, m->dq, a->qr, p->lnq_w, a->q_rstd, N * H, D);
        backend_rmsnorm_backward(be, m->dkr, g->lnk_w, m->dk, a->kr, p->lnk_w, a->k_rstd, N * Hkv, D);
        dq = m->dqr;
        dk = m->dkr;
    }
    linear_backward(m, m->dln, g->q_w, g->q_b, dq, a->ln1, p->q_w, N, C, qC, 0);
    adapt_backward(m, l, LORA_Q, m->dln, dq, a->ln1, N);
    linear_backward(m, m->dln, g->k_w, g->k_b, dk, a->ln1, p->k_w, N, C, kvC, 1);
    adapt_backward(m, l, LORA_K, m->dln, dk, a->ln1, N);
    linear_backward(m, m->dln, g->v_w, g->v_b, m->dv, a->ln1, p->v_w, N, C, kvC, 1);
    adapt_backward(m, l, LORA_V, m->dln, m->dv, a->ln1, N);
    norm_backward(m, m->dres, g->ln1_w, g->ln1_b, m->dln, a->x, p->ln1_w, a->ln1_mean, a->ln1_rstd, N);
}

int model_backward(model *m)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int L = c->n_layer, N = m->B * m->T, C = c->d_model;

    /* head and final norm: m->logits already holds dlogits (softmax_xent wrote it) */
    float *dhead = c->tied_embeddings ? m->g.wte : m->g.lm_head;
    int M = m->head_rows_n;
    if (M == N) {
        linear_backward(m, m->dln, dhead, NULL, m->logits, m->lnf, m->p.lm_head, N, C, c->vocab, 0);
    } else { /* compact head (model_forward): its input rows sit in dln; dx lands in dres first,
              * then goes back to its positions (zeros at the positions without a target) */
        if (M) linear_backward(m, m->dres, dhead, NULL, m->logits, m->dln, m->p.lm_head, M, C, c->vocab, 0);
        backend_fill(be, m->dln, 0.0f, (size_t)N * C);
        if (M) backend_embedding_backward(be, m->dln, NULL, m->dres, m->head_rows, 1, M, C, N);
    }
    backend_fill(be, m->dres, 0.0f, (size_t)N * C);
    norm_backward(m, m->dres, m->g.lnf_w, m->g.lnf_b, m->dln, m->x_final, m->p.lnf_w, m->lnf_mean,
                  m->lnf_rstd, N);
    if (model_end(m, L + 1, 1)) return -1;

    for (int l = L - 1; l >= 0; l--) {
        if (model_begin(m, l + 1, 1)) return -1;
        if (m->recompute) model_layer_forward(m, l, NULL);
        model_layer_backward(m, l);
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
