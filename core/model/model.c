/* model.c: the model's parameter layout (flat buffer + named tensor table), its buffers and its
 * seeded initialisation; a layer's own tensors, views, init rule and activations come from its
 * family (family.h). The passes are in model_forward.c / model_backward.c.
 * Everything is allocated here, once: the step loop never allocates. */
#include "core/model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"

#include "core/model/family.h"
#include "core/model/model_internal.h"

/* Append one tensor to the table (growing it), at the current end of the flat buffer. */
int model_layout_add(model *m, int *cap, const char *name, int64_t rows, int64_t cols, int region,
                     int decay)
{
    if (m->ntensors == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        model_tensor *t = realloc(m->tensors, (size_t)*cap * sizeof *t);
        if (!t) return loom_fail("model: out of host memory for the tensor table");
        m->tensors = t;
    }
    model_tensor *t = &m->tensors[m->ntensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 0;
    t->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    t->offset = m->nparams;
    t->region = region;
    t->decay = decay;
    t->trainable = 1;
    m->nparams += t->numel;
    return 0;
}

int model_layout(model *m, const model_config *cfg)
{
    m->cfg = *cfg;
    m->family = model_family_of(cfg);
    if (!m->family) return -1;
    m->ntensors = 0;
    m->nparams = 0;
    int cap = 0, L = cfg->n_layer;
    m->nregions = L + 2;
    m->region_offset = calloc((size_t)m->nregions + 1, sizeof *m->region_offset);
    if (!m->region_offset) return loom_fail("model: out of host memory");

    m->region_offset[0] = 0;
    if (model_layout_add(m, &cap, "wte.weight", cfg->vocab, cfg->d_model, 0, 1)) return -1;
    if (strcmp(cfg->positions, "learned") == 0 &&
        model_layout_add(m, &cap, "wpe.weight", cfg->max_seq, cfg->d_model, 0, 1))
        return -1;
    for (int l = 0; l < L; l++) {
        m->region_offset[l + 1] = m->nparams;
        if (m->family->layout_layer(m, &cap, l)) return -1;
    }
    m->region_offset[L + 1] = m->nparams;
    if (model_layout_add(m, &cap, "ln_f.weight", cfg->d_model, 0, L + 1, 0)) return -1;
    if (model_uses_layernorm(cfg) && model_layout_add(m, &cap, "ln_f.bias", cfg->d_model, 0, L + 1, 0))
        return -1;
    if (!cfg->tied_embeddings &&
        model_layout_add(m, &cap, "lm_head.weight", cfg->vocab, cfg->d_model, L + 1, 1))
        return -1;
    m->region_offset[L + 2] = m->nparams;
    return 0;
}

static int table_find(const model_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return i;
    return -1;
}

int model_find(const model *m, const char *name) { return table_find(m->tensors, m->ntensors, name); }

float *model_tensor_ptr(const tensor_set *s, const char *name)
{
    int i = table_find(s->t, s->n, name);
    return i < 0 ? NULL : s->ptr[i];
}

static void model_fill_views(const model *m, const tensor_set *s, model_params *v)
{
    v->wte = model_tensor_ptr(s, "wte.weight");
    v->wpe = model_tensor_ptr(s, "wpe.weight");
    v->lnf_w = model_tensor_ptr(s, "ln_f.weight");
    v->lnf_b = model_tensor_ptr(s, "ln_f.bias");
    v->lm_head = m->cfg.tied_embeddings ? v->wte : model_tensor_ptr(s, "lm_head.weight");
    for (int l = 0; l < m->cfg.n_layer; l++) m->family->layer_views(m, s, l, &v->layer[l]);
}

static void model_fill_lora_views(const model *m, const tensor_set *s, layer_lora *v)
{
    char n[MODEL_MAX_NAME];
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int t = 0; t < LORA_NTARGETS; t++) {
            snprintf(n, sizeof n, "h.%d.%s.lora_A", l, lora_stem(&m->cfg, t));
            v[l].t[t].A = model_tensor_ptr(s, n);
            snprintf(n, sizeof n, "h.%d.%s.lora_B", l, lora_stem(&m->cfg, t));
            v[l].t[t].B = model_tensor_ptr(s, n);
        }
}

