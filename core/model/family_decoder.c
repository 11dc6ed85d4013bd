/* family_decoder.c: the pre-norm decoder layer (GPT-2, Llama 2/3, SmolLM2, Mistral, Qwen2/3), every
 * variant a switch of the model config (norm, mlp, positions, biases, qk_norm, rope_scaling):
 *   xm = x + Attn(Norm1(x));  x' = xm + MLP(Norm2(xm))
 * its tensors, views, init and activations, then its forward, backward, decode and generation
 * step, as the family table (family.h). Calls only backend ops: it never reads a device pointer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/model/family.h"
#include "core/model/model.h"
#include "core/model/model_internal.h"

/* One layer's tensors, in forward order, named h.<l>.<block>.<proj> (loom's names: docs/model.md). */
static int decoder_layout_layer(model *m, int *cap, int l)
{
    const model_config *c = &m->cfg;
    int C = c->d_model, D = config_head_dim(c), qC = D * c->n_head, kvC = D * c->n_kv_head, F = c->d_ff;
    int r = l + 1, ln = model_uses_layernorm(c), b = c->bias;
    char n[MODEL_MAX_NAME];
#define ADD(suffix, rows, cols, decay)                                                   \
    do {                                                                                 \
        snprintf(n, sizeof n, "h.%d.%s", l, suffix);                                     \
        if (model_layout_add(m, cap, n, rows, cols, r, decay)) return -1;                \
    } while (0)
    ADD("ln_1.weight", C, 0, 0);
    if (ln) ADD("ln_1.bias", C, 0, 0);
    int qb = b || c->qkv_bias;
    ADD("attn.q.weight", qC, C, 1);
    if (qb) ADD("attn.q.bias", qC, 0, 0);
    ADD("attn.k.weight", kvC, C, 1);
    if (qb) ADD("attn.k.bias", kvC, 0, 0);
    ADD("attn.v.weight", kvC, C, 1);
    if (qb) ADD("attn.v.bias", kvC, 0, 0);
    if (c->qk_norm) {
        ADD("attn.ln_q.weight", D, 0, 0);
        ADD("attn.ln_k.weight", D, 0, 0);
    }
    ADD("attn.o.weight", C, qC, 1);
    if (b) ADD("attn.o.bias", C, 0, 0);
    ADD("ln_2.weight", C, 0, 0);
    if (ln) ADD("ln_2.bias", C, 0, 0);
    if (model_uses_swiglu(c)) {
        ADD("mlp.gate.weight", F, C, 1);
        ADD("mlp.up.weight", F, C, 1);
        ADD("mlp.down.weight", C, F, 1);
    } else {
        ADD("mlp.fc.weight", F, C, 1);
        if (b) ADD("mlp.fc.bias", F, 0, 0);
        ADD("mlp.proj.weight", C, F, 1);
        if (b) ADD("mlp.proj.bias", C, 0, 0);
    }
#undef ADD
    return 0;
}

static void decoder_layer_views(const model *m, const tensor_set *s, int l, layer_params *p)
{
    char n[MODEL_MAX_NAME];
#define VIEW(field, suffix) (snprintf(n, sizeof n, "h.%d.%s", l, suffix), p->field = model_tensor_ptr(s, n))
    VIEW(ln1_w, "ln_1.weight"); VIEW(ln1_b, "ln_1.bias");
    VIEW(q_w, "attn.q.weight"); VIEW(q_b, "attn.q.bias");
    VIEW(k_w, "attn.k.weight"); VIEW(k_b, "attn.k.bias");
    VIEW(v_w, "attn.v.weight"); VIEW(v_b, "attn.v.bias");
    VIEW(o_w, "attn.o.weight"); VIEW(o_b, "attn.o.bias");
    VIEW(ln2_w, "ln_2.weight"); VIEW(ln2_b, "ln_2.bias");
    VIEW(fc_w, "mlp.fc.weight"); VIEW(fc_b, "mlp.fc.bias");
    VIEW(gate_w, "mlp.gate.weight"); VIEW(up_w, "mlp.up.weight");
    VIEW(proj_w, model_uses_swiglu(&m->cfg) ? "mlp.down.weight" : "mlp.proj.weight");
    VIEW(proj_b, "mlp.proj.bias");
    VIEW(lnq_w, "attn.ln_q.weight"); VIEW(lnk_w, "attn.ln_k.weight");
#undef VIEW
}

/* True for the residual-stream output projections, which GPT-2 scales by 1/sqrt(2 L). */
static int decoder_is_residual_proj(const char *name)
{
    const char *s = strrchr(name, '.');
    if (!s || strcmp(s, ".weight") != 0) return 0;
    return strstr(name, "attn.o.") || strstr(name, "mlp.proj.") || strstr(name, "mlp.down.");
}

