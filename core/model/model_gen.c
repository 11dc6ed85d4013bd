/* model_gen.c: batched generation (see model.h, model_gen_*): R sequences decoded together, each
 * with its own KV cache row and position; the prompts are prefilled in one forward, then every live
 * row costs one row of each projection per step (the family's layer step, family.h). Its buffers
 * are its own: weights, KV cache and one layer's activations, so an inference model needs no
 * training activations. Must never read a device pointer, and must leave the model's own
 * activation views as it found them. */
#include "core/model/model.h"
#include "core/model/family.h"
#include "core/model/model_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct model_gen {
    model *m;
    int rows, cap, nf, lc; /* sequences, cache positions, forward rows, head rows per chunk */
    layer_acts *acts;      /* n_layer views of one layer's scratch; x alternates X[0], X[1] */
    float *X[2], *tmp, *last, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *kv;             /* per layer: k cache (rows, cap, kw) then v cache (rows, cap, vw) */
    int kw, vw;            /* the family's key and value widths (kv_widths) */
    float *rope_freq;      /* rope_scaling: its own copy of the frequency table (device, D/2) */
    int32_t *tokens, *targets, *pos, *idx; /* device */
    int32_t *rgather, *rback;              /* rope_scaling: row gather/scatter indices (device) */
    int32_t *pos_h, *idx_h;                /* host, rows */
    int32_t *rgather_h, *rback_h;          /* host: nf, rows */
    int rope_T, rope_per;                  /* rope_scaling: positions and rows per rope pass */
    float *host_losses;                    /* host, lc */
    int live;
    void *arena;           /* own device memory, or NULL when borrowed */
    int borrowed;          /* lives in the model's idle activation arena */
    size_t bytes;
};

/* Carve the context's buffers from base (a dry run with base NULL sizes it): two residuals, one
 * layer's activations (the family's) that every layer's views share, the head's, the batch. */
static size_t gen_carve(model_gen *g, char *base)
{
    const model_config *c = &g->m->cfg;
    size_t N = (size_t)g->nf, C = c->d_model, D = (size_t)config_head_dim(c), lc = (size_t)g->lc;
    int ln = model_uses_layernorm(c);
    model_arena a = {base, 0};
    layer_acts s = {0};
    g->X[0] = model_arena_take(&a, N * C);
    g->X[1] = model_arena_take(&a, N * C);
    g->m->family->carve_layer(g->m, &a, &s, N);
    for (int l = 0; l < c->n_layer && base; l++) {
        g->acts[l] = s;
        g->acts[l].x = g->X[l % 2];
    }
    g->tmp = model_arena_take(&a, (size_t)g->rows * C);
    g->last = model_arena_take(&a, lc * C);
    g->lnf = model_arena_take(&a, lc * C);
    g->lnf_mean = ln ? model_arena_take(&a, lc) : NULL;
    g->lnf_rstd = model_arena_take(&a, lc);
    g->logits = model_arena_take(&a, lc * (size_t)c->vocab);
    g->losses = model_arena_take(&a, lc);
    g->tokens = (int32_t *)model_arena_take(&a, N);
    g->targets = (int32_t *)model_arena_take(&a, N);
    g->pos = (int32_t *)model_arena_take(&a, (size_t)g->rows);
    g->idx = (int32_t *)model_arena_take(&a, lc);
    if (model_uses_rope_freq(c)) {
        g->rope_freq = model_arena_take(&a, D / 2);
        g->rgather = (int32_t *)model_arena_take(&a, N);
        g->rback = (int32_t *)model_arena_take(&a, (size_t)g->rows);
    }
    return a.used;
}

/* Floats of one layer's cache: keys, then values. */
static size_t gen_kv_floats(const model_gen *g) { return (size_t)g->rows * g->cap * (size_t)(g->kw + g->vw); }
static float *gen_kc(const model_gen *g, int l) { return g->kv + (size_t)l * gen_kv_floats(g); }
static float *gen_vc(const model_gen *g, int l) { return gen_kc(g, l) + (size_t)g->rows * g->cap * g->kw; }

