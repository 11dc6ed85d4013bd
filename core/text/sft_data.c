/* sft_data.c: JSONL loading with line-numbered errors, the seeded train/val split, power-of-two
 * length bucketing, and deterministic batch assembly (see sft_data.h). Never draws randomness
 * from anything but rng_u64 of (seed, counter), so every rank and world size agrees. */
#include "core/text/sft_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"

/* Independent streams from one seed: the split and the epoch order never share draws. */
#define SFT_SPLIT_KEY 0x5E1EC7ED5A11D47Aull
#define SFT_ORDER_KEY 0x0DE25F7E5A3B1C99ull

/* Bucketed epochs: this many global batches are sorted by length together (see sft_data.h). */
#define SFT_BUCKET_CHUNK 32
#define SFT_BATCH_KEY 0xBA7C4E5D1F0A2B37ull /* the order of an epoch's batches */

struct sft_perm_cache {
    int valid;
    uint64_t seed;
    int64_t epoch;
    int *perm;         /* the epoch's order: n_train entries, or n_pad (-1 = an empty row) bucketed */
    int *shuffled;     /* bucketed: scratch, n_train */
    uint64_t *keys;    /* bucketed: scratch, n_train sort keys */
    int *batch_perm;   /* bucketed: scratch, the batches' order */
};

/* A growable list of parsed examples. */
typedef struct sft_list {
    sft_example *ex;
    int n, cap;
} sft_list;

static int sft_list_push(sft_list *l, const sft_example *ex)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        sft_example *p = realloc(l->ex, (size_t)cap * sizeof *p);
        if (!p) return loom_fail("out of memory for %d examples", cap);
        l->ex = p;
        l->cap = cap;
    }
    l->ex[l->n++] = *ex;
    return 0;
}

static void sft_list_free(sft_list *l)
{
    for (int i = 0; i < l->n; i++) chat_example_free(&l->ex[i]);
    free(l->ex);
    memset(l, 0, sizeof *l);
}

/* Read a JSONL file whole: a regular file only (a FIFO would block, /dev/zero never end) and at
 * most SFT_FILE_MAX bytes, so what is held stays bounded whatever the path names. */
