/* needle_import.c: a Needle base file into a loom checkpoint (needle_ckpt_save, what `loom import`
 * runs): the layout needle_ckpt.c reads back as the file. Reads the base through needle.h. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle_internal.h"

/* The `source` record of base f (read from `src`): see the file comment. malloc'd; NULL + loom_fail. */
static char *needle_ckpt_source(needle_file *f, const char *src)
{
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)needle_file_digest(f));
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateArray(), *ts = cJSON_CreateArray(), *drop = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "format", "needle");
    cJSON_AddStringToObject(root, "file", src);
    cJSON_AddStringToObject(root, "digest", hex);
    cJSON_AddItemToObject(root, "meta", meta);
    cJSON_AddItemToObject(root, "tensors", ts);
    cJSON_AddItemToObject(root, "dropped", drop);
    for (int k = 0; k < f->nmeta; k++) {
        const char *kv[2] = {f->mkey[k], f->mval[k]};
        cJSON_AddItemToArray(meta, cJSON_CreateStringArray(kv, 2));
    }
    for (int j = 0, i = 0; j < f->st->ntensors; j++) {
        const st_tensor *t = &f->st->t[j];
        if (i < f->n && f->idx[i] == j) {
            cJSON *e = cJSON_CreateArray(), *shape = cJSON_CreateArray();
            cJSON_AddItemToArray(ts, e);
            cJSON_AddItemToArray(e, cJSON_CreateString(t->name));
            cJSON_AddItemToArray(e, cJSON_CreateString(st_dtype_name(t->dtype)));
            cJSON_AddItemToArray(e, shape);
            for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
            i++;
        } else {
            cJSON_AddItemToArray(drop, cJSON_CreateString(t->name)); /* mtp_: run.py:39 */
        }
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) loom_fail("out of memory");
    return s;
}

static int needle_ckpt_piece(void *ctx, int k, size_t e0, size_t n, float *dst)
{
    return needle_file_read_range(ctx, k, e0, n, dst);
}

int needle_ckpt_save(needle_file *f, const char *src, const char *dir)
{
    const char *p = f->st->path;
    if (f->ck || f->cut) return loom_fail("%s: already a loom checkpoint (or a rung): import the .safetensors file", p);
    ckpt_tensor *table = calloc((size_t)f->n + 1, sizeof *table);
    char *names = calloc((size_t)f->n + 1, 128), *source = needle_ckpt_source(f, src);
    int rc = table && names && source ? 0 : loom_fail("%s: out of memory", p);
    for (int i = 0; rc == 0 && i < f->n; i++) {
        const st_tensor *t = needle_file_tensor(f, i);
        /* '.' stands for '/': a name holding one would not come back (no Needle path has one) */
        if (strchr(t->name, '.') || strlen(t->name) >= 128 || t->ndim > CKPT_MAX_DIMS)
            rc = loom_fail("%s: tensor %s: a '.' in its name, a name of 128 bytes or more, or more than %d "
                           "dimensions: not storable in a loom checkpoint", p, t->name, CKPT_MAX_DIMS);
        needle_ckpt_name(t->name, names + 128 * (size_t)i, 128);
        table[i].name = names + 128 * (size_t)i;
        table[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim && d < CKPT_MAX_DIMS; d++) table[i].shape[d] = t->shape[d];
    }
    if (rc == 0) {
        const char *cfg = needle_file_meta(f, "config");
        ckpt_state st = {0};
        st.model_config_json = cfg ? cfg : "";
        st.job_config_json = "";
        st.world_size = 1;
        st.backend = "import";
        st.source = source;
        ckpt_group g = {"model", table, f->n, NULL, NULL, NULL};
        rc = ckpt_save_pieces(dir, &st, &g, needle_ckpt_piece, f, 0);
    }
    free(table), free(names), free(source);
    return rc;
}
