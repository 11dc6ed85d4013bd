/* tokenizer_spm_load.c: reading a SentencePiece `.model` file (a serialised ModelProto) with a
 * small reader of the protobuf wire format, and checking it as the library's loader does. Must
 * never read past the bytes it was given nor trust a length in the file: anything it cannot take
 * exactly is refused with one line naming the file. */
#include "core/text/tokenizer_spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- the protobuf wire format ---- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

typedef struct pb {
    const unsigned char *p, *end, *base;
    const char *path;
} pb;

static int pb_bad(const pb *r, const char *why)
{
    return loom_fail("%s: not a SentencePiece model (%s at byte %ld)", r->path, why, (long)(r->p - r->base));
}

static int pb_cut(const pb *r)
{
    return loom_fail("%s: truncated SentencePiece model (a field runs past the end at byte %ld)", r->path,
                     (long)(r->p - r->base));
}

static int pb_varint(pb *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return pb_cut(r);
        unsigned char b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return 0;
    }
    return pb_bad(r, "a varint longer than 10 bytes");
}

static int pb_key(pb *r, uint32_t *field, int *wt)
{
    uint64_t k;
    if (pb_varint(r, &k)) return -1;
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    if (*field == 0 || k >> 32) return pb_bad(r, "field number 0 or out of range");
    if (*wt != WT_VARINT && *wt != WT_I64 && *wt != WT_LEN && *wt != WT_I32)
        return pb_bad(r, "an unknown wire type");
    return 0;
}

/* A length-delimited field: its bytes as a sub-reader. */
static int pb_sub(pb *r, pb *sub)
{
    uint64_t n;
    if (pb_varint(r, &n)) return -1;
    if (n > (uint64_t)(r->end - r->p)) return pb_cut(r);
    *sub = (pb){r->p, r->p + n, r->base, r->path};
    r->p += n;
    return 0;
}

static int pb_skip(pb *r, int wt)
{
    uint64_t v;
    pb sub;
    if (wt == WT_VARINT) return pb_varint(r, &v);
    if (wt == WT_LEN) return pb_sub(r, &sub);
    size_t n = wt == WT_I64 ? 8 : 4;
    if ((size_t)(r->end - r->p) < n) return pb_cut(r);
    r->p += n;
    return 0;
}

/* A known field must come with its declared wire type. */
static int pb_want(const pb *r, int wt, int want)
{
    return wt == want ? 0 : pb_bad(r, "a field with the wrong wire type");
}

static int pb_bool(pb *r, int wt, int *out)
{
    uint64_t v;
    if (pb_want(r, wt, WT_VARINT) || pb_varint(r, &v)) return -1;
    *out = v != 0;
    return 0;
}

/* A string field copied (NUL-terminated) into *out, replacing what was there. */
static int pb_string(pb *r, int wt, char **out)
{
    pb s = {0};
    if (pb_want(r, wt, WT_LEN) || pb_sub(r, &s)) return -1;
    char *c = malloc((size_t)(s.end - s.p) + 1);
    if (!c) return loom_fail("%s: out of memory", r->path);
    memcpy(c, s.p, (size_t)(s.end - s.p));
    c[s.end - s.p] = '\0';
    free(*out);
    *out = c;
    return 0;
}

/* ---- the messages ---- */

typedef struct spm_read {
    spm_model *m;
    size_t cap, arena_n, arena_cap;
    int model_type;                   /* TrainerSpec.model_type, default UNIGRAM (1) */
    char *piece_name[4];              /* unk, bos, eos, pad pieces as the trainer spec names them */
    const unsigned char *charsmap[2]; /* normalizer, denormalizer */
    size_t charsmap_n[2];
} spm_read;

