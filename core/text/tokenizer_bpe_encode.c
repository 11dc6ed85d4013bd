/* tokenizer_bpe_encode.c: encoding and decoding with a loaded tokenizer.json, in the order the
 * tokenizers library runs: added tokens, normalizer, pre-tokenizer, BPE merges by rank (a heap
 * per word, words cached). Special tokens are never matched in text (see docs/tokenizers.md);
 * added tokens are matched with the library's lstrip / rstrip / single_word / normalized rules. */
#define _GNU_SOURCE /* memmem */
#include "core/text/tokenizer_bpe.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/error.h"

/* ---- the tables' lookups (also used while loading them, in tokenizer_bpe_load.c) ---- */

uint64_t bpe_hash_bytes(const char *s, size_t n) { return tok_fnv1a(s, n) | 1; }

int32_t bpe_lookup(const bpe *b, const char *s, size_t n)
{
    for (size_t h = bpe_hash_bytes(s, n) & b->vmap_mask;; h = (h + 1) & b->vmap_mask) {
        int32_t id = b->vmap[h];
        if (id < 0) return -1;
        if (b->tok_len[id] == n && memcmp(b->arena + b->tok_off[id], s, n) == 0) return id;
    }
}

/* ---- pieces: the pre-tokenizer's output, spans of one buffer ---- */

typedef struct bpe_pieces {
    char *buf;
    size_t n, cap;
    size_t *off, *len;
    size_t np, pcap;
} bpe_pieces;

static int pieces_add(bpe_pieces *p, size_t off, size_t len)
{
    if (len == 0) return 0;
    if (p->np == p->pcap) {
        size_t cap = p->pcap ? p->pcap * 2 : 64;
        size_t *o = realloc(p->off, cap * sizeof *o), *l = o ? realloc(p->len, cap * sizeof *l) : NULL;
        if (o) p->off = o;
        if (!o || !l) return loom_fail("tokenizer: out of memory");
        p->len = l;
        p->pcap = cap;
    }
    p->off[p->np] = off;
    p->len[p->np++] = len;
    return 0;
}

static int pieces_append(bpe_pieces *p, const char *s, size_t n)
{
    if (p->n + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->n + n + 1) cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) return loom_fail("tokenizer: out of memory");
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->n, s, n);
    p->n += n;
    return 0;
}

static void pieces_free(bpe_pieces *p)
{
    free(p->buf);
    free(p->off);
    free(p->len);
    memset(p, 0, sizeof *p);
}

/* ---- normalizers ---- */

static int bpe_is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

/* Apply step k to (s, n) into out (replacing its contents). */
static int bpe_normalize_step(const bpe_norm *k, const char *s, size_t n, bpe_pieces *out)
{
    out->n = 0;
    if (k->kind == BPE_NORM_PREPEND) {
        if (n == 0) return 0;
        return pieces_append(out, k->a, strlen(k->a)) || pieces_append(out, s, n) ? -1 : 0;
    }
    if (k->kind == BPE_NORM_REPLACE) {
        size_t al = strlen(k->a), bl = strlen(k->b), i = 0;
        while (i < n) {
            const char *hit = al <= n - i ? memmem(s + i, n - i, k->a, al) : NULL;
            size_t upto = hit ? (size_t)(hit - s) : n;
            if (pieces_append(out, s + i, upto - i)) return -1;
            if (!hit) break;
            if (pieces_append(out, k->b, bl)) return -1;
            i = upto + al;
        }
        return 0;
    }
    if (bpe_is_ascii(s, n)) return pieces_append(out, s, n); /* ASCII is in every normal form */
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (k->kind == BPE_NORM_NFC || k->kind == BPE_NORM_NFKC) opt |= UTF8PROC_COMPOSE;
    else opt |= UTF8PROC_DECOMPOSE;
    if (k->kind == BPE_NORM_NFKC || k->kind == BPE_NORM_NFKD) opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt);
    if (m < 0) return loom_fail("tokenizer: normalization failed: %s", utf8proc_errmsg(m));
    int rc = pieces_append(out, (const char *)dst, (size_t)m);
    free(dst);
    return rc;
}

