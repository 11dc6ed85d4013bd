/* session_hf.c: a base that brings its own model config (an HF folder; a checkpoint for --init)
 * adopted by the job, model fields the job set itself checked against it; an HF folder's tensors
 * (mapped by checkpoints/hf*.c) streamed one at a time into the frozen base (LoRA) or the
 * parameters, any world size or ZeRO stage. Must never name an HF tensor. */
#include "core/train/session.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/hf.h"

/* Field f's value in m as text ("32", "1e-06", "true", "\"rmsnorm\""). */
static void adopt_value(const config_field *f, const model_config *m, char *buf, size_t n)
{
    const char *p = (const char *)m - offsetof(job_config, model) + f->offset;
    switch (f->type) {
    case CFG_FLOAT: snprintf(buf, n, "%g", (double)*(const float *)p); break;
    case CFG_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
    case CFG_STRING: snprintf(buf, n, "\"%.*s\"", (int)(n > 8 ? n - 8 : 0), p); break;
    case CFG_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    default: snprintf(buf, n, "%d", *(const int *)p); break;
    }
}

static int adopt_same(const config_field *f, const model_config *a, const model_config *b)
{
    size_t off = f->offset - offsetof(job_config, model);
    const char *pa = (const char *)a + off, *pb = (const char *)b + off;
    switch (f->type) {
    case CFG_FLOAT: return *(const float *)pa == *(const float *)pb;
    case CFG_STRING: return strncmp(pa, pb, f->size) == 0;
    case CFG_U64: return *(const uint64_t *)pa == *(const uint64_t *)pb;
    default: return *(const int *)pa == *(const int *)pb;
    }
}

/* Run-time fields at load time: the job's (already adopted) value stands (tokenizer, init_std),
 * or may lower src's (max_seq of a RoPE model: positions are computed, so a shorter context is
 * the same model). */
static void adopt_runtime(model_config *out, const model_config *job)
{
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s", job->tokenizer);
    out->init_std = job->init_std;
    if (strcmp(out->positions, "rope") == 0 && job->max_seq > 0 && job->max_seq < out->max_seq)
        out->max_seq = job->max_seq;
}

int session_model_explicit(const unsigned char *explicit, const char *path)
{
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; explicit && i < n; i++)
        if (strcmp(f[i].path, path) == 0) return explicit[i];
    return 0;
}

int session_model_adopt(model_config *m, const model_config *src, const char *src_name,
                        const unsigned char *explicit)
{
    int n;
    const config_field *f = config_fields(&n);
    model_config out = *src;
    /* the source's preset name stays: a checkpoint's model was made from it (an HF folder has none) */
    out.init_std = m->init_std;
    if (session_model_explicit(explicit, "model.tokenizer")) snprintf(out.tokenizer, sizeof out.tokenizer, "%s", m->tokenizer);
    if (session_model_explicit(explicit, "model.max_seq") && strcmp(out.positions, "rope") == 0 && m->max_seq > 0 &&
        m->max_seq < out.max_seq)
        out.max_seq = m->max_seq;
    for (int i = 0; explicit && i < n; i++) {
        if (!explicit[i] || strncmp(f[i].path, "model.", 6) != 0 || strcmp(f[i].path, "model.preset") == 0) continue;
        if (adopt_same(&f[i], &out, m)) continue;
        char want[96], got[96];
        adopt_value(&f[i], m, want, sizeof want);
        adopt_value(&f[i], src, got, sizeof got);
        if (strcmp(f[i].path, "model.max_seq") == 0)
            return loom_fail("%s = %s (set by the job) disagrees with %s from %s (it may only be lowered, "
                             "and only for RoPE models)", f[i].path, want, got, src_name);
        return loom_fail("%s = %s (set by the job) disagrees with %s from %s: drop the setting or make it agree",
                         f[i].path, want, got, src_name);
    }
    *m = out;
    return 0;
}

int session_dir_tokenizer(const char *dir)
{
    char p[2100];
    struct stat sb;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (stat(p, &sb) == 0) return 1;
    snprintf(p, sizeof p, "%s/tokenizer.model", dir); /* a SentencePiece one alone (a "llama" GGUF's import) */
    return stat(p, &sb) == 0;
}

int session_model_from_hf(model_config *m, const char *dir, const unsigned char *explicit)
{
    hf_model *h = hf_open(dir);
    if (!h) return -1;
    model_config mc;
    char name[2100];
    snprintf(name, sizeof name, "%s/config.json", dir);
    int rc = config_model_from_json(&mc, hf_model_json(h)), own = session_dir_tokenizer(dir);
    if (rc) rc = loom_fail("%s: %s", dir, loom_error());
    else {
        /* the folder's own tokenizer, unless the job names one */
        if (own && strlen(dir) < sizeof mc.tokenizer) snprintf(mc.tokenizer, sizeof mc.tokenizer, "%s", dir);
        rc = session_model_adopt(m, &mc, name, explicit);
    }
    if (rc == 0)
        log_info("model from %s: %s, %d layers, d_model %d, %d/%d heads, vocab %d, max_seq %d, tokenizer %s", dir,
                 hf_arch_name(h), m->n_layer, m->d_model, m->n_head, m->n_kv_head, m->vocab, m->max_seq, m->tokenizer);
    hf_close(h);
    return rc;
}

int session_load_hf(session *s, const char *dir, const model_tensor *bt, int nb)
{
    hf_model *h = hf_open(dir);
    if (!h) return -1;
    model_config mc;
    int rc = config_model_from_json(&mc, hf_model_json(h)), n;
    if (rc == 0) adopt_runtime(&mc, &s->cfg->model);
    const char *field = rc ? NULL : config_model_diff(&mc, &s->cfg->model);
    if (rc == 0 && field) rc = loom_fail("%s: the folder's model differs from the job's in field 'model.%s'", dir, field + 6);
    hf_tensors(h, &n);
    if (rc == 0 && n != nb) rc = loom_fail("%s: %d tensors for a model of %d", dir, n, nb);
    size_t maxn = 1;
    for (int i = 0; i < nb; i++) maxn = bt[i].numel > maxn ? bt[i].numel : maxn;
    float *buf = rc == 0 ? malloc(maxn * sizeof(float)) : NULL;
    if (rc == 0 && !buf) rc = loom_fail("out of host memory for a %zu-float tensor", maxn);
    for (int i = 0; rc == 0 && i < nb; i++) {
        rc = hf_read(h, bt[i].name, buf, bt[i].numel);
        size_t lo = bt[i].offset, hi = lo + bt[i].numel;
        if (rc == 0) rc = s->model->lora.rank ? model_load_base_range(s->model, buf, lo, hi)
                                              : dp_load_params_range(s->dp, buf, lo, hi);
    }
    free(buf);
    hf_close(h);
    if (rc == 0) log_info("base model loaded from Hugging Face folder %s", dir);
    return rc;
}