/* ZeRO-3 binds a region per layer per pass, so binding must cost O(tensors of the region): the
 * named view fields each tensor feeds (two for a tied embedding: wte and lm_head) are found once,
 * at create, by filling the views from fake pointers that encode the tensor index. */
#define MODEL_VIEW_SLOTS 2

/* Re-derive every named view of one side (params or grads) of the trainable array by name
 * (O(L^2): used once, to build the view map). */
static void model_refresh_views(model *m, float **ptrs, int grads)
{
    tensor_set s = {m->tensors, m->ntensors, ptrs};
    if (m->lora.rank) model_fill_lora_views(m, &s, grads ? m->lg : m->lp);
    else model_fill_views(m, &s, grads ? &m->g : &m->p);
}

/* The view fields of one side (params or grads), as an array of float * slots: the top-level
 * fields, then every layer's struct (layer_params or, with LoRA, layer_lora: all pointers). */
static int model_view_slots(model *m, int grads, float ***slots, int cap)
{
    int n = 0, L = m->cfg.n_layer;
    if (!m->lora.rank) {
        model_params *v = grads ? &m->g : &m->p;
        float **top[] = {&v->wte, &v->wpe, &v->lnf_w, &v->lnf_b, &v->lm_head};
        for (size_t k = 0; k < sizeof top / sizeof *top && n < cap; k++) slots[n++] = top[k];
        for (int l = 0; l < L; l++)
            for (size_t k = 0; k < sizeof(layer_params) / sizeof(float *) && n < cap; k++)
                slots[n++] = (float **)&v->layer[l] + k;
    } else {
        layer_lora *v = grads ? m->lg : m->lp;
        for (int l = 0; l < L; l++)
            for (size_t k = 0; k < sizeof(layer_lora) / sizeof(float *) && n < cap; k++)
                slots[n++] = (float **)&v[l] + k;
    }
    return n;
}

/* Fill views of one side from fake pointers (index + 1, never dereferenced) and record, per
 * tensor, which slots received it. */
static int model_map_side(model *m, int grads)
{
    int cap = 5 + m->cfg.n_layer * (int)(sizeof(layer_params) / sizeof(float *) + sizeof(layer_lora) / sizeof(float *));
    float ***slots = malloc((size_t)cap * sizeof *slots);
    float **fake = malloc((size_t)m->ntensors * sizeof *fake);
    if (!slots || !fake) {
        free(slots);
        free(fake);
        return loom_fail("model: out of host memory for the view map");
    }
    for (int i = 0; i < m->ntensors; i++) fake[i] = (float *)(uintptr_t)(((uintptr_t)i + 1) * sizeof(float));
    model_refresh_views(m, fake, grads);
    int n = model_view_slots(m, grads, slots, cap), rc = 0;
    float ***map = m->view_map + (size_t)(grads ? m->ntensors : 0) * MODEL_VIEW_SLOTS;
    for (int k = 0; k < n; k++) {
        uintptr_t f = (uintptr_t)*slots[k];
        if (!f) continue;
        size_t i = f / sizeof(float) - 1;
        float ***at = map + i * MODEL_VIEW_SLOTS;
        if (at[0] && at[1]) rc = loom_fail("model: tensor %s feeds more than two views", m->tensors[i].name);
        else at[at[0] ? 1 : 0] = slots[k];
        *slots[k] = NULL;
    }
    free(slots);
    free(fake);
    return rc;
}

/* Tensor index ranges per region (the layout adds them region by region) and both view maps. */
static int model_map_views(model *m)
{
    m->region_first = calloc((size_t)m->nregions + 1, sizeof(int));
    m->view_map = calloc((size_t)m->ntensors * 2 * MODEL_VIEW_SLOTS + 1, sizeof(float **));
    if (!m->region_first || !m->view_map) return loom_fail("model: out of host memory for the view map");
    for (int r = 0, i = 0; r <= m->nregions; r++) {
        while (i < m->ntensors && m->tensors[i].region < r) i++;
        m->region_first[r] = i;
    }
    return model_map_side(m, 0) || model_map_side(m, 1) ? -1 : 0;
}