static int spm_add_piece(spm_read *rd, const pb *r, const unsigned char *s, size_t n, float score, int type)
{
    spm_model *m = rd->m;
    if (m->n >= SPM_MAX_PIECES)
        return loom_fail("%s: more than %d pieces: not a vocabulary loom takes", r->path, SPM_MAX_PIECES);
    if (m->n == (int)rd->cap) {
        size_t cap = rd->cap ? rd->cap * 2 : 1024;
        uint32_t *off = realloc(m->off, cap * sizeof *off);
        if (off) m->off = off;
        uint32_t *len = realloc(m->len, cap * sizeof *len);
        if (len) m->len = len;
        float *sc = realloc(m->score, cap * sizeof *sc);
        if (sc) m->score = sc;
        uint8_t *ty = realloc(m->type, cap);
        if (ty) m->type = ty;
        if (!off || !len || !sc || !ty) return loom_fail("%s: out of memory", r->path);
        rd->cap = cap;
    }
    if (rd->arena_n + n + 1 > rd->arena_cap) {
        size_t cap = rd->arena_cap ? rd->arena_cap : 1 << 16;
        while (cap < rd->arena_n + n + 1) cap *= 2;
        char *a = realloc(m->arena, cap);
        if (!a) return loom_fail("%s: out of memory", r->path);
        m->arena = a;
        rd->arena_cap = cap;
    }
    memcpy(m->arena + rd->arena_n, s, n);
    m->arena[rd->arena_n + n] = '\0';
    m->off[m->n] = (uint32_t)rd->arena_n;
    m->len[m->n] = (uint32_t)n;
    m->score[m->n] = score;
    m->type[m->n] = (uint8_t)type;
    rd->arena_n += n + 1;
    m->n++;
    return 0;
}

/* ModelProto.SentencePiece: piece = 1, score = 2 (float), type = 3 (default NORMAL). */
static int spm_read_piece(spm_read *rd, pb *r)
{
    const unsigned char *s = NULL;
    size_t n = 0;
    float score = 0;
    uint64_t type = SPM_NORMAL;
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        pb sub = {0};
        if (pb_key(r, &f, &wt)) return -1;
        if (f == 1) {
            if (pb_want(r, wt, WT_LEN) || pb_sub(r, &sub)) return -1;
            s = sub.p;
            n = (size_t)(sub.end - sub.p);
        } else if (f == 2) {
            if (pb_want(r, wt, WT_I32)) return -1;
            if (r->end - r->p < 4) return pb_cut(r);
            uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
            memcpy(&score, &u, 4);
            r->p += 4;
            if (score != score) return loom_fail("%s: piece %d has a NaN score", r->path, rd->m->n);
        } else if (f == 3) {
            if (pb_want(r, wt, WT_VARINT) || pb_varint(r, &type)) return -1;
            if (type < SPM_NORMAL || type > SPM_BYTE)
                return loom_fail("%s: piece %d has an unknown type %llu", r->path, rd->m->n, (unsigned long long)type);
        } else if (pb_skip(r, wt)) {
            return -1;
        }
    }
    if (n >= SPM_MAX_PIECE) return loom_fail("%s: piece %d is %zu bytes long (the library's limit is %d)", r->path, rd->m->n, n, SPM_MAX_PIECE);
    if (n == 0) return loom_fail("%s: piece %d is empty", r->path, rd->m->n);
    if (memchr(s, '\0', n)) return loom_fail("%s: piece %d holds a NUL byte", r->path, rd->m->n);
    return spm_add_piece(rd, r, s, n, score, (int)type);
}

/* TrainerSpec: the fields encoding and decoding depend on. */
static int spm_read_trainer(spm_read *rd, pb *r)
{
    spm_model *m = rd->m;
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (pb_key(r, &f, &wt)) return -1;
        int rc = 0;
        if (f == 3) {
            rc = pb_want(r, wt, WT_VARINT) || pb_varint(r, &v);
            if (!rc) rd->model_type = (int)(v > 9 ? 9 : v);
        } else if (f == 24) rc = pb_bool(r, wt, &m->norm.ws_suffix);
        else if (f == 35) rc = pb_bool(r, wt, &m->byte_fallback);
        else if (f == 44) rc = pb_string(r, wt, &m->unk_surface);
        else if (f >= 45 && f <= 48) rc = pb_string(r, wt, &rd->piece_name[f - 45]);
        else rc = pb_skip(r, wt);
        if (rc) return -1;
    }
    return 0;
}

/* NormalizerSpec: precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
 * escape_whitespaces = 5 (the name and the rule TSV are not used to encode). */
static int spm_read_norm(spm_read *rd, pb *r, int which)
{
    spm_norm *nm = which ? &rd->m->denorm : &rd->m->norm;
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        pb sub = {0};
        if (pb_key(r, &f, &wt)) return -1;
        int rc = 0;
        if (f == 2) {
            rc = pb_want(r, wt, WT_LEN) || pb_sub(r, &sub);
            rd->charsmap[which] = sub.p;
            rd->charsmap_n[which] = (size_t)(sub.end - sub.p);
        } else if (f == 3) rc = pb_bool(r, wt, &nm->add_dummy_prefix);
        else if (f == 4) rc = pb_bool(r, wt, &nm->remove_extra_ws);
        else if (f == 5) rc = pb_bool(r, wt, &nm->escape_ws);
        else rc = pb_skip(r, wt);
        if (rc) return -1;
    }
    return 0;
}

