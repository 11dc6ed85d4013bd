/* safetensors_set.c: a folder's weights as one set (model.safetensors, or the shards an index
 * names) and the writer of such a folder (single file or shards + index, the HF layout).
 * Must never follow a shard name out of the folder, nor keep a half-written file under its name. */
#include "checkpoints/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

#define ST_MAX_INDEX (64u << 20)

/* Whole small text file, NUL-terminated (malloc'd); NULL + loom_fail. */
static char *st_slurp(const char *path, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) { loom_fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || (size_t)n > cap) loom_fail("%s: unreadable or larger than %zu bytes", path, cap);
    else if (!(buf = malloc((size_t)n + 1))) loom_fail("%s: out of memory", path);
    else if (fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        loom_fail("%s: read failed", path);
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

static int st_set_add(st_set *s, const char *path)
{
    st_file **nf = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *nf);
    if (!nf) return loom_fail("out of memory");
    s->files = nf;
    s->files[s->nfiles] = st_open(path);
    if (!s->files[s->nfiles]) return -1;
    s->nfiles++;
    return 0;
}

/* Index -> shard list: every shard opened once, every mapped tensor found in its shard. */
static int st_set_from_index(st_set *s, const char *dir, const char *ipath)
{
    char *txt = st_slurp(ipath, ST_MAX_INDEX);
    if (!txt) return -1;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = cJSON_IsObject(wm) ? 0 : loom_fail("%s: no weight_map object", ipath);
    char path[4096];
    for (const cJSON *e = wm ? wm->child : NULL; rc == 0 && e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/')) {
            rc = loom_fail("%s: tensor %s: shard is not a file name in the folder", ipath, e->string);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        int have = -1;
        for (int i = 0; i < s->nfiles; i++)
            if (strcmp(s->files[i]->path, path) == 0) have = i;
        if (have < 0) {
            if (access(path, R_OK) != 0) {
                rc = loom_fail("%s: tensor %s: shard %s is missing", ipath, e->string, e->valuestring);
                break;
            }
            if ((rc = st_set_add(s, path)) != 0) break;
            have = s->nfiles - 1;
        }
        if (st_find(s->files[have], e->string) < 0)
            rc = loom_fail("%s: tensor %s is not in its shard %s", ipath, e->string, e->valuestring);
    }
    cJSON_Delete(root);
    return rc;
}

st_set *st_set_open(const char *dir)
{
    st_set *s = calloc(1, sizeof *s);
    if (!s) { loom_fail("out of memory"); return NULL; }
    char single[4096], index[4096];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(single, F_OK) == 0) rc = st_set_add(s, single);
    else if (access(index, F_OK) == 0) rc = st_set_from_index(s, dir, index);
    else rc = loom_fail("%s: no model.safetensors or model.safetensors.index.json", dir);
    /* a tensor in two shards would make the import depend on which one is read */
    for (int a = 0; rc == 0 && a < s->nfiles; a++)
        for (int b = a + 1; rc == 0 && b < s->nfiles; b++)
            for (int i = 0; i < s->files[a]->ntensors; i++)
                if (st_find(s->files[b], s->files[a]->t[i].name) >= 0) {
                    rc = loom_fail("%s: tensor %s is in shards %s and %s", dir, s->files[a]->t[i].name,
                                   s->files[a]->path, s->files[b]->path);
                    break;
                }
    if (rc) { st_set_close(s); return NULL; }
    return s;
}

void st_set_close(st_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) st_close(s->files[i]);
    free(s->files);
    free(s);
}

int st_set_find(const st_set *s, const char *name, st_file **file, int *index)
{
    for (int i = 0; i < s->nfiles; i++) {
        int k = st_find(s->files[i], name);
        if (k >= 0) { *file = s->files[i]; *index = k; return 0; }
    }
    return -1;
}

/* --- writing --- */

static uint64_t st_bytes(const st_wtensor *t, st_dtype d)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n * st_dtype_size(d);
}

/* Header JSON of tensors [a, b), padded with spaces to a multiple of 8 (malloc'd). */
static char *st_header(const st_wtensor *t, int a, int b, st_dtype d, size_t *len)
{
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int k = a; k < b; k++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[k].name), *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(d));
        for (int i = 0; i < t[k].ndim; i++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[k].shape[i]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        uint64_t n = st_bytes(&t[k], d);
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n)));
        off += n;
    }
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt) return NULL;
    size_t n = strlen(txt), padded = (n + 7) & ~(size_t)7;
    char *out = malloc(padded + 1);
    if (out) {
        memcpy(out, txt, n);
        memset(out + n, ' ', padded - n);
        out[padded] = '\0';
        *len = padded;
    }
    free(txt);
    return out;
}

/* Convert and write n floats in dtype d, through buf (ST_PUT_CHUNK 16-bit values): chunks large
 * enough that the write calls cost nothing next to the copy (an 8 KB buffer meant 65k writes for a
 * 135M model), small enough to stay in cache. Little-endian bytes whatever the host order. */
#define ST_PUT_CHUNK (64 * 1024)
static int st_put(FILE *f, const float *x, size_t n, st_dtype d, uint8_t *buf)
{
    if (d == ST_F32) return fwrite(x, 4, n, f) == n ? 0 : -1;
    for (size_t i = 0; i < n; i += ST_PUT_CHUNK) {
        size_t m = n - i < ST_PUT_CHUNK ? n - i : ST_PUT_CHUNK;
        const float *src = x + i;
        if (d == ST_BF16)
            for (size_t j = 0; j < m; j++) {
                uint16_t h = st_f32_to_bf16(src[j]);
                buf[2 * j] = (uint8_t)h;
                buf[2 * j + 1] = (uint8_t)(h >> 8);
            }
        else
            for (size_t j = 0; j < m; j++) {
                uint16_t h = st_f32_to_f16(src[j]);
                buf[2 * j] = (uint8_t)h;
                buf[2 * j + 1] = (uint8_t)(h >> 8);
            }
        if (fwrite(buf, 2, m, f) != m) return -1;
    }
    return 0;
}

