/* model_decode.c: generation for one sequence (batch row 0) with a KV cache: the prompt is run
 * once (prefill), then each new token costs one row of every projection plus attention of one
 * query over the cached keys and values. The cache is the model's own k/v activation buffers,
 * kept already rotated (RoPE) so no key is ever recomputed. */
#include "core/model/model.h"
#include "core/model/model_internal.h"

/* Rotate row t of x (T rows of H heads) to position t: rope rotates rows 0..t of the buffer, so
 * callers pass a scratch buffer whose rows before t hold nothing they need. */
static void decode_rope_row(model *m, float *x, int t, int H)
{
    model_rope(m, x, 1, t + 1, H, 0);
}

/* Layer l for the token at position t; rows 0..t-1 of the k/v buffers are the cache. */
static void model_layer_decode(model *m, int l, int t, float *x_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_acts *a = &m->acts[l];
    int C = c->d_model, F = c->d_ff, H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c);
    int qC = D * H, kvC = D * Hkv;
    size_t rc = (size_t)t * C, rq = (size_t)t * qC, rkv = (size_t)t * kvC, rf = (size_t)t * F;
    float *x = a->x + rc, *ln1 = a->ln1 + rc, *xm = a->xm + rc, *ln2 = a->ln2 + rc;

    model_norm_forward(m, ln1, a->ln1_mean ? a->ln1_mean + t : NULL, a->ln1_rstd + t, x, p->ln1_w, p->ln1_b, 1);
    float *qp = c->qk_norm ? a->qr + rq : a->q + rq; /* qk_norm: projection, then the norm */
    model_linear(m, qp, ln1, p->q_w, p->q_b, 1, C, qC);
    model_adapt(m, l, LORA_Q, qp, ln1, 1);
    /* the new key goes through a scratch row so rope cannot touch the cached (rotated) keys */
    float *knew = model_uses_rope(c) ? m->dk + rkv : a->k + rkv;
    float *kp = c->qk_norm ? a->kr + rkv : knew;
    model_linear(m, kp, ln1, p->k_w, p->k_b, 1, C, kvC);
    model_adapt(m, l, LORA_K, kp, ln1, 1);
    if (c->qk_norm) {
        backend_rmsnorm_forward(be, a->q + rq, a->q_rstd + (size_t)t * H, qp, p->lnq_w, H, D, c->norm_eps);
        backend_rmsnorm_forward(be, knew, a->k_rstd + (size_t)t * Hkv, kp, p->lnk_w, Hkv, D, c->norm_eps);
    }
    model_linear(m, a->v + rkv, ln1, p->v_w, p->v_b, 1, C, kvC);
    model_adapt(m, l, LORA_V, a->v + rkv, ln1, 1);
    if (model_uses_rope(c)) {
        decode_rope_row(m, a->q, t, H); /* earlier q rows are not needed again */
        decode_rope_row(m, m->dk, t, Hkv);
        backend_copy_d2d(be, a->k + rkv, knew, (size_t)kvC * sizeof(float));
    }
    if (backend_has(be, BACKEND_OP_ATTENTION_DECODE)) {
        backend_attention_decode(be, a->att + rq, a->q + rq, a->k, a->v, t + 1, H, Hkv, D);
    } else {
        /* causal attention over rows 0..t: row t is the new token's output (earlier rows,
         * recomputed from stale queries, are ignored) */
        backend_attention_forward(be, a->att, a->lse, a->q, a->k, a->v, 1, t + 1, H, Hkv, D);
    }
    backend_copy_d2d(be, xm, x, (size_t)C * sizeof(float));
    backend_matmul(be, xm, a->att + rq, p->o_w, 1, C, qC, 0, 1, 1.0f, 1.0f);
    if (p->o_b) backend_bias_add(be, xm, p->o_b, 1, C);
    model_adapt(m, l, LORA_O, xm, a->att + rq, 1);

    model_norm_forward(m, ln2, a->ln2_mean ? a->ln2_mean + t : NULL, a->ln2_rstd + t, xm, p->ln2_w, p->ln2_b, 1);
    if (model_uses_swiglu(c)) {
        model_linear(m, a->h + rf, ln2, p->gate_w, NULL, 1, C, F);
        model_adapt(m, l, LORA_GATE, a->h + rf, ln2, 1);
        model_linear(m, a->u + rf, ln2, p->up_w, NULL, 1, C, F);
        model_adapt(m, l, LORA_UP, a->u + rf, ln2, 1);
        backend_swiglu_forward(be, a->act + rf, a->h + rf, a->u + rf, (size_t)F);
    } else {
        model_linear(m, a->h + rf, ln2, p->fc_w, p->fc_b, 1, C, F);
        model_adapt(m, l, LORA_FC, a->h + rf, ln2, 1);
        backend_gelu_forward(be, a->act + rf, a->h + rf, (size_t)F);
    }
    backend_copy_d2d(be, x_out, xm, (size_t)C * sizeof(float));
    backend_matmul(be, x_out, a->act + rf, p->proj_w, 1, C, F, 0, 1, 1.0f, 1.0f);
    if (p->proj_b) backend_bias_add(be, x_out, p->proj_b, 1, C);
    model_adapt(m, l, LORA_PROJ, x_out, a->act + rf, 1);
}

