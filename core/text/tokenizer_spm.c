/* tokenizer_spm.c: the SentencePiece tokenizer behind tokenizer.h: BPE by piece score over the
 * normalised text (user-defined symbols frozen, byte fallback for unknown pieces) and decoding,
 * both as the `sentencepiece` library does them (bpe_model.cc, sentencepiece_processor.cc). Must
 * never print or exit, and never guess: what the library would refuse is refused here. */
#include "core/text/tokenizer_spm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The tokenizer's state: the model and scratch space reused by every encode (not thread-safe,
 * as tokenizer.h says). */
typedef struct spm_sym {
    int prev, next;        /* -1 at either end */
    uint32_t start, len;   /* bytes of the normalised text; len 0 once merged away */
    int freeze;            /* a user-defined symbol: never merged */
} spm_sym;

typedef struct spm_pair {
    float score;
    int left, right;
    uint32_t size;
} spm_pair;

typedef struct spm_rev {   /* an UNUSED piece's merge, to split it back (rev_merge) */
    uint32_t at, len, left_len; /* the merged text at `at` in the normalised text, its left part */
} spm_rev;

typedef struct spm_state {
    spm_model m;
    spm_buf norm;
    spm_sym *sym;
    size_t sym_cap;
    spm_pair *heap;
    size_t heap_n, heap_cap;
    spm_rev *rev;
    size_t rev_n, rev_cap;
    uint32_t *stack;
    size_t stack_cap;
} spm_state;

/* ---- the agenda: a max-heap, highest score first, then the leftmost pair ---- */

