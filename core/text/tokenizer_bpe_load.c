/* tokenizer_bpe_load.c: loading a Hugging Face tokenizer.json (BPE model, its normalizers,
 * pre-tokenizers, decoder and added tokens) into the tables tokenizer_bpe_encode.c works from.
 * Anything it cannot reproduce exactly is refused with one line naming the field, never guessed. */
#include "core/text/tokenizer_bpe.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/error.h"


/* The GPT-2 split (the ByteLevel pre-tokenizer's use_regex). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- the byte <-> char map of the ByteLevel pre-tokenizer (GPT-2's bytes_to_unicode) ---- */

static int bpe_unicode_to_byte(unsigned cp)
{
    static int map[324];
    static int ready;
    if (!ready) {
        for (int i = 0; i < 324; i++) map[i] = -1;
        int k = 0;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            map[printable ? b : 256 + k++] = b;
        }
        ready = 1;
    }
    return cp < 324 ? map[cp] : -1;
}

/* Decode one UTF-8 char at s (NUL-terminated); returns its length. cJSON passes a string's raw
 * bytes through unchecked, so a malformed or cut sequence (the NUL is no continuation byte) is
 * one byte with *cp = UINT_MAX, which maps to no byte: the key then stays as written. */
static int bpe_utf8_cp(const unsigned char *s, unsigned *cp)
{
    int len = s[0] < 0x80 ? 1 : s[0] < 0xC0 ? 0 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : s[0] < 0xF8 ? 4 : 0;
    unsigned c = len == 1 ? s[0] : len == 2 ? s[0] & 31u : len == 3 ? s[0] & 15u : s[0] & 7u;
    *cp = UINT_MAX;
    if (!len) return 1;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 1;
        c = c << 6 | (s[k] & 63u);
    }
    *cp = c;
    return len;
}

/* A vocabulary key as the bytes it stands for: byte-level keys map back char by char; a key with
 * a char outside the map (an added token's text) stays as written. Returns the length in out. */
static size_t bpe_key_bytes(const bpe *b, const char *key, char *out)
{
    size_t n = strlen(key);
    if (!b->byte_level) { memcpy(out, key, n); return n; }
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        i += (size_t)bpe_utf8_cp((const unsigned char *)key + i, &cp);
        int byte = bpe_unicode_to_byte(cp);
        if (byte < 0) { memcpy(out, key, n); return n; }
        out[w++] = (char)byte;
    }
    return w;
}

/* ---- tables ---- */

static int bpe_arena_add(bpe *b, const char *s, size_t n, uint32_t *off)
{
    if (!b->arena || b->arena_n + n > b->arena_cap) { /* allocated even for an empty first key */
        size_t cap = b->arena_cap ? b->arena_cap * 2 : 1 << 20;
        while (cap < b->arena_n + n) cap *= 2;
        char *a = realloc(b->arena, cap);
        if (!a) return loom_fail("tokenizer: out of memory");
        b->arena = a;
        b->arena_cap = cap;
    }
    memcpy(b->arena + b->arena_n, s, n);
    *off = (uint32_t)b->arena_n;
    b->arena_n += n;
    return 0;
}

/* Set token id's bytes (first writer wins: a model vocab entry before an added token's text). */
static int bpe_set_token(bpe *b, int32_t id, const char *s, size_t n, const char *path)
{
    if (b->tok_len[id] != UINT32_MAX) return 0;
    if (bpe_lookup(b, s, n) >= 0) return loom_fail("%s: two ids for the token \"%.*s\"", path, (int)n, s);
    if (bpe_arena_add(b, s, n, &b->tok_off[id])) return -1;
    b->tok_len[id] = (uint32_t)n;
    size_t h = bpe_hash_bytes(s, n) & b->vmap_mask;
    while (b->vmap[h] >= 0) h = (h + 1) & b->vmap_mask;
    b->vmap[h] = id;
    if (b->byte_level && n == 1) b->byte_id[(unsigned char)s[0]] = id;
    return 0;
}

static size_t bpe_pow2(size_t n)
{
    size_t p = 1024;
    while (p < 2 * n) p *= 2;
    return p;
}

