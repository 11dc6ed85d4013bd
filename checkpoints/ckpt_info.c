/* ckpt_info.c: what `loom ckpt info FILE` shows, as facts for the CLI to format: a checkpoint's
 * state and every tensor with its shape and a freshly verified checksum (ckpt_inspect); and `loom
 * ckpt seal FILE`, which re-seals a file only after the same tensor checks pass. Never prints.
 * `inspect` must never modify the file and must report (not stop at) every bad tensor; `seal`
 * must never change the file unless every tensor is sound. */
#include "checkpoints/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_internal.h"
#include "base/error.h"

typedef struct name_list {
    char **names;
    size_t n, cap;
    int oom;
} name_list;

static int list_add(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        char **grown = realloc(l->names, cap * sizeof *grown);
        if (!grown) return l->oom = 1, -1;
        l->names = grown;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name))) return l->oom = 1, -1;
    l->n++;
    return 0;
}

/* Collect every dataset path under group `path` ("" = the root), link by link. An explicit
 * index walk rather than H5Lvisit: HDF5 1.10's H5Lvisit crashes (frees a bad pointer) on a file
 * whose link names are damaged, where this walk gets an error it can report. */
static int walk_group(hid_t fid, const char *path, H5_index_t idx, name_list *l, int depth)
{
    hid_t g = H5Gopen2(fid, path[0] ? path : "/", H5P_DEFAULT);
    if (g < 0 || depth > 8) return g < 0 ? -1 : (H5Gclose(g), -1);
    H5G_info_t gi;
    int rc = H5Gget_info(g, &gi) < 0 ? -1 : 0;
    for (hsize_t i = 0; rc == 0 && i < gi.nlinks; i++) {
        char name[512], full[1100];
        ssize_t len = H5Lget_name_by_idx(g, ".", idx, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
        if (len < 0 || (size_t)len >= sizeof name) { rc = -1; break; }
        snprintf(full, sizeof full, "%s%s%s", path, path[0] ? "/" : "", name);
        hid_t obj = H5Oopen(fid, full, H5P_DEFAULT);
        /* A link whose object cannot be opened (a damaged header) is listed, and so reported
         * "unreadable": skipping it would call a file with lost tensors sound. */
        if (obj < 0) { rc = list_add(l, full); continue; }
        H5I_type_t type = H5Iget_type(obj);
        H5Oclose(obj);
        if (type == H5I_DATASET) rc = list_add(l, full);
        else if (type == H5I_GROUP) rc = walk_group(fid, full, idx, l, depth + 1);
    }
    H5Gclose(g);
    return rc;
}

static void list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* Creation order is the model's declaration order (we index it when writing); files written by
 * other tools may lack that index, so fall back to name order. */
static int list_datasets(hid_t fid, name_list *l)
{
    if (walk_group(fid, "", H5_INDEX_CRT_ORDER, l, 0) == 0) return 0;
    list_free(l);
    return walk_group(fid, "", H5_INDEX_NAME, l, 0);
}

/* Entries of the file's `tensors` manifest (version 2) that the walk did not find, appended to
 * `missing`. A version 1 file has no manifest: only what the walk finds can be checked. */
static int manifest_missing(hid_t fid, const name_list *found, name_list *missing)
{
    char *list = NULL;
    int rc = ckpt_attr_read_str(fid, "tensors", &list);
    if (rc != 0) return rc == 1 ? 0 : -1;
    for (char *p = list; *p;) {
        size_t len = strcspn(p, "\n");
        int last = p[len] == '\0';
        p[len] = '\0';
        size_t i = 0;
        while (i < found->n && strcmp(found->names[i], p) != 0) i++;
        if (p[0] && i == found->n && list_add(missing, p)) break;
        p += len + !last;
    }
    free(list);
    return missing->oom ? -1 : 0;
}

/* Read one dataset, verify its checksum; returns "ok", "BAD", "no crc32" or "unreadable". */
static const char *check_one(hid_t fid, const char *name, float **buf, size_t *cap, int *nd,
                             int64_t shape[H5S_MAX_RANK], int64_t *bytes)
{
    hid_t dset = H5Dopen2(fid, name, H5P_DEFAULT);
    if (dset < 0) return "unreadable";
    hid_t space = H5Dget_space(dset);
    hsize_t dims[H5S_MAX_RANK];
    *nd = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    if (space >= 0) H5Sclose(space);
    for (int d = 0; d < *nd; d++) shape[d] = (int64_t)dims[d];
    *bytes = *nd >= 0 ? ckpt_numel(*nd, shape) * 4 : 0;
    const char *status = *nd < 0 ? "unreadable" : NULL;
    /* Pieces all land in one bounded buffer: scanning never needs a whole tensor in memory. */
    size_t need = status ? 0 : ckpt_piece_floats(*nd, shape);
    if (need > *cap) {
        float *grown = realloc(*buf, need * sizeof(float));
        if (grown) *buf = grown, *cap = need;
        else status = "unreadable";
    }
    uint32_t want = 0, got = 0;
    if (!status && ckpt_attr_read(dset, "crc32", H5T_NATIVE_UINT32, &want) != 0) status = "no crc32";
    if (!status && ckpt_h5_pieces(dset, *nd, shape, *buf, 0, 1, &got) < 0) status = "unreadable";
    if (!status) status = got == want ? "ok" : "BAD";
    H5Dclose(dset);
    return status;
}

/* Verify every listed tensor and report each (then the manifest's missing ones) through fns; the
 * number that are not "ok" (the missing ones included), first naming the first bad found one. */
static int inspect_tensors(hid_t fid, const name_list *l, const name_list *missing, const ckpt_inspect_fns *fns,
                           void *ctx, char *first, size_t flen)
{
    float *buf = NULL;
    size_t cap = 0;
    int bad = 0;
    for (size_t i = 0; i < l->n; i++) {
        ckpt_tensor_report t = {l->names[i], 0, NULL, 0, NULL};
        int64_t shape[H5S_MAX_RANK], bytes = 0;
        t.status = check_one(fid, l->names[i], &buf, &cap, &t.ndim, shape, &bytes);
        t.shape = shape;
        t.numel = bytes / 4;
        if (fns && fns->tensor) fns->tensor(ctx, &t);
        if (strcmp(t.status, "ok") != 0 && bad++ == 0) snprintf(first, flen, "/%s (%s)", l->names[i], t.status);
    }
    free(buf);
    for (size_t i = 0; i < missing->n; i++, bad++) {
        ckpt_tensor_report t = {missing->names[i], -1, NULL, 0, "missing"};
        if (fns && fns->tensor) fns->tensor(ctx, &t);
    }
    return bad;
}

int ckpt_inspect(const char *file, const ckpt_inspect_fns *fns, void *ctx)
{
    char path[CKPT_PATH_MAX];
    if (ckpt_resolve(file, path, sizeof path)) return -1;
    ckpt_reader *r = ckpt_open(path);
    if (!r) return -1;
    ckpt_state s;
    if (ckpt_read_state(r, &s)) {
        ckpt_close(r);
        return -1;
    }
    if (fns && fns->state) fns->state(ctx, path, CKPT_MAGIC, &s);
    ckpt_state_free(&s);
    name_list l = {0}, missing = {0};
    int rc = list_datasets(r->fid, &l);
    if (rc == 0 && manifest_missing(r->fid, &l, &missing)) rc = -1;
    if (rc) {
        loom_fail("%s: cannot list the tensors%s", path, l.oom || missing.oom ? " (out of memory)" : "");
    } else {
        char first[600] = "";
        if (fns && fns->listed)
            fns->listed(ctx, (const char *const *)l.names, l.n, (const char *const *)missing.names, missing.n);
        int bad = inspect_tensors(r->fid, &l, &missing, fns, ctx, first, sizeof first);
        if (missing.n)
            rc = loom_fail("%s: %zu tensor(s) of the manifest missing, first /%s; %d tensor(s) not ok", path,
                           missing.n, missing.names[0], bad);
        else if (bad)
            rc = loom_fail("%s: %d tensor(s) failed their checksum, first %s", path, bad, first);
    }
    list_free(&l);
    list_free(&missing);
    ckpt_close(r);
    return rc;
}

/* Every tensor of an unsealed file must pass its crc32 before ckpt_seal vouches for the file. */
static int seal_check_tensors(hid_t fid, const char *path)
{
    name_list l = {0};
    if (list_datasets(fid, &l)) {
        int oom = l.oom;
        list_free(&l);
        return loom_fail("checkpoint %s: not sealed: cannot list the tensors%s", path, oom ? " (out of memory)" : "");
    }
    name_list missing = {0};
    if (manifest_missing(fid, &l, &missing)) {
        list_free(&l);
        list_free(&missing);
        return loom_fail("checkpoint %s: not sealed: unreadable `tensors` manifest", path);
    }
    if (missing.n) {
        loom_fail("checkpoint %s: not sealed: %zu tensor(s) of the manifest missing, first /%s", path, missing.n,
                  missing.names[0]);
        list_free(&l);
        list_free(&missing);
        return -1;
    }
    char first[600] = "";
    int bad = inspect_tensors(fid, &l, &missing, NULL, NULL, first, sizeof first); /* none missing */
    list_free(&l);
    if (bad)
        return loom_fail("checkpoint %s: not sealed: %d tensor(s) failed their checksum, first %s", path, bad, first);
    return 0;
}

int ckpt_seal(const char *file)
{
    char path[CKPT_PATH_MAX];
    if (ckpt_resolve(file, path, sizeof path)) return -1;
    ckpt_seal_state state;
    if (ckpt_seal_verify(path, &state) == 0) return 1;
    if (state == CKPT_SEAL_BROKEN) return -1; /* truncated, not HDF5, unreadable: nothing to vouch for */
    ckpt_reader *r = ckpt_open_unsealed(path);
    if (!r) return -1;
    int rc = seal_check_tensors(r->fid, path);
    ckpt_close(r); /* HDF5 lets go of the file before a byte of it changes */
    return rc ? -1 : ckpt_seal_write(path, state == CKPT_SEAL_STALE);
}