/* Point region r's tensors (-1 = all) of one side at base + (offset - region start), and the
 * named views they feed with them. */
static void model_point(model *m, float **table, int grads, int region, float *base)
{
    int lo = region >= 0 ? m->region_first[region] : 0;
    int hi = region >= 0 ? m->region_first[region + 1] : m->ntensors;
    size_t start = region >= 0 ? m->region_offset[region] : 0;
    float ***map = m->view_map + (size_t)(grads ? m->ntensors : 0) * MODEL_VIEW_SLOTS;
    for (int i = lo; i < hi; i++) {
        table[i] = base + (m->tensors[i].offset - start);
        for (int k = 0; k < MODEL_VIEW_SLOTS; k++)
            if (map[(size_t)i * MODEL_VIEW_SLOTS + k]) *map[(size_t)i * MODEL_VIEW_SLOTS + k] = table[i];
    }
}

void model_bind_region(model *m, int region, float *params, float *grads)
{
    if (params) model_point(m, m->ptr_params, 0, region, params);
    if (grads) model_point(m, m->ptr_grads, 1, region, grads);
}

/* LoRA: the layout so far becomes the frozen base table; the trainable table is rebuilt with one
 * A (r, in) and B (out, r) per adapted projection of each layer, in the layer's region. */
static int model_layout_lora(model *m)
{
    m->base_tensors = m->tensors;
    m->nbase = m->ntensors;
    m->nbase_params = m->nparams;
    m->tensors = NULL;
    m->ntensors = 0;
    m->nparams = 0;
    int cap = 0, r = m->lora.rank, L = m->cfg.n_layer;
    char n[MODEL_MAX_NAME];
    m->region_offset[0] = m->region_offset[1] = 0;
    for (int l = 0; l < L; l++) {
        m->region_offset[l + 1] = m->nparams;
        for (int t = 0; t < LORA_NTARGETS; t++) {
            if (!(m->lora.targets & (1u << t))) continue;
            int in, out;
            lora_dims(&m->cfg, t, &in, &out);
            snprintf(n, sizeof n, "h.%d.%s.lora_A", l, lora_stem(&m->cfg, t));
            if (model_layout_add(m, &cap, n, r, in, l + 1, 0)) return -1;
            snprintf(n, sizeof n, "h.%d.%s.lora_B", l, lora_stem(&m->cfg, t));
            if (model_layout_add(m, &cap, n, out, r, l + 1, 0)) return -1;
        }
    }
    m->region_offset[L + 1] = m->region_offset[L + 2] = m->nparams;
    m->lora_scale = m->lora.alpha / (float)r;
    return 0;
}

int model_base_table(const model *m, const model_tensor **tensors, int *n, size_t *nparams)
{
    *tensors = m->lora.rank ? m->base_tensors : m->tensors;
    *n = m->lora.rank ? m->nbase : m->ntensors;
    *nparams = m->lora.rank ? m->nbase_params : m->nparams;
    return 0;
}

/* The base changes (a load): its bf16 copy is stale. */
static void model_drop_base_bf16(model *m)
{
    if (!m->base_bf16) return;
    backend_weights_bf16(m->be, m->base, 0);
    m->base_bf16 = 0;
}

int model_load_base_range(model *m, const float *host, size_t lo, size_t hi)
{
    if (hi > m->nbase_params || lo > hi)
        return loom_fail("model: base elements [%zu, %zu) outside the %zu-element base", lo, hi,
                         m->nbase_params);
    model_drop_base_bf16(m);
    backend_copy_h2d(m->be, m->base + lo, host, (hi - lo) * sizeof(float));
    return 0;
}

