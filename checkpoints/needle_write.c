/* needle_write.c: writing safetensors files as the library Needle calls writes them (safetensors
 * 0.8 serialize_file: tensors sorted F32 > BF16 > F16 then by name, serde_json's escaping, the
 * header padded with spaces to 8 bytes), and Needle's base checkpoints and adapters on top of it.
 * Must never leave a half-written file under the final name. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoints/needle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

typedef struct wbuf {
    char *s;
    size_t n, cap;
    int oom;
} wbuf;

static void wput_n(wbuf *b, const char *s, size_t k)
{
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, k);
    b->n += k;
    b->s[b->n] = '\0';
}

static void wput(wbuf *b, const char *s) { wput_n(b, s, strlen(s)); }

/* A JSON string as serde_json writes it: UTF-8 kept, '"' '\\' and control bytes escaped. */
static void wput_serde(wbuf *b, const char *s)
{
    char e[8];
    wput(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') snprintf(e, sizeof e, "\\%c", *p);
        else if (*p == '\n') strcpy(e, "\\n");
        else if (*p == '\r') strcpy(e, "\\r");
        else if (*p == '\t') strcpy(e, "\\t");
        else if (*p == '\b') strcpy(e, "\\b");
        else if (*p == '\f') strcpy(e, "\\f");
        else if (*p < 0x20) snprintf(e, sizeof e, "\\u%04x", *p);
        else e[0] = (char)*p, e[1] = '\0';
        wput(b, e);
    }
    wput(b, "\"");
}

/* safetensors' order: dtype descending in its enum (F32 > BF16 > F16), then name (bytes). */
static int wrank(st_dtype d) { return d == ST_F32 ? 0 : d == ST_BF16 ? 1 : 2; }

static int wcmp(const void *a, const void *b)
{
    const needle_wtensor *x = *(const needle_wtensor *const *)a, *y = *(const needle_wtensor *const *)b;
    if (wrank(x->dtype) != wrank(y->dtype)) return wrank(x->dtype) - wrank(y->dtype);
    return strcmp(x->name, y->name);
}

static size_t wbytes(const needle_wtensor *t)
{
    size_t n = st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* The header JSON (padded) for tensors in `order`. */
static int wheader(wbuf *b, const needle_wtensor *const *order, int n, const needle_meta *m, int nm)
{
    char num[64];
    wput(b, "{");
    if (m) {
        wput(b, "\"__metadata__\":{");
        for (int i = 0; i < nm; i++) {
            if (i) wput(b, ",");
            wput_serde(b, m[i].key);
            wput(b, ":");
            wput_serde(b, m[i].value);
        }
        wput(b, "}");
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        const needle_wtensor *w = order[k];
        if (m || k) wput(b, ",");
        wput_serde(b, w->name);
        wput(b, ":{\"dtype\":\"");
        wput(b, st_dtype_name(w->dtype));
        wput(b, "\",\"shape\":[");
        for (int d = 0; d < w->ndim; d++) snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)w->shape[d]), wput(b, num);
        uint64_t end = off + wbytes(w);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)end);
        wput(b, num);
        off = end;
    }
    wput(b, "}");
    while (b->n % 8) wput(b, " ");
    return b->oom ? loom_fail("out of memory") : 0;
}

