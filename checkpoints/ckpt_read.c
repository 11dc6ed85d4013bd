/* ckpt_read.c: finding a checkpoint (ckpt_resolve) and loading it: the whole-file seal and
 * validation on open, the training state, and tensors read straight into the caller's flat
 * buffers with CRC checks.
 * Must never trust the file: every missing, mis-shaped or corrupt piece is an error naming it. */
#include "checkpoints/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_internal.h"
#include "base/error.h"

int ckpt_resolve(const char *dir_or_file, char *path_out, size_t path_len)
{
    struct stat st;
    if (!dir_or_file || stat(dir_or_file, &st) != 0)
        return loom_fail("%s: no such checkpoint file or directory", dir_or_file ? dir_or_file : "(null)");
    if (!S_ISDIR(st.st_mode)) {
        if (!S_ISREG(st.st_mode)) return loom_fail("%s: not a regular file, not a checkpoint", dir_or_file);
        if (strlen(dir_or_file) >= path_len) return loom_fail("%s: path too long", dir_or_file);
        strcpy(path_out, dir_or_file);
        return 0;
    }
    char name[256];
    if (ckpt_latest_read(dir_or_file, name, sizeof name)) return -1;
    int n = snprintf(path_out, path_len, "%s/%s", dir_or_file, name);
    if (n < 0 || (size_t)n >= path_len) return loom_fail("%s: path too long", dir_or_file);
    if (stat(path_out, &st) != 0)
        return loom_fail("%s/%s points to %s, which does not exist", dir_or_file, CKPT_LATEST, name);
    if (!S_ISREG(st.st_mode))
        return loom_fail("%s/%s points to %s, which is not a regular file", dir_or_file, CKPT_LATEST, name);
    return 0;
}

/* The file whose seal ckpt_open_peek saw hold, by identity, size and times, for the next sealed
 * open only: a job opens its base twice at start (needle_is_base looks inside any loom checkpoint
 * for a Needle import's record, then the load), and reading a base of tens of GB twice only to
 * check the same bytes again would double the start. Kept for one open (the load right after),
 * never for later ones, so a file damaged in place later is checked again whatever its times. */
static struct { dev_t dev; ino_t ino; off_t size; time_t mtime, ctime; int set; } seal_last;

/* Whether st is the file the peek saw sealed; forgets it either way (one use). */
static int seal_seen(const struct stat *st)
{
    const int seen = seal_last.set && seal_last.dev == st->st_dev && seal_last.ino == st->st_ino &&
                     seal_last.size == st->st_size && seal_last.mtime == st->st_mtime &&
                     seal_last.ctime == st->st_ctime;
    seal_last.set = 0;
    return seen;
}

static void seal_remember(const struct stat *st)
{
    seal_last.dev = st->st_dev, seal_last.ino = st->st_ino, seal_last.size = st->st_size;
    seal_last.mtime = st->st_mtime, seal_last.ctime = st->st_ctime, seal_last.set = 1;
}

/* Open the HDF5 file, saying "not HDF5" or what HDF5 found wrong (e.g. truncated). With
 * `sealed`, the whole-file seal is checked first: HDF5 1.10 crashes on some damaged files, so it
 * must only ever see bytes that are exactly what loom wrote (unless a peek just checked it:
 * seal_last); `sealed` 2 (a peek) remembers the file whose seal held. */
static hid_t open_h5(const char *file, int sealed)
{
    struct stat st;
    if (stat(file, &st) != 0) return loom_fail("%s: cannot open checkpoint (%s)", file, strerror(errno));
    if (S_ISDIR(st.st_mode)) return loom_fail("%s: is a directory, not a checkpoint file", file);
    if (!S_ISREG(st.st_mode)) return loom_fail("%s: not a regular file, not a checkpoint", file);
    if (sealed && !seal_seen(&st)) {
        if (ckpt_seal_verify(file, NULL) != 0) return -1;
        if (sealed == 2) seal_remember(&st);
    }
    htri_t is = H5Fis_hdf5(file);
    if (is == 0) return loom_fail("%s: not an HDF5 file (%lld bytes)", file, (long long)st.st_size);
    hid_t fapl = ckpt_h5_fapl();
    hid_t fid = is > 0 && fapl >= 0 ? H5Fopen(file, H5F_ACC_RDONLY, fapl) : -1;
    if (fid < 0) {
        char why[320];
        unsigned long long eof = 0, base = 0, stored = 0;
        ckpt_h5_reason(why, sizeof why);
        if (sscanf(why, "truncated file: eof = %llu, sblock->base_addr = %llu, stored_eof = %llu", &eof, &base,
                   &stored) == 3)
            loom_fail("%s: truncated file (%llu of %llu bytes)", file, eof, stored);
        else
            loom_fail("%s: cannot open as HDF5, damaged or truncated (%s)", file, why);
    }
    if (fapl >= 0) H5Pclose(fapl);
    return fid;
}

