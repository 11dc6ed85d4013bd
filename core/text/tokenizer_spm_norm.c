/* tokenizer_spm_norm.c: SentencePiece's normaliser: the precompiled charsmap (a darts-clone
 * double array, e.g. nmt_nfkc's), user-defined symbols passed through untouched, whitespace
 * collapsed and escaped to U+2581, the dummy prefix. Must follow the library's
 * Normalizer::Normalize step for step and never read outside the model's tables. */
#include "core/text/tokenizer_spm.h"

#include <stdlib.h>
#include <string.h>

#define SPM_SPACE "\xE2\x96\x81" /* U+2581, what a space becomes */

int spm_buf_add(spm_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) return -1;
        b->s = p;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return 0;
}

/* The length of a valid UTF-8 character at s (the library's DecodeUTF8: no overlongs, no
 * surrogates, nothing above U+10FFFF), 0 when the bytes are not one. */
static size_t spm_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || n < len) return 0;
    uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return 0;
    return len;
}

/* The longest charsmap key that prefixes s: its length (0 when none) and value in *val. This is
 * darts-clone's commonPrefixSearch, each step checked against the array's size. */
static size_t spm_trie_longest(const spm_norm *nm, const unsigned char *s, size_t n, uint32_t *val)
{
    const uint32_t *u = nm->units;
    size_t size = nm->n_units, pos = 0, best = 0;
    uint32_t unit = u[0];
#define DA_OFFSET(x) (((x) >> 10) << (((x) & (1u << 9)) >> 6))
    pos ^= DA_OFFSET(unit);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= size) break;
        unit = u[pos];
        if ((unit & (0x80000000u | 0xFFu)) != s[i]) break;
        pos ^= DA_OFFSET(unit);
        if (pos >= size) break;
        if ((unit >> 8) & 1) {
            best = i + 1;
            *val = u[pos] & 0x7FFFFFFFu;
        }
    }
#undef DA_OFFSET
    return best;
}

/* The library's NormalizePrefix: what the text at s becomes (*out, *out_n) and how many bytes
 * of it that takes (always at least 1). */
static size_t spm_norm_prefix(const spm_norm *nm, const spm_model *m, const char *s, size_t n,
                              const char **out, size_t *out_n)
{
    size_t len = m ? spm_match_user(m, s, n) : 0;
    if (len) {
        *out = s;
        *out_n = len;
        return len;
    }
    uint32_t val = 0;
    len = nm->units ? spm_trie_longest(nm, (const unsigned char *)s, n, &val) : 0;
    if (len) {
        *out = val < nm->pool_n ? nm->pool + val : nm->pool + nm->pool_n;
        *out_n = strlen(*out); /* the pool ends in a NUL we added */
        return len;
    }
    len = spm_utf8_len((const unsigned char *)s, n);
    if (!len) { /* a malformed byte: U+FFFD for it alone */
        *out = "\xEF\xBF\xBD";
        *out_n = 3;
        return 1;
    }
    *out = s;
    *out_n = len;
    return len;
}

/* Append sp, each space as U+2581 when the spec escapes whitespace. */
static int spm_put(const spm_norm *nm, spm_buf *out, const char *sp, size_t n)
{
    if (!nm->escape_ws || !memchr(sp, ' ', n)) return spm_buf_add(out, sp, n);
    for (size_t i = 0; i < n; i++)
        if (spm_buf_add(out, sp[i] == ' ' ? SPM_SPACE : sp + i, sp[i] == ' ' ? 3 : 1)) return -1;
    return 0;
}

int spm_normalize(const spm_norm *nm, const spm_model *m, const char *text, size_t n, int no_prefix,
                  spm_buf *out)
{
    const char *ws = nm->escape_ws ? SPM_SPACE : " ", *p;
    size_t wn = strlen(ws), pn;
    out->n = 0;
    if (spm_buf_add(out, "", 0)) return -1;
    while (nm->remove_extra_ws && n) { /* heading whitespace */
        size_t c = spm_norm_prefix(nm, m, text, n, &p, &pn);
        if (pn != 1 || p[0] != ' ') break;
        text += c;
        n -= c;
    }
    if (!n) return 0;
    if (!nm->ws_suffix && nm->add_dummy_prefix && !no_prefix && spm_buf_add(out, ws, wn)) return -1;
    int prev_space = nm->remove_extra_ws;
    while (n) {
        size_t c = spm_norm_prefix(nm, m, text, n, &p, &pn);
        while (prev_space && pn && p[0] == ' ') p++, pn--;
        if (pn) {
            if (spm_put(nm, out, p, pn)) return -1;
            prev_space = p[pn - 1] == ' ';
        }
        text += c;
        n -= c;
        if (!nm->remove_extra_ws) prev_space = 0;
    }
    while (nm->remove_extra_ws && out->n >= wn && memcmp(out->s + out->n - wn, ws, wn) == 0) out->n -= wn;
    out->s[out->n] = '\0';
    if (nm->ws_suffix && nm->add_dummy_prefix && !no_prefix && spm_buf_add(out, ws, wn)) return -1;
    return 0;
}
