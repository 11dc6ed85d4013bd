/* ckpt_compare.c: test helper for the end-to-end resume tests (resume.cmake). `A B` checks that two
 * checkpoints hold bitwise-equal tensors and the same training state; `--flip FILE DSET AT` damages
 * one data byte of a copy; `--seal FILE` seals a damaged copy anyway, so that the checks behind
 * the whole-file seal can be tested. Never touches a file it was not named on; never repairs.
 *
 *   ckpt_compare A.h5 B.h5 [GROUP...]   exit 0 if equal (default groups model optimizer/m optimizer/v)
 *   ckpt_compare --flip FILE DSET AT     xor 0x10 into byte AT of DSET's data (contiguous) in FILE
 *                                        (the file's seal then no longer matches)
 *   ckpt_compare --seal FILE             write a fresh seal over FILE as it is, checking nothing
 *                                        (unlike `loom ckpt seal`, which checks every tensor)
 *   ckpt_compare --get-attr FILE NAME    print root attribute NAME (an integer, float or string)
 *   ckpt_compare --set-attr FILE NAME V  rewrite root attribute NAME as V, in its own type (created
 *                                        as int64 if absent); the seal is then stale
 *   ckpt_compare --del-attr FILE NAME    delete root attribute NAME; the seal is then stale
 *
 * Tensor names and shapes come from A (plain HDF5 enumeration, in creation order); both files are
 * then read through ckpt.h (ckpt_open, ckpt_read_state, ckpt_read_group: format, completeness and
 * every CRC32C checked) and compared with memcmp, so -0.0 != 0.0 and NaN payloads count. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/ckpt_internal.h"
#include "base/error.h"

#define MAXT 4096

/* A group's tensor table as found in a file: names, shapes and packed offsets. */
typedef struct table {
    ckpt_tensor t[MAXT];
    char *names[MAXT];
    int n;
    size_t total;
} table;

static void table_free(table *tb)
{
    for (int i = 0; i < tb->n; i++) free(tb->names[i]);
    tb->n = 0;
}

