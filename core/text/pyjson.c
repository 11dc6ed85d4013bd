/* pyjson.c: JSON as Python's json module reads and writes it (see pyjson.h). */
#include "core/text/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* JSON's number grammar (what json.loads accepts), the whole of s[0..n). */
static int pyjson_number_ok(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        if (++i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

typedef struct pyjson_nums {
    cJSON **v;
    size_t n, cap;
} pyjson_nums;

static int pyjson_collect(cJSON *v, pyjson_nums *l)
{
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 64;
                cJSON **p = realloc(l->v, cap * sizeof *p);
                if (!p) return -1;
                l->v = p;
                l->cap = cap;
            }
            l->v[l->n++] = v;
        }
        if (v->child && pyjson_collect(v->child, l)) return -1;
    }
    return 0;
}

int pyjson_keep_numbers(cJSON *root, const char *text, size_t n)
{
    pyjson_nums l = {0};
    cJSON *next = root->next;
    root->next = NULL; /* root alone, not its siblings */
    int rc = pyjson_collect(root, &l) ? loom_fail("out of memory") : 0;
    root->next = next;
    size_t k = 0;
    for (size_t i = 0, in_str = 0; rc == 0 && i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            else if (c < 0x20) rc = loom_fail("a raw control character (0x%02x) inside a JSON string", c);
            continue;
        }
        if (c == '"') { in_str = 1; continue; }
        if (c != '-' && (c < '0' || c > '9')) continue;
        size_t j = i;
        while (j < n && strchr("0123456789+-.eE", text[j]) && text[j]) j++;
        if (!pyjson_number_ok(text + i, j - i)) rc = loom_fail("invalid JSON number '%.*s'", (int)(j - i), text + i);
        else if (k >= l.n) rc = loom_fail("invalid JSON");
        else {
            cJSON *v = l.v[k++];
            free(v->valuestring);
            v->valuestring = malloc(j - i + 1);
            if (!v->valuestring) rc = loom_fail("out of memory");
            else { memcpy(v->valuestring, text + i, j - i); v->valuestring[j - i] = '\0'; }
        }
        i = j - 1;
    }
    free(l.v);
    return rc;
}

/* A small appender into the caller's fixed buffer (a repr is at most 24 characters). */
typedef struct pj_out {
    char *p;
    size_t n;
} pj_out;

static void pj_add(pj_out *o, const char *s, size_t k)
{
    if (o->n + k >= PYJSON_NUMBER_BUF) k = PYJSON_NUMBER_BUF - 1 - o->n;
    memcpy(o->p + o->n, s, k);
    o->n += k;
    o->p[o->n] = '\0';
}

static void pj_str(pj_out *o, const char *s) { pj_add(o, s, strlen(s)); }

/* repr(float(x)): the shortest digits that read back, fixed notation for 1e-4 <= |x| < 1e16
 * (with ".0" when integral), else d.ddde+XX; json.dumps writes inf as Infinity. */
static void pj_float(pj_out *b, double v)
{
    if (isinf(v)) { pj_str(b, v < 0 ? "-Infinity" : "Infinity"); return; }
    if (isnan(v)) { pj_str(b, "NaN"); return; }
    char t[40], d[24];
    int p, e = 0;
    for (p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, v);
        if (strtod(t, NULL) == v) break;
    }
    size_t nd = 0;
    for (const char *q = t; *q && *q != 'e'; q++) if (*q >= '0' && *q <= '9') d[nd++] = *q;
    while (nd > 1 && d[nd - 1] == '0') nd--;
    d[nd] = '\0';
    e = atoi(strchr(t, 'e') + 1);
    if (signbit(v)) pj_str(b, "-");
    int decpt = e + 1;
    if (v == 0) decpt = 1;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            pj_str(b, "0.");
            for (int z = 0; z < -decpt; z++) pj_str(b, "0");
            pj_str(b, d);
        } else if ((size_t)decpt >= nd) {
            pj_str(b, d);
            for (size_t z = nd; z < (size_t)decpt; z++) pj_str(b, "0");
            pj_str(b, ".0");
        } else {
            pj_add(b, d, (size_t)decpt);
            pj_str(b, ".");
            pj_str(b, d + decpt);
        }
        return;
    }
    pj_add(b, d, 1);
    if (nd > 1) { pj_str(b, "."); pj_str(b, d + 1); }
    snprintf(t, sizeof t, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    pj_str(b, t);
}

