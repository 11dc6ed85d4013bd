/* toolcall.c: extraction, parsing and grading of generated tool calls, by loom's rule and by
 * Needle's (see toolcall.h). Treats every input as untrusted model output: any surprise is "no
 * match", never a crash or an error message, since one bad sample must not stop an evaluation. */
#include "core/text/toolcall.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int toolcall_extract(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap)
{
    return chat_extract_calls(ct, tokens, n, out, cap);
}

/* 1 when some object at any depth repeats a key (cJSON keeps duplicates, and cJSON_Compare would
 * then call {"a":1,"a":2} equal to {"a":1}). */
static int toolcall_dup_keys(const cJSON *v, int depth)
{
    if (depth > 64) return 1; /* absurd nesting: not a call we could have trained */
    const cJSON *c, *d;
    cJSON_ArrayForEach(c, v) {
        if (cJSON_IsObject(v))
            for (d = v->child; d != c; d = d->next)
                if (d->string && c->string && strcmp(d->string, c->string) == 0) return 1;
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && toolcall_dup_keys(c, depth + 1)) return 1;
    }
    return 0;
}

static int toolcall_valid_call(const cJSON *c)
{
    if (!cJSON_IsObject(c) || cJSON_GetArraySize(c) != 2) return 0;
    return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "name")) &&
           cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(c, "arguments"));
}

cJSON *toolcall_parse(const char *text)
{
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) return NULL;
    while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
    int ok = end && *end == '\0' && cJSON_IsArray(root) && !toolcall_dup_keys(root, 0);
    const cJSON *c;
    cJSON_ArrayForEach(c, root) ok = ok && toolcall_valid_call(c);
    if (!ok) { cJSON_Delete(root); return NULL; }
    return root;
}

toolcall_grade toolcall_grade_text(const char *generated_json, const cJSON *answers)
{
    toolcall_grade g = {0, 0, 0};
    cJSON *calls = toolcall_parse(generated_json);
    if (!calls) return g;
    g.valid = 1;
    if (cJSON_IsArray(answers) && cJSON_GetArraySize(calls) == cJSON_GetArraySize(answers)) {
        g.names = g.exact = 1;
        const cJSON *a = answers->child;
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            const cJSON *an = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "name") : NULL;
            const cJSON *aa = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "arguments") : NULL;
            const cJSON *cn = cJSON_GetObjectItemCaseSensitive(c, "name");
            if (!cJSON_IsString(an) || strcmp(an->valuestring, cn->valuestring) != 0) g.names = 0;
            if (!aa || !cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c, "arguments"), aa, 1)) g.exact = 0;
            a = a->next;
        }
        g.exact = g.exact && g.names;
    }
    cJSON_Delete(calls);
    return g;
}

int toolcall_match(const char *generated_json, const cJSON *answers)
{
    return toolcall_grade_text(generated_json, answers).exact;
}

/* ---- Needle's exact-call rule (needle/model/finetune.py _calls_of, _score_quantised) ----
 * The call text is read as Python's json.loads reads it, into a small tree that keeps what the
 * rule looks at: an integer's digits apart from a float's value (json.dumps writes 1 and 1.0
 * differently), strings as code points (sort_keys orders by code point). */

enum { TC_NULL, TC_FALSE, TC_TRUE, TC_INT, TC_FLOAT, TC_STR, TC_LIST, TC_DICT };

typedef struct tc_str { uint32_t *v; size_t n, cap; } tc_str; /* a Python str: code points */

typedef struct tc_val {
    int kind;
    tc_str s;             /* TC_STR: the string; TC_INT: the digits as written */
    double f;             /* TC_FLOAT */
    struct tc_val *items; /* TC_LIST items, TC_DICT values, in document order */
    tc_str *keys;         /* TC_DICT: each value's key (a repeated key kept: the last one counts) */
    size_t n;
} tc_val;

typedef struct tc_in { const unsigned char *p, *end; int oom; } tc_in;

typedef struct tc_buf { char *s; size_t n, cap; int oom; } tc_buf;

/* p (capacity *cap elements of size bytes) grown to hold need, doubling; NULL when out of memory
 * (p is then still the caller's). */
