/* gguf_read_test.c: see gguf_read_test.h. Reads the whole file (test files are small) and walks
 * it with bounds checks; SHA-256 as FIPS 180-4 gives it. */
#include "tests/checkpoints/gguf_read_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- SHA-256 --- */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64], a[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(a, h, sizeof a);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = a[7] + (ROR(a[4], 6) ^ ROR(a[4], 11) ^ ROR(a[4], 25)) + ((a[4] & a[5]) ^ (~a[4] & a[6])) + K[i] + w[i];
        uint32_t t2 = (ROR(a[0], 2) ^ ROR(a[0], 13) ^ ROR(a[0], 22)) + ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
        memmove(a + 1, a, 7 * sizeof *a);
        a[4] += t1;
        a[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += a[i];
}

void gt_sha256(const void *data, size_t n, char out[65])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) sha_block(h, p + i);
    unsigned char last[128] = {0};
    size_t r = n - i, len = r + 1 + 8 <= 64 ? 64 : 128;
    memcpy(last, p + i, r);
    last[r] = 0x80;
    uint64_t bits = (uint64_t)n * 8;
    for (int k = 0; k < 8; k++) last[len - 1 - k] = (unsigned char)(bits >> (8 * k));
    sha_block(h, last);
    if (len == 128) sha_block(h, last + 64);
    for (int k = 0; k < 8; k++) snprintf(out + 8 * k, 9, "%08x", h[k]);
}

/* --- GGUF --- */
size_t gt_type_size(uint32_t type, uint64_t n)
{
    return type == 0 ? n * 4 : type == 8 ? n / 32 * 34 : n * 2;
}

typedef struct cur {
    const unsigned char *p;
    size_t n, at;
    int bad;
} cur;

static const unsigned char *take(cur *c, size_t k)
{
    if (c->bad || k > c->n - c->at) { c->bad = 1; return NULL; }
    const unsigned char *r = c->p + c->at;
    c->at += k;
    return r;
}

static uint64_t u64(cur *c) { uint64_t v = 0; const unsigned char *p = take(c, 8); if (p) memcpy(&v, p, 8); return v; }
static uint32_t u32(cur *c) { uint32_t v = 0; const unsigned char *p = take(c, 4); if (p) memcpy(&v, p, 4); return v; }

static size_t scalar_size(uint32_t t)
{
    static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

/* skip one value of type t (not an array), returning its start */
static int skip_value(cur *c, uint32_t t)
{
    if (t == 8) { uint64_t n = u64(c); return take(c, (size_t)n) ? 0 : -1; }
    size_t s = scalar_size(t);
    return s && take(c, s) ? 0 : -1;
}

static char *str(cur *c)
{
    uint64_t n = u64(c);
    const unsigned char *p = take(c, (size_t)n);
    char *s = p ? malloc((size_t)n + 1) : NULL;
    if (s) { memcpy(s, p, (size_t)n); s[n] = '\0'; }
    return s;
}

static int read_kv(cur *c, gt_file *f, gt_kv *kv)
{
    kv->key = str(c);
    kv->type = u32(c);
    size_t start = c->at;
    if (kv->type == 9) {
        kv->elem = u32(c);
        kv->n = u64(c);
        start = c->at;
        for (uint64_t i = 0; i < kv->n && !c->bad; i++)
            if (skip_value(c, kv->elem)) return -1;
    } else if (skip_value(c, kv->type)) {
        return -1;
    }
    if (c->bad || !kv->key) return -1;
    kv->len = c->at - start;
    kv->val = malloc(kv->len + 1);
    if (!kv->val) return -1;
    memcpy(kv->val, c->p + start, kv->len);
    if (strcmp(kv->key, "general.alignment") == 0 && kv->type == 4) memcpy(&f->alignment, kv->val, 4);
    return 0;
}

int gt_read(const char *path, gt_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->alignment = 32;
    FILE *fp = fopen(path, "rb");
    if (!fp) return snprintf(err, errlen, "%s: cannot open", path), -1;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    size_t got = buf ? fread(buf, 1, (size_t)n, fp) : 0;
    fclose(fp);
    cur c = {buf, got, 0, 0};
    const unsigned char *magic = take(&c, 4);
    int rc = magic && memcmp(magic, "GGUF", 4) == 0 ? 0 : -1;
    if (rc) snprintf(err, errlen, "%s: no GGUF magic", path);
    f->version = u32(&c);
    f->nt = u64(&c);
    f->nkv = u64(&c);
    if (rc == 0 && (f->nkv > 100000 || f->nt > 100000)) rc = -1, snprintf(err, errlen, "%s: counts", path);
    f->kv = rc ? NULL : calloc((size_t)f->nkv + 1, sizeof *f->kv);
    f->t = rc ? NULL : calloc((size_t)f->nt + 1, sizeof *f->t);
    for (uint64_t i = 0; rc == 0 && i < f->nkv; i++)
        if (read_kv(&c, f, &f->kv[i])) rc = -1, snprintf(err, errlen, "%s: key %llu unreadable", path, (unsigned long long)i);
    for (uint64_t i = 0; rc == 0 && i < f->nt; i++) {
        gt_tensor *t = &f->t[i];
        t->name = str(&c);
        t->ndim = u32(&c);
        for (uint32_t d = 0; d < t->ndim && d < 4; d++) t->ne[d] = u64(&c);
        t->type = u32(&c);
        t->offset = u64(&c);
        if (c.bad || !t->name || t->ndim < 1 || t->ndim > 4) rc = -1, snprintf(err, errlen, "%s: tensor info %llu", path, (unsigned long long)i);
    }
    size_t data = (c.at + f->alignment - 1) / f->alignment * f->alignment;
    f->aligned = rc == 0;
    for (uint64_t i = 0; rc == 0 && i < f->nt; i++) {
        gt_tensor *t = &f->t[i];
        uint64_t ne = 1;
        for (uint32_t d = 0; d < t->ndim; d++) ne *= t->ne[d];
        size_t bytes = gt_type_size(t->type, ne);
        if (t->offset % f->alignment) f->aligned = 0;
        if (data + t->offset + bytes > got) { rc = -1; snprintf(err, errlen, "%s: tensor %s beyond the file", path, t->name); break; }
        gt_sha256(buf + data + t->offset, bytes, t->sha256);
    }
    free(buf);
    if (rc) gt_free(f);
    return rc;
}

void gt_free(gt_file *f)
{
    for (uint64_t i = 0; f->kv && i < f->nkv; i++) free(f->kv[i].key), free(f->kv[i].val);
    for (uint64_t i = 0; f->t && i < f->nt; i++) free(f->t[i].name);
    free(f->kv);
    free(f->t);
    memset(f, 0, sizeof *f);
}
