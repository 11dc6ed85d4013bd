/* gguf_read.c: a GGUF file opened for reading (see gguf.h). The file is mapped; the header, keys
 * and tensor infos are walked once with every length, count and offset checked against the file
 * size and sane limits, so no later access can leave the mapping. Knows nothing of models. */
#include "checkpoints/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

enum { GV_STRING = 8, GV_ARRAY = 9, MAX_ITEMS = 1 << 24, MAX_DIMS = 4 };

typedef struct gr_kv {
    char *key;
    uint32_t type, elem;
    uint64_t n;
    const unsigned char *val;   /* into the mapping */
} gr_kv;

typedef struct gr_tensor {
    char *name;
    int ndim;
    int64_t ne[MAX_DIMS];
    gguf_type type;
    uint64_t nelem, offset;
} gr_tensor;

struct gguf_file {
    char path[4096];
    const unsigned char *map;
    size_t size, at, data;
    gr_kv *kv;
    uint64_t nkv;
    gr_tensor *t;
    uint64_t nt;
};

const char *gguf_path(const gguf_file *g) { return g->path; }

static int gr_take(gguf_file *g, size_t n, const unsigned char **p, const char *field)
{
    if (n > g->size - g->at) return loom_fail("%s: %s runs past the end of the file (%zu bytes): truncated or not GGUF", g->path, field, g->size);
    if (p) *p = g->map + g->at;
    g->at += n;
    return 0;
}

static int gr_u32(gguf_file *g, uint32_t *v, const char *field)
{
    const unsigned char *p = NULL;
    if (gr_take(g, 4, &p, field)) return -1;
    memcpy(v, p, 4);
    return 0;
}

static int gr_u64(gguf_file *g, uint64_t *v, const char *field)
{
    const unsigned char *p = NULL;
    if (gr_take(g, 8, &p, field)) return -1;
    memcpy(v, p, 8);
    return 0;
}

static int gr_str(gguf_file *g, char **out, const char *field)
{
    uint64_t n;
    const unsigned char *p = NULL;
    if (gr_u64(g, &n, field) || gr_take(g, n > SIZE_MAX ? SIZE_MAX : (size_t)n, &p, field)) return -1;
    if (!(*out = malloc((size_t)n + 1))) return loom_fail("%s: out of memory", g->path);
    memcpy(*out, p, (size_t)n);
    (*out)[n] = '\0';
    return 0;
}