static void *tc_grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return p;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) cap2 *= 2;
    void *q = realloc(p, cap2 * size);
    if (q) *cap = cap2;
    return q;
}

static int tc_put(tc_str *s, uint32_t c)
{
    uint32_t *v = tc_grow(s->v, &s->cap, s->n + 1, sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->v[s->n++] = c;
    return 0;
}

static void tc_add(tc_buf *b, const char *s, size_t n)
{
    char *g = b->oom ? NULL : tc_grow(b->s, &b->cap, b->n + n + 1, 1);
    if (!g) { b->oom = 1; return; }
    b->s = g;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void tc_cat(tc_buf *b, const char *s) { tc_add(b, s, strlen(s)); }

static void tc_free(tc_val *v)
{
    free(v->s.v);
    for (size_t i = 0; i < v->n; i++) {
        if (v->items) tc_free(&v->items[i]);
        if (v->keys) free(v->keys[i].v);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static void tc_ws(tc_in *in)
{
    while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r')) in->p++;
}

static int tc_lit(tc_in *in, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(in->end - in->p) < n || memcmp(in->p, w, n) != 0) return 0;
    in->p += n;
    return 1;
}

/* One code point of UTF-8 text (a malformed byte reads as U+FFFD, as a lenient decode gives). */
static uint32_t tc_utf8(tc_in *in)
{
    const unsigned char *p = in->p;
    size_t left = (size_t)(in->end - p);
    int len = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3 : (p[0] >> 3) == 30 ? 4 : 0;
    uint32_t c = len == 1 ? p[0] : len == 2 ? p[0] & 0x1fu : len == 3 ? p[0] & 0x0fu : p[0] & 0x07u;
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= left || (p[k] & 0xc0) != 0x80) { len = 0; break; }
        c = (c << 6) | (p[k] & 0x3fu);
    }
    in->p += len ? len : 1;
    return len ? c : 0xfffd;
}

static int tc_hex4(tc_in *in, uint32_t *c)
{
    if (in->end - in->p < 4) return -1;
    *c = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char h = *in->p++;
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        *c = *c << 4 | (uint32_t)d;
    }
    return 0;
}

/* json's scanstring, strict: no raw control character; \uD8xx\uDCxx joins into one code point,
 * a lone surrogate stays. After the opening quote. */
static int tc_string(tc_in *in, tc_str *s)
{
    static const char esc_in[] = "\"\\/bfnrtu", esc_out[] = "\"\\/\b\f\n\r\t?";
    for (;;) {
        if (in->p >= in->end || *in->p < 0x20) return -1;
        uint32_t c = *in->p;
        if (c == '"') { in->p++; return 0; }
        if (c != '\\') c = tc_utf8(in);
        else {
            in->p++;
            const char *e = in->p < in->end && *in->p ? strchr(esc_in, *in->p) : NULL;
            if (!e) return -1;
            in->p++;
            if (*e != 'u') c = (unsigned char)esc_out[e - esc_in];
            else if (tc_hex4(in, &c)) return -1;
            else if (c >= 0xd800 && c <= 0xdbff && in->end - in->p >= 6 && in->p[0] == '\\' && in->p[1] == 'u') {
                tc_in look = {in->p + 2, in->end, 0};
                uint32_t lo;
                if (tc_hex4(&look, &lo)) return -1;
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
                    in->p = look.p;
                }
            }
        }
        if (tc_put(s, c)) { in->oom = 1; return -1; }
    }
}

/* json's number: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?, an int without fraction and exponent. */
static int tc_number(tc_in *in, tc_val *v)
{
    const unsigned char *a = in->p, *p = in->p, *e = in->end;
    if (p < e && *p == '-') p++;
    if (p >= e || *p < '0' || *p > '9') return -1;
    if (*p == '0') p++;
    else while (p < e && *p >= '0' && *p <= '9') p++;
    int is_float = 0;
    if (e - p >= 2 && *p == '.' && p[1] >= '0' && p[1] <= '9') {
        is_float = 1;
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) continue;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        const unsigned char *q = p + 1;
        if (q < e && (*q == '+' || *q == '-')) q++;
        if (q < e && *q >= '0' && *q <= '9') {
            is_float = 1;
            for (p = q; p < e && *p >= '0' && *p <= '9'; p++) continue;
        }
    }
    in->p = p;
    v->kind = is_float ? TC_FLOAT : TC_INT;
    if (is_float) {
        char t[512];
        size_t n = (size_t)(p - a) < sizeof t - 1 ? (size_t)(p - a) : sizeof t - 1;
        memcpy(t, a, n);
        t[n] = '\0';
        v->f = strtod(t, NULL);  /* correctly rounded, as float(); overflow gives inf as in Python */
        return 0;
    }
    if (p - a == 2 && a[0] == '-' && a[1] == '0') a++;  /* int("-0") is 0 */
    for (; a < p; a++)
        if (tc_put(&v->s, *a)) { in->oom = 1; return -1; }
    return 0;
}

