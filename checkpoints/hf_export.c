/* hf_export.c: loom tensors -> a Hugging Face folder (config.json + safetensors + the tokenizer
 * files the model came with) or a PEFT adapter folder (see hf.h). The family's map run backwards:
 * each HF tensor is assembled from its loom tensors one at a time, so memory is one HF tensor
 * (or a piece of one: a tensor whose layout does not change streams through when the caller can).
 * Must never write a tensor name or layout of its own: the maps in hf_gpt2.c / hf_llama.c decide. */
#include "checkpoints/hf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

static const char *const hf_side_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "tokenizer.model", "added_tokens.json", "generation_config.json", "chat_template.jinja", NULL};

static int hf_copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    int rc = in && out ? 0 : loom_fail("cannot copy %s to %s: %s", src, dst, strerror(errno));
    char buf[65536];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = loom_fail("%s: write failed: %s", dst, strerror(errno));
    if (in) fclose(in);
    if (out && fclose(out) != 0 && rc == 0) rc = loom_fail("%s: write failed", dst);
    return rc;
}

int hf_copy_side_files(const char *src_dir, const char *dst_dir, int with_config)
{
    char s[4096], d[4096];
    for (int i = 0; hf_side_files[i]; i++) {
        snprintf(s, sizeof s, "%s/%s", src_dir, hf_side_files[i]);
        snprintf(d, sizeof d, "%s/%s", dst_dir, hf_side_files[i]);
        if (access(s, R_OK) == 0 && hf_copy_file(s, d)) return -1;
    }
    if (with_config) { /* the source's config.json, kept for export (it carries fields loom has no use for) */
        snprintf(s, sizeof s, "%s/config.json", src_dir);
        snprintf(d, sizeof d, "%s/hf_config.json", dst_dir);
        if (access(s, R_OK) == 0 && hf_copy_file(s, d)) return -1;
    }
    return 0;
}

/* The source's config (src_dir/config.json, else src_dir/hf_config.json), NULL when none. */
static cJSON *hf_source_config(const char *src_dir)
{
    if (!src_dir) return NULL;
    static const char *const names[] = {"config.json", "hf_config.json"};
    char p[4096];
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", src_dir, names[i]);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        char *buf = malloc(1 << 20);
        size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        cJSON *c = NULL;
        if (buf) { buf[n] = '\0'; c = cJSON_Parse(buf); }
        free(buf);
        if (cJSON_IsObject(c)) return c;
        cJSON_Delete(c);
    }
    return NULL;
}

/* Which family writes dims d: the source's when it describes the same kind of model (so a
 * Mistral stays a Mistral), else the one loom's options imply. */
static const hf_family *hf_pick_family(const hf_dims *d, const cJSON *src)
{
    const hf_family *fam = !d->swiglu ? &hf_family_gpt2 : d->qk_norm ? &hf_family_qwen3
                         : d->qkv_bias ? &hf_family_qwen2 : &hf_family_llama;
    const cJSON *archs = src ? cJSON_GetObjectItemCaseSensitive(src, "architectures") : NULL;
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (cJSON_IsString(a0) && strcmp(a0->valuestring, hf_family_mistral.arch) == 0 && fam == &hf_family_llama)
        return &hf_family_mistral;
    return fam;
}

static int hf_write_json(const char *path, cJSON *o)
{
    char *txt = cJSON_Print(o);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int rc = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF ? 0 : loom_fail("%s: cannot write", path);
    if (f && fclose(f) != 0) rc = loom_fail("%s: cannot write", path);
    free(txt);
    return rc;
}

/* The HF tensors of a map in first-seen order, each assembled from its loom parts. */
typedef struct hf_out {
    const hf_map *maps;
    int nmaps;
    int *first;           /* index into maps of each HF tensor's first entry */
    char *single;         /* 1: the HF tensor is one loom tensor, unchanged (hf_is_copy) */
    st_wtensor *wt;
    int n;
    hf_get_fn get;
    hf_pieces_fn pieces;  /* NULL: every tensor through get */
    void *ctx;
    float *buf;
    size_t cap;
} hf_out;


static const float *hf_out_fetch(void *ctx, int k)
{
    hf_out *o = ctx;
    const hf_map *m0 = &o->maps[o->first[k]];
    if (o->single[k]) { /* the loom tensor is the HF tensor: hand it over as it is */
        const float *x = o->get(o->ctx, m0->loom);
        if (!x) loom_fail("export: the checkpoint has no tensor %s (for %s)", m0->loom, m0->hf);
        return x;
    }
    size_t n = (size_t)m0->hf_shape[0] * (size_t)(m0->hf_ndim > 1 ? m0->hf_shape[1] : 1);
    if (n > o->cap) {
        float *b = realloc(o->buf, n * sizeof(float));
        if (!b) { loom_fail("out of memory for tensor %s", m0->hf); return NULL; }
        o->buf = b;
        o->cap = n;
    }
    for (int i = o->first[k]; i < o->nmaps; i++) {
        if (strcmp(o->maps[i].hf, m0->hf) != 0) continue;
        const float *x = o->get(o->ctx, o->maps[i].loom);
        if (!x) { loom_fail("export: the checkpoint has no tensor %s (for %s)", o->maps[i].loom, m0->hf); return NULL; }
        hf_convert(&o->maps[i], (float *)x, o->buf, 1);
    }
    return o->buf;
}

