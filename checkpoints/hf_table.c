/* hf_table.c: what the family maps (hf_gpt2.c, hf_llama.c) build their tables with: typed
 * config.json fields with one-line errors, and the rows of a family's tensor map. Below both the
 * families and hf.c, which walks the family table: nothing here names an architecture. */
#include "checkpoints/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int hf_json_num(const cJSON *o, const char *key, double def, double *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (def == -1) return loom_fail("%s: field '%s' is missing", path, key); /* -1: required */
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return loom_fail("%s: field '%s' is not a number", path, key);
    *out = v->valuedouble;
    return 0;
}

int hf_json_int(const cJSON *o, const char *key, int def, int *out, const char *path)
{
    double d = 0;
    if (hf_json_num(o, key, def, &d, path)) return -1;
    if (d != floor(d) || d < 0 || d > 1e9) return loom_fail("%s: field '%s' (%g) is not a count", path, key, d);
    *out = (int)d;
    return 0;
}

int hf_json_bool(const cJSON *o, const char *key, int def, int *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (!cJSON_IsBool(v)) return loom_fail("%s: field '%s' is not true/false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int hf_map_add(hf_map **maps, int *n, const char *hf, const char *loom, int op, int part,
               int nparts, int head_dim, int hf_ndim, int64_t h0, int64_t h1, int ndim, int64_t l0,
               int64_t l1)
{
    if ((*n & (*n - 1)) == 0) { /* grow at powers of two */
        hf_map *g = realloc(*maps, (size_t)(*n ? 2 * *n : 64) * sizeof *g);
        if (!g) return loom_fail("out of memory for the tensor map");
        *maps = g;
    }
    hf_map *m = &(*maps)[(*n)++];
    memset(m, 0, sizeof *m);
    snprintf(m->hf, sizeof m->hf, "%s", hf);
    snprintf(m->loom, sizeof m->loom, "%s", loom);
    m->op = op;
    m->part = part;
    m->nparts = nparts;
    m->head_dim = head_dim;
    m->hf_ndim = hf_ndim;
    m->hf_shape[0] = h0;
    m->hf_shape[1] = h1;
    m->ndim = ndim;
    m->shape[0] = l0;
    m->shape[1] = l1;
    return 0;
}