static int tc_value(tc_in *in, tc_val *v, int depth);

/* '[' or '{' already read: items (and keys) up to the closing bracket. */
static int tc_container(tc_in *in, tc_val *v, int depth, int dict)
{
    size_t cap = 0, kcap = 0;
    v->kind = dict ? TC_DICT : TC_LIST;
    tc_ws(in);
    if (in->p < in->end && *in->p == (dict ? '}' : ']')) { in->p++; return 0; }
    for (;;) {
        tc_val *items = tc_grow(v->items, &cap, v->n + 1, sizeof *items);
        if (items) v->items = items;
        tc_str *keys = items && dict ? tc_grow(v->keys, &kcap, v->n + 1, sizeof *keys) : NULL;
        if (keys) v->keys = keys;
        if (!items || (dict && !keys)) { in->oom = 1; return -1; }
        memset(&v->items[v->n], 0, sizeof *v->items);
        if (dict) memset(&v->keys[v->n], 0, sizeof *v->keys);
        v->n++;
        if (dict) {
            tc_ws(in);
            if (!tc_lit(in, "\"") || tc_string(in, &v->keys[v->n - 1])) return -1;
            tc_ws(in);
            if (!tc_lit(in, ":")) return -1;
        }
        if (tc_value(in, &v->items[v->n - 1], depth + 1)) return -1;
        tc_ws(in);
        if (tc_lit(in, dict ? "}" : "]")) return 0;
        if (!tc_lit(in, ",")) return -1;
    }
}

/* One value after whitespace. Python gives up past its recursion limit (~1000); so does this, at 512. */
static int tc_value(tc_in *in, tc_val *v, int depth)
{
    tc_ws(in);
    if (depth > 512 || in->p >= in->end) return -1;
    unsigned char c = *in->p;
    if (c == '"') { in->p++; v->kind = TC_STR; return tc_string(in, &v->s); }
    if (c == '[' || c == '{') { in->p++; return tc_container(in, v, depth, c == '{'); }
    if (tc_lit(in, "null")) { v->kind = TC_NULL; return 0; }
    if (tc_lit(in, "true")) { v->kind = TC_TRUE; return 0; }
    if (tc_lit(in, "false")) { v->kind = TC_FALSE; return 0; }
    if (tc_lit(in, "NaN")) { v->kind = TC_FLOAT; v->f = NAN; return 0; }
    if (tc_lit(in, "Infinity")) { v->kind = TC_FLOAT; v->f = INFINITY; return 0; }
    if (tc_lit(in, "-Infinity")) { v->kind = TC_FLOAT; v->f = -INFINITY; return 0; }
    return tc_number(in, v);
}

/* repr(float) for a finite x into out (48 bytes): the shortest digits that read back; fixed
 * notation when the decimal exponent is in [-4, 16) (with ".0" when integral), else d.ddde+XX. */
static void tc_float_repr(double x, char *out)
{
    char t[40], d[24];
    int p;
    for (p = 1; p < 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, x);
        if (strtod(t, NULL) == x) break;
    }
    snprintf(t, sizeof t, "%.*e", p - 1, x);
    int nd = 0, e = x == 0 ? 0 : atoi(strchr(t, 'e') + 1);
    for (const char *q = t; *q != 'e'; q++) if (*q >= '0' && *q <= '9') d[nd++] = *q;
    while (nd > 1 && d[nd - 1] == '0') nd--;
    char *o = out;
    if (signbit(x)) *o++ = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) { /* 0.000ddd */
            *o++ = '0', *o++ = '.';
            for (int z = 0; z < -e - 1; z++) *o++ = '0';
        }
        for (int k = 0; k < nd || k <= e; k++) {
            *o++ = k < nd ? d[k] : '0';
            if (k == e) *o++ = '.';
        }
        if (nd <= e + 1) *o++ = '0';
        *o = '\0';
        return;
    }
    *o++ = d[0];
    if (nd > 1) *o++ = '.';
    for (int k = 1; k < nd; k++) *o++ = d[k];
    snprintf(o, 16, "e%c%02d", e < 0 ? '-' : '+', abs(e));
}

