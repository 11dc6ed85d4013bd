/* needle_config.c: Needle's TransformerConfig (architecture.py:40-122) in C: its defaults, the
 * checkpoint's config JSON read as load_checkpoint + from_saved read it, written back as
 * json.dumps(asdict(config)), the geometry it implies and every tensor shape of a base checkpoint.
 * Must never accept a config Needle 3 would build a different model from without saying so. */
#include "checkpoints/needle.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { NF_INT, NF_BOOL, NF_NUM, NF_STR, NF_LIST };

/* One field: JSON name, kind, place in needle_config, and whether from_saved (architecture.py:
 * 110-116) sets it to 0 / () / False when the saved config lacks it (else: the default). */
typedef struct nfield {
    const char *name;
    int kind;
    size_t off;
    int off_when_missing;
} nfield;

#define F(n, k, o) {#n, k, offsetof(needle_config, n), o}
static const nfield nfields[] = {
    F(vocab_size, NF_INT, 0), F(d_model, NF_INT, 0), F(num_heads, NF_INT, 0), F(num_kv_heads, NF_INT, 0),
    F(num_layers, NF_INT, 0), F(qk_head_dim, NF_INT, 1), F(v_head_dim, NF_INT, 1), F(max_seq_len, NF_INT, 0),
    F(pad_token_id, NF_INT, 0), F(embedding_dim, NF_INT, 0), F(embedding_probes, NF_INT, 0),
    F(embedding_queries, NF_INT, 0), F(confidence_probes, NF_INT, 0), F(confidence_queries, NF_INT, 0),
    F(router_probes, NF_INT, 0), F(router_queries, NF_INT, 0), F(rope_theta, NF_NUM, 0), F(dtype, NF_STR, 0),
    F(flash, NF_BOOL, 0), F(engram_orders, NF_LIST, 0), F(engram_heads, NF_INT, 0), F(engram_slots, NF_INT, 0),
    F(engram_seed_heads, NF_INT, 1), F(engram_layers, NF_LIST, 0), F(global_layers, NF_LIST, 1),
    F(sliding_window, NF_INT, 1), F(ladder_depths, NF_LIST, 1), F(ladder_sample, NF_BOOL, 1),
    F(ladder_widths, NF_LIST, 1), F(ladder_order, NF_LIST, 1), F(mhc_lanes, NF_INT, 0),
    F(qkv_conv_taps, NF_INT, 1), F(out_vocab, NF_INT, 1), F(kv_window, NF_INT, 0), F(kv_bits, NF_INT, 0),
    F(act_bits, NF_INT, 0), F(weight_bits, NF_STR, 0), F(remat, NF_BOOL, 0), F(scan_unroll, NF_INT, 0),
};
#undef F
#define NFIELDS ((int)(sizeof nfields / sizeof nfields[0]))

static needle_list nlist(int n, const int *v)
{
    needle_list l = {0};
    l.n = n;
    for (int i = 0; i < n; i++) l.v[i] = v[i];
    return l;
}

void needle_config_default(needle_config *c)
{
    memset(c, 0, sizeof *c);
    c->vocab_size = 16384, c->d_model = 768, c->num_heads = 12, c->num_kv_heads = 2, c->num_layers = 20;
    c->qk_head_dim = 48, c->v_head_dim = 64, c->max_seq_len = 4096, c->pad_token_id = 0;
    c->embedding_dim = 128;
    c->embedding_probes = c->embedding_queries = c->confidence_probes = c->confidence_queries = 4;
    c->router_probes = c->router_queries = 4;
    c->rope_theta = 100000.0;
    strcpy(c->dtype, "bfloat16");
    c->flash = 1;
    c->engram_orders = nlist(2, (const int[]){2, 3});
    c->engram_heads = 0, c->engram_slots = 18432, c->engram_seed_heads = 0;
    c->engram_layers = nlist(5, (const int[]){3, 7, 11, 15, 19});
    c->global_layers = nlist(4, (const int[]){4, 9, 14, 19});
    c->sliding_window = 1024;
    c->mhc_lanes = 4, c->qkv_conv_taps = 3, c->out_vocab = 0, c->kv_window = 0;
    c->kv_bits = 8, c->act_bits = 8;
    c->weight_bits[0] = '\0';
    c->remat = 1, c->scan_unroll = 1;
}

