/* needle.c: reading Needle's base checkpoints and LoRA adapters (see needle.h): the safetensors
 * metadata, format_version and config checked as run.py:load_checkpoint does, mtp_* tensors dropped,
 * every other tensor matched to the config's shapes; an adapter's A/B pairs and its metadata. A
 * base `loom import` made a loom checkpoint of is read through needle_ckpt.c and checked the same.
 * Must never accept a tensor it cannot place, nor let a lying file crash it. */
#include "checkpoints/needle.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/ckpt_crc.h"
#include "checkpoints/needle_internal.h"

/* The header's __metadata__ strings in file order into *keys / *vals (malloc'd). */
static int needle_meta_read(const st_file *st, int *n, char ***keys, char ***vals)
{
    cJSON *root = cJSON_ParseWithLength((const char *)st->map + 8, st->data_start - 8);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    int rc = 0, cnt = cJSON_IsObject(m) ? cJSON_GetArraySize(m) : 0;
    *n = 0;
    *keys = calloc((size_t)cnt + 1, sizeof **keys);
    *vals = calloc((size_t)cnt + 1, sizeof **vals);
    if (!*keys || !*vals) rc = loom_fail("out of memory");
    if (rc == 0 && m && !cJSON_IsObject(m)) rc = loom_fail("%s: __metadata__ is not an object", st->path);
    for (const cJSON *e = m ? m->child : NULL; rc == 0 && e; e = e->next) {
        if (!cJSON_IsString(e)) { rc = loom_fail("%s: metadata %s: not a string", st->path, e->string); break; }
        (*keys)[*n] = strdup(e->string);
        (*vals)[*n] = strdup(e->valuestring);
        (*n)++;
        if (!(*keys)[*n - 1] || !(*vals)[*n - 1]) rc = loom_fail("out of memory");
    }
    cJSON_Delete(root);
    return rc;
}

static const char *needle_meta_get(int n, char **keys, char **vals, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return vals[i];
    return NULL;
}

/* Python's int(text) == 2 (checkpoints.py:70, run.py:27): digits with optional blanks around. */
static int needle_version_ok(const char *v)
{
    if (!v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    return end != v && *end == '\0' && x == 2;
}

/* Each kept tensor against the expected list: known, its shape, and nothing required missing. */
static int needle_check_tensors(needle_file *f, const needle_shape *ex, int nex)
{
    const char *p = f->st->path;
    char *seen = calloc((size_t)nex + 1, 1);
    if (!seen) return loom_fail("out of memory");
    int rc = 0;
    for (int i = 0; rc == 0 && i < f->n; i++) {
        const st_tensor *t = needle_file_tensor(f, i);
        int k = 0;
        while (k < nex && strcmp(ex[k].path, t->name) != 0) k++;
        if (k == nex && strncmp(t->name, "ab_scales", 9) == 0)
            rc = loom_fail("%s: tensor %s: AB quantisation scales (quantize.py:154) are not supported", p, t->name);
        else if (k == nex)
            rc = loom_fail("%s: tensor %s: not a parameter of a Needle 3 model with this config", p, t->name);
        else {
            int same = t->ndim == ex[k].ndim;
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == ex[k].shape[d];
            char want[96] = "[", got[96] = "[";
            for (int d = 0; d < ex[k].ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)ex[k].shape[d]);
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
            if (!same) rc = loom_fail("%s: tensor %s: shape %s], the config implies %s]", p, t->name, got, want);
            seen[k] = 1;
        }
    }
    /* a probe head is all or nothing: the head of each optional tensor is present if any is */
    for (int k = 0; rc == 0 && k < nex; k++) {
        if (seen[k] || ex[k].optional == 2) continue;
        int head = 0;
        size_t pl = strcspn(ex[k].path, "/");
        for (int j = 0; ex[k].optional == 1 && j < nex; j++)
            head |= seen[j] && ex[j].optional && strncmp(ex[j].path, ex[k].path, pl) == 0 && ex[j].path[pl] == '/';
        if (ex[k].optional == 0 || head) rc = loom_fail("%s: tensor %s is missing", p, ex[k].path);
    }
    free(seen);
    return rc;
}

/* needle_check_tensors against the tensors f's config implies. */
static int needle_check_config_tensors(needle_file *f)
{
    needle_shape *ex;
    int nex;
    if (needle_expected(&f->cfg, &ex, &nex)) return -1;
    int rc = needle_check_tensors(f, ex, nex);
    free(ex);
    return rc;
}