static char *sft_read_file(const char *path, size_t *len)
{
    if (!path[0]) { loom_fail("data.train: not set"); return NULL; }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { loom_fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    int bad = fstat(fd, &st) != 0 ? loom_fail("%s: cannot stat: %s", path, strerror(errno))
            : !S_ISREG(st.st_mode) ? loom_fail("%s: not a regular file (data must be a file, not a "
                                               "device, FIFO or folder)", path)
            : (unsigned long long)st.st_size > SFT_FILE_MAX
                ? loom_fail("%s: %lld MiB, over the %llu MiB of JSONL loom holds in memory (split it)",
                            path, (long long)st.st_size >> 20, SFT_FILE_MAX >> 20)
                : 0;
    if (bad) { close(fd); return NULL; }
    size_t cap = (size_t)st.st_size, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { close(fd); loom_fail("%s: out of memory for %zu bytes", path, cap); return NULL; }
    while (n < cap) { /* a file that grows meanwhile is read up to the size seen */
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { loom_fail("%s: read error: %s", path, strerror(errno)); free(buf); close(fd); return NULL; }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Strict UTF-8 (RFC 3629) over n bytes: NULL if valid, else why, with the byte offset in *at.
 * Refuses a raw NUL, overlong forms (C0, C1, E0 80..9F, F0 80..8F), UTF-16 surrogates (ED A0..BF),
 * code points above U+10FFFF (F4 90.., F5..FF), stray continuation bytes and cut sequences. */
static const char *sft_utf8_problem(const unsigned char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        *at = i;
        if (c == 0) return "a raw NUL byte";
        if (c < 0x80) { i++; continue; }
        int more = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
        if (c == 0xC0 || c == 0xC1) return "overlong UTF-8";
        if (!more) return "invalid UTF-8";
        /* the second byte's range carries the overlong / surrogate / range limits */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (i + (size_t)more >= n) return "a cut UTF-8 sequence";
        unsigned c1 = s[i + 1];
        if (c1 < 0x80 || c1 > 0xBF) return "invalid UTF-8";
        if (c1 < lo) return "overlong UTF-8";
        if (c1 > hi) return c == 0xED ? "a UTF-16 surrogate in UTF-8" : "a code point above U+10FFFF";
        for (int k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return "invalid UTF-8";
        i += (size_t)more + 1;
    }
    return NULL;
}

/* JSON's \u0000 decodes to a NUL that would cut the C string it lands in: refuse it as the raw
 * byte is refused. Outside strings a backslash is invalid JSON anyway, so no string tracking. */
static int sft_escaped_nul(const char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !strncmp(s + i + 2, "0000", 4)) { *at = i; return 1; }
        i++; /* skip the escaped character (so \\u0000 is a backslash then text) */
    }
    return 0;
}

/* One line's bytes before JSON sees them: -1 + loom_fail (no location) if they are refused. */
static int sft_check_line(const char *p, size_t n)
{
    size_t at = 0;
    const char *why = sft_utf8_problem((const unsigned char *)p, n, &at);
    if (why) return loom_fail("%s at byte %zu", why, at + 1);
    if (sft_escaped_nul(p, n, &at)) return loom_fail("an escaped NUL (\\u0000) at byte %zu", at + 1);
    return 0;
}

static int sft_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* A bad line: fail (the default) or count it in *bad. The parser's message has no location. */
static int sft_bad_line(const char *path, int line, int skip, sft_bad_lines *bad)
{
    char why[384];
    snprintf(why, sizeof why, "%s", loom_error());
    if (!skip) return loom_fail("%s:%d: %s (data.skip_bad_lines=true skips such lines)", path, line, why);
    if (bad->count < SFT_BAD_LINES_KEPT) bad->line[bad->count] = line;
    if (bad->count == 0) snprintf(bad->first, sizeof bad->first, "%s:%d: %s", path, line, why);
    bad->count++;
    return 0;
}

/* Parse every non-blank line of path into out (flags: chat_example_parse's). */
static int sft_parse_file(const char *path, int skip, int flags, sft_list *out, sft_bad_lines *bad)
{
    size_t len;
    char *buf = sft_read_file(path, &len);
    if (!buf) return -1;
    const char *p = buf, *end = buf + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* UTF-8 byte order mark */
    int rc = 0;
    for (int line = 1; rc == 0 && p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!sft_blank(p, n)) {
            sft_example ex;
            if (sft_check_line(p, n) == 0 && chat_example_parse(p, n, &ex, flags) == 0) {
                ex.line = line;
                if ((rc = sft_list_push(out, &ex)) != 0) chat_example_free(&ex);
            } else if (out->n == 0 && bad->count == 0 && p[strspn(p, " \t")] != '{') {
                /* the first line is no JSON object at all: text, not tool-calling data */
                rc = loom_fail("%s:%d: not JSONL tool-calling data (no JSON object on the line): a fine-tune reads one "
                               "example a line, {\"query\", \"tools\", \"answers\"} or {\"messages\"} "
                               "(docs/finetune-data.md); plain text is `loom train`'s data", path, line);
            } else {
                rc = sft_bad_line(path, line, skip, bad);
            }
        }
        p += n + 1;
    }
    free(buf);
    if (rc == 0 && out->n == 0) {
        if (bad->count)
            rc = loom_fail("%s: no valid examples (%d bad lines skipped, first: %s)", path, bad->count,
                           bad->first);
        else
            rc = loom_fail("%s: no examples", path);
    }
    return rc;
}

/* Held out iff a uniform draw keyed by the line number falls under val_split. */
static int sft_is_val(uint64_t seed, int line, double val_split)
{
    double u = (double)(rng_u64(seed ^ SFT_SPLIT_KEY, (uint64_t)line) >> 11) * (1.0 / 9007199254740992.0);
    return u < val_split;
}