static int nint(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e9) return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* One JSON value into field f of c; -1 + loom_fail naming it. */
static int nfield_set(needle_config *c, const nfield *f, const cJSON *v, const char *where)
{
    char *p = (char *)c + f->off;
    switch (f->kind) {
    case NF_INT:
        if (nint(v, (int *)p) == 0) return 0;
        return loom_fail("%s: config field %s: not an integer", where, f->name);
    case NF_BOOL: /* Python truthiness of what json.loads gives; a bool or 0/1 */
        if (cJSON_IsBool(v)) { *(int *)p = cJSON_IsTrue(v); return 0; }
        if (nint(v, (int *)p) == 0 && (*(int *)p == 0 || *(int *)p == 1)) return 0;
        return loom_fail("%s: config field %s: not a boolean", where, f->name);
    case NF_NUM:
        if (cJSON_IsNumber(v)) { *(double *)p = v->valuedouble; return 0; }
        return loom_fail("%s: config field %s: not a number", where, f->name);
    case NF_STR:
        if (cJSON_IsString(v) && strlen(v->valuestring) < 16) { strcpy(p, v->valuestring); return 0; }
        return loom_fail("%s: config field %s: not a string of at most 15 bytes", where, f->name);
    default: {
        needle_list *l = (needle_list *)p;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > NEEDLE_MAX_LIST)
            return loom_fail("%s: config field %s: not a list of at most %d integers", where, f->name, NEEDLE_MAX_LIST);
        l->n = 0;
        for (const cJSON *e = v->child; e; e = e->next)
            if (nint(e, &l->v[l->n++]) != 0)
                return loom_fail("%s: config field %s: item %d is not an integer", where, f->name, l->n - 1);
        return 0;
    }
    }
}

/* The off value from_saved gives a missing field. */
static void nfield_off(needle_config *c, const nfield *f)
{
    char *p = (char *)c + f->off;
    if (f->kind == NF_LIST) ((needle_list *)p)->n = 0;
    else *(int *)p = 0;
}

static int nlist_in(const needle_list *l, int lo, int hi)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i] < lo || l->v[i] >= hi) return i;
    return -1;
}