int model_lora_merge(const model *m, float *base_host, const float *lora_host)
{
    char n[MODEL_MAX_NAME];
    int r = m->lora.rank;
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int t = 0; t < LORA_NTARGETS; t++) {
            if (!(m->lora.targets & (1u << t))) continue;
            int in, out;
            lora_dims(&m->cfg, t, &in, &out);
            snprintf(n, sizeof n, "h.%d.%s.lora_A", l, lora_stem(&m->cfg, t));
            const float *A = lora_host + m->tensors[model_find(m, n)].offset;
            snprintf(n, sizeof n, "h.%d.%s.lora_B", l, lora_stem(&m->cfg, t));
            const float *B = lora_host + m->tensors[model_find(m, n)].offset;
            snprintf(n, sizeof n, "h.%d.%s.weight", l, lora_stem(&m->cfg, t));
            int w = table_find(m->base_tensors, m->nbase, n);
            if (w < 0) return loom_fail("lora merge: no base tensor %s", n);
            float *W = base_host + m->base_tensors[w].offset;
            /* W (out, in) += s * B (out, r) A (r, in), summed in double */
            for (int o = 0; o < out; o++)
                for (int i = 0; i < in; i++) {
                    double acc = 0.0;
                    for (int k = 0; k < r; k++) acc += (double)B[(size_t)o * r + k] * A[(size_t)k * in + i];
                    W[(size_t)o * in + i] += (float)(m->lora_scale * acc);
                }
        }
    return 0;
}

/* LoRA: allocate the frozen base buffer and point the base views at it. */
static int model_alloc_base(model *m)
{
    m->base = backend_alloc(m->be, m->nbase_params * sizeof(float));
    m->ptr_base = calloc((size_t)m->nbase, sizeof(float *));
    m->lp = calloc((size_t)m->cfg.n_layer, sizeof(layer_lora));
    m->lg = calloc((size_t)m->cfg.n_layer, sizeof(layer_lora));
    if (!m->base || !m->ptr_base || !m->lp || !m->lg) return loom_fail("model: out of memory for LoRA");
    for (int i = 0; i < m->nbase; i++) m->ptr_base[i] = m->base + m->base_tensors[i].offset;
    tensor_set s = {m->base_tensors, m->nbase, m->ptr_base};
    model_fill_views(m, &s, &m->p);
    return 0;
}

/* Assign every activation pointer from the arena (model_arena: a dry run with base == NULL sizes
 * it): per layer the residual x and the family's activations (with recompute, layers after the
 * first share layer 0's), then the head's, the backward scratch and the batch. */
static void model_carve_acts(model *m, model_arena *a)
{
    const model_config *c = &m->cfg;
    size_t N = (size_t)m->B * m->T, C = c->d_model, V = c->vocab, D = config_head_dim(c);
    int ln = model_uses_layernorm(c);
    layer_acts shared = {0};
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts *s = &m->acts[l];
        s->x = model_arena_take(a, N * C);
        if (m->recompute && l > 0) {
            float *x = s->x;
            *s = shared;
            s->x = x;
            continue;
        }
        m->family->carve_layer(m, a, s, N);
        if (l == 0) shared = *s;
    }
    m->x_final = model_arena_take(a, N * C);
    m->lnf = model_arena_take(a, N * C);
    m->lnf_mean = ln ? model_arena_take(a, N) : NULL;
    m->lnf_rstd = model_arena_take(a, N);
    m->logits = model_arena_take(a, (size_t)m->head_chunk * V); /* one chunk of the head's rows */
    m->losses = model_arena_take(a, N);
    m->loss_acc = model_arena_take(a, N);
    m->dres = model_arena_take(a, N * C);
    m->dln = model_arena_take(a, N * C);
    m->family->carve_scratch(m, a, N);
    m->rope_freq = model_uses_rope_freq(c) ? model_arena_take(a, D / 2) : NULL;
    m->dxa = m->lora.rank ? model_arena_take(a, N * (size_t)m->lora.rank) : NULL;
    m->tokens = (int32_t *)model_arena_take(a, N);
    m->targets = (int32_t *)model_arena_take(a, N);
    m->head_rows = (int32_t *)model_arena_take(a, N);
    m->head_targets = (int32_t *)model_arena_take(a, N);
}

/* Rows of the head per chunk (model.h, head_chunk): LOOM_HEAD_CHUNK when set, else as many as
 * MODEL_HEAD_CHUNK_FLOATS holds; at most the pass's N rows, at least 1. */