/* The normalized segment in out->buf[0 .. out->n). */
static int bpe_normalize(const bpe *b, const char *s, size_t n, bpe_pieces *out)
{
    out->n = 0;
    if (pieces_append(out, s, n)) return -1;
    bpe_pieces tmp = {0};
    for (int i = 0; i < b->n_norm; i++) {
        if (bpe_normalize_step(&b->norm[i], out->buf, out->n, &tmp)) { pieces_free(&tmp); return -1; }
        bpe_pieces swap = *out;
        *out = tmp;
        tmp = swap;
    }
    pieces_free(&tmp);
    return 0;
}

/* ---- pre-tokenizers ---- */

/* Split every piece by re: matches become pieces of their own (Isolated) or go (Removed), the
 * text between them stays. Matching sees one piece at a time, as the library's does. */
static int bpe_split_regex(bpe *b, const pcre2_code *re, int removed, bpe_pieces *p)
{
    size_t np = p->np;
    size_t *off = p->off, *len = p->len;
    p->off = p->len = NULL;
    p->np = p->pcap = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < np; i++) {
        PCRE2_SPTR subj = (PCRE2_SPTR)(p->buf + off[i]);
        size_t at = 0, n = len[i];
        while (rc == 0 && at < n) {
            int m = pcre2_match(re, subj, n, at, PCRE2_NO_UTF_CHECK, b->md, NULL);
            if (m == PCRE2_ERROR_NOMATCH) break;
            if (m < 0) { rc = loom_fail("tokenizer: regex match failed (%d)", m); break; }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
            if (ov[1] == ov[0]) { /* an empty match: step over one char */
                size_t k = ov[0] + 1;
                while (k < n && ((unsigned char)subj[k] & 0xC0) == 0x80) k++;
                if (ov[0] > at) rc = pieces_add(p, off[i] + at, ov[0] - at);
                if (rc == 0) rc = pieces_add(p, off[i] + ov[0], k - ov[0]);
                at = k;
                continue;
            }
            rc = pieces_add(p, off[i] + at, ov[0] - at);
            if (rc == 0 && !removed) rc = pieces_add(p, off[i] + ov[0], ov[1] - ov[0]);
            at = ov[1];
        }
        if (rc == 0 && at < n) rc = pieces_add(p, off[i] + at, n - at);
    }
    free(off);
    free(len);
    return rc;
}

/* Rebuild the buffer piece by piece: ByteLevel's prefix space, Metaspace's replacement. */
static int bpe_rewrite(const bpe_pre *k, bpe_pieces *p, int first)
{
    bpe_pieces q = {0};
    size_t rl = strlen(k->repl);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < p->np; i++) {
        const char *s = p->buf + p->off[i];
        size_t n = p->len[i], start = q.n;
        if (k->kind == BPE_PRE_BYTELEVEL) {
            if (k->add_prefix_space && s[0] != ' ') rc = pieces_append(&q, " ", 1);
            if (rc == 0) rc = pieces_append(&q, s, n);
        } else {
            int pre = k->prepend == BPE_FIRST_ALWAYS || (k->prepend == BPE_FIRST_FIRST && first && i == 0);
            if (pre && !(n >= rl && memcmp(s, k->repl, rl) == 0)) rc = pieces_append(&q, k->repl, rl);
            for (size_t j = 0; rc == 0 && j < n; j++)
                rc = s[j] == ' ' ? pieces_append(&q, k->repl, rl) : pieces_append(&q, s + j, 1);
        }
        if (rc) break;
        if (k->kind == BPE_PRE_METASPACE && k->split) { /* MergedWithNext on the replacement */
            size_t a = start;
            for (size_t j = start + 1; j + rl <= q.n; j++)
                if (memcmp(q.buf + j, k->repl, rl) == 0) { rc = rc || pieces_add(&q, a, j - a); a = j; }
            if (rc == 0) rc = pieces_add(&q, a, q.n - a);
        } else {
            rc = pieces_add(&q, start, q.n - start);
        }
    }
    pieces_free(p);
    *p = q;
    return rc;
}