/* The largest id in model.vocab and added_tokens, so the tables can be sized first. */
static int bpe_size(bpe *b, const cJSON *vocab, const cJSON *added, const char *path)
{
    int max = -1;
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e8)
            return loom_fail("%s: model.vocab[\"%s\"] is not a token id", path, v->string);
        if (v->valueint > max) max = v->valueint;
    }
    cJSON_ArrayForEach(v, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 || !cJSON_IsString(c))
            return loom_fail("%s: added_tokens: an entry without a valid id and content", path);
        if (id->valueint > max) max = id->valueint;
    }
    if (max < 0) return loom_fail("%s: model.vocab is empty", path);
    size_t n = (size_t)max + 1;
    b->tok_off = malloc(n * sizeof *b->tok_off);
    b->tok_len = malloc(n * sizeof *b->tok_len);
    b->special = calloc(n, 1);
    b->vmap_mask = bpe_pow2(n) - 1;
    b->vmap = malloc((b->vmap_mask + 1) * sizeof *b->vmap);
    if (!b->tok_off || !b->tok_len || !b->special || !b->vmap) return loom_fail("tokenizer: out of memory");
    memset(b->tok_len, 0xff, n * sizeof *b->tok_len);
    memset(b->vmap, 0xff, (b->vmap_mask + 1) * sizeof *b->vmap);
    memset(b->byte_id, 0xff, sizeof b->byte_id);
    return max + 1;
}

static int bpe_load_vocab(bpe *b, const cJSON *vocab, const char *path)
{
    char *buf = NULL;
    size_t bcap = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        size_t need = strlen(v->string) + 1;
        if (need > bcap) {
            free(buf);
            bcap = need * 2;
            if (!(buf = malloc(bcap))) return loom_fail("tokenizer: out of memory");
        }
        size_t n = bpe_key_bytes(b, v->string, buf);
        if (bpe_set_token(b, v->valueint, buf, n, path)) { free(buf); return -1; }
    }
    free(buf);
    return 0;
}

static int bpe_load_added(bpe *b, const cJSON *added, int vocab, const char *path)
{
    int n = cJSON_GetArraySize(added);
    b->added = calloc((size_t)(n ? n : 1), sizeof *b->added);
    if (!b->added) return loom_fail("tokenizer: out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, added) {
        const char *c = cJSON_GetObjectItemCaseSensitive(v, "content")->valuestring;
        int32_t id = cJSON_GetObjectItemCaseSensitive(v, "id")->valueint;
        bpe_added *a = &b->added[b->n_added++];
        a->len = strlen(c);
        a->content = malloc(a->len + 1);
        if (!a->content) return loom_fail("tokenizer: out of memory");
        memcpy(a->content, c, a->len + 1);
        a->id = id;
        a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "special"));
        a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "lstrip"));
        a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "rstrip"));
        a->single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "single_word"));
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(v, "normalized"); /* absent: the library's default */
        a->normalized = cJSON_IsBool(norm) ? cJSON_IsTrue(norm) : !a->special;
        if (a->len == 0) return loom_fail("%s: added_tokens: id %d has empty content", path, id);
        b->special[id] = (uint8_t)a->special;
        if (b->tok_len[id] == UINT32_MAX && bpe_set_token(b, id, c, a->len, path)) return -1;
    }
    for (int id = 0; id < vocab; id++)
        if (b->tok_len[id] == UINT32_MAX) b->tok_len[id] = 0; /* a hole: decodes to nothing */
    return 0;
}

/* One merge "a b" or ["a", "b"]: its ids, the merged id, an error naming an unknown token. */
static int bpe_add_merge(bpe *b, const cJSON *m, uint32_t rank, const char *path, char *buf,
                         size_t cap)
{
    const char *l, *r;
    char *pair = NULL;
    if (cJSON_IsString(m)) {
        pair = m->valuestring;
        char *sp = strchr(pair + (pair[0] == ' '), ' ');
        if (!sp) return loom_fail("%s: merge %u \"%s\" is not two tokens", path, rank, pair);
        *sp = '\0';
        l = pair;
        r = sp + 1;
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
        l = m->child->valuestring;
        r = m->child->next->valuestring;
    } else {
        return loom_fail("%s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", path, rank);
    }
    if (strlen(l) + strlen(r) > cap) { /* longer than the whole vocabulary: not two of its tokens */
        int rc = loom_fail("%s: merge %u names a token longer than any in the vocab", path, rank);
        if (pair) pair[strlen(pair)] = ' ';
        return rc;
    }
    size_t ln = bpe_key_bytes(b, l, buf), rn = bpe_key_bytes(b, r, buf + ln);
    int32_t a = bpe_lookup(b, buf, ln), c = bpe_lookup(b, buf + ln, rn), nw = bpe_lookup(b, buf, ln + rn);
    const char *unknown = a < 0 ? l : c < 0 ? r : NULL;
    if (unknown || nw < 0) {
        int rc = unknown ? loom_fail("%s: merge %u names the unknown token \"%s\"", path, rank, unknown)
                         : loom_fail("%s: merge %u (\"%s\" \"%s\") makes a token not in the vocab", path,
                                     rank, l, r);
        if (pair) pair[strlen(pair)] = ' ';
        return rc;
    }
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)c;
    size_t h = (size_t)(key * 0x9E3779B97F4A7C15ull >> 32) & b->mmask;
    while (b->mkey[h] != UINT64_MAX && b->mkey[h] != key) h = (h + 1) & b->mmask;
    b->in_merge[a] = b->in_merge[c] = 1;
    if (b->mkey[h] == UINT64_MAX) { /* a repeated merge keeps its first (best) rank */
        b->mkey[h] = key;
        b->mrank[h] = rank;
        b->mnew[h] = nw;
    }
    return 0;
}

