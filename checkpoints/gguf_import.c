/* gguf_import.c: a GGUF model as loom's model (see gguf.h): gguf_export.c's mapping run backwards
 * (the same tensor list, so the two cannot drift apart) and the tokenizer keys written back as
 * Hugging Face tokenizer files. One GGUF tensor in memory at a time. */
#include "checkpoints/gguf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct gguf_model {
    gguf_file *f;
    hf_dims d;
    int arch;
    char *json;
    gg_list l;
    float *buf, *out;     /* the GGUF tensor last read; a loom tensor re-laid from it */
    size_t cap;
    int cur;              /* index in l of buf's tensor, -1 none */
};

const char *gguf_model_json(const gguf_model *m) { return m->json; }

/* a u32 key of the architecture (def < 0: required) */
static int gm_u32(const gguf_file *f, const char *arch, const char *key, long def, int *out)
{
    char k[96];
    uint32_t v;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int rc = gguf_get_u32(f, k, &v);
    if (rc < 0) return -1;
    if (rc == 1 && def < 0) return loom_fail("%s: key %s is missing", gguf_path(f), k);
    if (rc == 1) v = (uint32_t)def;
    if (v > 1u << 30) return loom_fail("%s: key %s is %u", gguf_path(f), k, v);
    *out = (int)v;
    return 0;
}

static int gm_f32(const gguf_file *f, const char *arch, const char *key, double def, double *out)
{
    char k[96];
    float v;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int rc = gguf_get_f32(f, k, &v);
    if (rc < 0) return -1;
    *out = rc == 1 ? def : (double)v;
    return 0;
}

/* the original context of llama3 scaling with this factor (low 1, high 4) that gives factors fr for
 * the wavelengths wl: from the first smoothed frequency, else any between the bounds the others set
 * (Llama 3's 8192 when it is one); -1 none */
static double gm_llama3_orig(const float *fr, const float *wl, int half, double factor)
{
    double lo = 0, hi = 1e12;
    for (int i = 0; i < half; i++) {
        if (fr[i] == 1.0f) { if (4.0 * wl[i] > lo) lo = 4.0 * wl[i]; continue; }  /* wavelen < orig / high */
        if (fr[i] == (float)factor) { if (wl[i] < hi) hi = wl[i]; continue; }      /* wavelen > orig / low */
        double s = (1.0 / fr[i] - 1.0 / factor) / (1.0 - 1.0 / factor);            /* 1/f = (1 - s)/factor + s */
        return floor(wl[i] * (1.0 + 3.0 * s) + 0.5);                               /* s = (orig/wavelen - 1)/3 */
    }
    if (8192 > lo && 8192 < hi) return 8192;
    return floor(lo) + 1 < hi ? floor(lo) + 1 : -1;
}

int gguf_llama3_params(hf_dims *d, const float *fr, int half)
{
    float wl[512], again[512], fmax = 1;
    if (half < 1 || half > 512) return -1;
    for (int i = 0; i < half; i++) { /* as gguf_rope_freqs computes them */
        float freq = 1.0f / powf((float)d->rope_theta, (float)(2 * i) / (float)(2 * half));
        wl[i] = (float)(2 * 3.14159265358979323846) / freq;
        if (fr[i] > fmax) fmax = fr[i];
    }
    const double factors[] = {fmax, 8, 32, 16, 4};
    d->llama3 = 1;
    d->rope_low = 1;
    d->rope_high = 4;
    for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++) {
        if (factors[k] <= 1) continue;
        d->rope_factor = factors[k];
        double orig = gm_llama3_orig(fr, wl, half, factors[k]);
        for (int delta = -1; orig > 0 && delta <= 1; delta++) {
            if (orig + delta < 1 || orig + delta > 1e9) continue;
            d->rope_original_max_seq = (int)orig + delta;
            gguf_rope_freqs(d, again);
            if (memcmp(again, fr, (size_t)half * sizeof *fr) == 0) return 0;
        }
    }
    return -1;
}

