/* data.c: token file I/O and deterministic window sampling (see data.h). Token files are
 * memory-mapped, never copied, so a corpus larger than RAM is fine; text is read whole under a
 * cap. Only a regular file is opened for data: a FIFO would block and /dev/zero never ends. */
#include "core/text/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"
#include "core/text/tokenizer.h"
static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* Open path for reading if it is a regular file; its size in *size. -1 + loom_fail. O_NONBLOCK:
 * open() of a FIFO would otherwise wait for a writer before the type could be checked. */
static int data_open_regular(const char *path, size_t *size)
{
    if (!path[0]) return loom_fail("data.train: not set");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return loom_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return loom_fail("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail("%s: not a regular file (data must be a file, not a device, FIFO or folder)", path);
    }
    *size = (size_t)st.st_size;
    return fd;
}

static int data_is_text_name(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcasecmp(path + n - 4, ".txt") == 0;
}

/* Check the header of a mapped token file and point d at its ids: version 1 (24 bytes, the byte
 * tokenizer's) or 2 (32 bytes, with the hash of the tokenizer that made it, which must be tok). */
static int data_parse_tokfile(token_data *d, const char *path, const unsigned char *buf, size_t len,
                              const tokenizer *tok)
{
    if (len < 8 || memcmp(buf, TOKFILE_MAGIC, 8) != 0)
        return loom_fail("%s: not a loom token file (it does not start with \"%s\"); a text file "
                         "must be named *.txt, or converted with `loom tokenize`", path, TOKFILE_MAGIC);
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
    d->payload = buf + hdr;
    d->width = (int)width;
    d->n = (size_t)count;
    return 0;
}

static int data_map_tokfile(token_data *d, const char *path, const tokenizer *tok)
{
    size_t len;
    int fd = data_open_regular(path, &len);
    if (fd < 0) return -1;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (len && map == MAP_FAILED) return loom_fail("%s: cannot map %zu bytes: %s", path, len, strerror(e));
    d->map = map;
    d->map_len = len;
    static const unsigned char none[1];
    return data_parse_tokfile(d, path, map ? map : none, len, tok);
}

/* Read a text file whole (at most TOKDATA_TEXT_MAX bytes) and encode it with the model's tokenizer. */
static int data_read_text(token_data *d, const char *path, tokenizer *tok)
{
    size_t len;
    int fd = data_open_regular(path, &len);
    if (fd < 0) return -1;
    if (len > TOKDATA_TEXT_MAX) {
        close(fd);
        return loom_fail("%s: %zu MiB of text, over the %llu MiB loom holds in memory; convert it with "
                         "`loom tokenize` (a token file is memory-mapped)", path, len >> 20, TOKDATA_TEXT_MAX >> 20);
    }
    char *buf = malloc(len ? len : 1);
    size_t n = 0;
    int rc = buf ? 0 : loom_fail("%s: out of memory for %zu bytes of text", path, len);
    while (rc == 0 && n < len) { /* a file that grows meanwhile is read up to the size seen */
        ssize_t got = read(fd, buf + n, len - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = loom_fail("%s: read error: %s", path, strerror(errno));
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (rc == 0) {
        d->tokens = tokenizer_encode_alloc(tok, buf, n, &d->n);
        if (!d->tokens) rc = loom_fail("%s: %s", path, loom_error());
    }
    free(buf);
    return rc;
}

static int data_check_vocab(const token_data *d, const char *path, int vocab)
{
    if (d->width == 2 && vocab >= 65536) return 0;
    if (d->map) posix_madvise(d->map, d->map_len, POSIX_MADV_SEQUENTIAL);
    for (size_t i = 0; i < d->n; i++) {
        int32_t id = token_data_at(d, i);
        if (id < 0 || id >= vocab)
            return loom_fail("%s: token id %d at position %zu is outside the model's vocab (%d)", path, id, i, vocab);
    }
    if (d->map) posix_madvise(d->map, d->map_len, POSIX_MADV_RANDOM); /* training reads windows anywhere */
    return 0;
}

static int data_load(token_data *d, const char *path, tokenizer *tok, int vocab, int text)
{
    memset(d, 0, sizeof *d);
    int rc = text ? data_read_text(d, path, tok) : data_map_tokfile(d, path, tok);
    if (rc == 0) rc = data_check_vocab(d, path, vocab);
    if (rc) token_data_free(d);
    return rc;
}

int token_data_load(token_data *d, const char *path, tokenizer *tok, int vocab)
{
    return data_load(d, path, tok, vocab, data_is_text_name(path));
}

int token_data_load_text(token_data *d, const char *path, tokenizer *tok, int vocab)
{
    return data_load(d, path, tok, vocab, 1);
}

void token_data_free(token_data *d)
{
    free(d->tokens);
    if (d->map) munmap(d->map, d->map_len);
    memset(d, 0, sizeof *d);
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
    for (int t = 0; t < T; t++) {
        tokens[t] = token_data_at(d, start + (size_t)t);
        targets[t] = token_data_at(d, start + (size_t)t + 1);
    }
}
