/* ckpt_write.c: ckpt_save: one HDF5 file per checkpoint, written under a temporary name, sealed
 * (whole-file CRC32C trailer, from the CRCs taken while writing), made durable (fsync), renamed
 * into place; then `latest` moves and old checkpoints are rotated out.
 * Must never touch the previous checkpoint or `latest` before the new file is complete on disk. */
#include "checkpoints/ckpt.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"
#include "base/error.h"
#include "base/log.h"

/* Crash-test hook. LOOM_FAULT_CKPT_PHASE=<phase> makes ckpt_save kill its own process with
 * SIGKILL when it reaches that phase, as a power cut would: after_data (tensors written, file
 * not closed), before_rename (temp file fsync'd), before_latest (renamed, `latest` not moved),
 * before_rotate (`latest` moved, old files not yet deleted). Unset: one getenv per phase. */
static void ckpt_fault_point(const char *phase)
{
    const char *want = getenv("LOOM_FAULT_CKPT_PHASE");
    if (want && strcmp(want, phase) == 0) raise(SIGKILL);
}

static int validate_tensor(const char *gpath, const ckpt_tensor *t)
{
    if (!t->name || !t->name[0] || strchr(t->name, '/'))
        return loom_fail("ckpt_save: group %s: bad tensor name '%s'", gpath, t->name ? t->name : "(null)");
    if (t->ndim < 0 || t->ndim > CKPT_MAX_DIMS)
        return loom_fail("ckpt_save: /%s/%s: ndim %d out of range", gpath, t->name, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0) return loom_fail("ckpt_save: /%s/%s: negative dimension", gpath, t->name);
    return 0;
}

/* Where ckpt_save_pieces's tensors come from (NULL for ckpt_save: each group's data or fetch). */
typedef struct save_src {
    ckpt_pieces_fn pieces;
    void *ctx;
    float *piece;        /* the largest piece any tensor needs */
    int k;               /* the tensor being written */
} save_src;

static int validate(const char *dir, const ckpt_state *st, const ckpt_group *groups, int ngroups, int keep,
                    const save_src *src)
{
    if (!dir || !dir[0]) return loom_fail("ckpt_save: no directory given");
    if (!st) return loom_fail("%s: ckpt_save: missing state", dir);
    if (ckpt_state_check(st, dir)) return -1; /* never write a file the reader refuses */
    if (ngroups < 0 || (ngroups > 0 && !groups) || keep < 0)
        return loom_fail("%s: ckpt_save: bad group list or keep count", dir);
    for (int i = 0; i < ngroups; i++) {
        const ckpt_group *g = &groups[i];
        const char *p = g->path ? g->path + strspn(g->path, "/") : NULL;
        if (!p || !p[0] || g->ntensors < 0 || (g->ntensors > 0 && (!g->tensors || (!g->data && !g->fetch && !src))))
            return loom_fail("%s: ckpt_save: group %d ('%s') has no path, tensors or data", dir, i,
                             g->path ? g->path : "(null)");
        for (int k = 0; k < g->ntensors; k++)
            if (validate_tensor(p, &g->tensors[k])) return -1;
    }
    return 0;
}

/* Root attributes: the exact training state, then informational fields. `complete` comes last,
 * written by write_file once every tensor is in. */
/* The `tensors` manifest: "group/name\n" for every tensor the save writes, so `ckpt info` and
 * `ckpt seal` can tell a tensor that is missing or unreadable from one never written. */
static char *manifest(const ckpt_group *groups, int ngroups)
{
    size_t len = 1;
    for (int i = 0; i < ngroups; i++)
        for (int k = 0; k < groups[i].ntensors; k++)
            len += strlen(groups[i].path) + strlen(groups[i].tensors[k].name) + 2;
    char *m = malloc(len);
    if (!m) return NULL;
    size_t used = 0;
    for (int i = 0; i < ngroups; i++) {
        const char *gp = groups[i].path + strspn(groups[i].path, "/");
        for (int k = 0; k < groups[i].ntensors; k++)
            used += (size_t)snprintf(m + used, len - used, "%s/%s\n", gp, groups[i].tensors[k].name);
    }
    m[used < len ? used : len - 1] = '\0';
    return m;
}