static int bpe_load_merges(bpe *b, const cJSON *merges, const char *path, size_t vocab)
{
    size_t n = (size_t)cJSON_GetArraySize(merges);
    b->mmask = bpe_pow2(n) - 1;
    b->mkey = malloc((b->mmask + 1) * sizeof *b->mkey);
    b->mrank = malloc((b->mmask + 1) * sizeof *b->mrank);
    b->mnew = malloc((b->mmask + 1) * sizeof *b->mnew);
    b->in_merge = calloc(vocab, 1);
    size_t cap = b->arena_n * 2 + 64; /* a merge's two keys, as bytes (each byte-level char >= 1 byte) */
    char *buf = malloc(cap);
    if (!b->mkey || !b->mrank || !b->mnew || !b->in_merge || !buf) { free(buf); return loom_fail("tokenizer: out of memory"); }
    memset(b->mkey, 0xff, (b->mmask + 1) * sizeof *b->mkey);
    uint32_t rank = 0;
    const cJSON *m;
    int rc = 0;
    cJSON_ArrayForEach(m, merges) {
        if ((rc = bpe_add_merge(b, m, rank++, path, buf, cap)) != 0) break;
    }
    free(buf);
    return rc;
}

/* A char of s packed in a uint32 (its UTF-8 bytes; a byte for byte-level vocabularies): the one
 * at the start (last 0) or the end (last 1). Only equality of packed chars matters. */
