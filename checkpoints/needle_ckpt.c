/* needle_ckpt.c: a Needle base as a loom checkpoint (`loom import`; written by needle_import.c):
 * its kept tensors as logical fp32 in group "model" (flax paths, '/' written '.'), the config as
 * model_config, and in the root attribute `source` all the file had besides (dtypes, shapes and
 * order of its tensors, metadata strings in order, its digest), so that needle_open reads the
 * checkpoint as the file itself and the file comes back bitwise. The reading side, called by
 * needle.c (so it calls nothing of needle.c's). Must never present a value the file did not hold. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle_internal.h"

struct needle_ckpt {
    ckpt_reader *r;
    int n;
    ckpt_tensor *table;   /* one per stored tensor, in file order: its dataset and shape */
    uint64_t digest;
};

int needle_ckpt_is(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return 1;
    unsigned char head[8];
    int fd = S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    int is = fd >= 0 && read(fd, head, sizeof head) == (ssize_t)sizeof head && memcmp(head, sig, 8) == 0;
    if (fd >= 0) close(fd);
    return is;
}

void needle_ckpt_name(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    for (char *p = out; *p; p++)
        if (*p == '/') *p = '.';
}

/* --- reading --- */

/* The record's tensor e ([path, dtype, [shape]]) into t (name malloc'd). */
static int needle_ckpt_entry(const cJSON *e, st_tensor *t)
{
    const cJSON *name = cJSON_GetArrayItem(e, 0), *dt = cJSON_GetArrayItem(e, 1), *sh = cJSON_GetArrayItem(e, 2);
    int d = cJSON_IsString(dt) ? st_dtype_parse(dt->valuestring) : -1;
    if (!cJSON_IsArray(e) || !cJSON_IsString(name) || d < 0 || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > CKPT_MAX_DIMS)
        return -1;
    t->dtype = (st_dtype)d;
    t->ndim = cJSON_GetArraySize(sh);
    t->numel = 1;
    for (int k = 0; k < t->ndim; k++) {
        const cJSON *x = cJSON_GetArrayItem(sh, k);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 4.0e12 || x->valuedouble != (int64_t)x->valuedouble)
            return -1;
        t->shape[k] = (int64_t)x->valuedouble;
        t->numel *= (size_t)t->shape[k];
    }
    return (t->name = strdup(name->valuestring)) ? 0 : -1;
}

/* The metadata and tensor list of the record into f (f->st made here, without a mapping). */
static int needle_ckpt_record(needle_file *f, const cJSON *root, const char *path)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!cJSON_IsArray(meta) || !cJSON_IsArray(ts)) return loom_fail("%s: attribute source: no meta or tensors list", path);
    int nm = cJSON_GetArraySize(meta), nt = cJSON_GetArraySize(ts);
    f->mkey = calloc((size_t)nm + 1, sizeof *f->mkey);
    f->mval = calloc((size_t)nm + 1, sizeof *f->mval);
    f->st = calloc(1, sizeof *f->st);
    if (!f->mkey || !f->mval || !f->st || !(f->st->path = strdup(path)) || !(f->st->t = calloc((size_t)nt + 1, sizeof *f->st->t)))
        return loom_fail("%s: out of memory", path);
    for (const cJSON *e = meta->child; e; e = e->next, f->nmeta++) {
        const cJSON *k = cJSON_GetArrayItem(e, 0), *v = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(k) || !cJSON_IsString(v)) return loom_fail("%s: attribute source: meta %d is not [key, value]", path, f->nmeta);
        f->mkey[f->nmeta] = strdup(k->valuestring);
        f->mval[f->nmeta] = strdup(v->valuestring);
        if (!f->mkey[f->nmeta] || !f->mval[f->nmeta]) return loom_fail("%s: out of memory", path);
    }
    uint64_t at = 0;
    for (const cJSON *e = ts->child; e; e = e->next) {
        st_tensor *t = &f->st->t[f->st->ntensors];
        if (needle_ckpt_entry(e, t)) {
            free(t->name);
            t->name = NULL;
            return loom_fail("%s: attribute source: tensor %d is not [path, F32|BF16|F16, [shape]]", path, f->st->ntensors);
        }
        f->st->ntensors++;
        t->begin = at; /* where the file held it: its tensors back to back, in order */
        t->end = at += t->numel * st_dtype_size(t->dtype);
    }
    return 0;
}

/* The checkpoint's tensors (datasets model/<path with '.'>) checked against the record's shapes. */
static int needle_ckpt_table(needle_ckpt *c, const st_file *st)
{
    c->n = st->ntensors;
    if (!(c->table = calloc((size_t)c->n + 1, sizeof *c->table))) return loom_fail("%s: out of memory", st->path);
    for (int j = 0; j < c->n; j++) {
        char name[256];
        needle_ckpt_name(st->t[j].name, name, sizeof name);
        if (!(c->table[j].name = strdup(name))) return loom_fail("%s: out of memory", st->path);
        c->table[j].ndim = st->t[j].ndim;
        for (int d = 0; d < st->t[j].ndim; d++) c->table[j].shape[d] = st->t[j].shape[d];
    }
    ckpt_group g = {"model", c->table, c->n, NULL, NULL, NULL};
    return ckpt_check_shapes(c->r, &g);
}