/* What architecture.py asserts or would fail on, checked before any shape is computed. */
static int needle_config_check(const needle_config *c, const char *w)
{
#define NEED(cond, field, ...) if (!(cond)) return loom_fail("%s: config field " field ": " __VA_ARGS__)
    NEED(c->vocab_size >= 1 && c->vocab_size <= (1 << 24), "vocab_size", "%d is not in [1, 2^24]", w, c->vocab_size);
    NEED(c->d_model >= 1 && c->d_model <= (1 << 16), "d_model", "%d is not in [1, 65536]", w, c->d_model);
    NEED(c->num_layers >= 1 && c->num_layers <= NEEDLE_MAX_LIST, "num_layers", "%d is not in [1, %d]", w,
         c->num_layers, NEEDLE_MAX_LIST);
    NEED(c->num_heads >= 1 && c->num_kv_heads >= 1 && c->num_heads % c->num_kv_heads == 0 && c->num_heads <= 4096,
         "num_kv_heads", "%d does not divide num_heads %d", w, c->num_kv_heads, c->num_heads);
    NEED(c->engram_heads >= 0 && c->engram_heads <= 4096, "engram_heads", "%d is not in [0, 4096]", w, c->engram_heads);
    NEED(c->qk_head_dim >= 0 && c->v_head_dim >= 0, "qk_head_dim", "negative head dims %d, %d", w, c->qk_head_dim,
         c->v_head_dim);
    needle_geometry g;
    needle_geometry_of(c, &g);
    NEED(g.qk_head_dim >= 2 && g.qk_head_dim % 2 == 0 && g.qk_head_dim <= 4096, "qk_head_dim",
         "%d is not an even size (RoPE rotates halves)", w, g.qk_head_dim);
    NEED(g.v_head_dim >= 1 && g.v_head_dim <= 4096, "v_head_dim", "%d is not a size", w, g.v_head_dim);
    NEED(strcmp(c->dtype, "bfloat16") == 0 || strcmp(c->dtype, "float32") == 0 || strcmp(c->dtype, "float16") == 0,
         "dtype", "'%s' is not bfloat16, float32 or float16", w, c->dtype);
    NEED(c->mhc_lanes >= 1 && c->mhc_lanes <= 64, "mhc_lanes", "%d is not in [1, 64]", w, c->mhc_lanes);
    NEED(c->qkv_conv_taps >= 0 && c->qkv_conv_taps <= 64, "qkv_conv_taps", "%d is not in [0, 64]", w, c->qkv_conv_taps);
    NEED(c->out_vocab >= 0 && c->out_vocab <= c->vocab_size, "out_vocab", "%d is not in [0, vocab_size]", w, c->out_vocab);
    NEED(c->sliding_window >= 0, "sliding_window", "%d is negative", w, c->sliding_window);
    NEED(c->max_seq_len >= 1, "max_seq_len", "%d is not a length", w, c->max_seq_len);
    int bad = nlist_in(&c->engram_layers, 0, c->num_layers);
    NEED(bad < 0, "engram_layers", "layer %d is not in [0, num_layers)", w, bad < 0 ? 0 : c->engram_layers.v[bad]);
    bad = nlist_in(&c->global_layers, 0, c->num_layers);
    NEED(bad < 0, "global_layers", "layer %d is not in [0, num_layers)", w, bad < 0 ? 0 : c->global_layers.v[bad]);
    if (c->engram_layers.n) {
        NEED(c->engram_orders.n >= 1 && nlist_in(&c->engram_orders, 1, 65) < 0, "engram_orders",
             "not a list of n-gram orders in [1, 64]", w);
        NEED(c->engram_slots >= 1, "engram_slots", "%d is not a count", w, c->engram_slots);
        NEED(g.engram_heads >= 1 && g.engram_sub_dim >= 1, "engram_heads",
             "%d heads of %d orders leave no width of d_model %d", w, g.engram_heads, c->engram_orders.n, c->d_model);
    }
    if (c->ladder_order.n) { /* ladder_order(): a permutation of the layers (architecture.py:157-162) */
        int seen[NEEDLE_MAX_LIST] = {0};
        NEED(c->ladder_order.n == c->num_layers && nlist_in(&c->ladder_order, 0, c->num_layers) < 0, "ladder_order",
             "not a permutation of %d layers", w, c->num_layers);
        for (int i = 0; i < c->ladder_order.n; i++)
            NEED(!seen[c->ladder_order.v[i]]++, "ladder_order", "layer %d appears twice", w, c->ladder_order.v[i]);
    }
#undef NEED
    return 0;
}

int needle_config_parse(needle_config *c, const char *json, const char *where)
{
    needle_config_default(c);
    cJSON *o = cJSON_Parse(json ? json : "");
    int rc = cJSON_IsObject(o) ? 0 : loom_fail("%s: config: not a JSON object", where);
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(o, "attn_dim") &&
        !cJSON_GetObjectItemCaseSensitive(o, "qk_head_dim"))
        rc = loom_fail("%s: config field attn_dim: a Needle 2 checkpoint (run.py:34); loom reads Needle 3", where);
    for (const cJSON *e = o ? o->child : NULL; rc == 0 && e; e = e->next) {
        int k = 0;
        while (k < NFIELDS && strcmp(nfields[k].name, e->string) != 0) k++;
        if (k < NFIELDS) rc = nfield_set(c, &nfields[k], e, where);
        else if (strcmp(e->string, "attn_dim") != 0) /* from_saved drops it once qk_head_dim is there */
            rc = loom_fail("%s: config field %s: unknown to Needle 3's TransformerConfig", where, e->string);
    }
    for (int k = 0; rc == 0 && k < NFIELDS; k++)
        if (nfields[k].off_when_missing && !cJSON_GetObjectItemCaseSensitive(o, nfields[k].name))
            nfield_off(c, &nfields[k]);
    cJSON_Delete(o);
    return rc ? rc : needle_config_check(c, where);
}

static int bit_length(unsigned x)
{
    int n = 0;
    while (x) n++, x >>= 1;
    return n;
}