/* Link name i of group g, in creation order when the file tracks it, else by name. */
static char *link_name(hid_t g, hsize_t i)
{
    H5_index_t idx = H5_INDEX_CRT_ORDER;
    ssize_t len = -1;
    H5E_BEGIN_TRY { len = H5Lget_name_by_idx(g, ".", idx, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT); }
    H5E_END_TRY;
    if (len < 0) {
        idx = H5_INDEX_NAME;
        len = H5Lget_name_by_idx(g, ".", idx, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
    }
    if (len < 0) return NULL;
    char *name = malloc((size_t)len + 1);
    if (name) H5Lget_name_by_idx(g, ".", idx, H5_ITER_INC, i, name, (size_t)len + 1, H5P_DEFAULT);
    return name;
}

/* Enumerate group `path` of `file` into tb; 0, or -1 with a message on stdout. */
static int table_read(const char *file, const char *path, table *tb)
{
    memset(tb, 0, sizeof *tb);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return printf("FAIL: cannot open %s with HDF5\n", file), -1;
    hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
    H5G_info_t info;
    int rc = (g < 0 || H5Gget_info(g, &info) < 0) ? -1 : 0;
    if (rc) printf("FAIL: %s has no group /%s\n", file, path);
    for (hsize_t i = 0; rc == 0 && i < info.nlinks && tb->n < MAXT; i++) {
        char *name = link_name(g, i);
        hid_t d = name ? H5Dopen2(g, name, H5P_DEFAULT) : -1;
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
        hsize_t dims[CKPT_MAX_DIMS] = {0};
        if (nd < 0 || nd > CKPT_MAX_DIMS) {
            printf("FAIL: %s: /%s/%s is not a dataset of at most %d dims\n", file, path, name ? name : "?", CKPT_MAX_DIMS);
            rc = -1;
        } else {
            H5Sget_simple_extent_dims(sp, dims, NULL);
            ckpt_tensor *t = &tb->t[tb->n];
            tb->names[tb->n++] = name;
            name = NULL;
            t->name = tb->names[tb->n - 1];
            t->ndim = nd;
            t->offset = tb->total;
            size_t numel = 1;
            for (int k = 0; k < nd; k++) numel *= (size_t)(t->shape[k] = (int64_t)dims[k]);
            tb->total += numel;
        }
        free(name);
        if (sp >= 0) H5Sclose(sp);
        if (d >= 0) H5Dclose(d);
    }
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    return rc;
}

/* Read group `path` of `file` laid out as tb, through ckpt.h (checksums verified). */
static float *group_read(const char *file, const char *path, const table *tb)
{
    ckpt_reader *r = ckpt_open(file);
    float *data = malloc((tb->total ? tb->total : 1) * sizeof(float));
    ckpt_group grp = {path, tb->t, tb->n, data, NULL, NULL};
    if (!r || !data || ckpt_read_group(r, &grp)) {
        printf("FAIL: reading /%s of %s: %s\n", path, file, loom_error());
        free(data);
        data = NULL;
    }
    ckpt_close(r);
    return data;
}

/* Bitwise comparison of one group; prints the first differing tensor and how far apart. */
static int group_compare(const char *a, const char *b, const char *path)
{
    table ta, tb;
    if (table_read(a, path, &ta)) return -1;
    int rc = table_read(b, path, &tb);
    if (rc == 0 && ta.n != tb.n) {
        printf("FAIL: /%s has %d tensors in %s, %d in %s\n", path, ta.n, a, tb.n, b);
        rc = -1;
    }
    table_free(&tb);
    float *da = rc ? NULL : group_read(a, path, &ta), *db = da ? group_read(b, path, &ta) : NULL;
    if (!db) rc = -1;
    for (int i = 0; rc == 0 && i < ta.n; i++) {
        const ckpt_tensor *t = &ta.t[i];
        size_t numel = (i + 1 < ta.n ? ta.t[i + 1].offset : ta.total) - t->offset, ndiff = 0;
        const float *x = da + t->offset, *y = db + t->offset;
        if (memcmp(x, y, numel * sizeof(float)) == 0) continue;
        double maxd = 0;
        for (size_t k = 0; k < numel; k++) {
            if (memcmp(&x[k], &y[k], sizeof(float)) == 0) continue;
            ndiff++;
            double d = fabs((double)x[k] - (double)y[k]);
            if (d > maxd || isnan(d)) maxd = d;
        }
        printf("FAIL: /%s/%s differs in %zu of %zu elements (max |a-b| %.3g)\n", path, t->name, ndiff, numel, maxd);
        rc = -1;
    }
    if (rc == 0) printf("ok: /%s: %d tensors, %zu floats bitwise equal\n", path, ta.n, ta.total);
    free(da);
    free(db);
    table_free(&ta);
    return rc;
}

/* The training state that decides what comes next must match (world size, ZeRO stage, backend
 * and the job config are informational and may differ). */
static int state_compare(const char *a, const char *b)
{
    ckpt_state sa = {0}, sb = {0};
    ckpt_reader *ra = ckpt_open(a), *rb = ckpt_open(b);
    int rc = (!ra || !rb || ckpt_read_state(ra, &sa) || ckpt_read_state(rb, &sb)) ? -1 : 0;
    if (rc) printf("FAIL: reading the state: %s\n", loom_error());
#define SAME(f, fmt, cast)                                                                    \
    if (rc == 0 && sa.f != sb.f) {                                                            \
        printf("FAIL: " #f " differs: " fmt " vs " fmt "\n", (cast)sa.f, (cast)sb.f);         \
        rc = -1;                                                                              \
    }
    SAME(step, "%lld", long long)
    SAME(tokens_seen, "%lld", long long)
    SAME(sample_cursor, "%lld", long long)
    SAME(epoch, "%lld", long long)
    SAME(seed, "%llu", unsigned long long)
    SAME(rng_counter, "%llu", unsigned long long)
    SAME(adam_step, "%lld", long long)
    SAME(base_digest, "%llx", unsigned long long)
    SAME(lr, "%.17g", double)
#undef SAME
    if (rc == 0 && strcmp(sa.model_config_json, sb.model_config_json) != 0) {
        printf("FAIL: model_config differs:\n  %s\n  %s\n", sa.model_config_json, sb.model_config_json);
        rc = -1;
    }
    if (rc == 0)
        printf("ok: state equal (step %lld, sample_cursor %lld, rng_counter %llu); saved by %d vs %d ranks, ZeRO %d vs %d\n",
               (long long)sa.step, (long long)sa.sample_cursor, (unsigned long long)sa.rng_counter,
               sa.world_size, sb.world_size, sa.zero_stage, sb.zero_stage);
    ckpt_state_free(&sa);
    ckpt_state_free(&sb);
    ckpt_close(ra);
    ckpt_close(rb);
    return rc;
}

/* xor 0x10 into byte `at` of dataset `dset`'s contiguous data. */
static int flip_byte(const char *file, const char *dset, long at)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, dset, H5P_DEFAULT) : -1;
    haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    hsize_t size = d >= 0 ? H5Dget_storage_size(d) : 0;
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (off == HADDR_UNDEF || at < 0 || (hsize_t)at >= size)
        return printf("FAIL: no contiguous dataset %s with byte %ld in %s\n", dset, at, file), -1;
    FILE *fp = fopen(file, "r+b");
    int byte = -1;
    if (fp && fseek(fp, (long)off + at, SEEK_SET) == 0) byte = fgetc(fp);
    int rc = (byte < 0 || fseek(fp, (long)off + at, SEEK_SET) || fputc(byte ^ 0x10, fp) == EOF) ? -1 : 0;
    if (fp && fclose(fp)) rc = -1;
    if (rc) return printf("FAIL: could not rewrite byte %llu of %s\n", (unsigned long long)off + at, file), -1;
    printf("flipped byte %ld of %s (file offset %llu) in %s\n", at, dset, (unsigned long long)off + at, file);
    return 0;
}

/* A seal over the file's bytes as they are (replacing a stale one): a damaged file that the seal
 * would refuse reaches the HDF5-level checks behind it. */