/* A str as json.dumps writes it (ensure_ascii): \" \\ \n \r \t \b \f, other code points outside
 * ' '..'~' as \uxxxx (a surrogate pair above U+FFFF). */
static void tc_dump_str(tc_buf *b, const tc_str *s)
{
    tc_cat(b, "\"");
    for (size_t i = 0; i < s->n; i++) {
        uint32_t c = s->v[i];
        char e[16];
        const char *sp = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                       : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (sp) tc_cat(b, sp);
        else if (c >= 0x20 && c <= 0x7e) { e[0] = (char)c; tc_add(b, e, 1); }
        else if (c < 0x10000) { snprintf(e, sizeof e, "\\u%04x", (unsigned)c); tc_cat(b, e); }
        else {
            c -= 0x10000;
            snprintf(e, sizeof e, "\\u%04x\\u%04x", (unsigned)(0xd800 | (c >> 10)), (unsigned)(0xdc00 | (c & 0x3ff)));
            tc_cat(b, e);
        }
    }
    tc_cat(b, "\"");
}

static int tc_str_cmp(const tc_str *a, const tc_str *b)
{
    for (size_t i = 0; i < a->n && i < b->n; i++)
        if (a->v[i] != b->v[i]) return a->v[i] < b->v[i] ? -1 : 1;
    return (a->n > b->n) - (a->n < b->n);
}

/* Index of the value a dict gives for key k (json.loads keeps a repeated key's last value), -1. */
static long tc_get(const tc_val *v, const tc_str *k)
{
    for (size_t i = v->n; i-- > 0;)
        if (tc_str_cmp(&v->keys[i], k) == 0) return (long)i;
    return -1;
}

/* Index order of a dict's distinct keys, each with its last value: sorted by code point
 * (sort_keys) or where the key first came (a Python dict's order). n_out: how many. */
static size_t *tc_dict_order(const tc_val *v, int sorted, size_t *n_out)
{
    size_t *o = malloc((v->n ? v->n : 1) * sizeof *o), n = 0;
    if (!o) return NULL;
    for (size_t i = 0; i < v->n; i++) {
        long first = 0;
        while (tc_str_cmp(&v->keys[first], &v->keys[i]) != 0) first++;
        if ((size_t)first == i) o[n++] = (size_t)tc_get(v, &v->keys[i]);
    }
    for (size_t i = 1; sorted && i < n; i++) /* insertion sort: argument dicts are small */
        for (size_t j = i; j > 0 && tc_str_cmp(&v->keys[o[j - 1]], &v->keys[o[j]]) > 0; j--) {
            size_t t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
    *n_out = n;
    return o;
}

/* json.dumps(v, sort_keys=True): separators ", " and ": ", floats by repr, NaN/Infinity. */
static void tc_dump(tc_buf *b, const tc_val *v)
{
    char t[48];
    switch (v->kind) {
    case TC_NULL: tc_cat(b, "null"); return;
    case TC_TRUE: tc_cat(b, "true"); return;
    case TC_FALSE: tc_cat(b, "false"); return;
    case TC_STR: tc_dump_str(b, &v->s); return;
    case TC_INT:
        for (size_t i = 0; i < v->s.n; i++) { t[0] = (char)v->s.v[i]; tc_add(b, t, 1); }
        return;
    case TC_FLOAT:
        if (isnan(v->f)) tc_cat(b, "NaN");
        else if (isinf(v->f)) tc_cat(b, v->f < 0 ? "-Infinity" : "Infinity");
        else { tc_float_repr(v->f, t); tc_cat(b, t); }
        return;
    case TC_LIST:
        tc_cat(b, "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i) tc_cat(b, ", ");
            tc_dump(b, &v->items[i]);
        }
        tc_cat(b, "]");
        return;
    default: {
        size_t n, *o = tc_dict_order(v, 1, &n);
        if (!o) { b->oom = 1; return; }
        tc_cat(b, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) tc_cat(b, ", ");
            tc_dump_str(b, &v->keys[o[i]]);
            tc_cat(b, ": ");
            tc_dump(b, &v->items[o[i]]);
        }
        tc_cat(b, "}");
        free(o);
    }
    }
}