/* A loom checkpoint of a format version this loom reads, with the `complete` flag set. `sealed`:
 * the file's loom seal held, so loom wrote (or sealed) it: a bad `loom_format` there is a damaged
 * root attribute, not another program's file. */
static int validate_file(hid_t fid, const char *file, int sealed, int *version_out)
{
    char *magic = NULL;
    int rc = ckpt_attr_read_str(fid, "loom_format", &magic);
    int bad = rc != 0 || strcmp(magic, CKPT_MAGIC) != 0;
    if (bad && sealed) {
        char got[80];
        snprintf(got, sizeof got, rc < 0 ? "unreadable" : rc > 0 ? "missing" : "\"%.60s\"", magic ? magic : "");
        free(magic);
        return loom_fail("%s: damaged root attributes under a valid loom seal: loom_format is %s, not \"%s\" "
                         "(edited before it was sealed?)", file, got, CKPT_MAGIC);
    }
    free(magic);
    if (bad) return loom_fail("%s: not a loom checkpoint (no loom_format = \"%s\")", file, CKPT_MAGIC);
    int32_t version = 0, complete = 0;
    if (ckpt_attr_read(fid, "format_version", H5T_NATIVE_INT32, &version) != 0)
        return loom_fail("%s: no readable format_version attribute", file);
    if (version < CKPT_FORMAT_OLDEST || version > CKPT_FORMAT_VERSION)
        return loom_fail("%s: format version %d, this loom reads %d to %d", file, version, CKPT_FORMAT_OLDEST,
                         CKPT_FORMAT_VERSION);
    *version_out = version;
    rc = ckpt_attr_read(fid, "complete", H5T_NATIVE_INT32, &complete);
    if (rc != 0 || complete != 1)
        return loom_fail("%s: incomplete checkpoint (no `complete` flag: the save was interrupted)", file);
    return 0;
}

static ckpt_reader *open_reader(const char *file, int sealed)
{
    if (!file) return loom_fail("ckpt_open: no file given"), NULL;
    if (strlen(file) >= CKPT_PATH_MAX) return loom_fail("%s: path too long", file), NULL;
    ckpt_h5_quiet();
    hid_t fid = open_h5(file, sealed);
    if (fid < 0) return NULL;
    int version = 0;
    if (validate_file(fid, file, sealed, &version)) {
        H5Fclose(fid);
        return NULL;
    }
    ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) {
        H5Fclose(fid);
        return loom_fail("%s: out of memory", file), NULL;
    }
    r->fid = fid;
    r->version = version;
    strcpy(r->path, file);
    /* Tensors are read front to back (the writer laid them out in order): ask for a larger
     * read-ahead window on the sec2 driver's descriptor. Only a hint; failures are ignored. */
    int *fdp = NULL;
    hid_t fapl = H5Fget_access_plist(fid);
    if (fapl >= 0 && H5Fget_vfd_handle(fid, fapl, (void **)&fdp) >= 0 && fdp) posix_fadvise(*fdp, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (fapl >= 0) H5Pclose(fapl);
    return r;
}

ckpt_reader *ckpt_open(const char *file) { return open_reader(file, 1); }

ckpt_reader *ckpt_open_unsealed(const char *file) { return open_reader(file, 0); }

ckpt_reader *ckpt_open_peek(const char *file) { return open_reader(file, 2); }

void ckpt_state_free(ckpt_state *s)
{
    if (!s) return;
    free((char *)s->model_config_json);
    free((char *)s->job_config_json);
    free((char *)s->backend);
    free((char *)s->tuning);
    free((char *)s->source);
    s->model_config_json = s->job_config_json = s->backend = s->tuning = s->source = NULL;
}

/* Version 2 keeps the AdamW step in `adam_step`; version 1 kept it in `rng_counter` (and had no
 * base binding): read it from there, so older checkpoints still resume exactly. */