static int write_state(hid_t fid, const ckpt_state *s, const ckpt_group *groups, int ngroups, const char *what)
{
    const int32_t version = CKPT_FORMAT_VERSION, world = s->world_size, zero = s->zero_stage;
    const struct { const char *name; hid_t ftype, mtype; const void *val; } a[] = {
        {"format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version},
        {"step", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->step},
        {"tokens_seen", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->tokens_seen},
        {"sample_cursor", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->sample_cursor},
        {"epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->epoch},
        {"seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &s->seed},
        {"rng_counter", H5T_STD_U64LE, H5T_NATIVE_UINT64, &s->rng_counter},
        {"adam_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &s->adam_step},
        {"base_digest", H5T_STD_U64LE, H5T_NATIVE_UINT64, &s->base_digest},
        {"tokenizer_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, &s->tokenizer_hash},
        {"lr", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s->lr},
        {"world_size", H5T_STD_I32LE, H5T_NATIVE_INT32, &world},
        {"zero_stage", H5T_STD_I32LE, H5T_NATIVE_INT32, &zero},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (ckpt_attr_write(fid, a[i].name, a[i].ftype, a[i].mtype, a[i].val, what)) return -1;
    const struct { const char *name, *val; } str[] = {
        {"loom_format", CKPT_MAGIC},
        {"checksum", "crc32c"},
        {"model_config", s->model_config_json ? s->model_config_json : ""},
        {"job_config", s->job_config_json ? s->job_config_json : ""},
        {"backend", s->backend ? s->backend : ""},
        {"tuning", s->tuning ? s->tuning : ""},
    };
    for (size_t i = 0; i < sizeof str / sizeof str[0]; i++)
        if (ckpt_attr_write_str(fid, str[i].name, str[i].val, what)) return -1;
    /* only an import has one: every other checkpoint's bytes stay as they were */
    if (s->source && s->source[0] && ckpt_attr_write_str(fid, "source", s->source, what)) return -1;
    char *list = manifest(groups, ngroups);
    if (!list) return loom_fail("%s: out of memory for the tensor manifest", what);
    int rc = ckpt_attr_write_str(fid, "tensors", list, what);
    free(list);
    return rc;
}

/* Open the group at `path` ("optimizer/m"), creating each missing level with creation-order
 * tracking so `ckpt info` lists tensors in the order the model declares them. */
static hid_t open_group(hid_t fid, const char *path, hid_t gcpl, const char *what)
{
    char buf[CKPT_PATH_MAX];
    int n = snprintf(buf, sizeof buf, "/%s", path);
    if (n < 0 || (size_t)n >= sizeof buf) return loom_fail("%s: group path too long: %s", what, path);
    for (int i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        htri_t e = H5Lexists(fid, buf, H5P_DEFAULT);
        hid_t g = e > 0 ? -2 : e == 0 ? H5Gcreate2(fid, buf, H5P_DEFAULT, gcpl, H5P_DEFAULT) : -1;
        if (g == -1) {
            char why[320];
            ckpt_h5_reason(why, sizeof why);
            return loom_fail("%s: cannot create group %s (%s)", what, buf, why);
        }
        if (g >= 0) H5Gclose(g);
        buf[i] = saved;
    }
    hid_t g = H5Gopen2(fid, buf, H5P_DEFAULT);
    if (g < 0) loom_fail("%s: cannot open group %s", what, buf);
    return g;
}

/* One tensor = one dataset of its logical shape (contiguous layout, no fill, no conversion:
 * HDF5 hands each piece to pwrite as is). The crc32 attribute is created first with a
 * placeholder, so the object header has its final size before the data is placed after it (no
 * continuation block later: a load reads the file front to back), and set after the data. */
static int fill_piece(void *ctx, size_t e0, size_t n, float *dst)
{
    save_src *src = ctx;
    return src->pieces(src->ctx, src->k, e0, n, dst);
}

static int write_tensor(hid_t gid, const char *gpath, const ckpt_tensor *t, const float *data, hid_t dcpl,
                        const char *what, ckpt_extent *ext, save_src *src)
{
    if (!data && !src) return loom_fail("%s: no data for /%s/%s (%s)", what, gpath, t->name, loom_error());
    hsize_t dims[CKPT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
    uint32_t crc = 0;
    hid_t space = t->ndim ? H5Screate_simple(t->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dset = space < 0 ? -1 : H5Dcreate2(gid, t->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = dset >= 0 ? ckpt_attr_write(dset, "crc32", H5T_STD_U32LE, H5T_NATIVE_UINT32, &crc, what) : -1;
    /* ckpt_h5_pieces only reads from x when writing. */
    int moved = rc ? 0 : src ? ckpt_h5_pieces_via(dset, t->ndim, t->shape, src->piece, 1, 1, &crc, fill_piece, src)
                             : ckpt_h5_pieces(dset, t->ndim, t->shape, (float *)data, 1, 0, &crc);
    if (moved == -2) {
        rc = loom_fail("%s: no data for /%s/%s (%s)", what, gpath, t->name, loom_error());
    } else if (dset < 0 || moved < 0) {
        char why[320];
        ckpt_h5_reason(why, sizeof why);
        rc = loom_fail("%s: cannot write /%s/%s (%s)", what, gpath, t->name, why);
    }
    /* Where the bytes went, for the seal: an address HDF5 cannot give (no storage yet) becomes an
     * extent past any file, so the seal reads the whole file instead of trusting it. */
    haddr_t at = rc ? HADDR_UNDEF : H5Dget_offset(dset);
    ext->len = (uint64_t)ckpt_numel(t->ndim, t->shape) * sizeof(float);
    ext->off = at == HADDR_UNDEF ? (ext->len ? UINT64_MAX : 0) : (uint64_t)at;
    ext->crc = crc;
    hid_t attr = rc ? -1 : H5Aopen(dset, "crc32", H5P_DEFAULT);
    if (!rc && (attr < 0 || H5Awrite(attr, H5T_NATIVE_UINT32, &crc) < 0))
        rc = loom_fail("%s: cannot set the checksum of /%s/%s", what, gpath, t->name);
    if (attr >= 0) H5Aclose(attr);
    if (dset >= 0) H5Dclose(dset);
    if (space >= 0) H5Sclose(space);
    return rc;
}

static int write_groups(hid_t fid, const ckpt_group *groups, int ngroups, const char *what, ckpt_extent *ext,
                        save_src *src)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    int rc = dcpl >= 0 && gcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
             H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0 &&
             H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) >= 0
                 ? 0 : loom_fail("%s: cannot set up HDF5 property lists", what);
    for (int i = 0; i < ngroups && !rc; i++) {
        const ckpt_group *g = &groups[i];
        const char *path = g->path + strspn(g->path, "/");
        hid_t gid = open_group(fid, path, gcpl, what);
        if (gid < 0) rc = -1;
        for (int k = 0; k < g->ntensors && !rc; k++) {
            const float *x = src ? NULL : g->data ? g->data + g->tensors[k].offset : g->fetch(g->fetch_ctx, k);
            if (src) src->k = k;
            rc = write_tensor(gid, path, &g->tensors[k], x, dcpl, what, ext, src);
            ext++;
        }
        if (gid >= 0) H5Gclose(gid);
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (gcpl >= 0) H5Pclose(gcpl);
    return rc;
}

/* After a failed write (disk full): give the temp file's space back before H5Fclose, so the close
 * can flush its metadata and really close. Otherwise HDF5 keeps a half-closed file and its
 * library shutdown (at exit, or inside MPI_Finalize in a parallel build) crashes on it. The temp
 * file is removed afterwards anyway, so its contents do not matter. */
static void ckpt_release_space(hid_t fid)
{
    void *handle = NULL;
    if (H5Fget_vfd_handle(fid, H5P_DEFAULT, &handle) >= 0 && handle) {
        int fd = *(int *)handle;
        if (ftruncate(fd, 0) != 0) { /* nothing more to try: the close below reports it */ }
    }
}

/* Everything up to a durable temp file: create, state, tensors, `complete`, close, seal, fsync. */
static int write_file(const char *tmp, const ckpt_state *st, const ckpt_group *groups, int ngroups, save_src *src)
{
    hid_t fapl = ckpt_h5_fapl();
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fapl < 0 || fcpl < 0 || H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        if (fcpl >= 0) H5Pclose(fcpl);
        return loom_fail("%s: cannot set up HDF5 file properties", tmp);
    }
    errno = 0;
    hid_t fid = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    /* The reason first: every HDF5 call (H5Pclose too) clears the error stack. */
    char why[320] = "";
    int err = errno;
    if (fid < 0) ckpt_h5_reason(why, sizeof why);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (fid < 0) {
        if (!why[0]) snprintf(why, sizeof why, "%s", err ? strerror(err) : "HDF5 gave no reason");
        return loom_fail("%s: cannot create checkpoint file (%s)", tmp, why);
    }
    int next = 0;
    for (int i = 0; i < ngroups; i++) next += groups[i].ntensors;
    ckpt_extent *ext = calloc((size_t)(next ? next : 1), sizeof *ext);
    int rc = ext ? write_state(fid, st, groups, ngroups, tmp) : loom_fail("%s: out of memory", tmp);
    if (!rc) rc = write_groups(fid, groups, ngroups, tmp, ext, src);
    if (!rc) ckpt_fault_point("after_data");
    const int32_t one = 1;
    if (!rc) rc = ckpt_attr_write(fid, "complete", H5T_STD_I32LE, H5T_NATIVE_INT32, &one, tmp);
    if (!rc && H5Fflush(fid, H5F_SCOPE_GLOBAL) < 0) {
        char why[320];
        ckpt_h5_reason(why, sizeof why);
        rc = loom_fail("%s: cannot flush checkpoint file (%s)", tmp, why);
    }
    if (rc) ckpt_release_space(fid);
    if (H5Fclose(fid) < 0 && !rc) {
        char why[320];
        ckpt_h5_reason(why, sizeof why);
        rc = loom_fail("%s: cannot close checkpoint file (%s)", tmp, why);
    }
    /* The seal (a whole-file CRC32C after HDF5's last byte) reads back only HDF5's metadata: the
     * tensors' CRCs, taken as they were written, stand in for their bytes. Its fsync makes data,
     * metadata and seal durable together. */
    if (!rc) rc = ckpt_seal_write_known(tmp, ext, next);
    free(ext);
    return rc;
}

/* After a failed `latest` update: delete the new, unreferenced file `fin` (unless `latest` names it
 * already: the same step saved again, the pointer unchanged). Keeps the save's error; returns -1. */
static int remove_orphan(const char *dir, const char *fin, const char *name)
{
    char why[1024], cur[256];
    snprintf(why, sizeof why, "%s", loom_error());
    if (ckpt_latest_read(dir, cur, sizeof cur) != 0 || strcmp(cur, name) != 0) {
        if (unlink(fin) == 0) {
            ckpt_fs_fsync_dir(dir); /* best effort: the save has failed already */
            return loom_fail("%s; the new %s was removed, `latest` still names the previous checkpoint", why, name);
        }
        return loom_fail("%s; could not remove the unreferenced %s either (%s)", why, fin, strerror(errno));
    }
    return loom_fail("%s", why);
}

static int save(const char *dir, const ckpt_state *state, const ckpt_group *groups, int ngroups, int keep,
                save_src *src)
{
    if (validate(dir, state, groups, ngroups, keep, src)) return -1;
    ckpt_h5_quiet();
    if (ckpt_fs_mkdirs(dir)) return -1;
    char name[64], fin[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    snprintf(name, sizeof name, "step_%08lld.h5", (long long)state->step);
    int nf = snprintf(fin, sizeof fin, "%s/%s", dir, name);
    int nt = snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    if (nf < 0 || nt < 0 || (size_t)nt >= sizeof tmp) return loom_fail("%s: checkpoint path too long", dir);

    if (write_file(tmp, state, groups, ngroups, src)) {
        unlink(tmp);
        return -1;
    }
    ckpt_fault_point("before_rename");
    if (rename(tmp, fin) != 0) {
        int err = errno;
        unlink(tmp);
        return loom_fail("%s: cannot rename %s into place (%s)", fin, tmp, strerror(err));
    }
    /* From here the new file is complete. If `latest` cannot move to it, nothing refers to it:
     * remove it, or it keeps the space (a full disk stays full and every later save fails). */
    if (ckpt_fs_fsync_dir(dir)) return remove_orphan(dir, fin, name);
    ckpt_fault_point("before_latest");
    if (ckpt_latest_write(dir, name)) return remove_orphan(dir, fin, name);
    ckpt_fault_point("before_rotate");
    int left = ckpt_rotate(dir, keep, name);
    if (left) log_warn("%s: could not delete %d old checkpoint file(s)", dir, left);
    return 0;
}

int ckpt_save(const char *dir, const ckpt_state *state, const ckpt_group *groups, int ngroups, int keep)
{
    return save(dir, state, groups, ngroups, keep, NULL);
}

int ckpt_save_pieces(const char *dir, const ckpt_state *state, const ckpt_group *g, ckpt_pieces_fn pieces,
                     void *ctx, int keep)
{
    if (!g || !pieces) return loom_fail("%s: ckpt_save_pieces: no group or no source", dir ? dir : "(null)");
    size_t most = 1; /* one piece buffer for every tensor: touched once, in cache after */
    for (int k = 0; k < g->ntensors && g->tensors; k++) {
        size_t m = ckpt_piece_size(&g->tensors[k]);
        most = m > most ? m : most;
    }
    save_src src = {pieces, ctx, malloc(most * sizeof(float)), 0};
    int rc = src.piece ? save(dir, state, g, 1, keep, &src) : loom_fail("%s: out of memory for a piece", dir);
    free(src.piece);
    return rc;
}
