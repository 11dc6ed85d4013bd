/* safetensors.c: the safetensors reader (see safetensors.h): mmap, header validation, one tensor
 * at a time to fp32, and the folder-level set (single file or index + shards).
 * Must never trust a length or offset from the file before checking it against the file's size. */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED): posix_madvise's DONTNEED is a no-op in glibc */
#include "checkpoints/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* The header is JSON text describing tensors: 100 MB is far beyond any real model's. */
#define ST_MAX_HEADER (100u << 20)

int st_dtype_parse(const char *s)
{
    if (strcmp(s, "F32") == 0) return ST_F32;
    if (strcmp(s, "F16") == 0) return ST_F16;
    if (strcmp(s, "BF16") == 0) return ST_BF16;
    return -1;
}

const char *st_dtype_name(st_dtype d) { return d == ST_F32 ? "F32" : d == ST_F16 ? "F16" : "BF16"; }
size_t st_dtype_size(st_dtype d) { return d == ST_F32 ? 4 : 2; }


static int st_read_whole(int fd, size_t *size)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0) return -1;
    *size = (size_t)sb.st_size;
    return 0;
}

/* One header entry -> t (name already set). */
static int st_parse_entry(st_file *f, const cJSON *e, st_tensor *t, uint64_t data_size)
{
    const char *p = f->path, *n = t->name;
    if (!cJSON_IsObject(e)) return loom_fail("%s: tensor %s: header entry is not an object", p, n);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return loom_fail("%s: tensor %s: no dtype", p, n);
    int d = st_dtype_parse(dt->valuestring);
    if (d < 0) return loom_fail("%s: tensor %s: unsupported dtype '%s' (F32, F16, BF16)", p, n, dt->valuestring);
    t->dtype = (st_dtype)d;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS)
        return loom_fail("%s: tensor %s: shape is not an array of at most %d sizes", p, n, ST_MAX_DIMS);
    t->ndim = cJSON_GetArraySize(sh);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *s = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(s) || s->valuedouble < 0 || s->valuedouble > 9.0e15 ||
            s->valuedouble != (double)(int64_t)s->valuedouble)
            return loom_fail("%s: tensor %s: shape[%d] is not a size", p, n, i);
        t->shape[i] = (int64_t)s->valuedouble;
        if (t->shape[i] && numel > UINT64_MAX / 8 / (uint64_t)t->shape[i])
            return loom_fail("%s: tensor %s: shape overflows", p, n);
        numel *= (uint64_t)t->shape[i];
    }
    t->numel = (size_t)numel;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return loom_fail("%s: tensor %s: data_offsets is not [begin, end]", p, n);
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, en = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ||
        b < 0 || en < b || en > 9.0e15 || b != (double)(uint64_t)b || en != (double)(uint64_t)en)
        return loom_fail("%s: tensor %s: data_offsets [%g, %g] are not a byte range", p, n, b, en);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (t->end > data_size)
        return loom_fail("%s: tensor %s: data_offsets end %llu past the end of the data (%llu bytes; truncated file?)",
                         p, n, (unsigned long long)t->end, (unsigned long long)data_size);
    if (t->end - t->begin != numel * st_dtype_size(t->dtype))
        return loom_fail("%s: tensor %s: %llu bytes for %llu %s elements", p, n,
                         (unsigned long long)(t->end - t->begin), (unsigned long long)numel, dt->valuestring);
    return 0;
}