static int read_adam_step(ckpt_reader *r, ckpt_state *s)
{
    if (ckpt_attr_read(r->fid, "tokenizer_hash", H5T_NATIVE_UINT64, &s->tokenizer_hash) != 0)
        s->tokenizer_hash = 0; /* optional: files written before it was recorded lack it */
    if (r->version >= 2) {
        if (ckpt_attr_read(r->fid, "adam_step", H5T_NATIVE_INT64, &s->adam_step) != 0)
            return loom_fail("%s: missing or unreadable attribute adam_step", r->path);
        if (ckpt_attr_read(r->fid, "base_digest", H5T_NATIVE_UINT64, &s->base_digest) != 0)
            return loom_fail("%s: missing or unreadable attribute base_digest", r->path);
        return 0;
    }
    if (s->step < 0 || s->step > CKPT_MAX_STEP) return 0; /* ckpt_state_check names the step */
    if (s->rng_counter > (uint64_t)CKPT_MAX_STEP || (int64_t)s->rng_counter > s->step)
        return loom_fail("%s: attribute rng_counter = %llu (the AdamW step, in a version 1 file) is out of range "
                         "[0, step %lld]", r->path, (unsigned long long)s->rng_counter, (long long)s->step);
    s->adam_step = (int64_t)s->rng_counter;
    s->base_digest = 0;
    return 0;
}

int ckpt_state_check(const ckpt_state *s, const char *what)
{
    const struct { const char *name; int64_t v, lo, hi; } r[] = {
        {"step", s->step, 0, CKPT_MAX_STEP},
        {"adam_step", s->adam_step, 0, s->step},
        {"tokens_seen", s->tokens_seen, 0, INT64_MAX},
        {"sample_cursor", s->sample_cursor, 0, INT64_MAX},
        {"epoch", s->epoch, 0, INT64_MAX},
        {"world_size", s->world_size, 1, INT32_MAX},
        {"zero_stage", s->zero_stage, 0, 3},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        if (r[i].v >= r[i].lo && r[i].v <= r[i].hi) continue;
        if (i == 1 && s->step >= 0 && s->step <= CKPT_MAX_STEP)
            return loom_fail("%s: attribute adam_step = %lld is out of range [0, step %lld]", what,
                             (long long)r[i].v, (long long)s->step);
        return loom_fail("%s: attribute %s = %lld is out of range [%lld, %lld]", what, r[i].name, (long long)r[i].v,
                         (long long)r[i].lo, (long long)r[i].hi);
    }
    if (!isfinite(s->lr) || s->lr < 0)
        return loom_fail("%s: attribute lr = %g is not a finite non-negative learning rate", what, s->lr);
    return 0;
}