/* The metadata (read by the caller: the file's header, or the import's record) and the tensors. */
static int needle_open_checks(needle_file *f)
{
    const char *p = f->st->path;
    const char *v = needle_file_meta(f, "format_version");
    if (!needle_version_ok(v))
        return loom_fail("%s: metadata format_version: %s%s%s, not 2 (not a Needle 3 checkpoint; run.py:27)", p,
                         v ? "'" : "", v ? v : "missing", v ? "'" : "");
    const char *cfg = needle_file_meta(f, "config");
    if (needle_config_parse(&f->cfg, cfg && cfg[0] ? cfg : "{}", p)) return -1;
    f->idx = malloc(((size_t)f->st->ntensors + 1) * sizeof *f->idx);
    if (!f->idx) return loom_fail("out of memory");
    for (int i = 0; i < f->st->ntensors; i++)
        if (strncmp(f->st->t[i].name, "mtp_", 4) != 0) f->idx[f->n++] = i;   /* run.py:39 */
    return needle_check_config_tensors(f);
}

needle_file *needle_open(const char *path)
{
    needle_file *f = calloc(1, sizeof *f);
    if (!f) { loom_fail("out of memory"); return NULL; }
    f->whole_i = -1;
    int rc = needle_ckpt_is(path) ? needle_ckpt_open(f, path)
             : !(f->st = st_open(path)) ? -1 : needle_meta_read(f->st, &f->nmeta, &f->mkey, &f->mval);
    if (rc || needle_open_checks(f)) {
        needle_close(f);
        return NULL;
    }
    return f;
}

void needle_close(needle_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->nmeta; i++) free(f->mkey[i]), free(f->mval[i]);
    free(f->mkey);
    free(f->mval);
    free(f->idx);
    for (int i = 0; f->cut && i < f->n; i++) free(f->cut[i].t.name), free(f->cut[i].bytes);
    free(f->cut);
    for (int j = 0; f->own && j < f->st->ntensors; j++) free(f->own[j]);
    free(f->own);
    free(f->whole);
    needle_ckpt_close(f->ck);
    st_close(f->st);
    free(f);
}

const needle_config *needle_file_config(const needle_file *f) { return &f->cfg; }
const char *needle_lora_path(int t)
{
    static const char *const path[NEEDLE_LORA_TARGETS] = {
        "stack/layers/block/self_attn/q_proj/kernel", "stack/layers/block/self_attn/k_proj/kernel",
        "stack/layers/block/self_attn/v_proj/kernel", "stack/layers/block/self_attn/gate_proj/kernel",
        "stack/layers/block/self_attn/out_proj/kernel"};
    return t >= 0 && t < NEEDLE_LORA_TARGETS ? path[t] : NULL;
}

void needle_lora_dims(const needle_geometry *g, int d_model, int t, int *in, int *out)
{
    const int outs[NEEDLE_LORA_TARGETS] = {g->q_dim, g->k_dim, g->v_dim, g->attn_dim, d_model};
    *in = t == NEEDLE_LORA_TARGETS - 1 ? g->attn_dim : d_model;
    *out = outs[t];
}

uint64_t needle_file_digest(const needle_file *f)
{
    if (f->ck) return needle_ckpt_digest(f->ck); /* the imported file's: the same base */
    /* CRC32C of the whole mapped file (header with its config, every byte of data: mtp_ tensors
     * too, they are part of the file the user named), its length in the high half */
    uint32_t crc = ckpt_crc32c(0, f->st->map, f->st->size);
    return ((uint64_t)(f->st->size & 0xffffffffu) << 32 | crc) | 1; /* never 0 (= none) */
}

const char *needle_file_meta(const needle_file *f, const char *key) { return needle_meta_get(f->nmeta, f->mkey, f->mval, key); }
int needle_file_count(const needle_file *f) { return f->n; }
const st_tensor *needle_file_tensor(const needle_file *f, int i) { return f->cut ? &f->cut[i].t : &f->st->t[f->idx[i]]; }

int needle_file_meta_count(const needle_file *f) { return f->nmeta; }

const char *needle_file_meta_at(const needle_file *f, int i, const char **value)
{
    *value = f->mval[i];
    return f->mkey[i];
}

