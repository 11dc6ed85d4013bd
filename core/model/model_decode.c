/* model_decode.c: generation for one sequence (batch row 0) with a KV cache: the prompt is run
 * once (prefill), then each new token costs one row of every projection plus attention of one
 * query over the cached keys and values (the family's layer decode, family.h). The cache is the
 * model's own k/v activation buffers, kept already rotated (RoPE) so no key is ever recomputed. */
#include "core/model/model.h"
#include "core/model/family.h"
#include "core/model/model_internal.h"

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
        m->family->layer_decode(m, l, t, (l + 1 < L ? m->acts[l + 1].x : m->x_final) + (size_t)t * C);
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