/* llama3 RoPE scaling back from rope_freqs.weight (gguf_llama3_params) */
static int gm_llama3(gguf_model *m, int ndim, const int64_t *ne)
{
    hf_dims *d = &m->d;
    int half = hf_head_dim(d) / 2;
    if (ndim != 1 || ne[0] != half || half > 512)
        return loom_fail("%s: tensor rope_freqs.weight has %lld values, the head dim implies %d", gguf_path(m->f), (long long)ne[0], half);
    float fr[512];
    if (gguf_tensor_read(m->f, "rope_freqs.weight", fr, (size_t)half)) return -1;
    if (gguf_llama3_params(d, fr, half) == 0) return 0;
    return loom_fail("%s: tensor rope_freqs.weight: no llama3 RoPE scaling with low_freq_factor 1 and high_freq_factor 4 "
                     "gives these factors (import the Hugging Face folder)", gguf_path(m->f));
}

/* the architecture keys -> dims, as gguf_export.c's gg_arch_keys wrote them */
static int gm_dims(gguf_model *m)
{
    const gguf_file *f = m->f;
    const char *a = NULL;
    int rc = gguf_get_str(f, "general.architecture", &a);
    if (rc) { if (rc == 1) loom_fail("%s: key general.architecture is missing", gguf_path(f)); return -1; }
    m->arch = -1;
    for (int i = 0; i <= GGUF_ARCH_QWEN3; i++)
        if (strcmp(a, gguf_arch_name(i)) == 0) m->arch = i;
    if (m->arch < 0) rc = loom_fail("%s: general.architecture '%s' is not one loom imports (gpt2, llama, qwen2, qwen3)", gguf_path(f), a);
    hf_dims *d = &m->d;
    memset(d, 0, sizeof *d);
    int kl = 0, ndim;
    int64_t ne[4];
    gguf_type ty;
    if (rc == 0)
        rc = gm_u32(f, a, "block_count", -1, &d->n_layer) || gm_u32(f, a, "context_length", -1, &d->max_seq) ||
             gm_u32(f, a, "embedding_length", -1, &d->d_model) || gm_u32(f, a, "feed_forward_length", -1, &d->d_ff) ||
             gm_u32(f, a, "attention.head_count", -1, &d->n_head) ||
             gm_u32(f, a, "attention.head_count_kv", d->n_head, &d->n_kv_head) || gm_u32(f, a, "attention.key_length", 0, &kl);
    if (rc == 0 && (d->n_head < 1 || d->n_kv_head < 1 || d->n_head % d->n_kv_head || d->n_layer < 1 || d->d_model < 1))
        rc = loom_fail("%s: %s.attention.head_count %d / head_count_kv %d / block_count %d do not make a model", gguf_path(f), a, d->n_head, d->n_kv_head, d->n_layer);
    if (rc == 0 && gguf_tensor_info(f, "token_embd.weight", &ndim, ne, &ty) != 0) rc = loom_fail("%s: tensor token_embd.weight is missing", gguf_path(f));
    if (rc == 0) d->vocab = (int)ne[1];
    if (rc == 0 && m->arch == GGUF_ARCH_GPT2) {
        d->layernorm = d->bias = 1;
        d->n_kv_head = d->n_head;
        rc = gm_f32(f, a, "attention.layer_norm_epsilon", 1e-5, &d->norm_eps);
    } else if (rc == 0) {
        d->swiglu = d->rope = 1;
        d->qkv_bias = m->arch == GGUF_ARCH_QWEN2;
        d->qk_norm = m->arch == GGUF_ARCH_QWEN3;
        d->bias = gguf_tensor_info(f, "blk.0.attn_output.bias", &ndim, ne, &ty) == 0;
        if (kl && (d->d_model % d->n_head || kl != d->d_model / d->n_head)) d->head_dim = kl;
        rc = gm_f32(f, a, "attention.layer_norm_rms_epsilon", 1e-6, &d->norm_eps) || gm_f32(f, a, "rope.freq_base", 10000, &d->rope_theta);
        if (rc == 0 && gguf_tensor_info(f, "rope_freqs.weight", &ndim, ne, &ty) == 0) rc = gm_llama3(m, ndim, ne);
    }
    d->tied = gguf_tensor_info(f, "output.weight", &ndim, ne, &ty) != 0;
    free((void *)a);
    return rc;
}