static int bpe_pretokenize(bpe *b, bpe_pieces *p, int first)
{
    if (pieces_add(p, 0, p->n)) return -1;
    for (int i = 0; i < b->n_pre; i++) {
        const bpe_pre *k = &b->pre[i];
        int rc = 0;
        if (k->kind == BPE_PRE_SPLIT) rc = bpe_split_regex(b, k->re, k->behavior == BPE_REMOVED, p);
        else if (k->kind == BPE_PRE_DIGITS) rc = bpe_split_regex(b, k->re, 0, p);
        else {
            if ((k->kind == BPE_PRE_METASPACE || k->add_prefix_space) && bpe_rewrite(k, p, first)) return -1;
            if (k->kind == BPE_PRE_BYTELEVEL && k->re) rc = bpe_split_regex(b, k->re, 0, p);
        }
        if (rc) return -1;
    }
    return 0;
}

/* ---- BPE on one word ---- */

static int bpe_merge_find(const bpe *b, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (size_t h = (size_t)(key * 0x9E3779B97F4A7C15ull >> 32) & b->mmask;; h = (h + 1) & b->mmask) {
        if (b->mkey[h] == key) return (int)h;
        if (b->mkey[h] == UINT64_MAX) return -1;
    }
}

static void heap_push(bpe *b, size_t *hn, uint64_t v)
{
    size_t i = (*hn)++;
    while (i > 0 && b->heap[(i - 1) / 2] > v) { b->heap[i] = b->heap[(i - 1) / 2]; i = (i - 1) / 2; }
    b->heap[i] = v;
}

static uint64_t heap_pop(bpe *b, size_t *hn)
{
    uint64_t top = b->heap[0], v = b->heap[--(*hn)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *hn) break;
        if (c + 1 < *hn && b->heap[c + 1] < b->heap[c]) c++;
        if (b->heap[c] >= v) break;
        b->heap[i] = b->heap[c];
        i = c;
    }
    b->heap[i] = v;
    return top;
}

static void bpe_push_pair(bpe *b, size_t *hn, int32_t pos)
{
    if (pos < 0) return;
    int32_t nx = b->next[pos];
    if (nx < 0) return;
    int m = bpe_merge_find(b, b->sym[pos], b->sym[nx]);
    if (m >= 0) heap_push(b, hn, (uint64_t)b->mrank[m] << 32 | (uint32_t)pos);
}

static int bpe_scratch(bpe *b, size_t n)
{
    if (n <= b->sym_cap) return 0;
    size_t cap = n * 2;
    free(b->sym); free(b->prev); free(b->next); free(b->heap); free(b->soff);
    b->sym = malloc(cap * sizeof *b->sym);
    b->soff = malloc(cap * sizeof *b->soff);
    b->prev = malloc(cap * sizeof *b->prev);
    b->next = malloc(cap * sizeof *b->next);
    b->heap = malloc(cap * 3 * sizeof *b->heap);
    b->sym_cap = b->sym && b->soff && b->prev && b->next && b->heap ? cap : 0;
    return b->sym_cap ? 0 : loom_fail("tokenizer: out of memory");
}

/* The initial symbols: bytes (byte-level) or chars, with byte fallback / unk for unknown chars. */
static size_t bpe_symbols(bpe *b, const char *s, size_t n)
{
    size_t k = 0;
    int unk_open = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = 1;
        if (!b->byte_level)
            while (i + cl < n && ((unsigned char)s[i + cl] & 0xC0) == 0x80) cl++;
        int32_t id = b->byte_level ? b->byte_id[(unsigned char)s[i]] : bpe_lookup(b, s + i, cl);
        if (id >= 0) { b->soff[k] = (int32_t)i; b->sym[k++] = id; unk_open = 0; i += cl; continue; }
        int fell = 0;
        if (b->byte_fallback) {
            int32_t ids[4];
            fell = 1;
            for (size_t j = 0; j < cl && fell; j++) {
                static const char hex[] = "0123456789ABCDEF";
                char name[7] = {'<', '0', 'x', hex[(unsigned char)s[i + j] >> 4], hex[s[i + j] & 15], '>', 0};
                ids[j] = bpe_lookup(b, name, 6);
                fell = ids[j] >= 0;
            }
            for (size_t j = 0; fell && j < cl; j++) { b->soff[k] = (int32_t)(i + j); b->sym[k++] = ids[j]; }
        }
        if (fell) unk_open = 0;
        else if (b->unk >= 0 && !(b->fuse_unk && unk_open)) { b->soff[k] = (int32_t)i; b->sym[k++] = b->unk; unk_open = 1; }
        i += cl; /* no unk token: the library drops the char; so does loom */
    }
    return k;
}