static int spm_add_test(spm_model *m, char *in, char *want)
{
    char **a = realloc(m->test_in, (size_t)(m->n_tests + 1) * sizeof *a);
    if (a) m->test_in = a;
    char **b = realloc(m->test_want, (size_t)(m->n_tests + 1) * sizeof *b);
    if (b) m->test_want = b;
    if (!a || !b) { free(in); free(want); return loom_fail("out of memory"); }
    m->test_in[m->n_tests] = in;
    m->test_want[m->n_tests++] = want;
    return 0;
}

/* SelfTestData: samples = 1, each {input = 1, expected = 2}. */
static int spm_read_tests(spm_read *rd, pb *r)
{
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        pb s = {0};
        if (pb_key(r, &f, &wt)) return -1;
        if (f != 1) { if (pb_skip(r, wt)) return -1; continue; }
        if (pb_want(r, wt, WT_LEN) || pb_sub(r, &s)) return -1;
        char *in = NULL, *want = NULL;
        int rc = 0;
        while (rc == 0 && s.p < s.end) {
            rc = pb_key(&s, &f, &wt);
            if (rc == 0) rc = f == 1 ? pb_string(&s, wt, &in) : f == 2 ? pb_string(&s, wt, &want) : pb_skip(&s, wt);
        }
        if (rc == 0 && (!in || !want)) {
            char *e = malloc(1);
            if (e) *e = '\0';
            if (!in) in = e; else want = e;
            if (!e) rc = loom_fail("out of memory");
        }
        if (rc || spm_add_test(rd->m, in, want)) { if (rc) { free(in); free(want); } return -1; }
    }
    return 0;
}

static int spm_read_model(spm_read *rd, pb *r)
{
    while (r->p < r->end) {
        uint32_t f;
        int wt;
        pb sub = {0};
        if (pb_key(r, &f, &wt)) return -1;
        if (f < 1 || f > 5) { if (pb_skip(r, wt)) return -1; continue; }
        if (pb_want(r, wt, WT_LEN) || pb_sub(r, &sub)) return -1;
        int rc = f == 1 ? spm_read_piece(rd, &sub) : f == 2 ? spm_read_trainer(rd, &sub)
               : f == 3 ? spm_read_norm(rd, &sub, 0) : f == 4 ? spm_read_tests(rd, &sub) : spm_read_norm(rd, &sub, 1);
        if (rc) return -1;
    }
    return 0;
}

/* ---- the tables ---- */

static uint64_t spm_hash(const char *s, size_t n) { return tok_fnv1a(s, n); }

int32_t spm_map_get(const spm_model *m, const spm_map *map, const char *s, size_t n)
{
    if (!map->slot) return -1;
    for (size_t i = spm_hash(s, n) & map->mask;; i = (i + 1) & map->mask) {
        int32_t id = map->slot[i];
        if (id < 0) return -1;
        if (m->len[id] == n && memcmp(m->arena + m->off[id], s, n) == 0) return id;
    }
}

int32_t spm_piece_id(const spm_model *m, const char *s, size_t n)
{
    int32_t id = spm_map_get(m, &m->reserved, s, n);
    if (id < 0) id = spm_map_get(m, &m->normal, s, n);
    return id < 0 ? m->unk : id;
}

static int spm_is_normal(int type) { return type == SPM_NORMAL || type == SPM_USER_DEFINED || type == SPM_UNUSED; }

/* Both maps, refusing a piece defined twice (in its map, or as both kinds: the library would
 * then emit a control id from text and fail to encode). */
static int spm_build_maps(spm_model *m, const char *path)
{
    for (int k = 0; k < 2; k++) {
        spm_map *map = k ? &m->reserved : &m->normal;
        size_t count = 0, cap = 16;
        for (int i = 0; i < m->n; i++) count += spm_is_normal(m->type[i]) != k;
        while (cap < 2 * count + 2) cap *= 2;
        map->slot = malloc(cap * sizeof *map->slot);
        if (!map->slot) return loom_fail("%s: out of memory", path);
        memset(map->slot, 0xFF, cap * sizeof *map->slot);
        map->mask = cap - 1;
        for (int i = 0; i < m->n; i++) {
            if (spm_is_normal(m->type[i]) == k) continue;
            const char *s = m->arena + m->off[i];
            if (spm_map_get(m, map, s, m->len[i]) >= 0)
                return loom_fail("%s: piece \"%.80s\" is defined twice", path, s);
            size_t j = spm_hash(s, m->len[i]) & map->mask;
            while (map->slot[j] >= 0) j = (j + 1) & map->mask;
            map->slot[j] = i;
        }
    }
    for (int i = 0; i < m->n; i++)
        if (spm_is_normal(m->type[i]) && spm_map_get(m, &m->reserved, m->arena + m->off[i], m->len[i]) >= 0)
            return loom_fail("%s: piece \"%.80s\" is both a normal and a control/byte piece", path, m->arena + m->off[i]);
    return 0;
}