static int model_head_chunk_rows(const model_config *cfg, size_t N)
{
    const char *env = getenv("LOOM_HEAD_CHUNK");
    size_t R = cfg->vocab > 0 ? MODEL_HEAD_CHUNK_FLOATS / (size_t)cfg->vocab : N;
    if (env && atol(env) > 0) R = (size_t)atol(env);
    if (R > N) R = N;
    return R > 0 ? (int)R : 1;
}

/* The host side of a model: its tables (trainable and LoRA base), views and the activation arena's
 * size (a dry run of model_carve_acts), no backend and no device memory: model_plan's whole, and
 * the first half of model_create, so a plan reads the very numbers the allocation takes. */
static model *model_new(const model_config *cfg, int B, int T, int recompute, const lora_spec *lora)
{
    model *m = calloc(1, sizeof *m);
    if (!m) { loom_fail("model: out of host memory"); return NULL; }
    m->B = m->B_max = B;
    m->T = m->T_max = T;
    m->recompute = recompute;
    m->head_chunk = model_head_chunk_rows(cfg, (size_t)B * T);
    if (lora) m->lora = *lora;
    if (model_layout(m, cfg)) goto fail;
    if (m->lora.rank && model_layout_lora(m)) goto fail;
    m->p.layer = calloc((size_t)cfg->n_layer, sizeof(layer_params));
    m->g.layer = calloc((size_t)cfg->n_layer, sizeof(layer_params));
    m->acts = calloc((size_t)cfg->n_layer, sizeof(layer_acts));
    m->ptr_params = calloc((size_t)m->ntensors, sizeof(float *));
    m->ptr_grads = calloc((size_t)m->ntensors, sizeof(float *));
    if (!m->p.layer || !m->g.layer || !m->acts || !m->ptr_params || !m->ptr_grads) {
        loom_fail("model: out of host memory");
        goto fail;
    }
    if (recompute != MODEL_ACTS_NONE) { /* inference models generate through model_gen */
        model_arena a = {0};
        model_carve_acts(m, &a); /* dry run: size */
        m->activation_bytes = a.used;
    }
    return m;
fail:
    model_destroy(m);
    return NULL;
}

model *model_plan(const model_config *cfg, int B, int T, int recompute, const lora_spec *lora)
{
    return model_new(cfg, B, T, recompute, lora);
}

model *model_create(const model_config *cfg, backend *be, int B, int T, int with_params,
                    int with_grads, int recompute, const lora_spec *lora)
{
    model *m = model_new(cfg, B, T, recompute, lora);
    if (!m) return NULL;
    m->be = be;
    if (m->lora.rank && model_alloc_base(m)) goto fail;
    if (model_map_views(m)) goto fail;
    if (with_params) {
        m->params = backend_alloc(be, m->nparams * sizeof(float));
        if (!m->params) goto fail;
        model_bind_region(m, -1, m->params, NULL);
    }
    if (with_grads) {
        m->grads = backend_alloc(be, m->nparams * sizeof(float));
        if (!m->grads) goto fail;
        model_bind_region(m, -1, NULL, m->grads);
    }
    if (recompute != MODEL_ACTS_NONE) {
        model_arena a = {0};
        a.base = backend_alloc(be, m->activation_bytes); /* model_new's dry run sized it */
        if (!a.base) goto fail;
        model_carve_acts(m, &a);
        if (m->rope_freq && model_upload_rope_freq(m)) goto fail;
        backend_fill(be, m->loss_acc, 0.0f, (size_t)B * T); /* model_take_loss sums all of it */
    }
    m->host_losses = malloc((size_t)B * T * sizeof(float));
    m->host_rows = malloc((size_t)B * T * 2 * sizeof(int32_t));
    m->head_rows_n = B * T;
    if (!m->host_losses || !m->host_rows) { loom_fail("model: out of host memory"); goto fail; }
    return m;
fail:
    model_destroy(m);
    return NULL;
}

void model_destroy(model *m)
{
    if (!m) return;
    backend *be = m->be;
    if (m->acts && m->acts[0].x) backend_free(be, m->acts[0].x); /* the arena's base */
    if (m->grads) backend_free(be, m->grads);
    if (m->params) backend_free(be, m->params);
    free(m->host_losses);
    free(m->host_rows);
    if (m->base) {
        model_drop_base_bf16(m);
        backend_free(be, m->base);
    }
    free(m->ptr_base);
    free(m->base_tensors);
    free(m->lp);
    free(m->lg);
    free(m->ptr_params);
    free(m->ptr_grads);
    free(m->p.layer);
    free(m->g.layer);
    free(m->acts);
    free(m->tensors);
    free(m->region_offset);
    free(m->region_first);
    free(m->view_map);
    free(m);
}