/* Merge sym[a .. e) by rank (ties: leftmost first), the library's order, then emit it. */
static int bpe_merge_run(bpe *b, int32_t a, int32_t e, tok_ids *out)
{
    size_t hn = 0;
    for (int32_t i = a; i < e; i++) {
        b->prev[i] = i - 1;
        b->next[i] = i + 1 < e ? i + 1 : -1;
    }
    b->prev[a] = -1;
    for (int32_t i = a; i + 1 < e; i++) bpe_push_pair(b, &hn, i);
    while (hn) {
        uint64_t top = heap_pop(b, &hn);
        int32_t pos = (int32_t)(uint32_t)top, nx = b->next[pos];
        if (b->sym[pos] < 0 || nx < 0) continue;
        int m = bpe_merge_find(b, b->sym[pos], b->sym[nx]);
        if (m < 0 || b->mrank[m] != (uint32_t)(top >> 32)) continue; /* a stale entry */
        b->sym[pos] = b->mnew[m];
        b->sym[nx] = -2;
        b->next[pos] = b->next[nx];
        if (b->next[nx] >= 0) b->prev[b->next[nx]] = pos;
        bpe_push_pair(b, &hn, b->prev[pos]);
        bpe_push_pair(b, &hn, pos);
    }
    for (int32_t i = a; i >= 0; i = b->next[i])
        if (tok_ids_push(out, b->sym[i])) return -1;
    return 0;
}

/* Whether symbols l, r (side by side) may end up in one token: both in some merge, and some
 * merge's left ends in l's last char while its right starts with r's first (a merged token's
 * text is its parts', so a merge across l | r needs exactly that). */
static int bpe_may_join(const bpe *b, int32_t l, int32_t r)
{
    return b->in_merge[l] && b->in_merge[r] && bpe_joinable(b, b->last_c[l], b->first_c[r]);
}

/* A word with no pre-tokenizer split (a Llama 2 kind: the whole text) is long; a symbol in no
 * merge (a byte-fallback newline, say) never merges, nor do two symbols no merge can join
 * ("x" | "▁" when no token has a "▁" after other text), so what lies either side merges alone:
 * one small heap per run instead of one the text's size (the same ids, in cache). */
#define BPE_CACHE_SLOTS (1u << 16)
#define BPE_CACHE_MAX_WORD 64

static int bpe_cache_get(bpe *b, const char *s, size_t n, uint64_t *h, size_t *slot, tok_ids *out);
static void bpe_cache_put(bpe *b, const char *s, size_t n, uint64_t h, size_t slot, const int32_t *ids, size_t nid);

/* A run's symbols are a function of its bytes s[soff[a] .. soff[e]) (a fused or dropped unknown
 * char goes with the run before it, as it would alone), so a run repeats like a word does. */
static int bpe_cached_run(bpe *b, const char *s, int32_t a, int32_t e, size_t n, int32_t k, tok_ids *out)
{
    size_t at = (size_t)b->soff[a], len = (e < k ? (size_t)b->soff[e] : n) - at;
    if (len > BPE_CACHE_MAX_WORD) return bpe_merge_run(b, a, e, out);
    uint64_t h;
    size_t slot, before = out->n;
    int hit = bpe_cache_get(b, s + at, len, &h, &slot, out);
    if (hit) return hit < 0 ? -1 : 0;
    if (bpe_merge_run(b, a, e, out)) return -1;
    bpe_cache_put(b, s + at, len, h, slot, out->v + before, out->n - before);
    return 0;
}