int ckpt_read_state(ckpt_reader *r, ckpt_state *s)
{
    ckpt_h5_quiet();
    memset(s, 0, sizeof *s);
    int32_t world = 0, zero = 0;
    const struct { const char *name; hid_t mtype; void *val; } a[] = {
        {"step", H5T_NATIVE_INT64, &s->step},
        {"tokens_seen", H5T_NATIVE_INT64, &s->tokens_seen},
        {"sample_cursor", H5T_NATIVE_INT64, &s->sample_cursor},
        {"epoch", H5T_NATIVE_INT64, &s->epoch},
        {"seed", H5T_NATIVE_UINT64, &s->seed},
        {"rng_counter", H5T_NATIVE_UINT64, &s->rng_counter},
        {"lr", H5T_NATIVE_DOUBLE, &s->lr},
        {"world_size", H5T_NATIVE_INT32, &world},
        {"zero_stage", H5T_NATIVE_INT32, &zero},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (ckpt_attr_read(r->fid, a[i].name, a[i].mtype, a[i].val) != 0)
            return loom_fail("%s: missing or unreadable attribute %s", r->path, a[i].name);
    s->world_size = world;
    s->zero_stage = zero;
    s->format_version = r->version;
    if (read_adam_step(r, s)) return -1;
    const char *names[3] = {"model_config", "job_config", "backend"};
    char *vals[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (ckpt_attr_read_str(r->fid, names[i], &vals[i]) != 0) {
            for (int k = 0; k < i; k++) free(vals[k]);
            return loom_fail("%s: missing or unreadable attribute %s", r->path, names[i]);
        }
    }
    s->model_config_json = vals[0];
    s->job_config_json = vals[1];
    s->backend = vals[2];
    /* optional (files before them have none, only an import has a source): absent reads as "" */
    const char *opt[2] = {"tuning", "source"};
    const char **dst[2] = {&s->tuning, &s->source};
    for (int i = 0; i < 2; i++) {
        char *v = NULL;
        if (ckpt_attr_read_str(r->fid, opt[i], &v) < 0) {
            ckpt_state_free(s);
            return loom_fail("%s: unreadable attribute %s", r->path, opt[i]);
        }
        *dst[i] = v ? v : calloc(1, 1);
        if (!*dst[i]) {
            ckpt_state_free(s);
            return loom_fail("%s: out of memory", r->path);
        }
    }
    if (ckpt_state_check(s, r->path) == 0) return 0;
    ckpt_state_free(s);
    return -1;
}

int ckpt_has_group(ckpt_reader *r, const char *path)
{
    char buf[CKPT_PATH_MAX];
    ckpt_h5_quiet();
    snprintf(buf, sizeof buf, "/%s", path + strspn(path, "/"));
    if (ckpt_h5_exists(r->fid, buf) != 1) return 0;
    hid_t obj = H5Oopen(r->fid, buf, H5P_DEFAULT);
    if (obj < 0) return 0;
    int is_group = H5Iget_type(obj) == H5I_GROUP;
    H5Oclose(obj);
    return is_group;
}

/* Dataset checks before reading: fp32 and the expected logical shape. */
static int check_dataset(hid_t dset, const char *file, const char *dpath, const ckpt_tensor *t)
{
    hid_t type = H5Dget_type(dset);
    int is_f32 = type >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
    if (type >= 0) H5Tclose(type);
    if (!is_f32) return loom_fail("%s: %s is not stored as fp32", file, dpath);
    hid_t space = H5Dget_space(dset);
    hsize_t dims[H5S_MAX_RANK];
    int nd = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    if (space >= 0) H5Sclose(space);
    if (nd < 0) return loom_fail("%s: cannot read the shape of %s", file, dpath);
    int same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++) same = (int64_t)dims[d] == t->shape[d];
    if (!same) {
        int64_t have[H5S_MAX_RANK];
        for (int d = 0; d < nd; d++) have[d] = (int64_t)dims[d];
        char hs[128], ws[128];
        ckpt_shape_str(hs, sizeof hs, nd, have);
        ckpt_shape_str(ws, sizeof ws, t->ndim, t->shape);
        return loom_fail("%s: shape mismatch for %s: file has %s, expected %s", file, dpath, hs, ws);
    }
    return 0;
}

static hid_t open_checked(ckpt_reader *r, const ckpt_group *g, int k, char *dpath, size_t len);

/* Tensor k of g into x (reuse = 0: all of it; 1: piece by piece through x, each handed to
 * fill), its crc32 attribute checked against what was read. */
static int read_checked(ckpt_reader *r, const ckpt_group *g, int k, float *x, int reuse,
                        ckpt_piece_fn fill, void *ctx)
{
    const ckpt_tensor *t = &g->tensors[k];
    char dpath[CKPT_PATH_MAX];
    hid_t dset = open_checked(r, g, k, dpath, sizeof dpath);
    if (dset < 0) return -1;
    uint32_t want = 0, got = 0;
    int rc = ckpt_attr_read(dset, "crc32", H5T_NATIVE_UINT32, &want) == 0
                 ? 0 : loom_fail("%s: %s has no crc32 attribute", r->path, dpath);
    int moved = rc ? 0 : ckpt_h5_pieces_via(dset, t->ndim, t->shape, x, 0, reuse, &got, fill, ctx);
    if (moved == -1) {
        char why[320];
        ckpt_h5_reason(why, sizeof why);
        rc = loom_fail("%s: cannot read %s (%s)", r->path, dpath, why);
    }
    H5Dclose(dset);
    if (moved == -2) rc = -1; /* the sink failed and said why */
    if (!rc && got != want) rc = loom_fail("%s: checksum mismatch in %s (corrupt file)", r->path, dpath);
    return rc;
}

static int read_tensor(ckpt_reader *r, const ckpt_group *g, int k)
{
    return read_checked(r, g, k, g->data + g->tensors[k].offset, 0, NULL, NULL);
}