static int force_seal(const char *file)
{
    ckpt_seal_state state;
    if (ckpt_seal_verify(file, &state) == 0) return printf("%s: already sealed\n", file), 0;
    if ((state != CKPT_SEAL_NONE && state != CKPT_SEAL_STALE) || ckpt_seal_write(file, state == CKPT_SEAL_STALE))
        return printf("FAIL: cannot seal %s: %s\n", file, loom_error()), -1;
    printf("sealed %s as it is\n", file);
    return 0;
}

/* Root attribute edits, through plain HDF5 (as a user with h5py would). */
static int attr_edit(const char *op, const char *file, const char *name, const char *val)
{
    int get = strcmp(op, "--get-attr") == 0, del = strcmp(op, "--del-attr") == 0;
    hid_t f = H5Fopen(file, get ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return printf("FAIL: cannot open %s with HDF5\n", file), -1;
    int rc = 0;
    htri_t have = H5Aexists(f, name);
    if (del) {
        rc = have > 0 && H5Adelete(f, name) >= 0 ? 0 : -1;
    } else if (get || have > 0) {
        hid_t a = H5Aopen(f, name, H5P_DEFAULT), ft = a >= 0 ? H5Aget_type(a) : -1;
        H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
        int is_signed = cls == H5T_INTEGER && H5Tget_sign(ft) == H5T_SGN_2;
        if (cls == H5T_STRING) {
            char *s = NULL;
            rc = ckpt_attr_read_str(f, name, &s);
            if (rc == 0 && get) printf("%s\n", s);
            free(s);
            if (rc == 0 && !get) rc = H5Adelete(f, name) >= 0 ? ckpt_attr_write_str(f, name, val, file) : -1;
        } else if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
            long long i = 0;
            unsigned long long u = 0;
            double d = 0;
            hid_t mt = cls == H5T_FLOAT ? H5T_NATIVE_DOUBLE : is_signed ? H5T_NATIVE_LLONG : H5T_NATIVE_ULLONG;
            void *p = cls == H5T_FLOAT ? (void *)&d : is_signed ? (void *)&i : (void *)&u;
            if (get) {
                rc = H5Aread(a, mt, p) >= 0 ? 0 : -1;
                if (rc == 0 && cls == H5T_FLOAT) printf("%.17g\n", d);
                else if (rc == 0) is_signed ? printf("%lld\n", i) : printf("%llu\n", u);
            } else {
                d = strtod(val, NULL), i = strtoll(val, NULL, 10), u = strtoull(val, NULL, 10);
                rc = H5Awrite(a, mt, p) >= 0 ? 0 : -1;
            }
        } else {
            rc = -1;
        }
        if (ft >= 0) H5Tclose(ft);
        if (a >= 0) H5Aclose(a);
    } else {
        long long i = strtoll(val, NULL, 10);
        rc = ckpt_attr_write(f, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &i, file);
    }
    if (H5Fclose(f) < 0) rc = -1;
    if (rc) printf("FAIL: %s %s %s\n", op, file, name);
    return rc;
}

/* Unlink one dataset (as h5py's `del f[name]` does): a tensor lost from an otherwise sound file. */
static int del_dataset(const char *file, const char *name)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return printf("FAIL: cannot open %s with HDF5\n", file), -1;
    int rc = H5Ldelete(f, name, H5P_DEFAULT) >= 0 ? 0 : -1;
    if (H5Fclose(f) < 0) rc = -1;
    if (rc) printf("FAIL: --del-dataset %s %s\n", file, name);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && (strcmp(argv[1], "--get-attr") == 0 || strcmp(argv[1], "--del-attr") == 0))
        return attr_edit(argv[1], argv[2], argv[3], NULL) ? 1 : 0;
    if (argc == 5 && strcmp(argv[1], "--set-attr") == 0) return attr_edit(argv[1], argv[2], argv[3], argv[4]) ? 1 : 0;
    if (argc == 5 && strcmp(argv[1], "--flip") == 0) return flip_byte(argv[2], argv[3], atol(argv[4])) ? 1 : 0;
    if (argc == 3 && strcmp(argv[1], "--seal") == 0) return force_seal(argv[2]) ? 1 : 0;
    if (argc == 4 && strcmp(argv[1], "--del-dataset") == 0) return del_dataset(argv[2], argv[3]) ? 1 : 0;
    if (argc < 3) {
        fprintf(stderr, "usage: ckpt_compare A.h5 B.h5 [GROUP...] | --flip FILE DSET AT | --seal FILE | "
                        "--get-attr FILE NAME | --set-attr FILE NAME VALUE | --del-attr FILE NAME | --del-dataset FILE DSET\n");
        return 2;
    }
    const char *defaults[] = {"model", "optimizer/m", "optimizer/v"};
    const char **groups = argc > 3 ? (const char **)argv + 3 : defaults;
    int ngroups = argc > 3 ? argc - 3 : 3;
    int rc = state_compare(argv[1], argv[2]);
    for (int i = 0; i < ngroups; i++) rc |= group_compare(argv[1], argv[2], groups[i]);
    if (rc) printf("FAIL: %s and %s differ\n", argv[1], argv[2]);
    return rc ? 1 : 0;
}