const char *pyjson_number(const cJSON *v, char tmp[PYJSON_NUMBER_BUF])
{
    const char *s = v->valuestring;
    if (s && !strpbrk(s, ".eE")) return strcmp(s, "-0") == 0 ? "0" : s;
    double x = s ? strtod(s, NULL) : v->valuedouble;
    tmp[0] = '\0';
    if (!s && x == floor(x) && fabs(x) < 9007199254740992.0) {
        snprintf(tmp, PYJSON_NUMBER_BUF, "%.0f", x);
        return strcmp(tmp, "-0") == 0 ? "0" : tmp;
    }
    pj_out o = {tmp, 0};
    pj_float(&o, x);
    return tmp;
}

void pyjson_add(pyjson_buf *b, const char *s, size_t n)
{
    if (b->err) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->err = 1; return; }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void pyjson_str(pyjson_buf *b, const char *s) { pyjson_add(b, s, strlen(s)); }

void pyjson_string(pyjson_buf *b, const char *s)
{
    pyjson_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; pyjson_add(b, esc, 2); }
        else if (c == '\n') pyjson_str(b, "\\n");
        else if (c == '\r') pyjson_str(b, "\\r");
        else if (c == '\t') pyjson_str(b, "\\t");
        else if (c == '\b') pyjson_str(b, "\\b");
        else if (c == '\f') pyjson_str(b, "\\f");
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); pyjson_str(b, esc); }
        else pyjson_add(b, (const char *)&c, 1);
    }
    pyjson_str(b, "\"");
}

const cJSON *pyjson_get(const cJSON *obj, const char *key)
{
    const cJSON *last = NULL;
    if (!cJSON_IsObject(obj)) return NULL;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0) last = c;
    return last;
}

/* A new line and `indent` spaces for each of `level` levels. */
static void pyjson_indent(pyjson_buf *b, int indent, int level)
{
    pyjson_str(b, "\n");
    for (int i = 0; i < indent * level; i++) pyjson_str(b, " ");
}

static void pyjson_dump_at(pyjson_buf *b, const cJSON *v, const char *item_sep, const char *key_sep, int indent,
                           int level)
{
    char t[PYJSON_NUMBER_BUF];
    if (!v || cJSON_IsNull(v)) pyjson_str(b, "null");
    else if (cJSON_IsString(v)) pyjson_string(b, v->valuestring);
    else if (cJSON_IsNumber(v)) pyjson_str(b, pyjson_number(v, t));
    else if (cJSON_IsTrue(v)) pyjson_str(b, "true");
    else if (cJSON_IsFalse(v)) pyjson_str(b, "false");
    else if (!v->child) pyjson_str(b, cJSON_IsObject(v) ? "{}" : "[]");
    else {
        int obj = cJSON_IsObject(v), first = 1;
        pyjson_str(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            const cJSON *val = c;
            if (obj) { /* a key again: the dict kept its first place and its last value */
                const cJSON *d = v->child;
                while (d != c && strcmp(d->string, c->string) != 0) d = d->next;
                if (d != c) continue;
                val = pyjson_get(v, c->string);
            }
            if (!first) pyjson_str(b, item_sep);
            first = 0;
            if (indent >= 0) pyjson_indent(b, indent, level + 1);
            if (obj) { pyjson_string(b, c->string); pyjson_str(b, key_sep); }
            pyjson_dump_at(b, val, item_sep, key_sep, indent, level + 1);
        }
        if (indent >= 0) pyjson_indent(b, indent, level);
        pyjson_str(b, obj ? "}" : "]");
    }
}

void pyjson_dump(pyjson_buf *b, const cJSON *v, const char *item_sep, const char *key_sep, int indent)
{
    pyjson_dump_at(b, v, item_sep, key_sep, indent, 0);
}