static int sft_split(sft_list *all, sft_list *train, sft_list *val, uint64_t seed, double val_split)
{
    for (int i = 0; i < all->n; i++) {
        sft_list *to = sft_is_val(seed, all->ex[i].line, val_split) ? val : train;
        if (sft_list_push(to, &all->ex[i])) return -1;
        memset(&all->ex[i], 0, sizeof all->ex[i]); /* moved */
    }
    sft_list_free(all);
    return 0;
}

/* Smallest power of two >= max(SFT_MIN_LEN, longest), capped at max_len. */
static int sft_bucket(int longest, int max_len)
{
    long T = SFT_MIN_LEN;
    while (T < longest && T < (1L << 30)) T *= 2;
    if (max_len > 0 && T > max_len) T = max_len;
    return (int)T;
}

/* Render list l into set s with rows of T tokens; counts examples cut at T. */
static int sft_render_set(const chat_template *ct, sft_list *l, sft_set *s, int T, int *n_truncated)
{
    size_t rows = l->n ? (size_t)l->n : 1;
    s->tokens = malloc(rows * (size_t)T * sizeof *s->tokens);
    s->loss_mask = malloc(rows * (size_t)T);
    s->len = malloc(rows * sizeof *s->len);
    s->prompt_len = malloc(rows * sizeof *s->prompt_len);
    if (!s->tokens || !s->loss_mask || !s->len || !s->prompt_len)
        return loom_fail("out of memory for %d examples of %d tokens", l->n, T);
    for (int i = 0; i < l->n; i++) {
        int32_t *row = s->tokens + (size_t)i * T;
        uint8_t *mask = s->loss_mask + (size_t)i * T;
        int full = chat_render(ct, &l->ex[i], row, mask, T);
        int len = full < T ? full : T;
        for (int t = len; t < T; t++) { row[t] = ct->pad; mask[t] = 0; }
        s->len[i] = len;
        s->prompt_len[i] = chat_render_prompt(ct, &l->ex[i], NULL, 0);
        if (full < 0 || s->prompt_len[i] < 0) return -1;
        if (full > T) (*n_truncated)++;
    }
    s->n = l->n;
    s->ex = l->ex; /* the set takes the examples */
    memset(l, 0, sizeof *l);
    return 0;
}

static int sft_longest(const chat_template *ct, const sft_list *l, const char *path)
{
    int m = 0;
    for (int i = 0; i < l->n; i++) {
        int n = chat_render(ct, &l->ex[i], NULL, NULL, 0);
        if (n < 0) return loom_fail("%s:%d: %s", path, l->ex[i].line, loom_error()); /* the format cannot write it */
        if (n > m) m = n;
    }
    return m;
}

/* -1 + loom_fail when no row of set s keeps a target: every prompt (through <|assistant|>) fills
 * the T tokens, so the split would train on nothing (loss 0) or validate to 0/0 (NaN). */
static int sft_check_targets(const sft_set *s, int T, const char *path, const char *what)
{
    int shortest = -1;
    for (int i = 0; i < s->n; i++)
        if (shortest < 0 || s->prompt_len[i] < s->prompt_len[shortest]) shortest = i;
    if (shortest < 0 || s->prompt_len[shortest] < T) return 0;
    return loom_fail("data.max_len (%d) is not above the shortest rendered prompt (%d tokens, %s:%d): no %s "
                     "example keeps an answer token; raise data.max_len (model.max_seq also caps it)",
                     T, s->prompt_len[shortest], path, s->ex[shortest].line, what);
}