/* A context's shape for rows sequences of cap positions, fwd_tokens token rows a forward. */
static void gen_shape(model_gen *g, model *m, int rows, int cap, int fwd_tokens)
{
    g->m = m;
    g->rows = rows;
    g->cap = cap;
    g->nf = fwd_tokens > rows ? fwd_tokens : rows;
    if (g->nf < cap) g->nf = cap; /* one whole sequence per forward at least */
    g->lc = rows > 64 ? rows : 64;
    if (g->lc > g->nf) g->lc = g->nf;
    m->family->kv_widths(&m->cfg, &g->kw, &g->vw);
}

size_t model_gen_size(model *m, int rows, int cap, int fwd_tokens)
{
    model_gen g;
    memset(&g, 0, sizeof g);
    gen_shape(&g, m, rows, cap, fwd_tokens);
    return gen_carve(&g, NULL) + (size_t)m->cfg.n_layer * gen_kv_floats(&g) * sizeof(float);
}

model_gen *model_gen_create(model *m, int rows, int cap, int fwd_tokens)
{
    if (rows < 1 || cap < 1 || cap > m->cfg.max_seq) {
        loom_fail("generate: %d rows of %d positions do not fit the model (max_seq %d)", rows, cap,
                  m->cfg.max_seq);
        return NULL;
    }
    model_gen *g = calloc(1, sizeof *g);
    if (!g) { loom_fail("generate: out of host memory"); return NULL; }
    gen_shape(g, m, rows, cap, fwd_tokens);
    g->acts = calloc((size_t)m->cfg.n_layer, sizeof *g->acts);
    g->pos_h = calloc((size_t)g->lc, sizeof(int32_t));
    g->idx_h = calloc((size_t)g->lc, sizeof(int32_t));
    g->host_losses = calloc((size_t)g->lc, sizeof(float));
    if (model_uses_rope_freq(&m->cfg)) {
        g->rgather_h = calloc((size_t)g->nf, sizeof(int32_t));
        g->rback_h = calloc((size_t)rows, sizeof(int32_t));
        if (!g->rgather_h || !g->rback_h) {
            loom_fail("generate: out of host memory");
            model_gen_destroy(g);
            return NULL;
        }
    }
    if (!g->acts || !g->pos_h || !g->idx_h || !g->host_losses) {
        loom_fail("generate: out of host memory");
        model_gen_destroy(g);
        return NULL;
    }
    size_t act_bytes = gen_carve(g, NULL), kv_bytes = (size_t)m->cfg.n_layer * gen_kv_floats(g) * sizeof(float);
    g->bytes = act_bytes + kv_bytes;
    char *base;
    if (m->acts[0].x && g->bytes <= m->activation_bytes) {
        /* a training model's activations are idle between steps: evaluate inside them */
        base = (char *)m->acts[0].x;
        g->borrowed = 1;
    } else {
        base = g->arena = backend_alloc(m->be, g->bytes);
        if (!base) {
            model_gen_destroy(g);
            return NULL;
        }
    }
    g->kv = (float *)(base + act_bytes);
    gen_carve(g, base);
    if (g->rope_freq) {
        /* the context's own copy of the scaled frequencies: an inference model has none, and a
         * borrowed arena may overwrite the model's (model_gen_destroy restores it) */
        float *own = m->rope_freq;
        m->rope_freq = g->rope_freq;
        int rc = model_upload_rope_freq(m);
        m->rope_freq = own;
        if (rc) {
            model_gen_destroy(g);
            return NULL;
        }
    }
    /* bf16 backends: the weights stay fixed while the context lives, so they are cast once for
     * all its forwards and decode steps (model_gen_destroy drops the copy) */
    model_weights_bf16(m, 1);
    return g;
}