/* GPT-2 style: N(0, std) matrices (residual output projections std/sqrt(2L)), zero biases, unit
 * norm weights. */
static int decoder_init_rule(const model *m, const model_tensor *t, float *value)
{
    if (t->ndim == 1) {
        int is_norm = strstr(t->name, "ln_") != NULL;
        *value = (is_norm && strstr(t->name, ".weight")) ? 1.0f : 0.0f;
        return 1;
    }
    float std = m->cfg.init_std, proj_std = std / sqrtf(2.0f * (float)m->cfg.n_layer);
    *value = decoder_is_residual_proj(t->name) ? proj_std : std;
    return 0;
}

static void decoder_carve_layer(const model *m, model_arena *a, layer_acts *s, size_t N)
{
    const model_config *c = &m->cfg;
    size_t C = c->d_model, F = c->d_ff, Hn = c->n_head, D = config_head_dim(c), qC = D * Hn, kvC = D * c->n_kv_head;
    int ln = model_uses_layernorm(c), sw = model_uses_swiglu(c);
    s->ln1 = model_arena_take(a, N * C);
    s->ln1_mean = ln ? model_arena_take(a, N) : NULL;
    s->ln1_rstd = model_arena_take(a, N);
    s->q = model_arena_take(a, N * qC);
    s->k = model_arena_take(a, N * kvC);
    s->qr = c->qk_norm ? model_arena_take(a, N * qC) : NULL;
    s->kr = c->qk_norm ? model_arena_take(a, N * kvC) : NULL;
    s->q_rstd = c->qk_norm ? model_arena_take(a, N * Hn) : NULL;
    s->k_rstd = c->qk_norm ? model_arena_take(a, N * c->n_kv_head) : NULL;
    s->v = model_arena_take(a, N * kvC);
    s->att = model_arena_take(a, N * qC); /* model_gen_step: also the scratch of its rope */
    s->lse = model_arena_take(a, N * Hn);
    s->xm = model_arena_take(a, N * C);
    s->ln2 = model_arena_take(a, N * C);
    s->ln2_mean = ln ? model_arena_take(a, N) : NULL;
    s->ln2_rstd = model_arena_take(a, N);
    s->h = model_arena_take(a, N * F);
    s->u = sw ? model_arena_take(a, N * F) : NULL;
    s->act = model_arena_take(a, N * F);
    s->g = s->act;
    for (int t = 0; t < LORA_NTARGETS; t++)
        s->xa[t] = (m->lora.targets & (1u << t)) ? model_arena_take(a, N * (size_t)m->lora.rank) : NULL;
}

static void decoder_carve_scratch(model *m, model_arena *a, size_t N)
{
    const model_config *c = &m->cfg;
    size_t F = c->d_ff, D = config_head_dim(c), qC = D * c->n_head, kvC = D * c->n_kv_head;
    int sw = model_uses_swiglu(c);
    m->dq = model_arena_take(a, N * qC);
    m->dk = model_arena_take(a, N * kvC);
    m->dv = model_arena_take(a, N * kvC);
    m->datt = model_arena_take(a, N * qC);
    m->dh = model_arena_take(a, N * F);
    m->du = sw ? model_arena_take(a, N * F) : NULL;
    m->dact = model_arena_take(a, N * F);
    m->dqr = c->qk_norm ? model_arena_take(a, N * qC) : NULL;
    m->dkr = c->qk_norm ? model_arena_take(a, N * kvC) : NULL;
}

static void decoder_kv_widths(const model_config *c, int *k, int *v)
{
    *k = *v = config_head_dim(c) * c->n_kv_head;
}

/* The projections' weights; causal attention: QK^T and PV cost 2 * 2 * (T/2 avg keys) * C forward
 * per layer, times 3 with backward. */
static void decoder_flops(const model_config *c, int T, double *weights, double *other)
{
    double C = c->d_model, D = config_head_dim(c), qC = D * c->n_head, kvC = D * c->n_kv_head, F = c->d_ff;
    *weights = C * qC * 2 + 2 * C * kvC + (model_uses_swiglu(c) ? 3 : 2) * C * F;
    *other = 6.0 * (double)T * C;
}

/* ---- forward ---- */

/* The attention block's inputs of layer l on N rows of x:  ln1 = Norm1(x);  q, k, v = ln1 W^T + b
 * (LoRA terms added where targeted, through m->acts[l]'s xa scratch); with qk_norm the
 * projections land in qr, kr and each head's D values are RMS-normalised into q, k. Before RoPE.
 * The training forward and model_gen's decode step share it. */
static void decoder_qkv_forward(model *m, int l, const layer_acts *a, const float *x, int N)
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