static int bpe_word(bpe *b, const char *s, size_t n, tok_ids *out, int runs_cached)
{
    if (b->ignore_merges) {
        int32_t id = bpe_lookup(b, s, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (bpe_scratch(b, n + 1)) return -1;
    int32_t k = (int32_t)bpe_symbols(b, s, n);
    for (int32_t a = 0; a < k;) {
        int32_t e = a + 1;
        while (e < k && bpe_may_join(b, b->sym[e - 1], b->sym[e])) e++;
        int rc = e - a > 1 && runs_cached ? bpe_cached_run(b, s, a, e, n, k, out) : bpe_merge_run(b, a, e, out);
        if (rc) return -1;
        a = e;
    }
    return 0;
}

/* ---- the word cache: pieces repeat (" the", " of"), so most words are merged once ---- */

/* 1 (ids pushed) when s is cached, 0 when not (*h, *slot say where it goes), -1 on error. */
static int bpe_cache_get(bpe *b, const char *s, size_t n, uint64_t *h, size_t *slot, tok_ids *out)
{
    if (!b->cache) {
        b->cache = calloc(BPE_CACHE_SLOTS, sizeof *b->cache);
        if (!b->cache) return loom_fail("tokenizer: out of memory");
        b->cache_mask = BPE_CACHE_SLOTS - 1;
    }
    *h = bpe_hash_bytes(s, n);
    size_t i = *h & b->cache_mask;
    for (; b->cache[i].hash; i = (i + 1) & b->cache_mask) {
        const bpe_cache_entry *e = &b->cache[i];
        if (e->hash == *h && e->key_len == n && memcmp(b->carena + e->key_off, s, n) == 0) {
            const int32_t *ids = (const int32_t *)(b->carena + e->ids_off);
            for (uint32_t j = 0; j < e->n_ids; j++)
                if (tok_ids_push(out, ids[j])) return -1;
            return 1;
        }
    }
    *slot = i;
    return 0;
}

static void bpe_cache_put(bpe *b, const char *s, size_t n, uint64_t h, size_t slot, const int32_t *ids, size_t nid)
{
    size_t need = (n + 3) / 4 * 4 + nid * 4;
    if (b->cache_used * 2 >= BPE_CACHE_SLOTS) return; /* full: stop adding */
    if (b->carena_n + need > b->carena_cap) {
        size_t cap = b->carena_cap ? b->carena_cap * 2 : 1 << 20;
        char *a = realloc(b->carena, cap);
        if (!a) return; /* the cache is an optimisation: no room, no entry */
        b->carena = a;
        b->carena_cap = cap;
    }
    bpe_cache_entry *e = &b->cache[slot];
    e->key_off = (uint32_t)b->carena_n;
    e->key_len = (uint32_t)n;
    memcpy(b->carena + b->carena_n, s, n);
    e->ids_off = (uint32_t)(b->carena_n + (n + 3) / 4 * 4);
    memcpy(b->carena + e->ids_off, ids, nid * 4);
    e->n_ids = (uint32_t)nid;
    e->hash = h;
    b->carena_n += need;
    b->cache_used++;
}

static int bpe_cached_word(bpe *b, const char *s, size_t n, tok_ids *out)
{
    if (n > BPE_CACHE_MAX_WORD) return bpe_word(b, s, n, out, 1);
    uint64_t h;
    size_t slot, before = out->n;
    int hit = bpe_cache_get(b, s, n, &h, &slot, out);
    if (hit) return hit < 0 ? -1 : 0;
    if (bpe_word(b, s, n, out, 0)) return -1;
    bpe_cache_put(b, s, n, h, slot, out->v + before, out->n - before);
    return 0;
}

/* A WordLevel model's word: its id, else unk (the library fails without one). */
static int bpe_word_level(bpe *b, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    int32_t id = bpe_lookup(b, s, n);
    if (id < 0 && (id = b->unk) < 0)
        return loom_fail("tokenizer: \"%.*s\" is not in the WordLevel vocab, which has no unk_token",
                         (int)(n < 40 ? n : 40), s);
    return tok_ids_push(out, id);
}

/* ---- encode ---- */

/* Pre-tokenize normalized text and merge each word. */
static int bpe_words(bpe *b, bpe_pieces *p, int first, tok_ids *out)
{
    int rc = bpe_pretokenize(b, p, first);
    for (size_t i = 0; rc == 0 && i < p->np; i++)
        rc = b->word_level ? bpe_word_level(b, p->buf + p->off[i], p->len[i], out)
                           : bpe_cached_word(b, p->buf + p->off[i], p->len[i], out);
    return rc;
}

/* ---- added tokens: the library's AddedVocabulary::find_matches ---- */

/* Unicode White_Space (the \s of the library's Rust regex): the code point at s, its length in
 * *len; 0 when it is not one. */
static int bpe_space_at(const char *s, size_t n, size_t *len)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    *len = k > 0 ? (size_t)k : 1;
    return k > 0 && ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
                     (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
                     c == 0x3000);
}

/* Rust regex's \w: alphabetic, marks, decimal digits, connector punctuation, joiners. */
static int bpe_word_char(utf8proc_int32_t c)
{
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC || c == 0x200C || c == 0x200D;
}

/* Start of the code point that ends s[0..at). */
static size_t bpe_prev_char(const char *s, size_t at)
{
    do at--;
    while (at > 0 && ((unsigned char)s[at] & 0xC0) == 0x80);
    return at;
}

static int bpe_word_at(const char *s, size_t n)
{
    utf8proc_int32_t c;
    return utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c) > 0 && bpe_word_char(c);
}