void model_gen_destroy(model_gen *g)
{
    if (!g) return;
    backend *be = g->m->be;
    model_weights_bf16(g->m, 0); /* the weights may change after (a training step) */
    if (g->arena) backend_free(be, g->arena);
    /* a borrowed arena may have covered the model's own frequency table: upload it again */
    if (g->borrowed && g->m->rope_freq) model_upload_rope_freq(g->m);
    free(g->rgather_h);
    free(g->rback_h);
    free(g->acts);
    free(g->pos_h);
    free(g->idx_h);
    free(g->host_losses);
    free(g);
}

size_t model_gen_bytes(const model_gen *g) { return g->borrowed ? 0 : g->bytes; }
int model_gen_live(const model_gen *g) { return g->live; }
int model_gen_pos(const model_gen *g, int i) { return g->pos_h[i]; }

/* The generation views stand in for the model's activations while one of its passes runs. */
typedef struct gen_swap { layer_acts *acts; float *rope_freq; int B, T, nseg; const int *seg; } gen_swap;

static gen_swap gen_enter(model_gen *g, int B, int T, const int *seg, int nseg)
{
    gen_swap s = {g->m->acts, g->m->rope_freq, g->m->B, g->m->T, g->m->nseg, g->m->seg};
    g->m->acts = g->acts;
    g->m->rope_freq = g->rope_freq;
    g->m->B = B;
    g->m->T = T;
    g->m->seg = seg;
    g->m->nseg = nseg;
    return s;
}

static void gen_leave(model_gen *g, gen_swap s)
{
    g->m->acts = s.acts;
    g->m->rope_freq = s.rope_freq;
    g->m->B = s.B;
    g->m->T = s.T;
    g->m->seg = s.seg;
    g->m->nseg = s.nseg;
}

/* Embeddings and every layer for the tokens already in g->tokens, through the model's own layer
 * forward (the same ops as training): B rows of T, or with `lens` a ragged pass over B sequences
 * packed one after another (T their sum). With `cache`, rows [r0, r0 + B) of every layer's KV
 * cache receive the keys and values. The last residual is left in X[L % 2]. */
static int gen_trunk(model_gen *g, int B, int T, const int *lens, int r0, int cache)
{
    model *m = g->m;
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int L = c->n_layer;
    gen_swap sw = lens ? gen_enter(g, 1, T, lens, B) : gen_enter(g, B, T, NULL, 0);
    int rc = model_begin(m, 0, 0);
    if (rc == 0) model_embed(m, g->X[0], g->tokens);
    for (int l = 0; rc == 0 && l < L; l++) {
        if ((rc = model_begin(m, l + 1, 0)) != 0) break;
        m->family->layer_forward(m, l, g->X[(l + 1) % 2]);
        for (int r = 0, off = 0; cache && r < B; off += lens ? lens[r] : T, r++) {
            size_t n = (size_t)(lens ? lens[r] : T), row = (size_t)(r0 + r) * g->cap, src = (size_t)off;
            backend_copy_d2d(be, gen_kc(g, l) + row * g->kw, g->acts[l].k + src * g->kw, n * g->kw * sizeof(float));
            backend_copy_d2d(be, gen_vc(g, l) + row * g->vw, g->acts[l].v + src * g->vw, n * g->vw * sizeof(float));
        }
        rc = model_end(m, l + 1, 0);
    }
    if (rc == 0) rc = model_begin(m, L + 1, 0);
    gen_leave(g, sw);
    return rc;
}

/* Final norm and head of n rows of `x` (device, n <= lc) into g->logits. */
static void gen_head(model_gen *g, const float *x, int n)
{
    model *m = g->m;
    int C = m->cfg.d_model;
    const float *w = m->p.lnf_w, *b = m->p.lnf_b;
    if (g->lnf_mean) backend_layernorm_forward(m->be, g->lnf, g->lnf_mean, g->lnf_rstd, x, w, b, n, C, m->cfg.norm_eps);
    else backend_rmsnorm_forward(m->be, g->lnf, g->lnf_rstd, x, w, n, C, m->cfg.norm_eps);
    model_linear(m, g->logits, g->lnf, m->p.lm_head, NULL, n, C, m->cfg.vocab);
}