/* Final norm and head for row t, logits to the host. */
static void model_decode_head(model *m, int t, float *logits_host)
{
    const model_config *c = &m->cfg;
    size_t rc = (size_t)t * c->d_model;
    model_norm_forward(m, m->lnf + rc, m->lnf_mean ? m->lnf_mean + t : NULL, m->lnf_rstd + t,
                       m->x_final + rc, m->p.lnf_w, m->p.lnf_b, 1);
    model_linear(m, m->logits, m->lnf + rc, m->p.lm_head, NULL, 1, c->d_model, c->vocab);
    backend_copy_d2h(m->be, logits_host, m->logits, (size_t)c->vocab * sizeof(float));
}

int model_decode(model *m, int32_t token, int t, float *logits_host)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int C = c->d_model, L = c->n_layer;
    if (t >= m->T_max || t >= c->max_seq || !m->acts[0].x) return -1;
    backend_copy_h2d(be, m->tokens + t, &token, sizeof token);
    /* learned positions: the embedding of a 1-token sequence reads wpe row 0, so shift wpe to t */
    const float *wpe = m->p.wpe ? m->p.wpe + (size_t)t * C : NULL;
    backend_embedding_forward(be, m->acts[0].x + (size_t)t * C, m->tokens + t, m->p.wte, wpe, 1, 1, C);
    for (int l = 0; l < L; l++)
        model_layer_decode(m, l, t, (l + 1 < L ? m->acts[l + 1].x : m->x_final) + (size_t)t * C);
    model_decode_head(m, t, logits_host);
    return 0;
}

int model_prefill(model *m, const int32_t *tokens, int n, float *logits_host)
{
    if (n < 1 || n > m->T_max || m->recompute) return -1;
    int B = m->B, T = m->T, nseg = m->nseg;
    m->B = 1;
    m->T = n; /* the activation buffers, sized for B x T rows, hold 1 x n rows */
    m->nseg = 0; /* one sequence, whatever shape the next training pass runs at */
    backend_copy_h2d(m->be, m->tokens, tokens, (size_t)n * sizeof(int32_t));
    int rc = model_trunk_forward(m);
    m->B = B;
    m->T = T;
    m->nseg = nseg;
    if (rc) return -1;
    /* the trunk normalised every row: only the head of the last one is needed */
    const model_config *c = &m->cfg;
    model_linear(m, m->logits, m->lnf + (size_t)(n - 1) * c->d_model, m->p.lm_head, NULL, 1,
                 c->d_model, c->vocab);
    backend_copy_d2h(m->be, logits_host, m->logits, (size_t)c->vocab * sizeof(float));
    return 0;
}