void needle_geometry_of(const needle_config *c, needle_geometry *g)
{
    memset(g, 0, sizeof *g);
    int legacy = c->num_heads > 0 ? c->d_model / c->num_heads : 0;
    g->qk_head_dim = c->qk_head_dim ? c->qk_head_dim : legacy;
    g->v_head_dim = c->v_head_dim ? c->v_head_dim : legacy;
    g->q_dim = c->num_heads * g->qk_head_dim;
    g->k_dim = c->num_kv_heads * g->qk_head_dim;
    g->v_dim = c->num_kv_heads * g->v_head_dim;
    g->attn_dim = c->num_heads * g->v_head_dim;
    g->hada_n = 1 << bit_length((unsigned)(c->d_model > 0 ? c->d_model - 1 : 0));   /* architecture.py:613 */
    g->hada_a = 1 << (bit_length((unsigned)(g->hada_n - 1)) / 2);                   /* _hada_blocks :578 */
    g->hada_b = g->hada_n / g->hada_a;
    int no = c->engram_orders.n;
    g->engram_heads = c->engram_heads ? c->engram_heads : (no ? (c->d_model / (no * 128) > 1 ? c->d_model / (no * 128) : 1) : 0);
    g->engram_tables = no * g->engram_heads;
    g->engram_sub_dim = g->engram_tables ? c->d_model / g->engram_tables : 0;
    for (int i = 0; i < no; i++)
        if (c->engram_orders.v[i] > g->engram_dilation) g->engram_dilation = c->engram_orders.v[i];
    g->lanes = c->mhc_lanes;
}

/* --- json.dumps(dataclasses.asdict(config)) --- */

typedef struct nbuf {
    char *s;
    size_t n, cap;
    int oom;
} nbuf;

static void nput(nbuf *b, const char *s)
{
    size_t k = strlen(s);
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

/* One code point from UTF-8 at *p (advanced); an invalid byte reads as itself (U+0080..U+00FF). */
static unsigned nutf8(const unsigned char **p)
{
    const unsigned char *s = *p;
    int len = s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 1;
    if (s[0] >= 0xf5) len = 1;
    unsigned cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) { *p = s + 1; return s[0]; }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *p = s + len;
    return cp;
}

/* A JSON string as Python's json.dumps writes it (ensure_ascii: all but ' '..'~' escaped). */
static void nput_str(nbuf *b, const char *s)
{
    char e[16];
    nput(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = nutf8(&p);
        if (c == '"' || c == '\\') snprintf(e, sizeof e, "\\%c", c);
        else if (c == '\n') strcpy(e, "\\n");
        else if (c == '\r') strcpy(e, "\\r");
        else if (c == '\t') strcpy(e, "\\t");
        else if (c == '\b') strcpy(e, "\\b");
        else if (c == '\f') strcpy(e, "\\f");
        else if (c >= 0x10000) snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + ((c - 0x10000) >> 10), 0xdc00 + ((c - 0x10000) & 0x3ff));
        else if (c < 0x20 || c > 0x7e) snprintf(e, sizeof e, "\\u%04x", c);
        else e[0] = (char)c, e[1] = '\0';
        nput(b, e);
    }
    nput(b, "\"");
}

char *needle_py_str(const char *s)
{
    nbuf b = {0};
    nput_str(&b, s);
    if (b.oom) { free(b.s); loom_fail("out of memory"); return NULL; }
    return b.s;
}

char *needle_config_json(const needle_config *c)
{
    nbuf b = {0};
    char tmp[64];
    nput(&b, "{");
    for (int k = 0; k < NFIELDS; k++) {
        const nfield *f = &nfields[k];
        const char *p = (const char *)c + f->off;
        nput(&b, k ? ", " : "");
        nput_str(&b, f->name);
        nput(&b, ": ");
        if (f->kind == NF_INT) snprintf(tmp, sizeof tmp, "%d", *(const int *)p), nput(&b, tmp);
        else if (f->kind == NF_BOOL) nput(&b, *(const int *)p ? "true" : "false");
        else if (f->kind == NF_NUM) needle_py_float(*(const double *)p, tmp, sizeof tmp), nput(&b, tmp);
        else if (f->kind == NF_STR) nput_str(&b, p);
        else {
            const needle_list *l = (const needle_list *)p;
            nput(&b, "[");
            for (int i = 0; i < l->n; i++) snprintf(tmp, sizeof tmp, "%s%d", i ? ", " : "", l->v[i]), nput(&b, tmp);
            nput(&b, "]");
        }
    }
    nput(&b, "}");
    if (b.oom) { free(b.s); loom_fail("out of memory"); return NULL; }
    return b.s;
}