/* llama3 rope scaling (HF's _compute_llama3_parameters): wavelengths longer than
 * original/low_freq_factor are slowed by `factor`, shorter than original/high_freq_factor kept,
 * and those between blended smoothly. Computed in double, rounded once to float. */
int model_upload_rope_freq(model *m)
{
    const model_config *c = &m->cfg;
    int D = config_head_dim(c), half = D / 2;
    if (!backend_has(m->be, BACKEND_OP_ROPE_FREQS))
        return loom_fail("model: backend %s has no rope_freqs op (model.rope_scaling %s)", backend_name(m->be), c->rope_scaling);
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return loom_fail("model: out of host memory");
    double old = c->rope_original_max_seq, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    double low_wl = old / lo, high_wl = old / hi, factor = c->rope_factor;
    for (int i = 0; i < half; i++) {
        double inv = pow((double)c->rope_theta, -2.0 * i / D), wl = 2.0 * 3.14159265358979323846 / inv, v = inv;
        if (wl > low_wl) v = inv / factor;
        else if (wl >= high_wl) {
            double sm = (old / wl - lo) / (hi - lo);
            v = (1.0 - sm) * inv / factor + sm * inv;
        }
        f[i] = (float)v;
    }
    backend_copy_h2d(m->be, m->rope_freq, f, (size_t)half * sizeof *f);
    free(f);
    return 0;
}

int model_init_range(const model *m, uint64_t seed, float *host, size_t lo, size_t hi)
{
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *t = &m->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo, end = t->offset + t->numel;
        size_t b = end < hi ? end : hi;
        if (b <= a) continue;
        float *x = host + (a - lo); /* x[j - j0] holds tensor element j */
        size_t j0 = a - t->offset, j1 = b - t->offset;
        float s; /* the family's rule: a constant, or the std of seeded normals */
        if (m->family->init_rule(m, t, &s)) {
            for (size_t j = j0; j < j1; j++) x[j - j0] = s;
            continue;
        }
        if (strstr(t->name, ".lora_B")) s = 0.0f;                      /* starts at the base model */
        if (strstr(t->name, ".lora_A")) s = 1.0f / sqrtf((float)t->shape[1]); /* unit-scale x A^T */
        /* one stream per tensor: the seed mixed with the tensor index, counter = element */
        uint64_t ts = rng_u64(seed, 0x1000000ull + (uint64_t)i);
        for (size_t j = j0; j < j1; j++) x[j - j0] = s * rng_normal(ts, j);
    }
    return 0;
}

int model_init_values(const model *m, uint64_t seed, float *host)
{
    return model_init_range(m, seed, host, 0, m->nparams);
}

double model_sum_losses(model *m, const float *losses)
{
    size_t N = (size_t)m->B * m->T;
    backend_copy_d2h(m->be, m->host_losses, losses, N * sizeof(float));
    double sum = 0.0;
    for (size_t i = 0; i < N; i++) sum += m->host_losses[i];
    return sum;
}

/* Over the whole allocation: micro-batches of a step may run at different shapes, each adding
 * into its own prefix; the positions no pass reached hold 0 (adding them changes no bit). */
double model_take_loss(model *m)
{
    int B = m->B, T = m->T;
    m->B = m->B_max;
    m->T = m->T_max;
    double sum = model_sum_losses(m, m->loss_acc);
    backend_fill(m->be, m->loss_acc, 0.0f, (size_t)m->B * m->T);
    m->B = B;
    m->T = T;
    return sum;
}

int model_set_shape(model *m, int B, int T)
{
    if (B < 1 || T < 1 || B > m->B_max || T > m->T_max)
        return loom_fail("model: shape %d x %d is outside the allocated %d x %d", B, T, m->B_max, m->T_max);
    m->B = B;
    m->T = T;
    m->seg = NULL;
    m->nseg = 0;
    return 0;
}