static int spm_byte_of(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    const char *a = strchr(hex, s[3]), *b = strchr(hex, s[4]);
    if (!s[3] || !s[4] || !a || !b) return -1;
    return (int)((a - hex) * 16 + (b - hex));
}

/* The library's InitializePieces checks: one <unk>, byte pieces only with byte_fallback and
 * then all 256 of them. */
static int spm_check_pieces(spm_model *m, const char *path)
{
    m->unk = -1;
    for (int b = 0; b < 256; b++) m->byte_id[b] = -1;
    for (int i = 0; i < m->n; i++) {
        const char *s = m->arena + m->off[i];
        if (m->type[i] == SPM_UNKNOWN) {
            if (m->unk >= 0) return loom_fail("%s: two <unk> pieces (%d and %d)", path, m->unk, i);
            m->unk = i;
        }
        if (m->type[i] == SPM_UNUSED) m->any_unused = 1;
        if (m->type[i] != SPM_BYTE) continue;
        if (!m->byte_fallback) return loom_fail("%s: byte piece %.16s without byte_fallback", path, s);
        int b = spm_byte_of(s, m->len[i]);
        if (b < 0) return loom_fail("%s: invalid byte piece \"%.16s\"", path, s);
        m->byte_id[b] = i;
    }
    if (m->unk < 0) return loom_fail("%s: no <unk> piece", path);
    m->cut_before_ws = m->cut_after_ws = 1;
    for (int i = 0; i < m->n; i++) {
        const char *s = m->arena + m->off[i];
        for (const char *w = s; m->type[i] == SPM_NORMAL && (w = strstr(w, "\xE2\x96\x81")) != NULL; w += 3) {
            if (w > s) m->cut_before_ws = 0;
            if (w + 3 < s + m->len[i]) m->cut_after_ws = 0;
        }
    }
    for (int b = 0; m->byte_fallback && b < 256; b++)
        if (m->byte_id[b] < 0) return loom_fail("%s: byte_fallback without the byte piece <0x%02X>", path, b);
    return 0;
}

typedef struct spm_user_key {
    unsigned char first;
    uint32_t len;
    int32_t id;
} spm_user_key;