int needle_file_find(const needle_file *f, const char *path)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(needle_file_tensor(f, i)->name, path) == 0) return i;
    return -1;
}

/* A cut's geometry: the stored tensor as outer x rows x inner elements around the cut axis. */
static void needle_cut_dims(const needle_file *f, int i, size_t *outer, int64_t *rows, size_t *inner)
{
    const st_tensor *s = &f->st->t[f->idx[i]];
    const int ax = f->cut[i].axis;
    *outer = 1, *inner = 1, *rows = s->shape[ax];
    for (int d = 0; d < ax; d++) *outer *= (size_t)s->shape[d];
    for (int d = ax + 1; d < s->ndim; d++) *inner *= (size_t)s->shape[d];
}

/* Stored tensor j (of f->st) whole as fp32: from the mapped file, or from the checkpoint. */
static int needle_src_read(needle_file *f, int j, float *out, size_t numel)
{
    return f->ck ? needle_ckpt_read(f->ck, j, out, numel) : st_read_f32(f->st, j, out, numel);
}

/* Stored tensor j's bytes in its dtype: the mapping, or (an imported checkpoint) a copy narrowed
 * from its fp32 values, kept until needle_close. NULL + loom_fail. */
static const uint8_t *needle_src_bytes(needle_file *f, int j)
{
    const st_tensor *t = &f->st->t[j];
    if (!f->ck) return f->st->map + f->st->data_start + t->begin;
    if (!f->own && !(f->own = calloc((size_t)f->st->ntensors + 1, sizeof *f->own)))
        return loom_fail("%s: out of memory", f->st->path), NULL;
    if (f->own[j]) return f->own[j];
    float *x = malloc(t->numel ? t->numel * sizeof(float) : 1);
    void *b = malloc(t->end > t->begin ? (size_t)(t->end - t->begin) : 1);
    int rc = x && b ? 0 : loom_fail("%s: tensor %s: out of memory", f->st->path, t->name);
    if (rc == 0) rc = needle_ckpt_read(f->ck, j, x, t->numel);
    if (rc == 0) rc = needle_ckpt_narrow(x, t->numel, t->dtype, b, f->st->path, t->name);
    free(x);
    if (rc) return free(b), NULL;
    return f->own[j] = b;
}

int needle_file_read(needle_file *f, int i, float *out, size_t numel)
{
    if (i < 0 || i >= f->n) return loom_fail("%s: no tensor %d", f->st->path, i);
    if (!f->cut || f->cut[i].axis < 0) return needle_src_read(f, f->idx[i], out, numel);
    const needle_cut *c = &f->cut[i];
    const st_tensor *s = &f->st->t[f->idx[i]];
    if (numel != c->t.numel) return loom_fail("%s: tensor %s: read of %zu values, it has %zu", f->st->path, c->t.name, numel, c->t.numel);
    size_t outer, inner;
    int64_t rows;
    needle_cut_dims(f, i, &outer, &rows, &inner);
    /* a checkpoint's tensor is read whole (its reader goes front to back), a mapped one by rows */
    float *all = f->ck ? malloc(s->numel ? s->numel * sizeof(float) : 1) : NULL;
    if (f->ck && !all) return loom_fail("%s: tensor %s: out of memory", f->st->path, s->name);
    int rc = f->ck ? needle_src_read(f, f->idx[i], all, s->numel) : 0;
    for (size_t o = 0; rc == 0 && o < outer; o++)
        for (int j = 0; rc == 0 && j < c->nrows; j++, out += inner) {
            const size_t e0 = (o * (size_t)rows + (size_t)c->rows[j]) * inner;
            if (all) memcpy(out, all + e0, inner * sizeof(float));
            else rc = st_read_f32_range(f->st, f->idx[i], e0, inner, out);
        }
    free(all);
    return rc;
}