static int wfile(const char *path, const char *tmp, const wbuf *h, const needle_wtensor *const *order, int n)
{
    FILE *f = fopen(tmp, "wb");
    if (!f) return loom_fail("%s: cannot create: %s", tmp, strerror(errno));
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(h->s, 1, h->n, f) == h->n;
    for (int k = 0; ok && k < n; k++) {
        size_t nb = wbytes(order[k]);
        ok = nb == 0 || fwrite(order[k]->data, 1, nb, f) == nb;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return loom_fail("%s: write failed: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) return loom_fail("%s: cannot rename into place: %s", path, strerror(errno));
    return 0;
}

/* needle_write, the tensors sorted as the library sorts them or in the order given. */
static int needle_write_in(const char *path, const needle_wtensor *t, int n, const needle_meta *m, int nm, int sorted)
{
    for (int k = 0; k < n; k++) {
        if (!t[k].name || (!t[k].data && wbytes(&t[k])) || t[k].ndim < 0 || t[k].ndim > ST_MAX_DIMS)
            return loom_fail("%s: tensor %d (%s): no name, data or a valid shape", path, k, t[k].name ? t[k].name : "?");
        for (int j = 0; j < k; j++)
            if (strcmp(t[j].name, t[k].name) == 0) return loom_fail("%s: tensor %s given twice", path, t[k].name);
    }
    const needle_wtensor **order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return loom_fail("out of memory");
    for (int k = 0; k < n; k++) order[k] = &t[k];
    if (sorted) qsort(order, (size_t)n, sizeof *order, wcmp);
    wbuf h = {0};
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int rc = wheader(&h, order, n, m, nm);
    if (rc == 0) rc = wfile(path, tmp, &h, order, n);
    if (rc) unlink(tmp);
    free(h.s);
    free(order);
    return rc;
}

int needle_write(const char *path, const needle_wtensor *t, int n, const needle_meta *m, int nm)
{
    return needle_write_in(path, t, n, m, nm, 1);
}

int needle_write_ordered(const char *path, const needle_wtensor *t, int n, const needle_meta *m, int nm)
{
    return needle_write_in(path, t, n, m, nm, 0);
}

int needle_write_base(const char *path, const needle_config *c, const char *config_json, int64_t step,
                      const char *run, const needle_wtensor *t, int n)
{
    char *own = config_json ? NULL : needle_config_json(c);
    if (!config_json && !own) return -1;
    char st[32] = "";
    if (step >= 0) snprintf(st, sizeof st, "%lld", (long long)step);
    /* write_checkpoint's dict order (the library writes a hash map: Needle's own order varies) */
    const needle_meta m[4] = {{"format_version", NEEDLE_FORMAT_VERSION},
                              {"config", config_json ? config_json : own},
                              {"step", st},
                              {"run", run ? run : "{}"}};
    int rc = needle_write(path, t, n, m, 4);
    free(own);
    return rc;
}

int needle_write_adapter(const char *path, const char *const *paths, const needle_wtensor *t, int npaths,
                         double scale, const char *base, int rank, int64_t seed)
{
    needle_wtensor *w = malloc(((size_t)2 * npaths + 1) * sizeof *w);
    char **names = calloc((size_t)2 * npaths + 1, sizeof *names);
    char *sbase = needle_py_str(base ? base : "");
    int rc = w && names && sbase ? 0 : loom_fail("out of memory");
    for (int i = 0; rc == 0 && i < 2 * npaths; i++) {
        size_t len = strlen(paths[i / 2]) + 8;
        if (!(names[i] = malloc(len))) { rc = loom_fail("out of memory"); break; }
        snprintf(names[i], len, "lora/%s/%c", paths[i / 2], i % 2 ? 'B' : 'A');
        w[i] = t[i];
        w[i].name = names[i];
    }
    char sscale[40], srank[24], sseed[24];
    needle_py_float(scale, sscale, sizeof sscale);
    snprintf(srank, sizeof srank, "%d", rank);
    if (seed >= 0) snprintf(sseed, sizeof sseed, "%lld", (long long)seed);
    else strcpy(sseed, "null");
    const needle_meta m[6] = {{"scale", sscale}, {"base", base ? sbase : "null"}, {"rank", srank},
                              {"seed", sseed}, {"pieces", "null"}, {"languages", "null"}};
    if (rc == 0) rc = needle_write(path, w, 2 * npaths, m, 6);
    for (int i = 0; names && i < 2 * npaths; i++) free(names[i]);
    free(names);
    free(w);
    free(sbase);
    return rc;
}