/* By first byte, then longest first (so the first match is the longest), then id. */
static int spm_user_cmp(const void *a, const void *b)
{
    const spm_user_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int spm_build_user(spm_model *m, const char *path)
{
    for (int i = 0; i < m->n; i++) m->n_user += m->type[i] == SPM_USER_DEFINED;
    m->user = malloc(((size_t)m->n_user + 1) * sizeof *m->user);
    spm_user_key *keys = malloc(((size_t)m->n_user + 1) * sizeof *keys);
    if (!m->user || !keys) { free(keys); return loom_fail("%s: out of memory", path); }
    int k = 0;
    for (int i = 0; i < m->n; i++)
        if (m->type[i] == SPM_USER_DEFINED) keys[k++] = (spm_user_key){(unsigned char)m->arena[m->off[i]], m->len[i], i};
    qsort(keys, (size_t)m->n_user, sizeof *keys, spm_user_cmp);
    for (int j = 0; j < m->n_user; j++) m->user[j] = keys[j].id;
    for (int b = 0, j = 0; b <= 256; b++) {
        while (j < m->n_user && keys[j].first < b) j++;
        m->user_start[b] = b == 256 ? m->n_user : j;
    }
    free(keys);
    return 0;
}

size_t spm_match_user(const spm_model *m, const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    for (int j = m->user_start[c]; j < m->user_start[c + 1]; j++) {
        int32_t id = m->user[j];
        if (m->len[id] <= n && memcmp(m->arena + m->off[id], s, m->len[id]) == 0) return m->len[id];
    }
    return 0;
}

/* <trie size: u32 LE><darts-clone units: u32 LE each><NUL-terminated replacements>, as the
 * library's DecodePrecompiledCharsMap. */
static int spm_charsmap(spm_norm *nm, const unsigned char *blob, size_t n, const char *path)
{
    if (n <= 4) return loom_fail("%s: the normaliser's charsmap is broken (%zu bytes)", path, n);
    size_t trie = (size_t)blob[0] | (size_t)blob[1] << 8 | (size_t)blob[2] << 16 | (size_t)blob[3] << 24;
    if (trie >= n || trie / 4 == 0)
        return loom_fail("%s: the normaliser's charsmap is broken (a trie of %zu bytes in %zu)", path, trie, n);
    nm->n_units = trie / 4;
    nm->units = malloc(nm->n_units * sizeof *nm->units);
    nm->pool_n = n - 4 - trie;
    nm->pool = malloc(nm->pool_n + 1);
    if (!nm->units || !nm->pool) return loom_fail("%s: out of memory", path);
    for (size_t i = 0; i < nm->n_units; i++) {
        const unsigned char *u = blob + 4 + 4 * i;
        nm->units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(nm->pool, blob + 4 + trie, nm->pool_n);
    nm->pool[nm->pool_n] = '\0'; /* a replacement never runs past the pool */
    return 0;
}

/* bos/eos/pad: the trainer spec's piece (or the library's default name) when it is CONTROL. */
static void spm_special_ids(spm_model *m, char *const names[4])
{
    static const char *const dflt[4] = {"<unk>", "<s>", "</s>", "<pad>"};
    int32_t *ids[4] = {NULL, &m->bos, &m->eos, &m->pad};
    for (int k = 1; k < 4; k++) {
        const char *s = names[k] && names[k][0] ? names[k] : dflt[k];
        int32_t id = spm_piece_id(m, s, strlen(s));
        *ids[k] = m->type[id] == SPM_CONTROL ? id : -1;
    }
}

static const char *spm_type_name(int t)
{
    static const char *const names[] = {"?", "unigram", "bpe", "word", "char"};
    return t >= 1 && t <= 4 ? names[t] : "unknown";
}

static int spm_finish(spm_read *rd, const char *path)
{
    spm_model *m = rd->m;
    if (m->n == 0) return loom_fail("%s: not a SentencePiece model (no pieces)", path);
    if (rd->model_type != 2)
        return loom_fail("%s: SentencePiece model type %s (%d): loom reads BPE models only", path,
                         spm_type_name(rd->model_type), rd->model_type);
    if (!m->unk_surface) {
        m->unk_surface = malloc(8);
        if (!m->unk_surface) return loom_fail("%s: out of memory", path);
        memcpy(m->unk_surface, " \xE2\x81\x87 ", 6);
    }
    if (spm_check_pieces(m, path) || spm_build_maps(m, path) || spm_build_user(m, path)) return -1;
    spm_special_ids(m, rd->piece_name);
    if (rd->charsmap_n[0] && spm_charsmap(&m->norm, rd->charsmap[0], rd->charsmap_n[0], path)) return -1;
    if (rd->charsmap_n[1] && spm_charsmap(&m->denorm, rd->charsmap[1], rd->charsmap_n[1], path)) return -1;
    return 0;
}

int spm_load(spm_model *m, const char *path, const unsigned char *data, size_t len)
{
    memset(m, 0, sizeof *m);
    m->norm.add_dummy_prefix = m->norm.remove_extra_ws = m->norm.escape_ws = 1;
    m->denorm.add_dummy_prefix = m->denorm.remove_extra_ws = m->denorm.escape_ws = 1;
    spm_read rd = {.m = m, .model_type = 1};
    pb r = {data, data + len, data, path};
    int rc = spm_read_model(&rd, &r);
    if (rc == 0) rc = spm_finish(&rd, path);
    for (int k = 0; k < 4; k++) free(rd.piece_name[k]);
    if (rc) spm_free(m);
    return rc;
}

void spm_free(spm_model *m)
{
    free(m->arena);
    free(m->off);
    free(m->len);
    free(m->score);
    free(m->type);
    free(m->normal.slot);
    free(m->reserved.slot);
    free(m->unk_surface);
    free(m->user);
    free(m->norm.units);
    free(m->norm.pool);
    free(m->denorm.units);
    free(m->denorm.pool);
    for (int i = 0; i < m->n_tests; i++) { free(m->test_in[i]); free(m->test_want[i]); }
    free(m->test_in);
    free(m->test_want);
    memset(m, 0, sizeof *m);
}