static uint32_t bpe_pack_char(const bpe *b, const char *s, size_t n, int last)
{
    size_t a = 0, e = 1;
    if (last) {
        a = n - 1;
        while (!b->byte_level && a > 0 && n - a < 4 && ((unsigned char)s[a] & 0xC0) == 0x80) a--;
        e = n;
    } else {
        while (!b->byte_level && e < n && e < 4 && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
    }
    uint32_t v = 0;
    for (size_t i = a; i < e; i++) v = v << 8 | (unsigned char)s[i];
    return v;
}

/* The chars at which tokens may meet in a merge: from every merge's (left, right). */
static int bpe_load_joins(bpe *b, size_t vocab)
{
    b->first_c = calloc(vocab, sizeof *b->first_c);
    b->last_c = calloc(vocab, sizeof *b->last_c);
    b->join_mask = b->mmask * 2 + 1;
    b->join = malloc((b->join_mask + 1) * sizeof *b->join);
    if (!b->first_c || !b->last_c || !b->join) return loom_fail("tokenizer: out of memory");
    memset(b->join, 0xff, (b->join_mask + 1) * sizeof *b->join);
    for (size_t id = 0; id < vocab; id++) {
        if (b->tok_len[id] == UINT32_MAX || b->tok_len[id] == 0) continue;
        b->first_c[id] = bpe_pack_char(b, b->arena + b->tok_off[id], b->tok_len[id], 0);
        b->last_c[id] = bpe_pack_char(b, b->arena + b->tok_off[id], b->tok_len[id], 1);
    }
    for (size_t i = 0; i <= b->mmask; i++) {
        if (b->mkey[i] == UINT64_MAX) continue;
        uint32_t l = b->last_c[b->mkey[i] >> 32], r = b->first_c[(uint32_t)b->mkey[i]];
        if (l < 128 && r < 128) { b->join_ascii[(l * 128 + r) >> 3] |= (uint8_t)(1u << (r & 7)); continue; }
        uint64_t key = (uint64_t)l << 32 | r;
        size_t h = bpe_join_hash(key) & b->join_mask;
        while (b->join[h] != UINT64_MAX && b->join[h] != key) h = (h + 1) & b->join_mask;
        b->join[h] = key;
    }
    return 0;
}

/* ---- normalizer, pre-tokenizer, decoder ---- */

static const char *bpe_type(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static const char *bpe_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static char *bpe_dup(const char *s)
{
    char *p = s ? malloc(strlen(s) + 1) : NULL;
    if (p) strcpy(p, s);
    return p;
}

static int bpe_add_norm(bpe *b, const cJSON *o, const char *path)
{
    const char *type = bpe_type(o);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "normalizers"))
            if (bpe_add_norm(b, c, path)) return -1;
        return 0;
    }
    if (b->n_norm == 8) return loom_fail("%s: normalizer: more than 8 steps", path);
    bpe_norm *n = &b->norm[b->n_norm];
    if (strcmp(type, "NFC") == 0) n->kind = BPE_NORM_NFC;
    else if (strcmp(type, "NFKC") == 0) n->kind = BPE_NORM_NFKC;
    else if (strcmp(type, "NFD") == 0) n->kind = BPE_NORM_NFD;
    else if (strcmp(type, "NFKD") == 0) n->kind = BPE_NORM_NFKD;
    else if (strcmp(type, "Prepend") == 0 && bpe_str(o, "prepend")) {
        n->kind = BPE_NORM_PREPEND;
        n->a = bpe_dup(bpe_str(o, "prepend"));
    } else if (strcmp(type, "Replace") == 0 && bpe_str(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String") &&
               bpe_str(o, "content")) {
        n->kind = BPE_NORM_REPLACE;
        n->a = bpe_dup(bpe_str(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String"));
        n->b = bpe_dup(bpe_str(o, "content"));
        if (n->a && !n->a[0]) return loom_fail("%s: normalizer Replace with an empty pattern", path);
    } else {
        return loom_fail("%s: unsupported normalizer \"%s\" (loom reads NFC, NFKC, NFD, NFKD, "
                         "Prepend, Replace with a String pattern, Sequence)", path, type);
    }
    b->n_norm++;
    return 0;
}

static pcre2_code *bpe_compile(const char *pattern, const char *path)
{
    int err;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &err, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        loom_fail("%s: split pattern does not compile at offset %zu: %s", path, (size_t)at, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* no JIT (some platforms): the interpreter */
    return re;
}

static int bpe_behavior(const char *s)
{
    static const char *const names[] = {"", "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 1; s && i < 6; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return 0;
}

static int bpe_add_split(bpe_pre *p, const cJSON *o, const char *path)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *re = bpe_str(pat, "Regex"), *lit = bpe_str(pat, "String");
    p->kind = BPE_PRE_SPLIT;
    p->behavior = bpe_behavior(bpe_str(o, "behavior"));
    p->invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "invert"));
    if (p->behavior != BPE_ISOLATED && p->behavior != BPE_REMOVED)
        return loom_fail("%s: Split behavior \"%s\" unsupported (loom reads Isolated, Removed)", path,
                         bpe_str(o, "behavior") ? bpe_str(o, "behavior") : "?");
    if (p->invert) return loom_fail("%s: Split with invert: true is unsupported", path);
    if (!re && lit) { /* a literal: quote it for PCRE2 */
        char q[512];
        if (strlen(lit) > 200) return loom_fail("%s: Split String pattern too long", path);
        snprintf(q, sizeof q, "\\Q%s\\E", lit);
        p->re = bpe_compile(q, path);
    } else {
        p->re = re ? bpe_compile(re, path) : NULL;
        if (!re) return loom_fail("%s: Split without a Regex or String pattern", path);
    }
    return p->re ? 0 : -1;
}

static int bpe_add_pre(bpe *b, const cJSON *o, const char *path)
{
    const char *type = bpe_type(o);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"))
            if (bpe_add_pre(b, c, path)) return -1;
        return 0;
    }
    if (b->n_pre == 8) return loom_fail("%s: pre_tokenizer: more than 8 steps", path);
    bpe_pre *p = &b->pre[b->n_pre++];
    if (strcmp(type, "Split") == 0) return bpe_add_split(p, o, path);
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = BPE_PRE_BYTELEVEL;
        p->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "add_prefix_space"));
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(o, "use_regex");
        if ((!ur || cJSON_IsTrue(ur)) && !(p->re = bpe_compile(gpt2_pattern, path))) return -1;
        b->byte_level = 1;
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        p->kind = BPE_PRE_DIGITS;
        /* the library's Digits splits on char::is_numeric: \p{N}, one by one or in runs */
        int each = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "individual_digits"));
        p->re = bpe_compile(each ? "\\p{N}" : "\\p{N}+", path);
        return p->re ? 0 : -1;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *r = bpe_str(o, "replacement"), *scheme = bpe_str(o, "prepend_scheme");
        p->kind = BPE_PRE_METASPACE;
        snprintf(p->repl, sizeof p->repl, "%s", r ? r : "\xE2\x96\x81");
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(o, "add_prefix_space");
        p->prepend = scheme ? (strcmp(scheme, "first") == 0 ? BPE_FIRST_FIRST
                               : strcmp(scheme, "never") == 0 ? BPE_FIRST_NEVER : BPE_FIRST_ALWAYS)
                            : (aps && !cJSON_IsTrue(aps) ? BPE_FIRST_NEVER : BPE_FIRST_ALWAYS);
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
        p->split = !split || cJSON_IsTrue(split);
        return 0;
    }
    if (strcmp(type, "Whitespace") == 0 || strcmp(type, "WhitespaceSplit") == 0) {
        /* WhitespaceSplit: the runs of Unicode White_Space go. Whitespace (the library's regex
         * \w+|[^\w\s]+, its \w Rust's Unicode one) then also cuts each run of word characters
         * from the rest: the same pieces, as two Splits. */
        p->kind = BPE_PRE_SPLIT;
        p->behavior = BPE_REMOVED;
        if (!(p->re = bpe_compile("\\p{White_Space}+", path))) return -1;
        if (strcmp(type, "WhitespaceSplit") == 0) return 0;
        if (b->n_pre == 8) return loom_fail("%s: pre_tokenizer: more than 8 steps", path);
        p = &b->pre[b->n_pre++];
        p->kind = BPE_PRE_SPLIT;
        p->behavior = BPE_ISOLATED;
        p->re = bpe_compile("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+", path);
        return p->re ? 0 : -1;
    }
    return loom_fail("%s: unsupported pre_tokenizer \"%s\" (loom reads ByteLevel, Split, Digits, "
                     "Metaspace, Whitespace, WhitespaceSplit, Sequence)", path, type);
}