/* Where the whitespace that ends s[0..at) begins (lstrip), and how long the whitespace that
 * starts s[0..n) is (rstrip). */
static size_t bpe_space_before(const char *s, size_t at)
{
    size_t len;
    while (at > 0) {
        size_t p = bpe_prev_char(s, at);
        if (!bpe_space_at(s + p, at - p, &len)) break;
        at = p;
    }
    return at;
}

static size_t bpe_space_after(const char *s, size_t n)
{
    size_t i = 0, len;
    while (i < n && bpe_space_at(s + i, n - i, &len)) i += len;
    return i;
}

/* The longest added token of kind `norm` whose match text starts at s, or -1 (leftmost-longest:
 * the scan goes left to right, so the first position with a match is the leftmost). */
static int bpe_added_at(const bpe *b, const char *s, size_t n, int norm)
{
    int best = -1;
    for (int i = 0; i < b->n_added; i++) {
        const bpe_added *a = &b->added[i];
        if (a->normalized == norm && a->match_len <= n && memcmp(s, a->match, a->match_len) == 0 &&
            (best < 0 || a->match_len > b->added[best].match_len))
            best = i;
    }
    return best;
}

static int bpe_segment(bpe *b, const char *s, size_t n, int first, tok_ids *out);

/* The text between matches: on the raw text (norm 0) it is normalized next (bpe_segment), on the
 * normalized text it is pre-tokenized. */
static int bpe_between(bpe *b, const char *s, size_t n, int norm, int first, tok_ids *out)
{
    if (n == 0) return 0;
    if (!norm) return bpe_segment(b, s, n, first, out);
    bpe_pieces p = {0};
    int rc = pieces_append(&p, s, n) || bpe_words(b, &p, first, out) ? -1 : 0;
    pieces_free(&p);
    return rc;
}

/* Split s at the added tokens of kind norm, as the library does with encode_special_tokens on: a
 * special token's match is passed over (it stays text, and hides what it contains); single_word
 * drops a match with a word character right before or after it; lstrip / rstrip move the
 * token's span over the whitespace on that side (not over text an earlier token took). */