/* xm = x + att W_o^T + b_o on N rows: the projection accumulates onto a copy of the residual. */
static void decoder_attn_out(model *m, int l, float *xm, const float *x, const float *att, int N)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    int C = c->d_model, qC = config_head_dim(c) * c->n_head;
    backend_copy_d2d(be, xm, x, (size_t)N * C * sizeof(float));
    backend_matmul(be, xm, att, p->o_w, N, C, qC, 0, 1, 1.0f, 1.0f);
    if (p->o_b) backend_bias_add(be, xm, p->o_b, N, C);
    model_adapt(m, l, LORA_O, xm, att, N);
}

/* The MLP block of layer l on N rows, a->xm in:  ln2 = Norm2(xm);  act = SwiGLU(ln2 Wg^T, ln2 Wu^T)
 * or GELU(ln2 Wfc^T + b);  x_out = xm + act Wproj^T + b, skipped when x_out is NULL (backward's
 * recompute needs only the activations). LoRA terms are added where targeted, through
 * m->acts[l]'s xa scratch. The training forward and model_gen's decode step share it. */
static void decoder_mlp_forward(model *m, int l, const layer_acts *a, float *x_out, int N)
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

/* Layer l from a->x to the layer's activations; writes x_out (the next residual) when non-NULL. */
static void decoder_layer_forward(model *m, int l, float *x_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    layer_acts *a = &m->acts[l];
    int N = m->B * m->T;
    int H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c), qC = D * H, kvC = D * Hkv;

    /* attention block */
    decoder_qkv_forward(m, l, a, a->x, N);
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
                                  Bs, Ts, H, Hkv, D, 0);
        off += Bs * Ts;
    }
    decoder_attn_out(m, l, a->xm, a->x, a->att, N);

    decoder_mlp_forward(m, l, a, x_out, N);
}

/* ---- backward: the forward read in reverse ---- */

/* dres enters as dL/d(layer output) and leaves as dL/d(layer input). */
static void decoder_layer_backward(model *m, int l)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_params *g = &m->g.layer[l];
    layer_acts *a = &m->acts[l];
    int N = m->B * m->T, C = c->d_model, F = c->d_ff;
    int H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c), qC = D * H, kvC = D * Hkv;

    /* MLP block: x' = xm + act W_proj^T + b_proj */
    model_linear_backward(m, m->dact, g->proj_w, g->proj_b, m->dres, a->act, p->proj_w, N, F, C, 0);
    model_adapt_backward(m, l, LORA_PROJ, m->dact, m->dres, a->act, N);
    if (model_uses_swiglu(c)) {
        backend_swiglu_backward(be, m->dh, m->du, m->dact, a->h, a->u, (size_t)N * F);
        model_linear_backward(m, m->dln, g->gate_w, NULL, m->dh, a->ln2, p->gate_w, N, C, F, 0);
        model_adapt_backward(m, l, LORA_GATE, m->dln, m->dh, a->ln2, N);
        model_linear_backward(m, m->dln, g->up_w, NULL, m->du, a->ln2, p->up_w, N, C, F, 1);
        model_adapt_backward(m, l, LORA_UP, m->dln, m->du, a->ln2, N);
    } else {
        backend_gelu_backward(be, m->dh, a->h, m->dact, (size_t)N * F);
        model_linear_backward(m, m->dln, g->fc_w, g->fc_b, m->dh, a->ln2, p->fc_w, N, C, F, 0);
        model_adapt_backward(m, l, LORA_FC, m->dln, m->dh, a->ln2, N);
    }
    /* dres (= dL/dxm through the skip) += Norm2 backward */
    model_norm_backward(m, m->dres, g->ln2_w, g->ln2_b, m->dln, a->xm, p->ln2_w, a->ln2_mean, a->ln2_rstd, N);

    /* attention block: xm = x + att W_o^T + b_o */
    model_linear_backward(m, m->datt, g->o_w, g->o_b, m->dres, a->att, p->o_w, N, qC, C, 0);
    model_adapt_backward(m, l, LORA_O, m->datt, m->dres, a->att, N);
    for (int s = 0, off = 0; s < model_seq_count(m); s++) { /* per sequence, as the forward */
        int Bs, Ts;
        model_seq_shape(m, s, &Bs, &Ts);
        size_t oq = (size_t)off * qC, ok = (size_t)off * kvC;
        backend_attention_backward(be, m->dq + oq, m->dk + ok, m->dv + ok, m->datt + oq, a->q + oq,
                                   a->k + ok, a->v + ok, a->att + oq, a->lse + (size_t)off * H, Bs, Ts,
                                   H, Hkv, D, 0);
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
    model_linear_backward(m, m->dln, g->q_w, g->q_b, dq, a->ln1, p->q_w, N, C, qC, 0);
    model_adapt_backward(m, l, LORA_Q, m->dln, dq, a->ln1, N);
    model_linear_backward(m, m->dln, g->k_w, g->k_b, dk, a->ln1, p->k_w, N, C, kvC, 1);
    model_adapt_backward(m, l, LORA_K, m->dln, dk, a->ln1, N);
    model_linear_backward(m, m->dln, g->v_w, g->v_b, m->dv, a->ln1, p->v_w, N, C, kvC, 1);
    model_adapt_backward(m, l, LORA_V, m->dln, m->dv, a->ln1, N);
    model_norm_backward(m, m->dres, g->ln1_w, g->ln1_b, m->dln, a->x, p->ln1_w, a->ln1_mean, a->ln1_rstd, N);
}