/* str.isprintable() for c >= 0x7f, for the characters a model may plausibly write: controls,
 * the Unicode spaces and separators (Zs, Zl, Zp), the common format characters (Cf), surrogates
 * and private use are not printable; every other character is taken as printable (Python also
 * escapes unassigned code points, from its Unicode tables). */
static int tc_printable(uint32_t c)
{
    static const uint32_t no[][2] = {
        {0x7f, 0xa0},     {0xad, 0xad},     {0x600, 0x605},   {0x61c, 0x61c},   {0x6dd, 0x6dd},
        {0x70f, 0x70f},   {0x1680, 0x1680}, {0x180e, 0x180e}, {0x2000, 0x200f}, {0x2028, 0x202f},
        {0x205f, 0x2064}, {0x2066, 0x206f}, {0x3000, 0x3000}, {0xd800, 0xf8ff}, {0xfeff, 0xfeff},
        {0xfff9, 0xfffb}, {0xfffe, 0xffff}, {0xe0001, 0xe007f}, {0xf0000, 0x10ffff}};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (c >= no[i][0] && c <= no[i][1]) return 0;
    return 1;
}

/* Python's repr of a str into code points: quoted with ' (with " when it holds ' and no "),
 * \\ \n \r \t and the quote escaped, other non-printable characters as \xNN, \uNNNN, \UNNNNNNNN. */
static int tc_repr_str(tc_str *o, const tc_str *s)
{
    int sq = 0, dq = 0, rc = 0;
    for (size_t i = 0; i < s->n; i++) sq |= s->v[i] == '\'', dq |= s->v[i] == '"';
    uint32_t q = sq && !dq ? '"' : '\'';
    rc |= tc_put(o, q);
    for (size_t i = 0; i < s->n; i++) {
        uint32_t c = s->v[i];
        char e[16] = {0};
        if (c == q || c == '\\') e[0] = '\\', e[1] = (char)c;
        else if (c == '\n' || c == '\r' || c == '\t') e[0] = '\\', e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        else if (c < 0x20 || (c >= 0x7f && !tc_printable(c)))
            snprintf(e, sizeof e, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)c);
        if (!e[0]) rc |= tc_put(o, c);
        for (int k = 0; e[k]; k++) rc |= tc_put(o, (unsigned char)e[k]);
    }
    return rc | tc_put(o, q);
}

static int tc_put_ascii(tc_str *o, const char *s)
{
    int rc = 0;
    for (; *s; s++) rc |= tc_put(o, (unsigned char)*s);
    return rc;
}

/* str(v) into code points (a str itself; repr for the rest: None, True, 1, 1.0, nan, [..], {..}). */
static int tc_str_of(tc_str *o, const tc_val *v, int top)
{
    char t[48];
    int rc = 0;
    switch (v->kind) {
    case TC_NULL: return tc_put_ascii(o, "None");
    case TC_TRUE: return tc_put_ascii(o, "True");
    case TC_FALSE: return tc_put_ascii(o, "False");
    case TC_INT:
        for (size_t i = 0; i < v->s.n; i++) rc |= tc_put(o, v->s.v[i]);
        return rc;
    case TC_FLOAT:
        if (isnan(v->f)) return tc_put_ascii(o, "nan");
        if (isinf(v->f)) return tc_put_ascii(o, v->f < 0 ? "-inf" : "inf");
        tc_float_repr(v->f, t);
        return tc_put_ascii(o, t);
    case TC_STR:
        if (!top) return tc_repr_str(o, &v->s);
        for (size_t i = 0; i < v->s.n; i++) rc |= tc_put(o, v->s.v[i]);
        return rc;
    case TC_LIST:
        rc |= tc_put(o, '[');
        for (size_t i = 0; i < v->n; i++) rc |= (i ? tc_put_ascii(o, ", ") : 0) | tc_str_of(o, &v->items[i], 0);
        return rc | tc_put(o, ']');
    default: {
        size_t n, *ord = tc_dict_order(v, 0, &n);
        if (!ord) return -1;
        rc |= tc_put(o, '{');
        for (size_t i = 0; i < n; i++)
            rc |= (i ? tc_put_ascii(o, ", ") : 0) | tc_repr_str(o, &v->keys[ord[i]]) | tc_put_ascii(o, ": ") |
                  tc_str_of(o, &v->items[ord[i]], 0);
        free(ord);
        return rc | tc_put(o, '}');
    }
    }
}

