/* gguf_write.c: the GGUF v3 container (see gguf.h): header, key-value metadata and tensor infos
 * kept in memory until gguf_data_begin writes them, then each tensor's data streamed through a
 * small conversion buffer, every tensor aligned to general.alignment. Writes only OUT.tmp.<pid>
 * beside OUT; the rename in gguf_commit is the one moment OUT exists. Knows nothing of models. */
#include "checkpoints/gguf.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "checkpoints/ckpt_internal.h"

enum { GGUF_VERSION = 3 };
/* GGUF metadata value types (gguf.h of ggml: enum gguf_type) */
enum { GV_UINT32 = 4, GV_INT32 = 5, GV_FLOAT32 = 6, GV_BOOL = 7, GV_STRING = 8, GV_ARRAY = 9 };

typedef struct gw_tensor {
    char *name;
    int ndim;
    int64_t ne[4];
    gguf_type type;
    uint64_t nelem, offset;
} gw_tensor;

struct gguf_writer {
    char path[4096], tmp[4200];
    FILE *f;
    uint32_t align;
    unsigned char *kv;        /* the metadata section, serialised as it is added */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    gw_tensor *t;
    int nt, tcap;
    int cur;                  /* the tensor gguf_put is filling */
    uint64_t done;            /* its elements written */
    uint64_t written;         /* bytes of the data section so far */
    float block[32];          /* q8_0: the partial block */
    int nblock;
    unsigned char out[34 * 128];
};

static int gguf_raw(gguf_writer *w, const void *p, size_t n)
{
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        unsigned char *b = realloc(w->kv, cap);
        if (!b) return loom_fail("%s: out of memory for the metadata", w->path);
        w->kv = b;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

/* little-endian integers (the file is little-endian; so is every host loom builds on) */
static int gguf_u32(gguf_writer *w, uint32_t v) { return gguf_raw(w, &v, 4); }
static int gguf_u64(gguf_writer *w, uint64_t v) { return gguf_raw(w, &v, 8); }

static int gguf_string(gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    return gguf_u64(w, n) || gguf_raw(w, s, n);
}

static int gguf_key(gguf_writer *w, const char *key, uint32_t type)
{
    w->n_kv++;
    return gguf_string(w, key) || gguf_u32(w, type);
}

gguf_writer *gguf_create(const char *path, uint32_t alignment)
{
    if (alignment == 0 || alignment % 8) { loom_fail("%s: alignment %u is not a multiple of 8", path, alignment); return NULL; }
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) { loom_fail("%s: out of memory", path); return NULL; }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    w->align = alignment;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        loom_fail("%s: cannot create %s (%s)", path, w->tmp, strerror(errno));
        free(w);
        return NULL;
    }
    return w;
}

int gguf_kv_str(gguf_writer *w, const char *key, const char *val)
{
    return gguf_key(w, key, GV_STRING) || gguf_string(w, val);
}

int gguf_kv_u32(gguf_writer *w, const char *key, uint32_t val) { return gguf_key(w, key, GV_UINT32) || gguf_u32(w, val); }

int gguf_kv_f32(gguf_writer *w, const char *key, float val) { return gguf_key(w, key, GV_FLOAT32) || gguf_raw(w, &val, 4); }

int gguf_kv_bool(gguf_writer *w, const char *key, int val)
{
    unsigned char b = val ? 1 : 0;
    return gguf_key(w, key, GV_BOOL) || gguf_raw(w, &b, 1);
}

int gguf_kv_strs(gguf_writer *w, const char *key, const char *const *vals, size_t n)
{
    if (gguf_key(w, key, GV_ARRAY) || gguf_u32(w, GV_STRING) || gguf_u64(w, n)) return -1;
    for (size_t i = 0; i < n; i++)
        if (gguf_string(w, vals[i])) return -1;
    return 0;
}

int gguf_kv_i32s(gguf_writer *w, const char *key, const int32_t *vals, size_t n)
{
    return gguf_key(w, key, GV_ARRAY) || gguf_u32(w, GV_INT32) || gguf_u64(w, n) || gguf_raw(w, vals, n * 4);
}

int gguf_kv_f32s(gguf_writer *w, const char *key, const float *vals, size_t n)
{
    return gguf_key(w, key, GV_ARRAY) || gguf_u32(w, GV_FLOAT32) || gguf_u64(w, n) || gguf_raw(w, vals, n * 4);
}

int gguf_tensor_add(gguf_writer *w, const char *name, int ndim, const int64_t *ne, gguf_type type)
{
    if (ndim < 1 || ndim > 4) return loom_fail("%s: tensor %s has %d dims", w->path, name, ndim);
    if (w->nt == w->tcap) {
        int cap = w->tcap ? 2 * w->tcap : 64;
        gw_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return loom_fail("%s: out of memory", w->path);
        w->t = t;
        w->tcap = cap;
    }
    gw_tensor *ti = &w->t[w->nt];
    memset(ti, 0, sizeof *ti);
    ti->ndim = ndim;
    ti->type = type;
    ti->nelem = 1;
    for (int d = 0; d < ndim; d++) ti->ne[d] = ne[d], ti->nelem *= (uint64_t)ne[d];
    if (type == GGUF_Q8_0 && ne[0] % 32)
        return loom_fail("%s: tensor %s: q8_0 needs rows of a multiple of 32 (%lld)", w->path, name, (long long)ne[0]);
    if (!(ti->name = strdup(name))) return loom_fail("%s: out of memory", w->path);
    w->nt++;
    return 0;
}