static int spm_before(const spm_pair *a, const spm_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int spm_heap_push(spm_state *st, spm_pair p)
{
    if (st->heap_n == st->heap_cap) {
        size_t cap = st->heap_cap ? st->heap_cap * 2 : 1024;
        spm_pair *h = realloc(st->heap, cap * sizeof *h);
        if (!h) return -1;
        st->heap = h;
        st->heap_cap = cap;
    }
    size_t i = st->heap_n++;
    while (i > 0 && spm_before(&p, &st->heap[(i - 1) / 2])) {
        st->heap[i] = st->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    st->heap[i] = p;
    return 0;
}

static spm_pair spm_heap_pop(spm_state *st)
{
    spm_pair top = st->heap[0], last = st->heap[--st->heap_n];
    size_t i = 0, n = st->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && spm_before(&st->heap[c + 1], &st->heap[c])) c++;
        if (!spm_before(&st->heap[c], &last)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = last;
    return top;
}

/* ---- BPE over the normalised text (bpe_model.cc's SampleEncode without dropout) ---- */

static int spm_rev_add(spm_state *st, uint32_t at, uint32_t len, uint32_t left_len)
{
    if (st->rev_n == st->rev_cap) {
        size_t cap = st->rev_cap ? st->rev_cap * 2 : 64;
        spm_rev *r = realloc(st->rev, cap * sizeof *r);
        if (!r) return -1;
        st->rev = r;
        st->rev_cap = cap;
    }
    st->rev[st->rev_n++] = (spm_rev){at, len, left_len};
    return 0;
}

/* Queue the pair (left, right) when their concatenation is a piece. */
static int spm_maybe_pair(spm_state *st, int left, int right)
{
    if (left < 0 || right < 0 || st->sym[left].freeze || st->sym[right].freeze) return 0;
    const spm_model *m = &st->m;
    uint32_t size = st->sym[left].len + st->sym[right].len;
    int32_t id = spm_map_get(m, &m->normal, st->norm.s + st->sym[left].start, size);
    if (id < 0) return 0;
    if (spm_heap_push(st, (spm_pair){m->score[id], left, right, size})) return -1;
    if (m->type[id] == SPM_UNUSED) return spm_rev_add(st, st->sym[left].start, size, st->sym[left].len);
    return 0;
}

/* Merge symbols a .. b-1 (a stretch no piece spans out of): the best pair first, by score,
 * then the leftmost; pairs reaching outside the stretch are never looked up. */
static int spm_merge_range(spm_state *st, int a, int b)
{
    st->heap_n = 0;
    if (b <= a) return 0;
    for (int i = a + 1; i < b; i++)
        if (spm_maybe_pair(st, i - 1, i)) return -1;
    while (st->heap_n) {
        spm_pair top = spm_heap_pop(st);
        spm_sym *l = &st->sym[top.left], *r = &st->sym[top.right];
        if (!l->len || !r->len || l->len + r->len != top.size) continue; /* no longer there */
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = top.left;
        r->len = 0;
        if ((l->prev >= a && spm_maybe_pair(st, l->prev, top.left)) ||
            (l->next >= 0 && l->next < b && spm_maybe_pair(st, top.left, l->next)))
            return -1;
    }
    return 0;
}

static int spm_is_space(const spm_state *st, const spm_sym *y)
{
    return y->len == 3 && memcmp(st->norm.s + y->start, "\xE2\x96\x81", 3) == 0;
}

/* 1 when no merge can ever join symbols x and y: a user-defined symbol on either side, or a
 * U+2581 where the vocabulary has no piece spanning it. */
static int spm_cut(const spm_state *st, const spm_sym *x, const spm_sym *y)
{
    if (y->freeze || x->freeze) return 1;
    return (st->m.cut_before_ws && spm_is_space(st, y)) || (st->m.cut_after_ws && spm_is_space(st, x));
}

/* The normalised text from byte at as symbols 0, 1, ..: each user-defined symbol whole (frozen),
 * else one character by its lead byte (the library's OneCharLen). With cuts, it stops before the
 * first symbol no merge can join to the one before it: the stretches merge alone, with the same
 * result as the library's one agenda over the whole text (a stretch's merges never touch
 * another's) on small heaps and a bounded symbol array. Returns the count (-1 on OOM) and the
 * byte after the last symbol in *end. */
static int spm_split(spm_state *st, size_t at, int cuts, size_t *end)
{
    static const unsigned char one[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    const char *s = st->norm.s;
    size_t n = st->norm.n, i = at;
    int count = 0;
    for (; i < n; count++) {
        size_t len = spm_match_user(&st->m, s + i, n - i);
        int freeze = len > 0;
        if (!len) len = one[(unsigned char)s[i] >> 4] < n - i ? one[(unsigned char)s[i] >> 4] : n - i;
        spm_sym y = {count - 1, -1, (uint32_t)i, (uint32_t)len, freeze};
        if (cuts && count > 0 && spm_cut(st, &st->sym[count - 1], &y)) break;
        if ((size_t)count == st->sym_cap) {
            size_t cap = st->sym_cap ? 2 * st->sym_cap : 256;
            spm_sym *p = realloc(st->sym, cap * sizeof *p);
            if (!p) return -1;
            st->sym = p;
            st->sym_cap = cap;
        }
        if (count > 0) st->sym[count - 1].next = count;
        st->sym[count] = y;
        i += len;
    }
    *end = i;
    return count;
}

/* One final piece's id, as PopulateSentencePieceText adds it: an unknown piece as its bytes under
 * byte fallback, else a run of unknown pieces as one <unk>. */
static int spm_emit(spm_state *st, const char *w, uint32_t len, int *prev_unk, tok_ids *out)
{
    const spm_model *m = &st->m;
    int32_t id = spm_piece_id(m, w, len);
    int unk = m->type[id] == SPM_UNKNOWN;
    int rc = 0;
    if (m->type[id] == SPM_CONTROL)
        return loom_fail("sentencepiece: the model maps text to its control piece %d (the library fails too)", id);
    if (unk && m->byte_fallback) {
        for (uint32_t k = 0; k < len && rc == 0; k++) rc = tok_ids_push(out, m->byte_id[(unsigned char)w[k]]);
    } else if (!(unk && *prev_unk)) {
        rc = tok_ids_push(out, id);
    }
    *prev_unk = unk;
    return rc;
}

/* An UNUSED piece is split back into the two symbols it was merged from (the last merge of that
 * text wins, as the library's map keeps it), recursively. */
static const spm_rev *spm_rev_find(const spm_state *st, const char *w, uint32_t len)
{
    for (size_t k = st->rev_n; k-- > 0;)
        if (st->rev[k].len == len && memcmp(st->norm.s + st->rev[k].at, w, len) == 0) return &st->rev[k];
    return NULL;
}

static int spm_resegment(spm_state *st, uint32_t at, uint32_t len, int *prev_unk, tok_ids *out)
{
    const spm_model *m = &st->m;
    size_t top = 0;
    if (st->stack_cap < 2 * (size_t)len + 2) {
        uint32_t *s = realloc(st->stack, (2 * (size_t)len + 2) * sizeof *s);
        if (!s) return loom_fail("tokenizer: out of memory");
        st->stack = s;
        st->stack_cap = 2 * (size_t)len + 2;
    }
    st->stack[top++] = at;
    st->stack[top++] = len;
    while (top) {
        uint32_t l = st->stack[--top], a = st->stack[--top];
        const char *w = st->norm.s + a;
        int32_t id = spm_piece_id(m, w, l);
        const spm_rev *r = m->type[id] == SPM_UNUSED ? spm_rev_find(st, w, l) : NULL;
        if (!r) {
            if (spm_emit(st, w, l, prev_unk, out)) return -1;
            continue;
        }
        st->stack[top++] = a + r->left_len; /* right half, then left half on top */
        st->stack[top++] = l - r->left_len;
        st->stack[top++] = a;
        st->stack[top++] = r->left_len;
    }
    return 0;
}

static int spm_encode(tokenizer *t, const char *text, size_t n, tok_ids *out)
{
    spm_state *st = t->impl;
    if (n > INT_MAX / 4) return loom_fail("sentencepiece: %zu bytes of text in one piece is too long", n);
    if (spm_normalize(&st->m.norm, &st->m, text, n, t->cont, &st->norm))
        return loom_fail("tokenizer: out of memory");
    /* UNUSED pieces: the split-back table depends on the global order, so the text stays whole */
    int prev_unk = 0, cuts = !st->m.any_unused;
    st->rev_n = 0;
    for (size_t at = 0; at < st->norm.n;) {
        int count = spm_split(st, at, cuts, &at);
        if (count < 0 || spm_merge_range(st, 0, count)) return loom_fail("tokenizer: out of memory");
        for (int i = 0; i >= 0; i = st->sym[i].next) {
            const spm_sym *y = &st->sym[i];
            int rc = st->m.any_unused ? spm_resegment(st, y->start, y->len, &prev_unk, out)
                                      : spm_emit(st, st->norm.s + y->start, y->len, &prev_unk, out);
            if (rc) return -1;
        }
    }
    return 0;
}

/* ---- decode (SentencePieceProcessor::Decode) ---- */

typedef struct spm_dec {
    spm_buf *b;
    size_t limit;          /* stop before the text reaches this many bytes */
    int full;
    int text;              /* the library's text is not empty */
} spm_dec;

/* One piece's surface, whole or not at all (a cut lands on a piece boundary). */
static void spm_out(spm_dec *d, const char *s, size_t n, int counts)
{
    if (d->full || !n) return;
    if (d->b->n + n >= d->limit || spm_buf_add(d->b, s, n)) { d->full = 1; return; }
    d->text |= counts;
}

/* A run of byte pieces: each valid UTF-8 character they spell, each other byte as U+FFFD. */
static void spm_out_bytes(spm_dec *d, const unsigned char *bytes, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len = 0;
        unsigned c = bytes[i];
        size_t want = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (want && want <= n - i) {
            uint32_t cp = want == 1 ? c : c & (want == 2 ? 0x1F : want == 3 ? 0x0F : 0x07);
            int ok = 1;
            for (size_t k = 1; k < want; k++) {
                ok &= (bytes[i + k] & 0xC0) == 0x80;
                cp = cp << 6 | (bytes[i + k] & 0x3F);
            }
            static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
            if (ok && cp >= least[want] && !(cp >= 0xD800 && cp < 0xE000) && cp <= 0x10FFFF) len = want;
        }
        if (len) spm_out(d, (const char *)bytes + i, len, 1);
        else spm_out(d, "\xEF\xBF\xBD", 3, 1);
        i += len ? len : 1;
    }
}

/* A piece that is not a byte: control pieces are invisible (named unless skip), <unk> is the
 * unknown surface, a leading U+2581 is dropped at the start of the text, U+2581 is a space. */
static int spm_out_piece(const spm_model *m, spm_dec *d, int32_t id, int bos_ws, int skip)
{
    const char *p = m->arena + m->off[id];
    size_t n = m->len[id];
    if (m->type[id] == SPM_CONTROL) {
        if (!skip) spm_out(d, p, n, 0);
        return 0;
    }
    if (m->type[id] == SPM_UNKNOWN) {
        spm_out(d, m->unk_surface, strlen(m->unk_surface), 1);
        return 0;
    }
    int seen = 0;
    if (bos_ws && (m->norm.add_dummy_prefix || m->norm.remove_extra_ws) && n >= 3 && memcmp(p, "\xE2\x96\x81", 3) == 0) {
        p += 3, n -= 3;
        seen = !m->norm.remove_extra_ws;
    }
    char tmp[SPM_MAX_PIECE];
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(p + i, "\xE2\x96\x81", 3) == 0) { tmp[w++] = ' '; i += 3; }
        else tmp[w++] = p[i++];
    }
    spm_out(d, tmp, w, 1);
    return seen;
}