/* Prefill rows [r0, r0 + B), their prompts packed without padding (n tokens): tokens, a ragged
 * trunk, logits of each row's last prompt token. */
static int gen_prefill_group(model_gen *g, const int32_t *const *prompts, const int *lens, int r0,
                             int B, int n, int32_t *host_tok, float *logits_host)
{
    model *m = g->m;
    backend *be = m->be;
    int V = m->cfg.vocab;
    for (int r = 0, off = 0; r < B; off += lens[r0 + r], r++) {
        memcpy(host_tok + off, prompts[r0 + r], (size_t)lens[r0 + r] * sizeof(int32_t));
        g->idx_h[r] = off + lens[r0 + r] - 1;
    }
    backend_copy_h2d(be, g->tokens, host_tok, (size_t)n * sizeof(int32_t));
    if (gen_trunk(g, B, n, lens + r0, r0, 1)) return -1;
    /* the last prompt position of every row, gathered like an embedding lookup */
    backend_copy_h2d(be, g->idx, g->idx_h, (size_t)B * sizeof(int32_t));
    backend_embedding_forward(be, g->last, g->idx, g->X[m->cfg.n_layer % 2], NULL, 1, B, m->cfg.d_model);
    gen_head(g, g->last, B);
    backend_copy_d2h(be, logits_host + (size_t)r0 * V, g->logits, (size_t)B * V * sizeof(float));
    return 0;
}

int model_gen_prefill(model_gen *g, const int32_t *const *prompts, const int *lens, int R, float *logits_host)
{
    if (R < 1 || R > g->rows) return loom_fail("generate: %d sequences, room for %d", R, g->rows);
    if (R > g->lc) return loom_fail("generate: %d sequences exceed the head's %d rows", R, g->lc);
    for (int r = 0; r < R; r++)
        if (lens[r] < 1 || lens[r] >= g->cap)
            return loom_fail("generate: prompt %d has %d tokens; the cache holds %d positions", r, lens[r], g->cap);
    int32_t *host_tok = malloc((size_t)g->nf * sizeof(int32_t));
    if (!host_tok) return loom_fail("generate: out of host memory");
    int rc = 0;
    /* groups of consecutive rows whose tokens fit one forward (usually the whole batch) */
    for (int r0 = 0; rc == 0 && r0 < R;) {
        int B = 0, n = 0;
        while (r0 + B < R && n + lens[r0 + B] <= g->nf) n += lens[r0 + B++];
        rc = gen_prefill_group(g, prompts, lens, r0, B, n, host_tok, logits_host);
        r0 += B;
    }
    free(host_tok);
    for (int r = 0; r < R; r++) g->pos_h[r] = lens[r];
    g->live = rc == 0 ? R : 0;
    return rc ? loom_fail("generate: prefill failed") : 0;
}

/* rope_scaling: the positions of one step's rows for model_gen_rope (host, then device). rope_freqs
 * rotates rows 0..T-1 of (B, T) sequences, so each row is gathered into every position of a
 * scratch sequence (rope_per rows of rope_T positions fit the nf-row scratch), rotated there, and
 * the row at its own position gathered back: the same table bits as the training forward. */
static void gen_rope_index(model_gen *g, int R)
{
    backend *be = g->m->be;
    int top = 0;
    for (int r = 0; r < R; r++)
        if (g->pos_h[r] > top) top = g->pos_h[r];
    g->rope_T = top + 1;
    g->rope_per = g->nf / g->rope_T; /* >= 1: positions < cap <= nf */
    if (g->rope_per > R) g->rope_per = R;
    for (int j = 0; j < g->rope_per; j++)
        for (int t = 0; t < g->rope_T; t++) g->rgather_h[(size_t)j * g->rope_T + t] = j;
    for (int r = 0; r < R; r++) g->rback_h[r] = (r % g->rope_per) * g->rope_T + g->pos_h[r];
    backend_copy_h2d(be, g->rgather, g->rgather_h, (size_t)g->rope_per * g->rope_T * sizeof(int32_t));
    backend_copy_h2d(be, g->rback, g->rback_h, (size_t)R * sizeof(int32_t));
}