/* Both lists parsed and split: bucket, render, and set up the order cache. */
static int sft_finish(sft_data *d, sft_list *train, sft_list *val, const data_config *cfg)
{
    int lt = sft_longest(d->chat, train, cfg->train), lv = lt < 0 ? -1 : sft_longest(d->chat, val, cfg->val[0] ? cfg->val : cfg->train);
    if (lt < 0 || lv < 0) return -1;
    d->longest = lt > lv ? lt : lv;
    d->T = sft_bucket(d->longest, d->T);
    if (sft_render_set(d->chat, train, &d->train, d->T, &d->n_truncated) ||
        sft_render_set(d->chat, val, &d->val, d->T, &d->n_truncated))
        return -1;
    if (sft_check_targets(&d->train, d->T, cfg->train, "training") ||
        sft_check_targets(&d->val, d->T, cfg->val[0] ? cfg->val : cfg->train, "validation"))
        return -1;
    d->perm = calloc(1, sizeof *d->perm);
    if (d->perm) d->perm->perm = malloc((size_t)d->train.n * sizeof(int));
    if (!d->perm || !d->perm->perm) return loom_fail("out of memory for the epoch order");
    return 0;
}

int sft_data_load(sft_data *d, const data_config *cfg, const chat_template *ct, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->chat = ct;
    sft_list all = {0}, train = {0}, val = {0};
    int flags = ct->format && strcmp(ct->format, "needle") == 0 ? CHAT_PARSE_NEEDLE : 0; /* as Needle reads */
    int rc = sft_parse_file(cfg->train, cfg->skip_bad_lines, flags, &all, &d->bad);
    if (rc == 0 && cfg->val[0]) {
        rc = sft_parse_file(cfg->val, cfg->skip_bad_lines, flags, &val, &d->bad_val);
        if (rc == 0) { train = all; memset(&all, 0, sizeof all); }
    } else if (rc == 0) {
        rc = sft_split(&all, &train, &val, seed, cfg->val_split);
        if (rc == 0 && train.n == 0)
            rc = loom_fail("%s: all %d examples went to validation (data.val_split = %g); lower "
                           "data.val_split or set data.val", cfg->train, val.n, cfg->val_split);
    }
    d->T = cfg->max_len; /* sft_finish turns the cap into the bucket */
    if (rc == 0) rc = sft_finish(d, &train, &val, cfg);
    sft_list_free(&all);
    sft_list_free(&train);
    sft_list_free(&val);
    if (rc) {
        sft_bad_lines bad = d->bad, bad_val = d->bad_val; /* kept for the caller's report */
        sft_data_free(d);
        d->bad = bad;
        d->bad_val = bad_val;
    }
    return rc;
}

static void sft_set_free(sft_set *s)
{
    for (int i = 0; s->ex && i < s->n; i++) chat_example_free(&s->ex[i]);
    free(s->ex);
    free(s->tokens);
    free(s->loss_mask);
    free(s->len);
    free(s->prompt_len);
    memset(s, 0, sizeof *s);
}

void sft_data_free(sft_data *d)
{
    sft_set_free(&d->train);
    sft_set_free(&d->val);
    if (d->perm) {
        free(d->perm->perm);
        free(d->perm->shuffled);
        free(d->perm->keys);
        free(d->perm->batch_perm);
    }
    free(d->perm);
    memset(d, 0, sizeof *d);
}

/* Fisher-Yates over 0..n-1 keyed by (seed, epoch): for i = n-1 .. 1 swap i with j = u_i mod (i+1),
 * u_i = rng_u64(key, i). (The modulo bias is < n / 2^64.) */