static int bpe_split_added(bpe *b, const char *s, size_t n, int norm, int first, tok_ids *out)
{
    size_t seg = 0;
    for (size_t i = 0; b->any_added[norm] && i < n; i++) {
        if (!b->added_first[norm][(unsigned char)s[i]]) continue;
        int k = bpe_added_at(b, s + i, n - i, norm);
        if (k < 0) continue;
        const bpe_added *a = &b->added[k];
        size_t start = i, stop = i + a->match_len;
        i = stop - 1;
        if (a->special) continue;
        if (a->single_word && ((start > 0 && bpe_word_at(s + bpe_prev_char(s, start), start - bpe_prev_char(s, start))) ||
                               (stop < n && bpe_word_at(s + stop, n - stop))))
            continue;
        if (a->lstrip) {
            size_t ls = bpe_space_before(s, start);
            start = ls > seg ? ls : seg;
        }
        if (a->rstrip) stop += bpe_space_after(s + stop, n - stop);
        if (bpe_between(b, s + seg, start - seg, norm, first && seg == 0, out) || tok_ids_push(out, a->id)) return -1;
        seg = stop;
        i = stop - 1;
    }
    return bpe_between(b, s + seg, n - seg, norm, first && seg == 0, out);
}

/* A piece of raw text between non-normalized tokens: normalized, then split at the normalized
 * tokens, then pre-tokenized. */
static int bpe_segment(bpe *b, const char *s, size_t n, int first, tok_ids *out)
{
    if (n == 0) return 0;
    bpe_pieces p = {0};
    int rc = bpe_normalize(b, s, n, &p);
    if (rc == 0 && b->any_added[1]) rc = bpe_split_added(b, p.buf, p.n, 1, first, out);
    else if (rc == 0) rc = bpe_words(b, &p, first, out);
    pieces_free(&p);
    return rc;
}

int bpe_prepare_added(bpe *b)
{
    for (int i = 0; i < b->n_added; i++) {
        bpe_added *a = &b->added[i];
        a->match = a->content;
        a->match_len = a->len;
        if (a->normalized && b->n_norm) { /* the library matches the token's normalized form */
            bpe_pieces p = {0};
            if (bpe_normalize(b, a->content, a->len, &p)) { pieces_free(&p); return -1; }
            if (p.n == 0) { pieces_free(&p); return loom_fail("tokenizer: added token %d normalizes to nothing", a->id); }
            p.buf[p.n] = '\0';
            a->match = p.buf; /* owned now */
            a->match_len = p.n;
            free(p.off), free(p.len);
        }
        b->added_first[a->normalized][(unsigned char)a->match[0]] = 1;
        b->any_added[a->normalized] = 1;
    }
    return 0;
}

int bpe_encode(tokenizer *t, const char *text, size_t n, tok_ids *out)
{
    return bpe_split_added(t->impl, text, n, 0, !t->cont, out);
}

/* ---- decode ---- */

/* One token's text: metaspace back to spaces, "<0xAB>" back to its byte. Returns its length. */
static size_t bpe_token_text(const bpe *b, int32_t id, const char **s, char *tmp, size_t tmp_cap)
{
    const char *p = b->arena + b->tok_off[id];
    size_t n = b->tok_len[id];
    *s = p;
    if (b->special[id] || b->byte_level) return n;
    if (b->byte_fallback && n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>') {
        tmp[0] = (char)strtol((char[3]){p[3], p[4], 0}, NULL, 16);
        *s = tmp;
        return 1;
    }
    if (!b->dec_meta || n > tmp_cap) return n;
    size_t ml = strlen(b->meta), w = 0;
    for (size_t i = 0; i < n;) {
        if (i + ml <= n && memcmp(p + i, b->meta, ml) == 0) { tmp[w++] = ' '; i += ml; }
        else tmp[w++] = p[i++];
    }
    *s = tmp;
    return w;
}

size_t bpe_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap, int skip)
{
    const bpe *b = t->impl;
    char tmp[512];
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab || (skip && b->special[ids[i]])) continue;
        const char *s;
        size_t len = bpe_token_text(b, ids[i], &s, tmp, sizeof tmp);
        if (w == 0 && b->dec_strip && len && s[0] == ' ') { s++; len--; }
        if (b->word_level && w > 0) { /* the library joins WordLevel tokens with spaces */
            if (w + 1 >= cap) break;
            out[w++] = ' ';
        }
        if (w + len >= cap) break;
        memcpy(out + w, s, len);
        w += len;
    }
    return w;
}