int model_set_ragged(model *m, const int *lens, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1 || lens[i] > m->T_max)
            return loom_fail("model: ragged sequence %d has %d tokens, outside 1..%d", i, lens[i], m->T_max);
        sum += lens[i];
    }
    if (n < 1 || sum > (long)m->B_max * m->T_max)
        return loom_fail("model: %d ragged sequences of %ld tokens exceed the allocated %d x %d", n, sum,
                         m->B_max, m->T_max);
    m->B = 1;
    m->T = (int)sum;
    m->seg = lens;
    m->nseg = n;
    return 0;
}

int model_pack_rows(int32_t *tokens, int32_t *targets, int B, int T, int *lens)
{
    int n = 0;
    size_t off = 0;
    for (int r = 0; r < B; r++) {
        const int32_t *tg = targets + (size_t)r * T;
        int len = T;
        while (len > 0 && tg[len - 1] < 0) len--;
        if (len == 0) continue;
        memmove(tokens + off, tokens + (size_t)r * T, (size_t)len * sizeof(int32_t));
        memmove(targets + off, tg, (size_t)len * sizeof(int32_t));
        lens[n++] = len;
        off += (size_t)len;
    }
    if (n == 0) targets[0] = -1, lens[n++] = 1;
    return n;
}

void model_weights_bf16(model *m, int keep)
{
    backend *be = m->be;
    if (!backend_has(be, BACKEND_OP_WEIGHTS_BF16)) return;
    if (m->params) backend_weights_bf16(be, m->params, keep ? m->nparams : 0);
    if (m->base && keep && !m->base_bf16) { /* frozen: the optimizer never changes it */
        backend_weights_bf16(be, m->base, m->nbase_params);
        m->base_bf16 = 1;
    }
}

/* The positions the head runs on (model_forward): all of them when every one has a target,
 * else the M that have one, uploaded with their targets. */
static void model_head_plan(model *m, const int32_t *targets)
{
    int N = m->B * m->T, M = 0;
    int32_t *rows = m->host_rows, *tg = m->host_rows + N;
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0) rows[M] = n, tg[M++] = targets[n];
    m->head_rows_n = m->full_head ? N : M;
    if (m->head_rows_n == N) return; /* every position: the plain path reads m->targets */
    if (!M) return;
    backend_copy_h2d(m->be, m->head_rows, rows, (size_t)M * sizeof(int32_t));
    backend_copy_h2d(m->be, m->head_targets, tg, (size_t)M * sizeof(int32_t));
}

void model_set_batch(model *m, const int32_t *tokens, const int32_t *targets)
{
    size_t bytes = (size_t)m->B * m->T * sizeof(int32_t);
    backend_copy_h2d(m->be, m->tokens, tokens, bytes);
    backend_copy_h2d(m->be, m->targets, targets, bytes);
    model_head_plan(m, targets);
}

/* Per-token FLOPs split in the body (every real position) and the head (positions with a loss). */
static void model_flops_split(const model *m, int T, double *body, double *head)
{
    /* 6 flops per matmul weight per token (2 forward, 4 backward), plus each layer's other FLOPs
     * (the family's: the decoder's causal attention). LoRA: the frozen weights need no weight
     * gradient (4 flops: forward + input gradient), the adapters (the trainable parameters) all 6. */
    const model_config *c = &m->cfg;
    double per_layer, other;
    m->family->flops(c, T, &per_layer, &other);
    double per_weight = m->lora.rank ? 4.0 : 6.0;
    *head = per_weight * (double)c->vocab * c->d_model;
    *body = per_weight * per_layer * c->n_layer + (m->lora.rank ? 6.0 * (double)m->nparams : 0.0) +
            other * c->n_layer;
}

double model_flops_per_token(const model *m, int T)
{
    double body, head;
    model_flops_split(m, T, &body, &head);
    return body + head;
}

double model_step_flops(const model *m, int T, double tokens, double head_rows)
{
    double body, head;
    model_flops_split(m, T, &body, &head);
    return body * tokens + head * (m->full_head ? tokens : head_rows);
}