static int st_cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Parse the JSON header into f->t; checks every entry, then overlaps and duplicates. */
static int st_parse_header(st_file *f, const char *json, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: the header is not a JSON object", f->path);
    }
    int n = 0, rc = 0;
    for (cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
    f->t = calloc((size_t)(n ? n : 1), sizeof *f->t);
    if (!f->t) rc = loom_fail("%s: out of memory for %d tensors", f->path, n);
    uint64_t data_size = f->size - f->data_start;
    for (cJSON *e = root->child; rc == 0 && e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        st_tensor *t = &f->t[f->ntensors++];
        t->name = strdup(e->string);
        rc = t->name ? st_parse_entry(f, e, t, data_size) : loom_fail("out of memory");
    }
    cJSON_Delete(root);
    if (rc) return -1;
    qsort(f->t, (size_t)f->ntensors, sizeof *f->t, st_cmp_begin);
    int last = -1; /* the tensor reaching furthest so far: an empty one must not hide a long one */
    for (int i = 0; i < f->ntensors; i++) {
        const st_tensor *t = &f->t[i];
        if (last >= 0 && t->end > t->begin && t->begin < f->t[last].end)
            return loom_fail("%s: tensor %s overlaps tensor %s", f->path, t->name, f->t[last].name);
        if (last < 0 || t->end > f->t[last].end) last = i;
    }
    for (int i = 0; i < f->ntensors; i++)
        for (int j = i + 1; j < f->ntensors; j++)
            if (strcmp(f->t[i].name, f->t[j].name) == 0)
                return loom_fail("%s: tensor %s appears twice", f->path, f->t[i].name);
    return 0;
}

st_file *st_open(const char *path)
{
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) { free(f); loom_fail("out of memory"); return NULL; }
    int fd = open(path, O_RDONLY);
    if (fd < 0) { loom_fail("%s: cannot open: %s", path, strerror(errno)); goto fail; }
    int rc = st_read_whole(fd, &f->size);
    if (rc == 0 && f->size < 8) rc = loom_fail("%s: %zu bytes: too short for a safetensors file", path, f->size);
    if (rc == 0) {
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) f->map = NULL, rc = loom_fail("%s: cannot map: %s", path, strerror(errno));
    }
    close(fd);
    if (rc) goto fail;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > f->size - 8 || hlen > ST_MAX_HEADER || hlen < 2) {
        loom_fail("%s: header length %llu does not fit the %zu-byte file (truncated or not safetensors)",
                  path, (unsigned long long)hlen, f->size);
        goto fail;
    }
    f->data_start = 8 + (size_t)hlen;
    if (st_parse_header(f, (const char *)f->map + 8, (size_t)hlen)) goto fail;
    return f;
fail:
    st_close(f);
    return NULL;
}

void st_close(st_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    for (int i = 0; i < f->ntensors; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    free(f);
}

int st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}

/* Elements [e0, e0 + n) of tensor t as fp32. */
static void st_convert(const st_file *f, const st_tensor *t, size_t e0, size_t n, float *out)
{
    const uint8_t *src = f->map + f->data_start + t->begin + e0 * st_dtype_size(t->dtype);
    if (t->dtype == ST_F32) {
        memcpy(out, src, n * 4);
    } else if (t->dtype == ST_BF16) { /* a loop of its own: a shift per element, vectorised */
        for (size_t j = 0; j < n; j++) out[j] = st_bf16_to_f32((uint16_t)(src[2 * j] | (src[2 * j + 1] << 8)));
    } else {
        for (size_t j = 0; j < n; j++) out[j] = st_f16_to_f32((uint16_t)(src[2 * j] | (src[2 * j + 1] << 8)));
    }
}

/* Drop tensor t's pages from memory: the import's memory stays one tensor, not the whole file. */
static void st_release(const st_file *f, const st_tensor *t)
{
    const uint8_t *src = f->map + f->data_start + t->begin;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)src & ~(uintptr_t)(pg - 1), e = (uintptr_t)src + (t->end - t->begin);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

int st_read_f32(st_file *f, int i, float *out, size_t numel)
{
    const st_tensor *t = &f->t[i];
    if (t->numel != numel)
        return loom_fail("%s: tensor %s has %zu elements, expected %zu", f->path, t->name, t->numel, numel);
    st_convert(f, t, 0, numel, out);
    st_release(f, t);
    return 0;
}

int st_read_f32_range(st_file *f, int i, size_t e0, size_t n, float *out)
{
    const st_tensor *t = &f->t[i];
    if (e0 > t->numel || n > t->numel - e0)
        return loom_fail("%s: tensor %s has %zu elements, not [%zu, %zu)", f->path, t->name, t->numel, e0, e0 + n);
    st_convert(f, t, e0, n, out);
    if (e0 + n == t->numel) st_release(f, t);
    return 0;
}