/* The decoder only decides how metaspace text turns back into spaces; byte-level decoding and
 * byte fallback follow from the model itself. */
static int bpe_add_decoder(bpe *b, const cJSON *o, const char *path)
{
    const char *type = bpe_type(o);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "decoders"))
            if (bpe_add_decoder(b, c, path)) return -1;
        return 0;
    }
    if (strcmp(type, "Replace") == 0) {
        const char *from = bpe_str(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String");
        const char *to = bpe_str(o, "content");
        if (!from || !to || strcmp(to, " ") != 0 || strlen(from) >= sizeof b->meta)
            return loom_fail("%s: decoder Replace: only a metaspace -> \" \" replacement is supported", path);
        b->dec_meta = 1;
        snprintf(b->meta, sizeof b->meta, "%s", from);
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *r = bpe_str(o, "replacement"), *scheme = bpe_str(o, "prepend_scheme");
        b->dec_meta = 1;
        snprintf(b->meta, sizeof b->meta, "%s", r ? r : "\xE2\x96\x81");
        b->dec_strip = !(scheme && strcmp(scheme, "never") == 0);
    } else if (strcmp(type, "Strip") == 0) {
        const char *c = bpe_str(o, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(o, "start");
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!c || strcmp(c, " ") != 0 || !cJSON_IsNumber(start) || start->valueint > 1 ||
            (cJSON_IsNumber(stop) && stop->valueint != 0))
            return loom_fail("%s: decoder Strip: only stripping one leading space is supported", path);
        b->dec_strip = start->valueint;
    } else if (strcmp(type, "ByteLevel") != 0 && strcmp(type, "ByteFallback") != 0 && strcmp(type, "Fuse") != 0) {
        return loom_fail("%s: unsupported decoder \"%s\"", path, type);
    }
    return 0;
}