int needle_file_read_range(needle_file *f, int i, size_t e0, size_t n, float *out)
{
    if (i < 0 || i >= f->n) return loom_fail("%s: no tensor %d", f->st->path, i);
    const st_tensor *t = needle_file_tensor(f, i);
    if (e0 > t->numel || n > t->numel - e0)
        return loom_fail("%s: tensor %s: elements [%zu, %zu) past its %zu", f->st->path, t->name, e0, e0 + n, t->numel);
    if (!f->ck && (!f->cut || f->cut[i].axis < 0)) return st_read_f32_range(f->st, f->idx[i], e0, n, out);
    if (f->whole_i != i) {
        free(f->whole);
        f->whole_i = -1;
        if (!(f->whole = malloc(t->numel ? t->numel * sizeof(float) : 1)))
            return loom_fail("%s: tensor %s: out of memory", f->st->path, t->name);
        if (needle_file_read(f, i, f->whole, t->numel)) return -1;
        f->whole_i = i;
    }
    memcpy(out, f->whole + e0, n * sizeof(float));
    if (e0 + n == t->numel) free(f->whole), f->whole = NULL, f->whole_i = -1; /* read to its end: released */
    return 0;
}

const void *needle_file_bytes(needle_file *f, int i, size_t *nbytes)
{
    const st_tensor *t = &f->st->t[f->idx[i]];
    *nbytes = (size_t)(t->end - t->begin);
    needle_cut *c = f->cut && f->cut[i].axis >= 0 ? &f->cut[i] : NULL;
    size_t outer = 1, inner = 1;
    int64_t rows = 0;
    if (c) needle_cut_dims(f, i, &outer, &rows, &inner);
    const size_t row = inner * st_dtype_size(t->dtype);
    if (c) *nbytes = outer * (size_t)c->nrows * row;
    if (c && c->bytes) return c->bytes;
    const uint8_t *src = needle_src_bytes(f, f->idx[i]);
    if (!src || !c) return src;
    if (!(c->bytes = malloc(*nbytes ? *nbytes : 1))) return loom_fail("%s: out of memory", f->st->path), NULL;
    uint8_t *dst = c->bytes;
    for (size_t o = 0; o < outer; o++)
        for (int j = 0; j < c->nrows; j++, dst += row) memcpy(dst, src + (o * (size_t)rows + (size_t)c->rows[j]) * row, row);
    if (f->ck) free(f->own[f->idx[i]]), f->own[f->idx[i]] = NULL; /* the cut is what the caller keeps */
    return c->bytes;
}

/* --- a ladder rung of a base (needle.h; ladder_slice, architecture.py:199-224) --- */

/* How rung f cuts kept tensor i (f->cfg still the base's): its name and cut; 0 kept, 1 dropped. */
static int needle_cut_plan(needle_file *f, int i, int depth, needle_cut *c)
{
    const st_tensor *s = &f->st->t[f->idx[i]];
    static const char *const heads[] = {"embedding_head/", "confidence_head/", "router_head/"};
    char name[192];
    snprintf(name, sizeof name, "%s", s->name);
    c->axis = -1;
    if (strncmp(s->name, "stack/", 6) == 0 && strncmp(s->name, "stack/final_norm/", 17) != 0)
        c->axis = 0, c->nrows = depth, c->rows = f->sel;
    for (int h = 0; h < 3; h++) {
        const char *leaf = strncmp(s->name, heads[h], strlen(heads[h])) == 0 ? s->name + strlen(heads[h]) : NULL;
        if (leaf && (!strcmp(leaf, "probes") || !strcmp(leaf, "gain") || !strcmp(leaf, "row_bias")))
            c->axis = !strcmp(leaf, "row_bias"), c->nrows = depth + 1, c->rows = f->hrows;
    }
    int site;
    char rest[160];
    if (sscanf(s->name, "engrams_%d/%159s", &site, rest) == 2 && site >= 0 && site < f->cfg.engram_layers.n) {
        int kept = -1, before = 0;
        for (int j = 0; j < depth; j++) {
            kept = f->sel[j] == f->cfg.engram_layers.v[site] ? j : kept;
            for (int e = 0; e < site; e++) before += f->sel[j] == f->cfg.engram_layers.v[e];
        }
        if (kept < 0) return 1;
        snprintf(name, sizeof name, "engrams_%d/%s", before, rest);
    }
    c->t = *s;
    if (c->axis >= 0) {
        c->t.shape[c->axis] = c->nrows;
        c->t.numel = 1;
        for (int d = 0; d < c->t.ndim; d++) c->t.numel *= (size_t)c->t.shape[d];
    }
    return (c->t.name = strdup(name)) ? 0 : loom_fail("out of memory");
}