/* ---- decode: one sequence, one token, with a KV cache ---- */

/* Rotate row t of x (T rows of H heads) to position t: rope rotates rows 0..t of the buffer, so
 * callers pass a scratch buffer whose rows before t hold nothing they need. */
static void decoder_rope_row(model *m, float *x, int t, int H)
{
    model_rope(m, x, 1, t + 1, H, 0);
}

/* The attention block of layer l for the token at position t (model_decode): its q, k, v rows
 * (rotated), and attention of the one query over rows 0..t into a->att's row t. */
static void decoder_attn_decode(model *m, int l, int t)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_acts *a = &m->acts[l];
    int C = c->d_model, H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c);
    int qC = D * H, kvC = D * Hkv;
    size_t rc = (size_t)t * C, rq = (size_t)t * qC, rkv = (size_t)t * kvC;
    float *x = a->x + rc, *ln1 = a->ln1 + rc;

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
        decoder_rope_row(m, a->q, t, H); /* earlier q rows are not needed again */
        decoder_rope_row(m, m->dk, t, Hkv);
        backend_copy_d2d(be, a->k + rkv, knew, (size_t)kvC * sizeof(float));
    }
    if (backend_has(be, BACKEND_OP_ATTENTION_DECODE)) {
        backend_attention_decode(be, a->att + rq, a->q + rq, a->k, a->v, t + 1, H, Hkv, D);
    } else {
        /* causal attention over rows 0..t: row t is the new token's output (earlier rows,
         * recomputed from stale queries, are ignored) */
        backend_attention_forward(be, a->att, a->lse, a->q, a->k, a->v, 1, t + 1, H, Hkv, D, 0);
    }
}

/* Layer l for the token at position t; rows 0..t-1 of the k/v buffers are the cache. */
static void decoder_layer_decode(model *m, int l, int t, float *x_out)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_params *p = &m->p.layer[l];
    layer_acts *a = &m->acts[l];
    int C = c->d_model, F = c->d_ff, qC = config_head_dim(c) * c->n_head;
    size_t rc = (size_t)t * C, rq = (size_t)t * qC, rf = (size_t)t * F;
    float *xm = a->xm + rc, *ln2 = a->ln2 + rc;

    decoder_attn_decode(m, l, t);
    decoder_attn_out(m, l, xm, a->x + rc, a->att + rq, 1);

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

/* ---- batched generation: R rows, one token each at its own position ---- */

static void decoder_layer_step(model *m, int l, const gen_step *s)
{
    backend *be = m->be;
    const model_config *c = &m->cfg;
    const layer_acts *a = &m->acts[l];
    int R = s->R, H = c->n_head, Hkv = c->n_kv_head, D = config_head_dim(c);

    decoder_qkv_forward(m, l, a, s->x, R);
    if (model_uses_rope(c)) { /* att is free until attention writes it */
        model_gen_rope(s->g, a->q, a->att, R, H, D);
        model_gen_rope(s->g, a->k, a->att, R, Hkv, D);
    }
    backend_attention_decode_rows(be, a->att, a->q, a->k, a->v, s->kc, s->vc, s->pos, R, s->cap, H,
                                  Hkv, D);
    decoder_attn_out(m, l, a->xm, s->x, a->att, R);

    decoder_mlp_forward(m, l, a, s->x_out, R);
}

const model_family family_decoder = {
    .name = "decoder",
    .layout_layer = decoder_layout_layer,
    .layer_views = decoder_layer_views,
    .init_rule = decoder_init_rule,
    .carve_layer = decoder_carve_layer,
    .carve_scratch = decoder_carve_scratch,
    .kv_widths = decoder_kv_widths,
    .flops = decoder_flops,
    .layer_forward = decoder_layer_forward,
    .layer_backward = decoder_layer_backward,
    .layer_decode = decoder_layer_decode,
    .layer_step = decoder_layer_step,
};