/* The parsed `source` attribute if it is a Needle base's record, else NULL. */
static cJSON *needle_ckpt_source_of(const char *source)
{
    cJSON *root = source[0] ? cJSON_Parse(source) : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "needle") == 0) return root;
    cJSON_Delete(root);
    return NULL;
}

static int needle_ckpt_state(needle_file *f, const char *path, const ckpt_state *s)
{
    cJSON *root = needle_ckpt_source_of(s->source);
    if (!root)
        return loom_fail("%s: a loom checkpoint, not a Needle base's (no Needle source attribute; `loom import "
                         "NEEDLE.safetensors OUT` makes one)", path);
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(root, "digest");
    char *end = NULL;
    if (cJSON_IsString(dg) && strlen(dg->valuestring) == 16) f->ck->digest = strtoull(dg->valuestring, &end, 16);
    int rc = !end || *end || !f->ck->digest ? loom_fail("%s: attribute source: digest is not 16 hex digits", path) : 0;
    if (rc == 0) rc = needle_ckpt_record(f, root, path);
    cJSON_Delete(root);
    const char *cfg = NULL; /* the record's config string (needle_file_meta's, read here: needle.c calls this file) */
    for (int k = 0; rc == 0 && k < f->nmeta && !cfg; k++)
        if (strcmp(f->mkey[k], "config") == 0) cfg = f->mval[k];
    if (rc == 0 && strcmp(s->model_config_json, cfg ? cfg : "") != 0)
        rc = loom_fail("%s: attribute model_config is not the config of the source's metadata", path);
    return rc;
}

int needle_ckpt_open(needle_file *f, const char *path)
{
    char file[4096];
    if (!(f->ck = calloc(1, sizeof *f->ck))) return loom_fail("out of memory");
    if (ckpt_resolve(path, file, sizeof file) || !(f->ck->r = ckpt_open(file))) return -1;
    ckpt_state s;
    if (ckpt_read_state(f->ck->r, &s)) return -1;
    int rc = needle_ckpt_state(f, path, &s);
    ckpt_state_free(&s);
    return rc ? rc : needle_ckpt_table(f->ck, f->st);
}

void needle_ckpt_close(needle_ckpt *c)
{
    if (!c) return;
    for (int j = 0; c->table && j < c->n; j++) free((char *)c->table[j].name);
    free(c->table);
    ckpt_close(c->r);
    free(c);
}

uint64_t needle_ckpt_digest(const needle_ckpt *c) { return c->digest; }

typedef struct needle_ckpt_dst {
    float *out;
    size_t at;
} needle_ckpt_dst;

static int needle_ckpt_put(void *ctx, const float *x, size_t n)
{
    needle_ckpt_dst *d = ctx;
    memcpy(d->out + d->at, x, n * sizeof(float));
    d->at += n;
    return 0;
}

int needle_ckpt_read(needle_ckpt *c, int j, float *out, size_t numel)
{
    const ckpt_tensor *t = &c->table[j];
    size_t want = 1;
    for (int d = 0; d < t->ndim; d++) want *= (size_t)t->shape[d];
    if (numel != want) return loom_fail("model/%s: read of %zu values, it has %zu", t->name, numel, want);
    float *buf = malloc(ckpt_piece_size(t) * sizeof(float) + sizeof(float));
    if (!buf) return loom_fail("model/%s: out of memory", t->name);
    needle_ckpt_dst d = {out, 0};
    int rc = ckpt_read_pieces(c->r, "model", t, buf, needle_ckpt_put, &d);
    free(buf);
    return rc;
}

int needle_ckpt_narrow(const float *x, size_t n, st_dtype dt, void *out, const char *path, const char *name)
{
    if (dt == ST_F32) {
        memcpy(out, x, n * sizeof(float));
        return 0;
    }
    uint16_t *h = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t u, back;
        memcpy(&u, &x[i], 4);
        if (dt == ST_BF16) h[i] = (uint16_t)(u >> 16);
        else if ((u & 0x7f800000u) == 0x7f800000u) h[i] = (uint16_t)((u >> 16 & 0x8000) | 0x7c00 | (u >> 13 & 0x3ff));
        else h[i] = st_f32_to_f16(x[i]); /* exact for a value from F16: rounding has nothing to do */
        float w = dt == ST_BF16 ? st_bf16_to_f32(h[i]) : st_f16_to_f32(h[i]);
        memcpy(&back, &w, 4);
        if (back != u)
            return loom_fail("%s: tensor %s: element %zu (%.9g) is not a %s value (not what an import of it stored)",
                             path, name, i, (double)x[i], st_dtype_name(dt));
    }
    return 0;
}

int needle_is_base(const char *path)
{
    size_t n = strlen(path);
    struct stat st;
    if (!n || stat(path, &st) != 0) return 0;
    if (n > 12 && strcmp(path + n - 12, ".safetensors") == 0) return S_ISREG(st.st_mode);
    char file[4096];
    ckpt_reader *r = needle_ckpt_is(path) && ckpt_resolve(path, file, sizeof file) == 0 ? ckpt_open_peek(file) : NULL;
    ckpt_state s = {0};
    cJSON *root = r && ckpt_read_state(r, &s) == 0 ? needle_ckpt_source_of(s.source) : NULL;
    const int is = root != NULL;
    cJSON_Delete(root);
    ckpt_state_free(&s);
    ckpt_close(r);
    return is;
}