static void spm_decode_text(const spm_model *m, const int32_t *ids, size_t n, int skip, spm_dec *d)
{
    int bos_ws = 1, bos_seen = 0;
    spm_buf run = {0};
    for (size_t i = 0; i < n && !d->full; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= m->n) continue; /* the library refuses the whole call; loom skips it */
        if (m->type[id] == SPM_BYTE) {
            char byte = (char)strtol(m->arena + m->off[id] + 3, NULL, 16);
            if (spm_buf_add(&run, &byte, 1)) d->full = 1;
            continue;
        }
        spm_out_bytes(d, (const unsigned char *)run.s, run.n);
        run.n = 0;
        if (bos_seen || d->text) bos_ws = 0;
        bos_seen = spm_out_piece(m, d, id, bos_ws, skip);
    }
    spm_out_bytes(d, (const unsigned char *)run.s, run.n);
    free(run.s);
}

static size_t spm_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap, int skip)
{
    const spm_model *m = &((const spm_state *)t->impl)->m;
    spm_buf b = {0}, dn = {0};
    spm_dec d = {&b, m->denorm.units ? SIZE_MAX : cap, 0, 0};
    spm_decode_text(m, ids, n, skip, &d);
    const spm_buf *src = &b;
    if (m->denorm.units && b.n && spm_normalize(&m->denorm, NULL, b.s, b.n, 0, &dn) == 0) src = &dn;
    size_t w = src->n < cap ? src->n : cap - 1;
    while (w < src->n && w > 0 && ((unsigned char)src->s[w] & 0xC0) == 0x80) w--; /* a whole character */
    if (w) memcpy(out, src->s, w);
    free(b.s);
    free(dn.s);
    return w;
}