static int hf_put_sink(void *sink, const float *x, size_t n) { return st_sink_put(sink, x, n); }

/* HF tensor k into the file: in pieces when it is one loom tensor unchanged and the caller reads
 * pieces, else assembled whole. */
static int hf_out_stream(void *ctx, int k, st_sink *sink)
{
    hf_out *o = ctx;
    if (o->pieces && o->single[k]) return o->pieces(o->ctx, o->maps[o->first[k]].loom, hf_put_sink, sink);
    const float *x = hf_out_fetch(ctx, k);
    size_t n = 1;
    for (int d = 0; d < o->wt[k].ndim; d++) n *= (size_t)o->wt[k].shape[d];
    return x ? st_sink_put(sink, x, n) : -1;
}

static int hf_out_plan(hf_out *o)
{
    o->first = calloc((size_t)o->nmaps, sizeof *o->first);
    o->wt = calloc((size_t)o->nmaps, sizeof *o->wt);
    o->single = calloc((size_t)o->nmaps, 1);
    if (!o->first || !o->wt || !o->single) return loom_fail("out of memory");
    for (int i = 0; i < o->nmaps; i++) {
        int seen = -1;
        for (int k = 0; k < o->n && seen < 0; k++) seen = strcmp(o->wt[k].name, o->maps[i].hf) == 0 ? k : -1;
        if (seen >= 0) {
            o->single[seen] = 0; /* assembled from several loom tensors */
            continue;
        }
        o->single[o->n] = (char)hf_is_copy(&o->maps[i]);
        o->first[o->n] = i;
        st_wtensor *w = &o->wt[o->n++];
        w->name = o->maps[i].hf;
        w->ndim = o->maps[i].hf_ndim;
        w->shape[0] = o->maps[i].hf_shape[0];
        w->shape[1] = o->maps[i].hf_shape[1];
    }
    return 0;
}

static const char *hf_torch_dtype(st_dtype d) { return d == ST_F32 ? "float32" : d == ST_BF16 ? "bfloat16" : "float16"; }

int hf_export(const char *out_dir, const char *model_json, hf_get_fn get, void *ctx,
              st_dtype dtype, const char *src_dir, uint64_t max_shard_bytes)
{
    return hf_export_pieces(out_dir, model_json, get, NULL, ctx, dtype, src_dir, max_shard_bytes);
}

int hf_export_pieces(const char *out_dir, const char *model_json, hf_get_fn get, hf_pieces_fn pieces, void *ctx,
                     st_dtype dtype, const char *src_dir, uint64_t max_shard_bytes)
{
    hf_dims d;
    if (hf_dims_from_loom_json(model_json, &d)) return -1;
    cJSON *cfg = hf_source_config(src_dir);
    const hf_family *fam = hf_pick_family(&d, cfg);
    if (cfg) { /* the source's fields stay, loom's overwrite; the architecture is the one written */
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
        if (!cJSON_IsString(mt) || strcmp(mt->valuestring, fam->model_type) != 0) { cJSON_Delete(cfg); cfg = NULL; }
    }
    if (!cfg) {
        cfg = cJSON_CreateObject();
        cJSON_AddStringToObject(cfg, "model_type", fam->model_type);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "architectures");
    cJSON *arr = cJSON_AddArrayToObject(cfg, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString(fam->arch));
    fam->write_config(&d, cfg);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "torch_dtype"); /* transformers 4's name */
    cJSON_AddStringToObject(cfg, "torch_dtype", hf_torch_dtype(dtype));
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "dtype");       /* transformers 5's */
    cJSON_AddStringToObject(cfg, "dtype", hf_torch_dtype(dtype));
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    int rc = hf_write_json(path, cfg);
    cJSON_Delete(cfg);
    hf_out o = {0};
    o.get = get;
    o.pieces = pieces;
    o.ctx = ctx;
    if (rc == 0) rc = fam->map(&d, fam == &hf_family_gpt2 ? "transformer." : "", (hf_map **)&o.maps, &o.nmaps);
    if (rc == 0) rc = hf_out_plan(&o);
    if (rc == 0) rc = st_write_dir_stream(out_dir, "model", dtype, o.wt, o.n, hf_out_stream, &o, max_shard_bytes);
    if (rc == 0 && src_dir) rc = hf_copy_side_files(src_dir, out_dir, 0);
    if (rc == 0) log_info("exported %s (%d tensors, %s) to %s", fam->arch, o.n, hf_torch_dtype(dtype), out_dir);
    free((void *)o.maps);
    free(o.first);
    free(o.single);
    free(o.wt);
    free(o.buf);
    return rc;
}