/* Python's truth of a value: null, false, 0, 0.0, "", [] and {} are false. */
static int tc_truthy(const tc_val *v)
{
    switch (v->kind) {
    case TC_NULL: case TC_FALSE: return 0;
    case TC_TRUE: return 1;
    case TC_INT: return !(v->s.n == 1 && v->s.v[0] == '0');
    case TC_FLOAT: return v->f != 0.0;
    case TC_STR: return v->s.n > 0;
    default: return v->n > 0;
    }
}

/* One call of the list: str(name) as a JSON string, a space, json.dumps(arguments or {},
 * sort_keys=True), a newline. */
static int tc_call_line(tc_buf *b, const tc_val *c)
{
    static const uint32_t kname[4] = {'n', 'a', 'm', 'e'}, kargs[9] = {'a', 'r', 'g', 'u', 'm', 'e', 'n', 't', 's'};
    tc_str name = {0}, kn = {(uint32_t *)kname, 4, 4}, ka = {(uint32_t *)kargs, 9, 9};
    tc_val none = {0}, empty = {0};
    long in = tc_get(c, &kn), ia = tc_get(c, &ka);
    none.kind = TC_NULL;
    empty.kind = TC_DICT;
    const tc_val *args = ia >= 0 && tc_truthy(&c->items[ia]) ? &c->items[ia] : &empty;
    int rc = tc_str_of(&name, in >= 0 ? &c->items[in] : &none, 1);
    if (rc == 0) {
        tc_dump_str(b, &name);
        tc_cat(b, " ");
        tc_dump(b, args);
        tc_cat(b, "\n");
    }
    free(name.v);
    return rc || b->oom ? -1 : 0;
}

int toolcall_needle_calls(const char *text, char **out)
{
    *out = NULL;
    tc_buf b = {0};
    tc_cat(&b, "");
    if (!text) return b.oom ? -1 : (*out = b.s, 1);  /* no call block: [] */
    tc_in in = {(const unsigned char *)text, (const unsigned char *)text + strlen(text), 0};
    tc_val v = {0};
    int ok = !tc_lit(&in, "\xef\xbb\xbf") && tc_value(&in, &v, 0) == 0;  /* json.loads refuses a BOM */
    tc_ws(&in);
    ok = ok && in.p == in.end && v.kind == TC_LIST;
    for (size_t i = 0; ok && i < v.n; i++)
        if (v.items[i].kind == TC_DICT && tc_call_line(&b, &v.items[i])) b.oom = 1;
    tc_free(&v);
    if (in.oom || b.oom || !ok) {
        free(b.s);
        return in.oom || b.oom ? -1 : 0;
    }
    *out = b.s;
    return 1;
}

int toolcall_needle_match(const char *generated, const char *answers_json)
{
    char *g = NULL, *w = NULL;
    /* Needle's reference goes through _calls_of too: its text up to a "</tool_call>" inside it */
    const char *a = answers_json ? answers_json : "[]", *cut = strstr(a, "</tool_call>");
    char *want = cut ? malloc((size_t)(cut - a) + 1) : NULL;
    if (want) memcpy(want, a, (size_t)(cut - a)), want[cut - a] = '\0';
    int sg = toolcall_needle_calls(generated, &g), sw = cut && !want ? -1 : toolcall_needle_calls(want ? want : a, &w);
    free(want);
    int match = sg >= 0 && sw >= 0 && sg == sw && (sg == 0 || strcmp(g, w) == 0);
    free(g);
    free(w);
    return match;
}