/* ---- the tokenizer ---- */

/* A control, user-defined or unknown piece by its text. */
static int32_t spm_special(const tokenizer *t, const char *name)
{
    const spm_model *m = &((const spm_state *)t->impl)->m;
    size_t n = strlen(name);
    int32_t id = spm_map_get(m, &m->reserved, name, n);
    if (id < 0) id = spm_map_get(m, &m->normal, name, n);
    if (id < 0) return -1;
    int ty = m->type[id];
    return ty == SPM_CONTROL || ty == SPM_USER_DEFINED || ty == SPM_UNKNOWN ? id : -1;
}

/* Only control pieces never come from text: user-defined symbols do (SentencePiece matches them
 * anywhere), and so may <unk>. */
static int spm_is_special(const tokenizer *t, int32_t id)
{
    const spm_model *m = &((const spm_state *)t->impl)->m;
    return id >= 0 && id < m->n && m->type[id] == SPM_CONTROL;
}

static void spm_destroy(tokenizer *t)
{
    spm_state *st = t->impl;
    if (!st) return;
    spm_free(&st->m);
    free(st->norm.s);
    free(st->sym);
    free(st->heap);
    free(st->rev);
    free(st->stack);
    free(st);
    t->impl = NULL;
}

static const tokenizer_ops spm_ops = {spm_encode, spm_decode, spm_special, spm_is_special, spm_destroy};

/* The model's self_test_data, as the library's Load runs it: each input encoded, its pieces
 * joined by spaces, equal to the expected text. */
static int spm_self_test(tokenizer *t, const char *path)
{
    spm_model *m = &((spm_state *)t->impl)->m;
    int rc = 0;
    for (int k = 0; k < m->n_tests && rc == 0; k++) {
        tok_ids ids = {0};
        spm_buf got = {0};
        rc = spm_encode(t, m->test_in[k], strlen(m->test_in[k]), &ids);
        for (size_t i = 0; rc == 0 && i < ids.n; i++)
            if ((i && spm_buf_add(&got, " ", 1)) || spm_buf_add(&got, m->arena + m->off[ids.v[i]], m->len[ids.v[i]]))
                rc = loom_fail("tokenizer: out of memory");
        if (rc == 0 && strcmp(got.s ? got.s : "", m->test_want[k]) != 0)
            rc = loom_fail("%s: self-test sample %d encodes to \"%.80s\", the model expects \"%.80s\"", path, k,
                           got.s ? got.s : "", m->test_want[k]);
        free(ids.v);
        free(got.s);
    }
    return rc;
}

int tok_spm_open(tokenizer *t, const char *path, const char *data, size_t len)
{
    spm_state *st = calloc(1, sizeof *st);
    if (!st) return loom_fail("%s: out of memory", path);
    if (spm_load(&st->m, path, (const unsigned char *)data, len)) { free(st); return -1; }
    t->impl = st;
    t->ops = &spm_ops;
    t->kind = "sentencepiece";
    t->vocab = st->m.n;
    t->hash = tok_fnv1a(data, len);
    t->bos = st->m.bos;
    t->eos = t->eot = st->m.eos; /* Needle's generation stops at EOS */
    t->pad = st->m.pad >= 0 ? st->m.pad : st->m.eos;
    snprintf(t->describe, sizeof t->describe, "sentencepiece %.280s (%d ids)", path, t->vocab);
    return spm_self_test(t, path);
}