static int needle_rung_cut(needle_file *f, int depth)
{
    needle_config rc;
    if (needle_ladder_layers(&f->cfg, depth, f->sel) || needle_ladder_config(&f->cfg, depth, &rc)) return -1;
    f->hrows[0] = 0;
    for (int j = 0; j < depth; j++) f->hrows[j + 1] = f->sel[j] + 1;
    if (!(f->cut = calloc((size_t)f->n + 1, sizeof *f->cut))) return loom_fail("out of memory");
    int n = 0;
    for (int i = 0; i < f->n; i++) {
        int r = needle_cut_plan(f, i, depth, &f->cut[n]);
        if (r < 0) return -1;
        if (r == 0) f->idx[n++] = f->idx[i];
    }
    f->n = n;
    f->cfg = rc;
    char *json = needle_config_json(&rc);
    if (!json) return -1;
    for (int k = 0; k < f->nmeta; k++)
        if (!strcmp(f->mkey[k], "config")) free(f->mval[k]), f->mval[k] = json, json = NULL;
    free(json);
    return needle_check_config_tensors(f); /* what ladder_slice leaves must be the rung's tensors */
}

needle_file *needle_open_rung(const char *path, int depth)
{
    needle_file *f = needle_open(path);
    if (!f || depth == 0 || depth == f->cfg.num_layers) return f;
    if (needle_rung_cut(f, depth)) {
        loom_fail("%s: %s", path, loom_error());
        needle_close(f);
        return NULL;
    }
    return f;
}

/* --- adapters --- */

const char *const needle_adapter_keys[6] = {"scale", "base", "rank", "seed", "pieces", "languages"};

/* "lora/<path>/A" -> path into out, 'A' or 'B' returned; 0 for any other name. */
static int needle_lora_name(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    if (strncmp(name, "lora/", 5) != 0 || n < 8 || name[n - 2] != '/' || (name[n - 1] != 'A' && name[n - 1] != 'B') ||
        n - 7 >= cap)
        return 0;
    memcpy(out, name + 5, n - 7);
    out[n - 7] = '\0';
    return name[n - 1];
}

/* A [.., in, r] and B [.., r, out]: the same leading dims, the same r. */
static int needle_lora_shapes(const needle_adapter *a, const needle_lora *l, int *rank)
{
    const st_tensor *A = &a->st->t[l->a], *B = &a->st->t[l->b];
    const char *p = a->st->path;
    int ok = A->ndim >= 2 && A->ndim == B->ndim;
    for (int d = 0; ok && d < A->ndim - 2; d++) ok = A->shape[d] == B->shape[d];
    if (!ok) return loom_fail("%s: tensor lora/%s/A and /B: shapes do not pair as [.., in, r] and [.., r, out]", p, l->path);
    int64_t r = A->shape[A->ndim - 1];
    if (B->shape[B->ndim - 2] != r)
        return loom_fail("%s: tensor lora/%s/B: rank %lld, A has %lld", p, l->path, (long long)B->shape[B->ndim - 2], (long long)r);
    if (*rank >= 0 && r != *rank)
        return loom_fail("%s: tensor lora/%s/A: rank %lld, other tensors or metadata rank say %d", p, l->path, (long long)r, *rank);
    *rank = (int)r;
    return 0;
}

static int needle_adapter_pairs(needle_adapter *a)
{
    const char *p = a->st->path;
    a->lora = calloc((size_t)a->st->ntensors + 1, sizeof *a->lora);
    if (!a->lora) return loom_fail("out of memory");
    char path[96];
    for (int i = 0; i < a->st->ntensors; i++) {
        const char *name = a->st->t[i].name;
        if (strcmp(name, "rows") == 0)
            return loom_fail("%s: tensor rows: a Whistle adapter (rows), not supported", p);
        int m = needle_lora_name(name, path, sizeof path);
        if (!m) return loom_fail("%s: tensor %s: not lora/<path>/A or /B", p, name);
        int k = 0;
        while (k < a->n && strcmp(a->lora[k].path, path) != 0) k++;
        if (k == a->n) {
            snprintf(a->lora[k].path, sizeof a->lora[k].path, "%s", path);
            a->lora[k].a = a->lora[k].b = -1;
            a->n++;
        }
        int *slot = m == 'A' ? &a->lora[k].a : &a->lora[k].b;
        *slot = i;
    }
    for (int k = 0; k < a->n; k++)
        if (a->lora[k].a < 0 || a->lora[k].b < 0)
            return loom_fail("%s: tensor lora/%s/%c is missing", p, a->lora[k].path, a->lora[k].a < 0 ? 'A' : 'B');
    return 0;
}