static uint64_t gguf_align_up(uint64_t n, uint32_t a) { return (n + a - 1) / a * a; }

static int gguf_fwrite(gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n) return loom_fail("%s: write failed (%s)", w->path, strerror(errno));
    return 0;
}

static int gguf_pad(gguf_writer *w, uint64_t have)
{
    static const unsigned char zeros[64];
    uint64_t n = gguf_align_up(have, w->align) - have;
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (gguf_fwrite(w, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

/* header, metadata, tensor infos (offsets in the data section, each aligned), padding */
int gguf_data_begin(gguf_writer *w)
{
    uint64_t off = 0;
    unsigned char *kv = w->kv;
    size_t kv_len = w->kv_len;
    w->kv = NULL, w->kv_len = w->kv_cap = 0; /* the info section goes after it in a buffer of its own */
    int rc = 0;
    for (int i = 0; rc == 0 && i < w->nt; i++) {
        gw_tensor *t = &w->t[i];
        t->offset = off;
        off = gguf_align_up(off + gguf_type_size(t->type, t->nelem), w->align);
        rc = gguf_string(w, t->name) || gguf_u32(w, (uint32_t)t->ndim);
        for (int d = 0; rc == 0 && d < t->ndim; d++) rc = gguf_u64(w, (uint64_t)t->ne[d]);
        if (rc == 0) rc = gguf_u32(w, (uint32_t)t->type) || gguf_u64(w, t->offset);
    }
    unsigned char head[24];
    uint32_t ver = GGUF_VERSION;
    uint64_t nt = (uint64_t)w->nt;
    memcpy(head, "GGUF", 4);
    memcpy(head + 4, &ver, 4);
    memcpy(head + 8, &nt, 8);
    memcpy(head + 16, &w->n_kv, 8);
    if (rc == 0) rc = gguf_fwrite(w, head, sizeof head) || gguf_fwrite(w, kv, kv_len) || gguf_fwrite(w, w->kv, w->kv_len);
    if (rc == 0) rc = gguf_pad(w, sizeof head + kv_len + w->kv_len);
    free(kv);
    w->cur = 0;
    w->done = 0;
    return rc;
}

/* n values of the current tensor, all within it, converted in chunks of the out buffer */
static int gguf_put_within(gguf_writer *w, const float *x, size_t n)
{
    gguf_type ty = w->t[w->cur].type;
    while (n > 0) {
        size_t k = 0, bytes = 0;
        if (ty == GGUF_Q8_0) {
            while (k < n && bytes + 34 <= sizeof w->out) {
                w->block[w->nblock++] = x[k++];
                if (w->nblock == 32) gguf_quantize_q8_0(w->block, w->out + bytes), bytes += 34, w->nblock = 0;
            }
        } else {
            size_t es = ty == GGUF_F32 ? 4 : 2, cap = sizeof w->out / es;
            k = n < cap ? n : cap;
            if (ty == GGUF_F32) memcpy(w->out, x, k * 4);
            for (size_t i = 0; ty != GGUF_F32 && i < k; i++) {
                uint16_t h = ty == GGUF_F16 ? gguf_fp32_to_fp16(x[i]) : gguf_fp32_to_bf16(x[i]);
                memcpy(w->out + 2 * i, &h, 2);
            }
            bytes = k * es;
        }
        if (gguf_fwrite(w, w->out, bytes)) return -1;
        w->written += bytes;
        x += k;
        n -= k;
    }
    return 0;
}

int gguf_put(gguf_writer *w, const float *x, size_t n)
{
    while (n > 0) {
        if (w->cur >= w->nt) return loom_fail("%s: more tensor data than the tensors declared", w->path);
        gw_tensor *t = &w->t[w->cur];
        uint64_t left = t->nelem - w->done;
        size_t k = n < left ? n : (size_t)left;
        if (gguf_put_within(w, x, k)) return -1;
        w->done += k;
        x += k;
        n -= k;
        if (w->done == t->nelem) { /* tensor complete: pad to the next one's offset */
            if (gguf_pad(w, w->written)) return -1;
            w->written = gguf_align_up(w->written, w->align);
            w->cur++;
            w->done = 0;
        }
    }
    return 0;
}

static void gguf_free(gguf_writer *w)
{
    for (int i = 0; i < w->nt; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

void gguf_abort(gguf_writer *w)
{
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    gguf_free(w);
}

int gguf_commit(gguf_writer *w)
{
    int rc = w->cur == w->nt ? 0
           : loom_fail("%s: tensor %s got %llu of its %llu values", w->path, w->t[w->cur].name,
                       (unsigned long long)w->done, (unsigned long long)w->t[w->cur].nelem);
    if (rc == 0 && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        rc = loom_fail("%s: write failed (%s)", w->path, strerror(errno));
    int closed = fclose(w->f);
    w->f = NULL;
    if (rc == 0 && closed != 0) rc = loom_fail("%s: write failed (%s)", w->path, strerror(errno));
    if (rc == 0 && rename(w->tmp, w->path) != 0)
        rc = loom_fail("%s: cannot rename %s into place (%s)", w->path, w->tmp, strerror(errno));
    if (rc == 0) { /* the rename made durable: the folder's entry synced (else no file, as promised) */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", w->path);
        if ((rc = ckpt_fs_fsync_dir(dirname(dir))) != 0) unlink(w->path);
    }
    if (rc) unlink(w->tmp);
    gguf_free(w);
    return rc;
}