static int bpe_load_model(bpe *b, const cJSON *model, const char *path)
{
    const char *type = bpe_type(model);
    if (strcmp(type, "WordLevel") == 0) { /* a vocab and an unk_token: the word is looked up whole */
        b->word_level = 1;
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(model, "vocab")))
            return loom_fail("%s: model needs an object 'vocab'", path);
        return 0;
    }
    if (strcmp(type, "BPE") != 0)
        return loom_fail("%s: unsupported model type \"%s\" (loom reads BPE, WordLevel)", path, type[0] ? type : "none");
    const char *csp = bpe_str(model, "continuing_subword_prefix"), *eow = bpe_str(model, "end_of_word_suffix");
    if ((csp && csp[0]) || (eow && eow[0]))
        return loom_fail("%s: BPE with continuing_subword_prefix / end_of_word_suffix is unsupported", path);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return loom_fail("%s: BPE dropout is a training-time option; loom tokenizes without it", path);
    b->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    b->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
    b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return loom_fail("%s: model needs an object 'vocab' and an array 'merges'", path);
    return 0;
}

static void bpe_destroy(tokenizer *t)
{
    bpe *b = t->impl;
    if (!b) return;
    for (int i = 0; i < b->n_norm; i++) { free(b->norm[i].a); free(b->norm[i].b); }
    for (int i = 0; i < b->n_pre; i++) pcre2_code_free(b->pre[i].re);
    for (int i = 0; i < b->n_added; i++) {
        if (b->added[i].match != b->added[i].content) free(b->added[i].match);
        free(b->added[i].content);
    }
    pcre2_match_data_free(b->md);
    free(b->added); free(b->special); free(b->arena); free(b->tok_off); free(b->tok_len); free(b->vmap);
    free(b->mkey); free(b->mrank); free(b->mnew); free(b->in_merge); free(b->first_c); free(b->last_c);
    free(b->join); free(b->soff); free(b->sym); free(b->prev); free(b->next);
    free(b->heap); free(b->heap_new); free(b->cache); free(b->carena);
    free(b);
    t->impl = NULL;
}

static int32_t bpe_special(const tokenizer *t, const char *name)
{
    const bpe *b = t->impl;
    for (int i = 0; i < b->n_added; i++)
        if (strcmp(b->added[i].content, name) == 0) return b->added[i].id;
    return -1;
}

static int bpe_is_special(const tokenizer *t, int32_t id)
{
    const bpe *b = t->impl;
    return id >= 0 && id < t->vocab && b->special[id];
}

static const tokenizer_ops bpe_ops = {bpe_encode, bpe_decode, bpe_special, bpe_is_special, bpe_destroy};

static int bpe_load(tokenizer *t, bpe *b, const cJSON *root, const char *path)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model)) return loom_fail("%s: no 'model' object (not a tokenizer.json?)", path);
    if (bpe_load_model(b, model, path)) return -1;
    if (norm && !cJSON_IsNull(norm) && bpe_add_norm(b, norm, path)) return -1;
    if (pre && !cJSON_IsNull(pre) && bpe_add_pre(b, pre, path)) return -1;
    if (dec && !cJSON_IsNull(dec) && bpe_add_decoder(b, dec, path)) return -1;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    int n = bpe_size(b, vocab, added, path);
    if (n < 0 || bpe_load_vocab(b, vocab, path) || bpe_load_added(b, added, n, path)) return -1;
    t->vocab = n;
    /* WordLevel: no merges (an empty table) */
    const cJSON *merges = b->word_level ? NULL : cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (bpe_load_merges(b, merges, path, (size_t)n) ||
        bpe_load_joins(b, (size_t)n))
        return -1;
    const char *unk = bpe_str(model, "unk_token");
    b->unk = unk ? bpe_lookup(b, unk, strlen(unk)) : -1;
    if (unk && b->unk < 0) return loom_fail("%s: unk_token \"%s\" is not in the vocab", path, unk);
    b->md = pcre2_match_data_create(4, NULL);
    if (!b->md) return loom_fail("tokenizer: out of memory");
    return bpe_prepare_added(b);
}

int tok_bpe_open(tokenizer *t, const char *path, const char *json, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return loom_fail("%s: invalid JSON", path);
    bpe *b = calloc(1, sizeof *b);
    if (!b) { cJSON_Delete(root); return loom_fail("tokenizer: out of memory"); }
    t->impl = b;
    t->ops = &bpe_ops;
    t->hash = tok_fnv1a(json, len);
    int rc = bpe_load(t, b, root, path);
    cJSON_Delete(root);
    return rc;
}