typedef struct {
    int (*put)(void *ctx, const float *x, size_t n);
    void *ctx;
} piece_sink;

static int read_piece_put(void *ctx, size_t e0, size_t n, float *x)
{
    const piece_sink *sink = ctx;
    (void)e0; /* in order: the sink appends */
    return sink->put(sink->ctx, x, n);
}

int ckpt_read_pieces(ckpt_reader *r, const char *group, const ckpt_tensor *t, float *buf,
                     int (*put)(void *ctx, const float *x, size_t n), void *ctx)
{
    ckpt_h5_quiet();
    ckpt_tensor one = *t;
    one.offset = 0;
    ckpt_group g = {group, &one, 1, buf, NULL, NULL};
    piece_sink sink = {put, ctx};
    return read_checked(r, &g, 0, buf, 1, read_piece_put, &sink);
}

int ckpt_read_group(ckpt_reader *r, const ckpt_group *g)
{
    ckpt_h5_quiet();
    for (int k = 0; k < g->ntensors; k++)
        if (read_tensor(r, g, k)) return -1;
    return 0;
}

/* Open tensor k of g as stored ("/<group>/<name>"), checking type and shape. -1 + loom_fail. */
static hid_t open_checked(ckpt_reader *r, const ckpt_group *g, int k, char *dpath, size_t len)
{
    const ckpt_tensor *t = &g->tensors[k];
    int n = snprintf(dpath, len, "/%s/%s", g->path + strspn(g->path, "/"), t->name);
    if (n < 0 || (size_t)n >= len) return loom_fail("%s: tensor path too long: %s", r->path, t->name);
    if (t->ndim < 0 || t->ndim > CKPT_MAX_DIMS) return loom_fail("%s: %s: ndim %d out of range", r->path, dpath, t->ndim);
    if (ckpt_h5_exists(r->fid, dpath) != 1) return loom_fail("%s: missing tensor %s", r->path, dpath);
    hid_t dset = H5Dopen2(r->fid, dpath, H5P_DEFAULT);
    if (dset < 0) return loom_fail("%s: %s is not a readable dataset", r->path, dpath);
    if (check_dataset(dset, r->path, dpath, t) == 0) return dset;
    H5Dclose(dset);
    return -1;
}

int ckpt_check_shapes(ckpt_reader *r, const ckpt_group *g)
{
    ckpt_h5_quiet();
    char dpath[CKPT_PATH_MAX];
    for (int k = 0; k < g->ntensors; k++) {
        hid_t dset = open_checked(r, g, k, dpath, sizeof dpath);
        if (dset < 0) return -1;
        H5Dclose(dset);
    }
    return 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001B3ull;
    return h;
}

int ckpt_group_digest(ckpt_reader *r, const ckpt_group *g, uint64_t *digest)
{
    ckpt_h5_quiet();
    uint64_t h = 0xCBF29CE484222325ull;
    char dpath[CKPT_PATH_MAX];
    for (int k = 0; k < g->ntensors; k++) {
        const ckpt_tensor *t = &g->tensors[k];
        hid_t dset = open_checked(r, g, k, dpath, sizeof dpath);
        if (dset < 0) return -1;
        uint32_t crc = 0;
        int rc = ckpt_attr_read(dset, "crc32", H5T_NATIVE_UINT32, &crc);
        H5Dclose(dset);
        if (rc != 0) return loom_fail("%s: %s has no crc32 attribute", r->path, dpath);
        unsigned char le[8 * CKPT_MAX_DIMS + 4];
        size_t n = 0;
        for (int d = 0; d < t->ndim; d++)
            for (int b = 0; b < 8; b++) le[n++] = (unsigned char)((uint64_t)t->shape[d] >> (8 * b));
        for (int b = 0; b < 4; b++) le[n++] = (unsigned char)(crc >> (8 * b));
        h = fnv1a(fnv1a(h, t->name, strlen(t->name) + 1), le, n);
    }
    *digest = h ? h : 1;
    return 0;
}

void ckpt_close(ckpt_reader *r)
{
    if (!r) return;
    H5Fclose(r->fid);
    free(r);
}

size_t ckpt_piece_size(const ckpt_tensor *t)
{
    return t->ndim < 0 || t->ndim > CKPT_MAX_DIMS ? 1 : ckpt_piece_floats(t->ndim, t->shape);
}