/* bytes of one scalar of value type t (0: not a scalar type) */
static size_t gr_scalar(uint32_t t)
{
    static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

static int gr_skip_value(gguf_file *g, uint32_t t, const char *key)
{
    if (t == GV_STRING) {
        uint64_t n;
        return gr_u64(g, &n, key) || gr_take(g, n > SIZE_MAX ? SIZE_MAX : (size_t)n, NULL, key);
    }
    size_t s = gr_scalar(t);
    return s ? gr_take(g, s, NULL, key) : loom_fail("%s: key %s has value type %u (not a GGUF type)", g->path, key, t);
}

static int gr_kv_read(gguf_file *g, gr_kv *kv, uint64_t i)
{
    char field[64];
    snprintf(field, sizeof field, "key %llu", (unsigned long long)i);
    if (gr_str(g, &kv->key, field) || gr_u32(g, &kv->type, kv->key)) return -1;
    if (kv->type == GV_ARRAY) {
        if (gr_u32(g, &kv->elem, kv->key) || gr_u64(g, &kv->n, kv->key)) return -1;
        if (kv->elem == GV_ARRAY || kv->n > MAX_ITEMS) return loom_fail("%s: key %s: an array of %llu of type %u", g->path, kv->key, (unsigned long long)kv->n, kv->elem);
        kv->val = g->map + g->at;
        for (uint64_t k = 0; k < kv->n; k++)
            if (gr_skip_value(g, kv->elem, kv->key)) return -1;
        return 0;
    }
    kv->val = g->map + g->at;
    return gr_skip_value(g, kv->type, kv->key);
}

static int gr_tensor_read_info(gguf_file *g, gr_tensor *t, uint64_t i)
{
    char field[64];
    uint32_t nd, ty;
    snprintf(field, sizeof field, "tensor info %llu", (unsigned long long)i);
    if (gr_str(g, &t->name, field) || gr_u32(g, &nd, t->name)) return -1;
    if (nd < 1 || nd > MAX_DIMS) return loom_fail("%s: tensor %s: %u dims", g->path, t->name, nd);
    t->ndim = (int)nd;
    t->nelem = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t ne;
        if (gr_u64(g, &ne, t->name)) return -1;
        if (ne == 0 || ne > ((uint64_t)1 << 40) / t->nelem) return loom_fail("%s: tensor %s: dim %d is %llu", g->path, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        t->nelem *= ne;
    }
    if (gr_u32(g, &ty, t->name) || gr_u64(g, &t->offset, t->name)) return -1;
    if (ty != GGUF_F32 && ty != GGUF_F16 && ty != GGUF_BF16 && ty != GGUF_Q8_0)
        return loom_fail("%s: tensor %s: ggml type %u is not one loom reads (f32, f16, bf16, q8_0: requantize with "
                         "llama-quantize to one of them)", g->path, t->name, ty);
    t->type = (gguf_type)ty;
    if (t->type == GGUF_Q8_0 && t->ne[0] % 32) return loom_fail("%s: tensor %s: q8_0 rows of %lld", g->path, t->name, (long long)t->ne[0]);
    return 0;
}

static int gr_parse(gguf_file *g)
{
    const unsigned char *magic = NULL;
    uint32_t version, align = 32;
    if (gr_take(g, 4, &magic, "magic")) return -1;
    if (memcmp(magic, "GGUF", 4) != 0) return loom_fail("%s: not a GGUF file (magic)", g->path);
    if (gr_u32(g, &version, "version") || gr_u64(g, &g->nt, "tensor count") || gr_u64(g, &g->nkv, "key count")) return -1;
    if (version != 2 && version != 3) return loom_fail("%s: GGUF version %u (2 or 3)", g->path, version);
    if (g->nkv > MAX_ITEMS || g->nt > MAX_ITEMS) return loom_fail("%s: %llu keys, %llu tensors: not a real count", g->path, (unsigned long long)g->nkv, (unsigned long long)g->nt);
    g->kv = calloc((size_t)g->nkv + 1, sizeof *g->kv);
    g->t = calloc((size_t)g->nt + 1, sizeof *g->t);
    if (!g->kv || !g->t) return loom_fail("%s: out of memory", g->path);
    for (uint64_t i = 0; i < g->nkv; i++)
        if (gr_kv_read(g, &g->kv[i], i)) return -1;
    for (uint64_t i = 0; i < g->nt; i++)
        if (gr_tensor_read_info(g, &g->t[i], i)) return -1;
    int r = gguf_get_u32(g, "general.alignment", &align);
    if (r < 0 || align == 0 || align % 8) return loom_fail("%s: general.alignment %u is not a multiple of 8", g->path, align);
    g->data = (g->at + align - 1) / align * align;
    for (uint64_t i = 0; i < g->nt; i++) {
        gr_tensor *t = &g->t[i];
        size_t bytes = gguf_type_size(t->type, t->nelem);
        if (t->offset % align || t->offset > g->size || g->data > g->size - t->offset || bytes > g->size - g->data - t->offset)
            return loom_fail("%s: tensor %s: data at offset %llu (%zu bytes) lies outside the file (%zu bytes) or off the "
                             "alignment %u", g->path, t->name, (unsigned long long)t->offset, bytes, g->size, align);
    }
    return 0;
}

gguf_file *gguf_open(const char *path)
{
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) { loom_fail("%s: out of memory", path); return NULL; }
    snprintf(g->path, sizeof g->path, "%s", path);
    int fd = open(path, O_RDONLY);
    struct stat st;
    int rc = fd < 0 || fstat(fd, &st) != 0 ? loom_fail("%s: cannot open (%s)", path, strerror(errno)) : 0;
    if (rc == 0 && st.st_size < 24) rc = loom_fail("%s: %lld bytes: too short for a GGUF header", path, (long long)st.st_size);
    if (rc == 0) {
        g->size = (size_t)st.st_size;
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) rc = loom_fail("%s: cannot map (%s)", path, strerror(errno));
        else g->map = m;
    }
    if (fd >= 0) close(fd);
    if (rc == 0) rc = gr_parse(g);
    if (rc) { gguf_close(g); return NULL; }
    return g;
}

void gguf_close(gguf_file *g)
{
    if (!g) return;
    for (uint64_t i = 0; g->kv && i < g->nkv; i++) free(g->kv[i].key);
    for (uint64_t i = 0; g->t && i < g->nt; i++) free(g->t[i].name);
    free(g->kv);
    free(g->t);
    if (g->map) munmap((void *)g->map, g->size);
    free(g);
}

static const gr_kv *gr_find(const gguf_file *g, const char *key, uint32_t type, int *rc)
{
    for (uint64_t i = 0; i < g->nkv; i++) {
        if (!g->kv[i].key || strcmp(g->kv[i].key, key) != 0) continue;
        const gr_kv *kv = &g->kv[i];
        *rc = kv->type == type ? 0 : loom_fail("%s: key %s has value type %u, not %u", g->path, key, kv->type, type);
        return *rc ? NULL : kv;
    }
    *rc = 1;
    return NULL;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, 4, &rc);
    if (kv) memcpy(out, kv->val, 4);
    return rc;
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, 6, &rc);
    if (kv) memcpy(out, kv->val, 4);
    return rc;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, 7, &rc);
    if (kv) *out = kv->val[0] != 0;
    return rc;
}

