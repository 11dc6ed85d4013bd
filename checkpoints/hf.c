/* hf.c: opening a Hugging Face folder as a checkpoint (see hf.h): config.json -> loom's model
 * config through the family table, the weights checked tensor by tensor against the family's map,
 * and each loom tensor read back in loom's layout. The per-family knowledge is in hf_gpt2.c and
 * hf_llama.c; this file must never name an architecture's tensors. */
#include "checkpoints/hf_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

static const hf_family *const hf_families[] = {&hf_family_gpt2, &hf_family_llama, &hf_family_mistral,
                                               &hf_family_qwen2, &hf_family_qwen3};
#define HF_NFAM ((int)(sizeof hf_families / sizeof hf_families[0]))

struct hf_model {
    char dir[2048];
    const hf_family *fam;
    hf_dims dims;
    char *model_json;
    st_set *set;
    hf_map *maps;
    int nmaps;
    hf_loom_tensor *lt;     /* one per map entry, same order */
    float *scratch;         /* the HF tensor being converted, grown to the largest */
    size_t scratch_n;
    float *whole;           /* hf_read_range: the last loom tensor read whole (a layout change) */
    size_t whole_n;
    int whole_of;           /* its map index, -1 none */
};

int hf_is_folder(const char *path)
{
    char p[4096];
    struct stat sb;
    if (!path || !path[0] || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/config.json", path);
    return access(p, F_OK) == 0;
}

/* The shortest decimal that reads back as the same float: loom holds fp32 fields, and 1e-06
 * must go out as 1e-06, not 9.99999997e-07. */
static double hf_short(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if ((float)strtod(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

char *hf_dims_to_loom_json(const hf_dims *d)
{
    cJSON *o = cJSON_CreateObject();
#define NUM(k, v) cJSON_AddNumberToObject(o, k, v)
#define STR(k, v) cJSON_AddStringToObject(o, k, v)
#define BOOL(k, v) cJSON_AddBoolToObject(o, k, v)
    STR("preset", "");
    NUM("vocab", d->vocab); NUM("d_model", d->d_model); NUM("n_layer", d->n_layer);
    NUM("n_head", d->n_head); NUM("n_kv_head", d->n_kv_head); NUM("d_ff", d->d_ff);
    if (d->head_dim) NUM("head_dim", d->head_dim);
    STR("norm", d->layernorm ? "layernorm" : "rmsnorm");
    STR("mlp", d->swiglu ? "swiglu" : "gelu");
    STR("positions", d->rope ? "rope" : "learned");
    NUM("rope_theta", d->rope ? d->rope_theta : 10000);
    STR("rope_scaling", d->llama3 ? "llama3" : "none");
    if (d->llama3) {
        NUM("rope_factor", d->rope_factor); NUM("rope_low_freq_factor", d->rope_low);
        NUM("rope_high_freq_factor", d->rope_high); NUM("rope_original_max_seq", d->rope_original_max_seq);
    }
    BOOL("tied_embeddings", d->tied); BOOL("bias", d->bias);
    BOOL("qkv_bias", d->qkv_bias); BOOL("qk_norm", d->qk_norm);
    NUM("max_seq", d->max_seq); NUM("norm_eps", d->norm_eps);
#undef NUM
#undef STR
#undef BOOL
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) loom_fail("out of memory");
    return s;
}

int hf_dims_from_loom_json(const char *json, hf_dims *d)
{
    cJSON *o = cJSON_Parse(json);
    memset(d, 0, sizeof *d);
    const char *src = "checkpoint model config";
    int rc = cJSON_IsObject(o) ? 0 : loom_fail("%s: not a JSON object", src);
    double th = 10000, eps = 1e-5, f = 8, lo = 1, hi = 4;
    if (rc == 0 &&
        (hf_json_int(o, "vocab", -1, &d->vocab, src) || hf_json_int(o, "d_model", -1, &d->d_model, src) ||
         hf_json_int(o, "n_layer", -1, &d->n_layer, src) || hf_json_int(o, "n_head", -1, &d->n_head, src) ||
         hf_json_int(o, "n_kv_head", -1, &d->n_kv_head, src) || hf_json_int(o, "head_dim", 0, &d->head_dim, src) || hf_json_int(o, "d_ff", -1, &d->d_ff, src) ||
         hf_json_int(o, "max_seq", -1, &d->max_seq, src) || hf_json_num(o, "rope_theta", 10000, &th, src) ||
         hf_json_num(o, "norm_eps", 1e-5, &eps, src) || hf_json_bool(o, "tied_embeddings", 1, &d->tied, src) ||
         hf_json_bool(o, "bias", 1, &d->bias, src) || hf_json_bool(o, "qkv_bias", 0, &d->qkv_bias, src) ||
         hf_json_bool(o, "qk_norm", 0, &d->qk_norm, src) || hf_json_num(o, "rope_factor", 8, &f, src) ||
         hf_json_num(o, "rope_low_freq_factor", 1, &lo, src) || hf_json_num(o, "rope_high_freq_factor", 4, &hi, src) ||
         hf_json_int(o, "rope_original_max_seq", 8192, &d->rope_original_max_seq, src)))
        rc = -1;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(o, "norm"), *mlp = cJSON_GetObjectItemCaseSensitive(o, "mlp");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(o, "positions"), *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    d->layernorm = !cJSON_IsString(norm) || strcmp(norm->valuestring, "layernorm") == 0;
    d->swiglu = cJSON_IsString(mlp) && strcmp(mlp->valuestring, "swiglu") == 0;
    d->rope = cJSON_IsString(pos) && strcmp(pos->valuestring, "rope") == 0;
    d->llama3 = cJSON_IsString(rs) && strcmp(rs->valuestring, "llama3") == 0;
    d->rope_theta = hf_short((float)th);
    d->norm_eps = hf_short((float)eps);
    d->rope_factor = hf_short((float)f);
    d->rope_low = hf_short((float)lo);
    d->rope_high = hf_short((float)hi);
    cJSON_Delete(o);
    return rc;
}

/* --- opening --- */

static char *hf_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { loom_fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || n > (16l << 20)) loom_fail("%s: unreadable or larger than 16 MB", path);
    else if ((buf = malloc((size_t)n + 1)) && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[n] = '\0';
    else { free(buf); buf = NULL; loom_fail("%s: read failed", path); }
    fclose(f);
    return buf;
}

/* config.json -> its family and dims. */
static int hf_read_config(hf_model *h)
{
    char path[2100];
    snprintf(path, sizeof path, "%s/config.json", h->dir);
    char *txt = hf_slurp(path);
    if (!txt) return -1;
    cJSON *c = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(c)) { cJSON_Delete(c); return loom_fail("%s: not a JSON object", path); }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : "", *type = cJSON_IsString(mt) ? mt->valuestring : "";
    for (int i = 0; i < HF_NFAM && !h->fam; i++)
        if (strcmp(arch, hf_families[i]->arch) == 0 || (!arch[0] && strcmp(type, hf_families[i]->model_type) == 0))
            h->fam = hf_families[i];
    int rc = 0;
    if (!h->fam)
        rc = loom_fail("%s: architecture '%s' (model_type '%s') is not supported; supported: GPT2LMHeadModel, "
                       "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM",
                       path, arch[0] ? arch : "?", type[0] ? type : "?");
    if (rc == 0) rc = h->fam->parse(c, path, &h->dims);
    cJSON_Delete(c);
    return rc;
}

/* A tied model's saved head: nonzero unless it is byte for byte the embedding (maps[0]). */
static int hf_head_differs(const hf_model *h, const st_file *f, int k)
{
    st_file *ef;
    int ek;
    if (st_set_find(h->set, h->maps[0].hf, &ef, &ek)) return 1;
    const st_tensor *a = &f->t[k], *b = &ef->t[ek];
    if (a->dtype != b->dtype || a->end - a->begin != b->end - b->begin) return 1;
    return memcmp(f->map + f->data_start + a->begin, ef->map + ef->data_start + b->begin, a->end - a->begin) != 0;
}

/* The shape check and the accounting: every map entry finds its tensor with config.json's
 * shape, and every tensor in the files is mapped (or a known buffer, or the tied head's copy). */
static int hf_check(hf_model *h)
{
    for (int i = 0; i < h->nmaps; i++) {
        const hf_map *m = &h->maps[i];
        st_file *f;
        int k;
        if (st_set_find(h->set, m->hf, &f, &k))
            return loom_fail("%s: tensor %s is missing (%s with %d layers needs it)", h->dir, m->hf, h->fam->arch, h->dims.n_layer);
        const st_tensor *t = &f->t[k];
        int same = t->ndim == m->hf_ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == m->hf_shape[d];
        if (!same)
            return loom_fail("%s: tensor %s: shape [%lld%s%lld] (%d-d) disagrees with config.json's [%lld, %lld]", f->path, m->hf,
                             (long long)(t->ndim ? t->shape[0] : 0), t->ndim > 1 ? ", " : " ",
                             (long long)(t->ndim > 1 ? t->shape[1] : 0), t->ndim, (long long)m->hf_shape[0],
                             (long long)m->hf_shape[1]);
    }
    for (int fi = 0; fi < h->set->nfiles; fi++) {
        const st_file *f = h->set->files[fi];
        for (int k = 0; k < f->ntensors; k++) {
            const char *n = f->t[k].name;
            int tied_copy = h->dims.tied && strcmp(n, "lm_head.weight") == 0;
            if (tied_copy && hf_head_differs(h, f, k))
                return loom_fail("%s: tensor lm_head.weight differs from the embedding, but config.json says "
                                 "tie_word_embeddings", f->path);
            int used = tied_copy || h->fam->is_buffer(n);
            for (int i = 0; !used && i < h->nmaps; i++) used = strcmp(h->maps[i].hf, n) == 0;
            if (!used)
                return loom_fail("%s: tensor %s is not used by %s as config.json describes it (unexpected tensor)",
                                 f->path, n, h->fam->arch);
        }
    }
    return 0;
}

hf_model *hf_open(const char *dir)
{
    hf_model *h = calloc(1, sizeof *h);
    if (!h) { loom_fail("out of memory"); return NULL; }
    h->whole_of = -1;
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    char cfg[2100];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (access(cfg, F_OK) != 0) { loom_fail("%s: no config.json (not a Hugging Face model folder)", dir); goto fail; }
    if (hf_read_config(h) || !(h->set = st_set_open(dir))) goto fail;
    st_file *f;
    int k;
    const char *prefix = st_set_find(h->set, "transformer.wte.weight", &f, &k) == 0 ? "transformer." : "";
    if (h->fam->map(&h->dims, prefix, &h->maps, &h->nmaps) || hf_check(h)) goto fail;
    if (!(h->model_json = hf_dims_to_loom_json(&h->dims))) goto fail;
    h->lt = calloc((size_t)h->nmaps, sizeof *h->lt);
    if (!h->lt) { loom_fail("out of memory"); goto fail; }
    for (int i = 0; i < h->nmaps; i++) {
        hf_loom_tensor *t = &h->lt[i];
        snprintf(t->name, sizeof t->name, "%s", h->maps[i].loom);
        t->ndim = h->maps[i].ndim;
        t->shape[0] = h->maps[i].shape[0];
        t->shape[1] = h->maps[i].shape[1];
        t->numel = (size_t)t->shape[0] * (size_t)(t->ndim > 1 ? t->shape[1] : 1);
    }
    return h;
fail:
    hf_close(h);
    return NULL;
}

void hf_close(hf_model *h)
{
    if (!h) return;
    st_set_close(h->set);
    free(h->maps);
    free(h->lt);
    free(h->model_json);
    free(h->scratch);
    free(h->whole);
    free(h);
}

const char *hf_model_json(const hf_model *h) { return h->model_json; }
const char *hf_arch_name(const hf_model *h) { return h->fam->arch; }

const hf_loom_tensor *hf_tensors(const hf_model *h, int *n)
{
    *n = h->nmaps;
    return h->lt;
}

void hf_convert(const hf_map *m, float *loom, float *hf, int back)
{
    size_t rows = (size_t)m->shape[0], cols = m->ndim > 1 ? (size_t)m->shape[1] : 1;
    if (m->op == HF_T) { /* hf (cols_in, nparts * rows) -> loom (rows, cols_in) */
        size_t R = (size_t)m->hf_shape[0], W = (size_t)m->hf_shape[1], off = (size_t)m->part * rows;
        for (size_t r = 0; r < R; r++)
            for (size_t o = 0; o < rows; o++) {
                if (back) hf[r * W + off + o] = loom[o * R + r];
                else loom[o * R + r] = hf[r * W + off + o];
            }
    } else if (m->op == HF_ROPE) { /* per head: loom row 2i <- hf row i, 2i+1 <- i + D/2 */
        size_t D = (size_t)m->head_dim, half = D / 2;
        for (size_t r = 0; r < rows; r++) {
            size_t h = r / D, j = r % D, src = h * D + (j % 2 ? half + j / 2 : j / 2);
            if (back) memcpy(hf + src * cols, loom + r * cols, cols * sizeof(float));
            else memcpy(loom + r * cols, hf + src * cols, cols * sizeof(float));
        }
    } else { /* copy, or part `part` of a fused 1-d tensor */
        size_t n = rows * cols, off = (size_t)m->part * n;
        if (back) memcpy(hf + off, loom, n * sizeof(float));
        else memcpy(loom, hf + off, n * sizeof(float));
    }
}

/* Map index of loom tensor `name` (numel elements) and its HF tensor; -1 + loom_fail. */
static int hf_locate(hf_model *h, const char *name, size_t numel, st_file **f, int *k)
{
    int i = 0;
    while (i < h->nmaps && strcmp(h->maps[i].loom, name) != 0) i++;
    if (i == h->nmaps) return loom_fail("%s: loom tensor %s has no counterpart in %s", h->dir, name, h->fam->arch);
    if (h->lt[i].numel != numel)
        return loom_fail("%s: loom tensor %s: %zu elements from the folder, %zu in the model", h->dir, name, h->lt[i].numel, numel);
    if (st_set_find(h->set, h->maps[i].hf, f, k)) return loom_fail("%s: tensor %s vanished", h->dir, h->maps[i].hf);
    return i;
}

int hf_read_range(hf_model *h, const char *name, size_t numel, size_t e0, size_t n, float *out)
{
    st_file *f;
    int k, i = hf_locate(h, name, numel, &f, &k);
    if (i < 0) return -1;
    if (e0 > numel || n > numel - e0) return loom_fail("%s: loom tensor %s: no elements [%zu, %zu)", h->dir, name, e0, e0 + n);
    if (hf_is_copy(&h->maps[i]) && f->t[k].numel == numel) return st_read_f32_range(f, k, e0, n, out);
    /* a layout change: the whole loom tensor once (at its first piece), then pieces of it */
    if (h->whole_of != i || e0 == 0) {
        if (numel > h->whole_n) {
            float *w = realloc(h->whole, numel * sizeof(float));
            if (!w) return loom_fail("out of memory for tensor %s (%zu floats)", name, numel);
            h->whole = w;
            h->whole_n = numel;
        }
        h->whole_of = -1;
        if (hf_read(h, name, h->whole, numel)) return -1;
        h->whole_of = i;
    }
    memcpy(out, h->whole + e0, n * sizeof(float));
    return 0;
}

int hf_read(hf_model *h, const char *name, float *out, size_t numel)
{
    st_file *f;
    int k, i = hf_locate(h, name, numel, &f, &k);
    if (i < 0) return -1;
    size_t hn = f->t[k].numel;
    /* the same layout: straight into out (no scratch pass, no scratch the size of the embedding) */
    if (hf_is_copy(&h->maps[i]) && hn == numel) return st_read_f32(f, k, out, hn);
    if (hn > h->scratch_n) {
        float *s = realloc(h->scratch, (hn ? hn : 1) * sizeof(float));
        if (!s) return loom_fail("out of memory for tensor %s (%zu floats)", h->maps[i].hf, hn);
        h->scratch = s;
        h->scratch_n = hn;
    }
    if (st_read_f32(f, k, h->scratch, hn)) return -1;
    hf_convert(&h->maps[i], out, h->scratch, 0);
    return 0;
}