/* scale and rank from the metadata (JSON texts), checked against the tensors. */
static int needle_adapter_meta(needle_adapter *a, int nm, char **keys, char **vals)
{
    const char *p = a->st->path;
    for (int k = 0; k < 6; k++) {
        const char *v = needle_meta_get(nm, keys, vals, needle_adapter_keys[k]);
        if (v && !(a->meta[k] = strdup(v))) return loom_fail("out of memory");
    }
    cJSON *s = cJSON_Parse(a->meta[0] ? a->meta[0] : "");
    int rc = cJSON_IsNumber(s) ? 0 : loom_fail("%s: metadata scale: '%s' is not a number", p, a->meta[0] ? a->meta[0] : "missing");
    a->scale = rc == 0 ? s->valuedouble : 0;
    cJSON_Delete(s);
    a->rank = -1;
    if (rc == 0 && a->meta[2] && strcmp(a->meta[2], "null") != 0) {
        cJSON *r = cJSON_Parse(a->meta[2]);
        if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 65536 || r->valuedouble != (int)r->valuedouble)
            rc = loom_fail("%s: metadata rank: '%s' is not a rank", p, a->meta[2]);
        else a->rank = (int)r->valuedouble;
        cJSON_Delete(r);
    }
    for (int k = 0; rc == 0 && k < a->n; k++) rc = needle_lora_shapes(a, &a->lora[k], &a->rank);
    if (rc == 0 && a->n == 0) rc = loom_fail("%s: no lora/ tensors", p);
    return rc;
}

needle_adapter *needle_adapter_open(const char *path)
{
    needle_adapter *a = calloc(1, sizeof *a);
    if (!a) { loom_fail("out of memory"); return NULL; }
    int nm = 0, rc = -1;
    char **keys = NULL, **vals = NULL;
    if ((a->st = st_open(path)) && needle_meta_read(a->st, &nm, &keys, &vals) == 0 && needle_adapter_pairs(a) == 0)
        rc = needle_adapter_meta(a, nm, keys, vals);
    for (int i = 0; i < nm; i++) free(keys[i]), free(vals[i]);
    free(keys);
    free(vals);
    if (rc) { needle_adapter_close(a); return NULL; }
    return a;
}

void needle_adapter_close(needle_adapter *a)
{
    if (!a) return;
    for (int k = 0; k < 6; k++) free(a->meta[k]);
    free(a->lora);
    st_close(a->st);
    free(a);
}

/* finetune.py:306-315: a kernel of the layer stack under one of LORA_TARGETS. */
static int needle_is_target(const char *path)
{
    static const char *const targets[] = {"/q_proj/", "/k_proj/", "/v_proj/", "/gate_proj/", "/out_proj/"};
    char wrapped[112];
    snprintf(wrapped, sizeof wrapped, "/%s/", path);
    int hit = 0;
    for (int t = 0; t < 5; t++) hit |= strstr(wrapped, targets[t]) != NULL;
    size_t n = strlen(path);
    return hit && strstr(wrapped, "/layers/") && n > 7 && strcmp(path + n - 7, "/kernel") == 0;
}

int needle_adapter_check(const needle_adapter *a, const needle_file *base)
{
    const char *p = a->st->path;
    for (int k = 0; k < a->n; k++) {
        const needle_lora *l = &a->lora[k];
        int i = needle_file_find(base, l->path);
        if (!needle_is_target(l->path) || i < 0)
            return loom_fail("%s: tensor lora/%s/A: not a LoRA target (q/k/v/gate/out_proj kernel of the layers) of %s",
                             p, l->path, base->st->path);
        const st_tensor *W = needle_file_tensor(base, i), *A = &a->st->t[l->a], *B = &a->st->t[l->b];
        int ok = W->ndim == A->ndim;
        for (int d = 0; ok && d < W->ndim - 1; d++) ok = A->shape[d] == W->shape[d];
        for (int d = 0; ok && d < W->ndim - 2; d++) ok = B->shape[d] == W->shape[d];
        if (!ok || B->shape[B->ndim - 1] != W->shape[W->ndim - 1])
            return loom_fail("%s: tensor lora/%s: A and B do not fit the base kernel's shape", p, l->path);
    }
    return 0;
}