/* RoPE on R rows of x (R, H, D), row r at position pos[r]; `scratch` holds nf rows of H*D. */
void model_gen_rope(model_gen *g, float *x, float *scratch, int R, int H, int D)
{
    model *m = g->m;
    backend *be = m->be;
    if (!g->rope_freq) {
        backend_rope_rows(be, x, g->pos, R, H, D, m->cfg.rope_theta, NULL);
        return;
    }
    int W = H * D, Tp = g->rope_T;
    for (int r0 = 0; r0 < R; r0 += g->rope_per) {
        int n = R - r0 < g->rope_per ? R - r0 : g->rope_per;
        float *xr = x + (size_t)r0 * W;
        backend_embedding_forward(be, scratch, g->rgather, xr, NULL, 1, n * Tp, W);
        backend_rope_freqs(be, scratch, n, Tp, H, D, g->rope_freq, 0);
        backend_embedding_forward(be, xr, g->rback + r0, scratch, NULL, 1, n, W);
    }
}

int model_gen_step(model_gen *g, const int32_t *tokens, float *logits_host)
{
    model *m = g->m;
    backend *be = m->be;
    const model_config *c = &m->cfg;
    int R = g->live, L = c->n_layer, C = c->d_model;
    if (R < 1) return loom_fail("generate: no live sequence to step");
    if (!backend_has(be, BACKEND_OP_ATTENTION_DECODE_ROWS) ||
        (model_uses_rope(c) && !g->rope_freq && !backend_has(be, BACKEND_OP_ROPE_ROWS)))
        return loom_fail("generate: backend %s has no batched decode ops", backend_name(be));
    for (int i = 0; i < R; i++)
        if (g->pos_h[i] >= g->cap)
            return loom_fail("generate: row %d reached the cache's %d positions", i, g->cap);
    backend_copy_h2d(be, g->tokens, tokens, (size_t)R * sizeof(int32_t));
    backend_copy_h2d(be, g->pos, g->pos_h, (size_t)R * sizeof(int32_t));
    if (g->rope_freq) gen_rope_index(g, R);
    if (model_begin(m, 0, 0)) return -1;
    backend_embedding_forward(be, g->X[0], g->tokens, m->p.wte, NULL, 1, R, C);
    if (m->p.wpe) { /* learned positions: each row's own wpe row, gathered the same way */
        backend_embedding_forward(be, g->tmp, g->pos, m->p.wpe, NULL, 1, R, C);
        backend_add(be, g->X[0], g->X[0], g->tmp, (size_t)R * C);
    }
    for (int l = 0; l < L; l++) { /* the layer's views and shape R x 1 (LoRA's xa scratch) */
        if (model_begin(m, l + 1, 0)) return -1;
        gen_step s = {.g = g, .x = g->X[l % 2], .x_out = g->X[(l + 1) % 2], .kc = gen_kc(g, l),
                      .vc = gen_vc(g, l), .pos = g->pos, .R = R, .cap = g->cap};
        gen_swap sw = gen_enter(g, R, 1, NULL, 0);
        m->family->layer_step(m, l, &s);
        gen_leave(g, sw);
        if (model_end(m, l + 1, 0)) return -1;
    }
    if (model_begin(m, L + 1, 0)) return -1;
    gen_head(g, g->X[L % 2], R);
    backend_copy_d2h(be, logits_host, g->logits, (size_t)R * c->vocab * sizeof(float));
    for (int i = 0; i < R; i++) g->pos_h[i]++;
    return 0;
}