void needle_py_float(double x, char *buf, size_t cap)
{
    if (isnan(x)) { snprintf(buf, cap, "NaN"); return; }
    if (isinf(x)) { snprintf(buf, cap, x > 0 ? "Infinity" : "-Infinity"); return; }
    char e[40];
    int p = 1;
    for (; p < 17; p++) { /* the shortest digits that read back (repr's 'r' mode) */
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    char digits[24], *m = e, *ex = strchr(e, 'e');
    int nd = 0, neg = *m == '-', exp10 = atoi(ex + 1);
    for (char *q = m + neg; q < ex; q++)
        if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    int decpt = exp10 + 1; /* Python: fixed notation when -4 < decpt <= 16 */
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0', out[o++] = '.';
            for (int i = 0; i < -decpt; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i < decpt; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > decpt) for (int i = decpt; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    snprintf(buf, cap, "%s", out);
}

/* --- the tensors of a base checkpoint --- */

typedef struct nshapes {
    needle_shape *s;
    int n, cap, oom;
} nshapes;

static void nadd(nshapes *v, int optional, const char *path, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        needle_shape *p = realloc(v->s, (size_t)cap * sizeof *p);
        if (!p) { v->oom = 1; return; }
        v->s = p, v->cap = cap;
    }
    needle_shape *s = &v->s[v->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->ndim = ndim, s->optional = optional;
    s->shape[0] = d0, s->shape[1] = d1, s->shape[2] = d2, s->shape[3] = d3;
}

/* The layer stack: Block's parameters stacked over num_layers by nn.scan (architecture.py:640-678). */
static void nexpect_layers(nshapes *v, const needle_config *c, const needle_geometry *g)
{
    const int64_t L = c->num_layers, d = c->d_model, n = g->hada_n, T = c->qkv_conv_taps;
#define BLK "stack/layers/block/"
    nadd(v, 0, BLK "ZCRMSNorm_0/scale", 2, L, d, 0, 0);
    nadd(v, 0, BLK "attn_gate", 1, L, 0, 0, 0);
    nadd(v, 0, BLK "post_attn_norm/scale", 2, L, d, 0, 0);
    nadd(v, 0, BLK "pre_hada_norm/scale", 2, L, d, 0, 0);
    nadd(v, 0, BLK "self_attn/q_proj/kernel", 3, L, d, g->q_dim, 0);
    nadd(v, 0, BLK "self_attn/k_proj/kernel", 3, L, d, g->k_dim, 0);
    nadd(v, 0, BLK "self_attn/v_proj/kernel", 3, L, d, g->v_dim, 0);
    nadd(v, 0, BLK "self_attn/gate_proj/kernel", 3, L, d, g->attn_dim, 0);
    nadd(v, 0, BLK "self_attn/out_proj/kernel", 3, L, g->attn_dim, d, 0);
    nadd(v, 0, BLK "self_attn/q_norm/scale", 2, L, g->qk_head_dim, 0, 0);
    nadd(v, 0, BLK "self_attn/k_norm/scale", 2, L, g->qk_head_dim, 0, 0);
    if (T) {
        nadd(v, 0, BLK "self_attn/q_taps", 3, L, T, g->q_dim, 0);
        nadd(v, 0, BLK "self_attn/k_taps", 3, L, T, g->k_dim, 0);
        nadd(v, 0, BLK "self_attn/v_taps", 3, L, T, g->v_dim, 0);
    }
    static const char *const fa[] = {BLK "hadamard_mlp/w1a", BLK "hadamard_mlp/w2a", BLK "hadamard_mlp/w3a"};
    static const char *const fb[] = {BLK "hadamard_mlp/w1b", BLK "hadamard_mlp/w2b", BLK "hadamard_mlp/w3b"};
    for (int s = 0; s < 3; s++) {
        nadd(v, 0, fa[s], 3, L, g->hada_a, g->hada_a, 0);
        nadd(v, 0, fb[s], 3, L, g->hada_b, g->hada_b, 0);
    }
    static const char *const dg[] = {BLK "hadamard_mlp/d1", BLK "hadamard_mlp/d2", BLK "hadamard_mlp/b2",
                                     BLK "hadamard_mlp/d3", BLK "hadamard_mlp/d4"};
    for (int s = 0; s < 5; s++) nadd(v, 0, dg[s], 2, L, n, 0, 0);
    nadd(v, 0, BLK "hadamard_mlp/cond_v", 3, L, d, 8, 0);   /* HADA_COND_RANK */
    nadd(v, 0, BLK "hadamard_mlp/cond_u", 3, L, 8, n, 0);
#undef BLK
}

/* The probe heads (architecture.py:881-969): each all or nothing (a checkpoint may lack them). */
static void nexpect_heads(nshapes *v, const needle_config *c)
{
    static const char *const key[] = {"embedding_head", "confidence_head", "router_head"};
    const int probes[] = {c->embedding_probes, c->confidence_probes, c->router_probes};
    const int queries[] = {c->embedding_queries, c->confidence_queries, c->router_queries};
    const int out[] = {c->embedding_dim, 1, 3};
    const int64_t l1 = c->num_layers + 1, d = c->d_model;
    char p[96];
    for (int h = 0; h < 3; h++) {
        const int64_t k = probes[h], q = queries[h];
#define HP(suffix) (snprintf(p, sizeof p, "%s/%s", key[h], suffix), p)
        nadd(v, 1, HP("probes"), 3, l1, k, d, 0);
        nadd(v, 1, HP("gain"), 2, l1, k, 0, 0);
        nadd(v, 1, HP("query"), 2, q, d, 0, 0);
        nadd(v, 1, HP("row_bias"), 3, q, l1, k, 0);
        nadd(v, 1, HP("proj/kernel"), 2, q * d, out[h], 0, 0);
        if (h > 0) nadd(v, 1, HP("proj/bias"), 1, out[h], 0, 0, 0);
        if (h == 0) {
            nadd(v, 1, HP("log_temp"), 0, 0, 0, 0, 0);
            nadd(v, 1, HP("bias"), 0, 0, 0, 0, 0);
        }
        if (h == 2) nadd(v, 2, HP("calibration"), 1, 3, 0, 0, 0); /* export.py reads it when present */
#undef HP
    }
}

int needle_expected(const needle_config *c, needle_shape **out, int *n)
{
    needle_geometry g;
    needle_geometry_of(c, &g);
    nshapes v = {0};
    const int64_t L = c->num_layers, d = c->d_model, nl = g.lanes, nC = g.lanes * (int64_t)c->d_model;
    nadd(&v, 0, "embedding/embedding", 2, c->vocab_size, d, 0, 0);
    nadd(&v, 0, "stack/final_norm/scale", 1, d, 0, 0, 0);
    nexpect_layers(&v, c, &g);
    nadd(&v, 0, "stack/mhc_phi_pre", 3, L, nC, nl, 0);        /* Stack, architecture.py:785-796 */
    nadd(&v, 0, "stack/mhc_phi_post", 3, L, nC, nl, 0);
    nadd(&v, 0, "stack/mhc_phi_res", 3, L, nC, nl * nl, 0);
    nadd(&v, 0, "stack/mhc_b_pre", 2, L, nl, 0, 0);
    nadd(&v, 0, "stack/mhc_b_post", 2, L, nl, 0, 0);
    nadd(&v, 0, "stack/mhc_b_res", 3, L, nl, nl, 0);
    nadd(&v, 0, "stack/mhc_a_pre", 1, L, 0, 0, 0);
    nadd(&v, 0, "stack/mhc_a_post", 1, L, 0, 0, 0);
    nadd(&v, 0, "stack/mhc_a_res", 1, L, 0, 0, 0);
    char p[96];
    const int64_t e = (int64_t)g.engram_tables * g.engram_sub_dim;
    for (int s = 0; s < c->engram_layers.n; s++) {            /* Engram, architecture.py:436-461 */
        snprintf(p, sizeof p, "engrams_%d/embedding", s);
        nadd(&v, 0, p, 3, g.engram_tables, c->engram_slots, g.engram_sub_dim, 0);
        snprintf(p, sizeof p, "engrams_%d/key_proj/kernel", s);
        nadd(&v, 0, p, 2, e, d, 0, 0);
        snprintf(p, sizeof p, "engrams_%d/value_proj/kernel", s);
        nadd(&v, 0, p, 2, e, d, 0, 0);
        snprintf(p, sizeof p, "engrams_%d/taps", s);
        nadd(&v, 0, p, 2, 4, d, 0, 0);                          /* ENGRAM_CONV_TAPS */
    }
    nexpect_heads(&v, c);
    if (v.oom) { free(v.s); return loom_fail("out of memory"); }
    *out = v.s, *n = v.n;
    return 0;
}