/* every tensor the dims imply, with its shape, and no other */
static int gm_check(gguf_model *m)
{
    if (gguf_tensor_list(&m->d, m->arch, &m->l)) return -1;
    int ndim;
    int64_t ne[4];
    gguf_type ty;
    for (int i = 0; i < m->l.n; i++) {
        const gg_tensor *t = &m->l.t[i];
        if (gguf_tensor_info(m->f, t->name, &ndim, ne, &ty) != 0) return loom_fail("%s: tensor %s is missing", gguf_path(m->f), t->name);
        if (ndim != t->ndim || ne[0] != t->ne[0] || (ndim > 1 && ne[1] != t->ne[1]))
            return loom_fail("%s: tensor %s has shape [%lld, %lld], the keys imply [%lld, %lld]", gguf_path(m->f), t->name,
                             (long long)ne[0], (long long)(ndim > 1 ? ne[1] : 1), (long long)t->ne[0], (long long)t->ne[1]);
    }
    for (size_t k = 0; k < gguf_n_tensors(m->f); k++) {
        const char *name = gguf_tensor_name(m->f, k);
        int known = 0;
        for (int i = 0; i < m->l.n && !known; i++) known = strcmp(m->l.t[i].name, name) == 0;
        if (!known) return loom_fail("%s: tensor %s is not one of a %s model with these keys", gguf_path(m->f), name, gguf_arch_name(m->arch));
    }
    return 0;
}

gguf_model *gguf_model_open(const char *path)
{
    gguf_model *m = calloc(1, sizeof *m);
    if (!m) { loom_fail("%s: out of memory", path); return NULL; }
    m->cur = -1;
    m->f = gguf_open(path);
    int rc = m->f ? 0 : -1;
    const char *ty = NULL;
    if (rc == 0 && gguf_get_str(m->f, "general.type", &ty) == 0 && strcmp(ty, "model") != 0)
        rc = loom_fail("%s: general.type is '%s', not a model (a LoRA adapter is applied with llama.cpp's --lora)", path, ty);
    free((void *)ty);
    if (rc == 0) rc = gm_dims(m) || gm_check(m);
    if (rc == 0 && !(m->json = hf_dims_to_loom_json(&m->d))) rc = -1;
    if (rc) { gguf_model_close(m); return NULL; }
    return m;
}

void gguf_model_close(gguf_model *m)
{
    if (!m) return;
    gguf_close(m->f);
    free(m->json);
    free(m->l.t);
    free(m->buf);
    free(m->out);
    free(m);
}

/* loom tensor `name`: part p of a GGUF tensor (GPT-2's qkv stacks three), its rows back from HF's
 * halves to loom's pairs where llama.cpp keeps HF's (qwen2, qwen3) */
const float *gguf_model_get(void *ctx, const char *name)
{
    gguf_model *m = ctx;
    for (int i = 0; i < m->l.n; i++) {
        const gg_tensor *t = &m->l.t[i];
        for (int p = 0; p < t->nparts; p++) {
            if (strcmp(t->part[p], name) != 0) continue;
            size_t n = (size_t)(t->ne[0] * t->ne[1]), per = n / (size_t)t->nparts;
            if (n > m->cap) {
                float *b = realloc(m->buf, n * sizeof *b), *o = b ? realloc(m->out, n * sizeof *o) : NULL;
                if (b) m->buf = b;
                if (o) m->out = o;
                if (!b || !o) { loom_fail("%s: out of memory for %s", gguf_path(m->f), t->name); return NULL; }
                m->cap = n;
                m->cur = -1;
            }
            if (m->cur != i && gguf_tensor_read(m->f, t->name, m->buf, n)) return NULL;
            m->cur = i;
            if (!t->neox) return m->buf + (size_t)p * per;
            size_t cols = t->ndim > 1 ? (size_t)t->ne[0] : 1, rows = per / cols, D = (size_t)t->head_dim, half = D / 2;
            for (size_t r = 0; r < rows; r++) { /* inverse of gguf_rows_to_neox */
                size_t h = r / D, j = r % D, src = h * D + (j % 2 ? half + j / 2 : j / 2);
                memcpy(m->out + r * cols, m->buf + src * cols, cols * sizeof(float));
            }
            return m->out;
        }
    }
    loom_fail("%s: no tensor holds loom's %s", gguf_path(m->f), name);
    return NULL;
}

int gguf_model_write_tokenizer(const gguf_model *m, const char *dir) { return gguf_vocab_to_hf(m->f, dir); }