int model_gen_drop(model_gen *g, int i)
{
    if (i < 0 || i >= g->live) return loom_fail("generate: no live row %d", i);
    int last = --g->live;
    if (i == last) return 0;
    backend *be = g->m->be;
    const model_config *c = &g->m->cfg;
    size_t n = (size_t)g->pos_h[last], dst = (size_t)i * g->cap, src = (size_t)last * g->cap;
    for (int l = 0; l < c->n_layer; l++) {
        backend_copy_d2d(be, gen_kc(g, l) + dst * g->kw, gen_kc(g, l) + src * g->kw, n * g->kw * sizeof(float));
        backend_copy_d2d(be, gen_vc(g, l) + dst * g->vw, gen_vc(g, l) + src * g->vw, n * g->vw * sizeof(float));
    }
    g->pos_h[i] = g->pos_h[last];
    return 0;
}

/* The loss of one packed group (B sequences, n host tokens and targets): the trunk, then the
 * head and cross-entropy only on the positions with a target, lc at a time, gathered like an
 * embedding lookup. */
static int gen_loss_group(model_gen *g, const int *lens, int B, int n, const int32_t *tok,
                          const int32_t *tg, double *sum)
{
    model *m = g->m;
    backend *be = m->be;
    int V = m->cfg.vocab, C = m->cfg.d_model;
    backend_copy_h2d(be, g->tokens, tok, (size_t)n * sizeof(int32_t));
    if (gen_trunk(g, B, n, lens, 0, 0)) return -1;
    const float *x = g->X[m->cfg.n_layer % 2];
    for (int i = 0; i < n;) {
        int k = 0;
        for (; i < n && k < g->lc; i++)
            if (tg[i] >= 0) g->idx_h[k] = i, g->pos_h[k++] = tg[i]; /* pos_h: lc ids of scratch */
        if (k == 0) break;
        backend_copy_h2d(be, g->idx, g->idx_h, (size_t)k * sizeof(int32_t));
        backend_copy_h2d(be, g->targets, g->pos_h, (size_t)k * sizeof(int32_t));
        backend_embedding_forward(be, g->last, g->idx, x, NULL, 1, k, C);
        gen_head(g, g->last, k);
        backend_softmax_xent(be, g->logits, g->losses, g->targets, k, V, V, 0.0f);
        backend_copy_d2h(be, g->host_losses, g->losses, (size_t)k * sizeof(float));
        for (int j = 0; j < k; j++) *sum += g->host_losses[j];
    }
    return 0;
}

int model_gen_loss(model_gen *g, const int32_t *tokens, const int32_t *targets, int R, int T,
                   double *sum_out)
{
    if (T > g->nf) {
        return loom_fail("generate: sequences of %d tokens exceed the %d rows of one forward", T,
                         g->nf);
    }
    /* the rows packed (model_pack_rows) on a host copy, then cut into groups of at most nf tokens */
    size_t N = (size_t)R * T;
    int32_t *tok = malloc(N * sizeof(int32_t)), *tg = malloc(N * sizeof(int32_t));
    int *lens = malloc((size_t)R * sizeof(int)), rc = tok && tg && lens ? 0 : -1;
    if (rc) loom_fail("generate: out of host memory");
    double sum = 0.0;
    if (rc == 0) {
        memcpy(tok, tokens, N * sizeof(int32_t));
        memcpy(tg, targets, N * sizeof(int32_t));
        int ns = model_pack_rows(tok, tg, R, T, lens);
        size_t off = 0;
        for (int s0 = 0; rc == 0 && s0 < ns;) {
            int B = 0, n = 0;
            while (s0 + B < ns && n + lens[s0 + B] <= g->nf) n += lens[s0 + B++];
            rc = gen_loss_group(g, lens + s0, B, n, tok + off, tg + off, &sum);
            s0 += B, off += (size_t)n;
        }
    }
    free(tok), free(tg), free(lens);
    if (rc == 0) *sum_out = sum;
    return rc;
}
