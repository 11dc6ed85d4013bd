/* data.c: token file I/O and deterministic window sampling (see data.h). Files are read whole:
 * the corpora loom pretrains on here are small; a memory map is the next step for large ones. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* Read a whole file into a malloc'd buffer. */
static unsigned char *data_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) { loom_fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            unsigned char *b = realloc(buf, cap);
            if (!b) { free(buf); fclose(f); loom_fail("%s: out of memory reading it", path); return NULL; }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); loom_fail("%s: read error", path); return NULL; }
    *len = n;
    return buf;
}

static int data_parse_tokfile(token_data *d, const char *path, const unsigned char *buf, size_t len,
                              const tokenizer *tok)
{
    uint32_t version = len >= 12 ? le32(buf + 8) : 0;
    size_t hdr = version == 1 ? 24 : TOKFILE_HEADER_BYTES;
    if (len < hdr) return loom_fail("%s: truncated token file header", path);
    uint32_t width = le32(buf + 12);
    uint64_t count = le64(buf + 16);
    if (version != 1 && version != TOKFILE_VERSION)
        return loom_fail("%s: token file version %u, this loom reads 1 and %d", path, version, TOKFILE_VERSION);
    uint64_t made_by = version == 1 ? TOKENIZER_BYTE_HASH : le64(buf + 24); /* v1: byte tokenizer only */
    if (made_by != tokenizer_hash(tok))
        return loom_fail("%s: made by tokenizer %016llx, the model uses %s (%016llx): re-run loom tokenize "
                         "with this model's job", path, (unsigned long long)made_by, tokenizer_describe(tok),
                         (unsigned long long)tokenizer_hash(tok));
    if (width != 2 && width != 4)
        return loom_fail("%s: token width %u bytes (must be 2 or 4)", path, width);
    size_t have = (len - hdr) / width;
    if (count > have)
        return loom_fail("%s: truncated: header says %llu tokens, file holds %zu", path,
                         (unsigned long long)count, have);
    d->tokens = malloc((count ? count : 1) * sizeof(int32_t));
    if (!d->tokens) return loom_fail("%s: out of memory for %llu tokens", path, (unsigned long long)count);
    const unsigned char *p = buf + hdr;
    for (uint64_t i = 0; i < count; i++)
        d->tokens[i] = width == 2 ? (int32_t)(p[2 * i] | p[2 * i + 1] << 8) : (int32_t)le32(p + 4 * i);
    d->n = count;
    return 0;
}

int token_data_load(token_data *d, const char *path, tokenizer *tok, int vocab)
{
    memset(d, 0, sizeof *d);
    size_t len;
    unsigned char *buf = data_read_file(path, &len);
    if (!buf) return -1;
    int rc = 0;
    if (len >= 8 && memcmp(buf, TOKFILE_MAGIC, 8) == 0) {
        rc = data_parse_tokfile(d, path, buf, len, tok);
    } else { /* plain text: the model's tokenizer */
        d->tokens = tokenizer_encode_alloc(tok, (const char *)buf, len, &d->n);
        if (!d->tokens) rc = loom_fail("%s: %s", path, loom_error());
    }
    free(buf);
    for (size_t i = 0; rc == 0 && i < d->n; i++)
        if (d->tokens[i] < 0 || d->tokens[i] >= vocab)
            rc = loom_fail("%s: token id %d at position %zu is outside the model's vocab (%d)", path,
                           d->tokens[i], i, vocab);
    if (rc) token_data_free(d);
    return rc;
}

void token_data_free(token_data *d)
{
    free(d->tokens);
    d->tokens = NULL;
    d->n = 0;
}

int tokfile_write(const char *path, const int32_t *tokens, size_t n, int width, uint64_t tok_hash)
{
    if (width != 2 && width != 4) return loom_fail("%s: token width must be 2 or 4", path);
    FILE *f = fopen(path, "wb");
    if (!f) return loom_fail("%s: cannot create: %s", path, strerror(errno));
    unsigned char hdr[TOKFILE_HEADER_BYTES];
    memcpy(hdr, TOKFILE_MAGIC, 8);
    put32(hdr + 8, TOKFILE_VERSION);
    put32(hdr + 12, (uint32_t)width);
    put64(hdr + 16, n);
    put64(hdr + 24, tok_hash);
    int ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char b[4];
        if (width == 2 && (tokens[i] < 0 || tokens[i] > 65535)) {
            fclose(f);
            return loom_fail("%s: token %d does not fit 2 bytes", path, tokens[i]);
        }
        put32(b, (uint32_t)tokens[i]);
        ok = fwrite(b, 1, (size_t)width, f) == (size_t)width;
    }
    if (fclose(f) != 0 || !ok) return loom_fail("%s: write failed: %s", path, strerror(errno));
    return 0;
}

void token_data_sample(const token_data *d, uint64_t seed, uint64_t g, int T, int32_t *tokens,
                       int32_t *targets)
{
    /* the data stream is independent of the init stream: a different key in the seed */
    size_t windows = d->n - (size_t)T; /* starts 0 .. n-T-1 leave room for the last target */
    size_t start = (size_t)(rng_u64(seed ^ 0xDA7A5EEDull, g) % windows);
    memcpy(tokens, d->tokens + start, (size_t)T * sizeof(int32_t));
    memcpy(targets, d->tokens + start + 1, (size_t)T * sizeof(int32_t));
}