struct st_sink {
    FILE *f;
    st_dtype d;
    uint8_t *buf;
    size_t left;         /* values the tensor still needs */
    const char *tmp;
    const char *name;
};

int st_sink_put(st_sink *s, const float *x, size_t n)
{
    if (n > s->left) return loom_fail("%s: tensor %s: more values than its shape holds", s->tmp, s->name);
    s->left -= n;
    return st_put(s->f, x, n, s->d, s->buf) ? loom_fail("%s: write failed: %s", s->tmp, strerror(errno)) : 0;
}

/* One file holding tensors [a, b), through path.tmp + fsync + rename. */
static int st_write_file(const char *path, st_dtype d, const st_wtensor *t, int a, int b,
                         st_stream_fn stream, void *ctx)
{
    size_t hlen = 0;
    char *hdr = st_header(t, a, b, d, &hlen), tmp[4200];
    if (!hdr) return loom_fail("%s: out of memory for the header", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    uint8_t *buf = malloc(2 * ST_PUT_CHUNK);
    int rc = !buf ? loom_fail("%s: out of memory", path) : f ? 0 : loom_fail("%s: cannot create: %s", tmp, strerror(errno));
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (rc == 0 && (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen))
        rc = loom_fail("%s: write failed: %s", tmp, strerror(errno));
    for (int k = a; rc == 0 && k < b; k++) {
        st_sink sink = {f, d, buf, (size_t)(st_bytes(&t[k], d) / st_dtype_size(d)), tmp, t[k].name};
        rc = stream(ctx, k, &sink);
        if (rc == 0 && sink.left) rc = loom_fail("%s: tensor %s: %zu values short of its shape", tmp, t[k].name, sink.left);
    }
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0) && rc == 0) rc = loom_fail("%s: flush failed: %s", tmp, strerror(errno));
    if (f && fclose(f) != 0 && rc == 0) rc = loom_fail("%s: close failed: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = loom_fail("%s: rename failed: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    free(buf);
    free(hdr);
    return rc;
}

static int st_write_index(const char *dir, const char *stem, const st_wtensor *t, int n,
                          const int *shard_of, int nshards, st_dtype d)
{
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
    uint64_t total = 0;
    for (int k = 0; k < n; k++) total += st_bytes(&t[k], d);
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
    char name[512], path[4096];
    for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s-%05d-of-%05d.safetensors", stem, shard_of[k] + 1, nshards);
        cJSON_AddStringToObject(wm, t[k].name, name);
    }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, stem);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int rc = f && fputs(txt, f) >= 0 ? 0 : loom_fail("%s: cannot write the index", path);
    if (f && fclose(f) != 0) rc = loom_fail("%s: cannot write the index", path);
    free(txt);
    return rc;
}

typedef struct st_whole {
    st_fetch_fn fetch;
    void *ctx;
    const st_wtensor *t;
    st_dtype d;
} st_whole;

static int st_stream_whole(void *ctx, int k, st_sink *sink)
{
    const st_whole *w = ctx;
    const float *x = w->fetch(w->ctx, k);
    return x ? st_sink_put(sink, x, (size_t)(st_bytes(&w->t[k], w->d) / st_dtype_size(w->d))) : -1;
}

int st_write_dir(const char *dir, const char *stem, st_dtype dtype, const st_wtensor *t, int n,
                 st_fetch_fn fetch, void *ctx, uint64_t max_shard_bytes)
{
    st_whole w = {fetch, ctx, t, dtype};
    return st_write_dir_stream(dir, stem, dtype, t, n, st_stream_whole, &w, max_shard_bytes);
}

int st_write_dir_stream(const char *dir, const char *stem, st_dtype dtype, const st_wtensor *t, int n,
                        st_stream_fn stream, void *ctx, uint64_t max_shard_bytes)
{
    int *shard_of = calloc((size_t)(n ? n : 1), sizeof *shard_of), ns = 1;
    if (!shard_of) return loom_fail("out of memory");
    uint64_t cur = 0;
    for (int k = 0; k < n; k++) {
        uint64_t b = st_bytes(&t[k], dtype);
        if (cur > 0 && cur + b > max_shard_bytes) ns++, cur = 0;
        shard_of[k] = ns - 1;
        cur += b;
    }
    char path[4096];
    int rc = 0;
    if (ns == 1) {
        snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, stem);
        unlink(path); /* a stale index must not outlive the single file that replaces it */
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem);
        rc = st_write_file(path, dtype, t, 0, n, stream, ctx);
    } else {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem);
        unlink(path); /* readers prefer the single file: it must not shadow the shards */
        for (int s = 0, a = 0; rc == 0 && s < ns; s++) {
            int b = a;
            while (b < n && shard_of[b] == s) b++;
            snprintf(path, sizeof path, "%s/%s-%05d-of-%05d.safetensors", dir, stem, s + 1, ns);
            rc = st_write_file(path, dtype, t, a, b, stream, ctx);
            a = b;
        }
        if (rc == 0) rc = st_write_index(dir, stem, t, n, shard_of, ns, dtype);
    }
    free(shard_of);
    return rc;
}