/* a string stored at p (u64 length + bytes, already bounds-checked) as a malloc'd C string */
static char *gr_cstr(const unsigned char *p, size_t *used)
{
    uint64_t n;
    memcpy(&n, p, 8);
    char *s = malloc((size_t)n + 1);
    if (s) { memcpy(s, p + 8, (size_t)n); s[n] = '\0'; }
    *used = 8 + (size_t)n;
    return s;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **out)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, GV_STRING, &rc);
    if (!kv) return rc;
    size_t used;
    char *s = gr_cstr(kv->val, &used);
    if (!s) return loom_fail("%s: out of memory", g->path);
    *out = s;
    return 0;
}

int gguf_get_strs(const gguf_file *g, const char *key, const char ***out, size_t *n)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, GV_ARRAY, &rc);
    if (!kv) return rc;
    if (kv->elem != GV_STRING) return loom_fail("%s: key %s is an array of type %u, not of strings", g->path, key, kv->elem);
    const char **v = calloc((size_t)kv->n + 1, sizeof *v);
    if (!v) return loom_fail("%s: out of memory", g->path);
    const unsigned char *p = kv->val;
    for (uint64_t i = 0; i < kv->n; i++) {
        size_t used;
        if (!(v[i] = gr_cstr(p, &used))) {
            for (uint64_t k = 0; k < i; k++) free((void *)v[k]);
            free(v);
            return loom_fail("%s: out of memory", g->path);
        }
        p += used;
    }
    *out = v;
    *n = (size_t)kv->n;
    return 0;
}

int gguf_get_i32s(const gguf_file *g, const char *key, const void **out, size_t *n)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, GV_ARRAY, &rc);
    if (!kv) return rc;
    if (kv->elem != 5) return loom_fail("%s: key %s is an array of type %u, not of int32", g->path, key, kv->elem);
    *out = kv->val;
    *n = (size_t)kv->n;
    return 0;
}

int gguf_get_f32s(const gguf_file *g, const char *key, const void **out, size_t *n)
{
    int rc;
    const gr_kv *kv = gr_find(g, key, GV_ARRAY, &rc);
    if (!kv) return rc;
    if (kv->elem != 6) return loom_fail("%s: key %s is an array of type %u, not of float32", g->path, key, kv->elem);
    *out = kv->val;
    *n = (size_t)kv->n;
    return 0;
}

size_t gguf_n_tensors(const gguf_file *g) { return (size_t)g->nt; }
const char *gguf_tensor_name(const gguf_file *g, size_t i) { return i < g->nt ? g->t[i].name : NULL; }

static const gr_tensor *gr_tensor_find(const gguf_file *g, const char *name)
{
    for (uint64_t i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    return NULL;
}

int gguf_tensor_info(const gguf_file *g, const char *name, int *ndim, int64_t ne[4], gguf_type *type)
{
    const gr_tensor *t = gr_tensor_find(g, name);
    if (!t) return 1;
    *ndim = t->ndim;
    memcpy(ne, t->ne, sizeof t->ne);
    *type = t->type;
    return 0;
}

int gguf_tensor_read(const gguf_file *g, const char *name, float *out, size_t n)
{
    const gr_tensor *t = gr_tensor_find(g, name);
    if (!t) return loom_fail("%s: no tensor %s", g->path, name);
    if (n != t->nelem) return loom_fail("%s: tensor %s has %llu values, %zu expected", g->path, name, (unsigned long long)t->nelem, n);
    const unsigned char *p = g->map + g->data + t->offset;
    if (t->type == GGUF_F32) { memcpy(out, p, n * 4); return 0; }
    for (size_t i = 0; t->type != GGUF_Q8_0 && i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        if (t->type == GGUF_F16) out[i] = gguf_fp16_to_fp32(h);
        else { uint32_t u = (uint32_t)h << 16; memcpy(&out[i], &u, 4); }
    }
    for (size_t b = 0; t->type == GGUF_Q8_0 && b < n / 32; b++) { /* ggml's dequantize_row_q8_0: q * d */
        uint16_t h;
        memcpy(&h, p + 34 * b, 2);
        const float d = gguf_fp16_to_fp32(h);
        for (int j = 0; j < 32; j++) out[32 * b + (size_t)j] = (float)(int8_t)p[34 * b + 2 + (size_t)j] * d;
    }
    return 0;
}