static void sft_permute(int *perm, int n, uint64_t seed, int64_t epoch)
{
    uint64_t key = rng_u64(seed ^ SFT_ORDER_KEY, (uint64_t)epoch);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int sft_key_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Bucketed epoch e into c->perm (n_pad entries): the shuffle cut into chunks of
 * SFT_BUCKET_CHUNK global batches, each chunk sorted by length (longest first, ties in shuffle
 * order: one total order), cut into global batches (the epoch's last one short, filled with -1),
 * and the batches put in an order keyed by (seed, e). */
static void sft_bucket_order(const sft_data *d, struct sft_perm_cache *c, uint64_t seed, int64_t e)
{
    int n = d->train.n, B = d->batch, nb = (n + B - 1) / B, chunk = SFT_BUCKET_CHUNK * B;
    sft_permute(c->shuffled, n, seed, e);
    for (int i = 0; i < n; i++) /* (INT32_MAX - len, position): sorts by length, then position */
        c->keys[i] = ((uint64_t)(INT32_MAX - d->train.len[c->shuffled[i]]) << 32) | (uint32_t)i;
    for (int c0 = 0; d->sorted && c0 < n; c0 += chunk)
        qsort(c->keys + c0, (size_t)(n - c0 < chunk ? n - c0 : chunk), sizeof *c->keys, sft_key_cmp);
    uint64_t key = rng_u64(seed ^ SFT_BATCH_KEY, (uint64_t)e);
    for (int i = 0; i < nb; i++) c->batch_perm[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)(rng_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int t = c->batch_perm[i];
        c->batch_perm[i] = c->batch_perm[j];
        c->batch_perm[j] = t;
    }
    for (int k = 0; k < nb; k++)
        for (int i = 0; i < B; i++) {
            int at = c->batch_perm[k] * B + i;
            c->perm[k * B + i] = at < n ? c->shuffled[(uint32_t)c->keys[at]] : -1;
        }
}

/* Samples per epoch in the running index: n_train, or whole global batches when bucketed. */
static uint64_t sft_epoch_len(const sft_data *d)
{
    uint64_t n = (uint64_t)d->train.n, B = (uint64_t)d->batch;
    return d->bucket ? (n + B - 1) / B * B : n;
}

int sft_sample_index(const sft_data *d, uint64_t seed, int epoch, uint64_t g)
{
    uint64_t n = sft_epoch_len(d);
    int64_t e = (int64_t)epoch + (int64_t)(g / n);
    struct sft_perm_cache *c = d->perm; /* the cache is behind a pointer: mutable through const d */
    if (!c->valid || c->seed != seed || c->epoch != e) {
        if (d->bucket) sft_bucket_order(d, c, seed, e);
        else sft_permute(c->perm, d->train.n, seed, e);
        c->valid = 1;
        c->seed = seed;
        c->epoch = e;
    }
    return c->perm[g % n];
}

int sft_data_batching(sft_data *d, int global_batch, int bucket, uint64_t seed)
{
    if (global_batch < 1) return loom_fail("sft: global batch %d must be >= 1", global_batch);
    struct sft_perm_cache *c = d->perm;
    d->batch = global_batch;
    d->bucket = 0;
    c->valid = 0;
    if (!bucket) return 0;
    size_t n = (size_t)d->train.n, nb = (n + (size_t)global_batch - 1) / (size_t)global_batch;
    int *perm = realloc(c->perm, nb * (size_t)global_batch * sizeof *perm);
    if (perm) c->perm = perm;
    free(c->shuffled);
    free(c->keys);
    free(c->batch_perm);
    c->shuffled = malloc(n * sizeof *c->shuffled);
    c->keys = malloc(n * sizeof *c->keys);
    c->batch_perm = malloc(nb * sizeof *c->batch_perm);
    if (!perm || !c->shuffled || !c->keys || !c->batch_perm)
        return loom_fail("out of memory for the bucketed order of %zu examples", n);
    d->bucket = 1;
    long rows = sft_steps_per_epoch(d, global_batch) * global_batch;
    d->sorted = 0;
    c->valid = 0;
    d->share_unsorted = sft_padding_share(d, seed, 0, rows);
    d->sorted = 1;
    c->valid = 0;
    d->share_sorted = sft_padding_share(d, seed, 0, rows);
    /* computed tokens sorted / unsorted = (1 - unsorted share) / (1 - sorted share) */
    d->sorted = (1.0 - d->share_unsorted) < SFT_SORT_GAIN * (1.0 - d->share_sorted);
    c->valid = 0;
    return 0;
}

/* The row length for rows of the longest length `longest`: d->T unless bucketed. */
static int sft_round_len(const sft_data *d, int longest)
{
    if (!d->bucket) return d->T;
    int T = (longest + SFT_LEN_MULTIPLE - 1) / SFT_LEN_MULTIPLE * SFT_LEN_MULTIPLE;
    if (T < SFT_LEN_MULTIPLE) T = SFT_LEN_MULTIPLE;
    return T < d->T ? T : d->T;
}

int sft_pass_len(const sft_data *d) { return sft_round_len(d, d->longest); }

int sft_batch_len(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index, int n)
{
    int longest = 0;
    for (int i = 0; d->bucket && i < n; i++) {
        int idx = sft_sample_index(d, seed, epoch, first_global_index + (uint64_t)i);
        if (idx >= 0 && d->train.len[idx] > longest) longest = d->train.len[idx];
    }
    return sft_round_len(d, longest);
}

int sft_val_batch_len(const sft_data *d, int first, int n)
{
    int longest = 0;
    for (int i = first < 0 ? -first : 0; d->bucket && i < n && first + i < d->val.n; i++)
        if (d->val.len[first + i] > longest) longest = d->val.len[first + i];
    return sft_round_len(d, longest);
}

/* One row of T: tokens from example idx of s (rows of T_data), or all padding when idx < 0. */
static long sft_fill_row(const sft_set *s, int T_data, int32_t pad, int idx, int T, int32_t *tokens,
                         int32_t *targets)
{
    const int32_t *row = idx >= 0 ? s->tokens + (size_t)idx * T_data : NULL;
    const uint8_t *mask = idx >= 0 ? s->loss_mask + (size_t)idx * T_data : NULL;
    long count = 0;
    for (int t = 0; t < T; t++) {
        int has = row && t < T_data, next = row && t + 1 < T_data && mask[t + 1];
        if (tokens) tokens[t] = has ? row[t] : pad;
        if (targets) targets[t] = next ? row[t + 1] : -1;
        count += next;
    }
    return count;
}

long sft_batch(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index, int n,
               int T, int32_t *tokens, int32_t *targets)
{
    long count = 0;
    for (int i = 0; i < n; i++) {
        int idx = sft_sample_index(d, seed, epoch, first_global_index + (uint64_t)i);
        count += sft_fill_row(&d->train, d->T, d->chat->pad, idx, T, tokens ? tokens + (size_t)i * T : NULL,
                              targets ? targets + (size_t)i * T : NULL);
    }
    return count;
}

long sft_batch_loss_tokens(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index,
                           int n, int T)
{
    return sft_batch(d, seed, epoch, first_global_index, n, T, NULL, NULL);
}

long sft_val_batch(const sft_data *d, int first, int n, int T, int32_t *tokens, int32_t *targets)
{
    long count = 0;
    for (int i = 0; i < n; i++) {
        int idx = first + i >= 0 && first + i < d->val.n ? first + i : -1;
        count += sft_fill_row(&d->val, d->T, d->chat->pad, idx, T, tokens ? tokens + (size_t)i * T : NULL,
                              targets ? targets + (size_t)i * T : NULL);
    }
    return count;
}

long sft_steps_per_epoch(const sft_data *d, int global_batch)
{
    if (global_batch <= 0) return 0;
    return ((long)d->train.n + global_batch - 1) / global_batch;
}

long sft_count_loss_tokens(const int32_t *targets, size_t n)
{
    long count = 0;
    for (size_t i = 0; i < n; i++) count += targets[i] >= 0;
    return count;
}

double sft_padding_share(const sft_data *d, uint64_t seed, uint64_t first_global_index, long n)
{
    double real = 0.0, rows = 0.0;
    long G = d->batch > 0 ? d->batch : 1;
    for (long i = 0; i < n; i += G) {
        int m = (int)(n - i < G ? n - i : G);
        uint64_t g = first_global_index + (uint64_t)i;
        rows += (double)m * sft_batch_len(d, seed, 0, g, m);
        for (int j = 0; j < m; j++) {
            int idx = sft_sample_index(d, seed, 0, g + (uint64_t)j);
            if (idx >= 0) real += d->train.len[idx];
        }
    }
    return rows > 0 ? 1.0 - real / rows : 0.0;
}
