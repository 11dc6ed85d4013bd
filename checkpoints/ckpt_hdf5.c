/* ckpt_hdf5.c: the small amount of HDF5 plumbing the checkpoint reader and writer share:
 * quiet errors, the file access list, path existence, tensor I/O in checksummed pieces, attributes.
 * Must never open files through an MPI driver: checkpoints are written by one process. */
#include "checkpoints/ckpt_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_crc.h"
#include "base/error.h"

void ckpt_h5_quiet(void)
{
    /* No HDF5 exit handler: after a failed write (disk full) H5Fclose can leave the file half
     * closed, and HDF5 1.10's atexit cleanup then crashes on it. Nothing needs closing at exit:
     * a failed save's temp file is already removed. Must precede the library's initialisation. */
    static int once = 0;
    if (!once) {
        H5dont_atexit();
        once = 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static herr_t reason_walk(unsigned n, const H5E_error2_t *err, void *data)
{
    (void)n;
    char *buf = ((char **)data)[0];
    size_t len = (size_t)(uintptr_t)((char **)data)[1];
    if (err->desc && err->desc[0]) snprintf(buf, len, "%s", err->desc);
    return 0;
}

void ckpt_h5_reason(char *buf, size_t len)
{
    char desc[1024];
    void *data[2] = {desc, (void *)(uintptr_t)sizeof desc};
    desc[0] = buf[0] = '\0';
    /* Downward: from the API call to the innermost function; the last description wins. */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, reason_walk, data);
    /* The POSIX driver says "file write failed: time = <ctime with a newline>, filename = ...,
     * errno = 28, error message = 'No space left on device', ..."; keep "what: strerror". */
    const char *msg = strstr(desc, "error message = '");
    const char *colon = strchr(desc, ':');
    /* ... and "unable to lock file, errno = 11, error message = 'Resource temporarily
     * unavailable'" (a lock conflict): "unable to lock file: Resource temporarily unavailable". */
    const char *comma = strchr(desc, ',');
    const char *cut = colon && colon < msg ? colon : comma && comma < msg ? comma : NULL;
    if (msg && cut) {
        msg += strlen("error message = '");
        snprintf(buf, len, "%.*s: %.*s", (int)(cut - desc), desc, (int)strcspn(msg, "'"), msg);
    } else {
        snprintf(buf, len, "%s", desc);
    }
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

hid_t ckpt_h5_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    /* sec2 = plain POSIX read/write: no MPI_Init needed even in a parallel HDF5 build. The 1.8
     * object format gives dense attribute storage (no 64 KB cap on the JSON attributes) and link
     * creation order, and is readable by any HDF5 >= 1.8 (h5py, h5dump). A strong close makes
     * error paths simple: H5Fclose shuts every object still open in the file. A 1 MB metadata
     * block keeps the ~0.5 KB object headers together instead of scattered between tensors: a
     * GPT-2 checkpoint loaded ~20% faster from a cold cache (metadata reads no longer break the
     * kernel's sequential read-ahead); bench/ckpt_io.c measures it. */
    if (H5Pset_fapl_sec2(fapl) < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 || H5Pset_meta_block_size(fapl, 1 << 20) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

int ckpt_h5_exists(hid_t loc, const char *path)
{
    char buf[CKPT_PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    /* H5Lexists fails (rather than returning 0) when an intermediate group is missing, so test
     * each prefix "/a", "/a/b", ... in turn. */
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        htri_t e = H5Lexists(loc, buf, H5P_DEFAULT);
        buf[i] = saved;
        if (e <= 0) return e < 0 ? -1 : 0;
    }
    return 1;
}

/* Elements in one row (product of all dims but the first) and rows per piece. */
static size_t piece_rows(int ndim, const int64_t *shape, size_t *row)
{
    *row = 1;
    for (int d = 1; d < ndim; d++) *row *= (size_t)shape[d];
    size_t per = CKPT_PIECE_BYTES / sizeof(float) / (*row ? *row : 1);
    return per ? per : 1;
}

size_t ckpt_piece_floats(int ndim, const int64_t *shape)
{
    size_t row, n = (size_t)ckpt_numel(ndim, shape);
    size_t piece = piece_rows(ndim, shape, &row) * row;
    return n < piece ? n : piece;
}

static herr_t move(hid_t dset, hid_t mspace, hid_t fspace, float *x, int write)
{
    return write ? H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, x)
                 : H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, x);
}

int ckpt_h5_pieces(hid_t dset, int ndim, const int64_t *shape, float *x, int write, int reuse, uint32_t *crc)
{
    return ckpt_h5_pieces_via(dset, ndim, shape, x, write, reuse, crc, NULL, NULL);
}

int ckpt_h5_pieces_via(hid_t dset, int ndim, const int64_t *shape, float *x, int write, int reuse,
                       uint32_t *crc, ckpt_piece_fn fill, void *ctx)
{
    size_t n = (size_t)ckpt_numel(ndim, shape), row;
    size_t per = piece_rows(ndim, shape, &row);
    if (n == 0) return 0;
    if (ndim == 0 || (size_t)shape[0] <= per) { /* small: one call */
        if (write && fill && fill(ctx, 0, n, x)) return -2;
        if (write) *crc = ckpt_crc32c_f32(*crc, x, n);
        if (move(dset, H5S_ALL, H5S_ALL, x, write) < 0) return -1;
        if (!write) *crc = ckpt_crc32c_f32(*crc, x, n);
        return !write && fill && fill(ctx, 0, n, x) ? -2 : 0;
    }
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    for (int d = 0; d < ndim; d++) count[d] = (hsize_t)shape[d];
    hid_t fspace = H5Dget_space(dset);
    int rc = fspace < 0 ? -1 : 0;
    for (size_t r = 0; r < (size_t)shape[0] && !rc; r += per) {
        /* Rows [r, r+nr) of a contiguous dataset are one contiguous byte range: one pread/pwrite. */
        hsize_t nr = (size_t)shape[0] - r < per ? (size_t)shape[0] - r : per, m = nr * row;
        float *p = reuse ? x : x + r * row;
        start[0] = r;
        count[0] = nr;
        if (write && fill && fill(ctx, r * row, m, p)) {
            rc = -2;
            break;
        }
        hid_t mspace = H5Screate_simple(1, &m, NULL);
        if (write) *crc = ckpt_crc32c_f32(*crc, p, m);
        if (mspace < 0 || H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            move(dset, mspace, fspace, p, write) < 0)
            rc = -1;
        else if (!write)
            *crc = ckpt_crc32c_f32(*crc, p, m);
        if (!rc && !write && fill && fill(ctx, r * row, m, p)) rc = -2;
        if (mspace >= 0) H5Sclose(mspace);
    }
    if (fspace >= 0) H5Sclose(fspace);
    return rc;
}

int ckpt_attr_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *val,
                    const char *what)
{
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = space < 0 ? -1 : H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = attr >= 0 && H5Awrite(attr, mem_type, val) >= 0 ? 0 : -1;
    if (rc) {
        char why[320];
        ckpt_h5_reason(why, sizeof why);
        loom_fail("%s: cannot write attribute %s (%s)", what, name, why);
    }
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    return rc;
}

int ckpt_attr_write_str(hid_t loc, const char *name, const char *s, const char *what)
{
    /* Fixed-length, NUL-terminated UTF-8: h5dump shows it as text, h5py as bytes. */
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0 || H5Tset_size(type, strlen(s) + 1) < 0 || H5Tset_strpad(type, H5T_STR_NULLTERM) < 0 ||
        H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
        if (type >= 0) H5Tclose(type);
        return loom_fail("%s: cannot make string type for attribute %s", what, name);
    }
    int rc = ckpt_attr_write(loc, name, type, type, s, what);
    H5Tclose(type);
    return rc;
}

int ckpt_attr_read(hid_t loc, const char *name, hid_t mem_type, void *val)
{
    htri_t e = H5Aexists(loc, name);
    if (e <= 0) return e < 0 ? -1 : 1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    if (attr < 0) return -1;
    hid_t space = H5Aget_space(attr);
    int ok = space >= 0 && H5Sget_simple_extent_npoints(space) == 1 && H5Aread(attr, mem_type, val) >= 0;
    if (space >= 0) H5Sclose(space);
    H5Aclose(attr);
    return ok ? 0 : -1;
}

/* Read a string attribute of either HDF5 flavour (fixed-length as we write it, variable-length
 * as h5py writes by default), so files touched by other tools still load. */
static int attr_read_str_open(hid_t attr, char **out)
{
    hid_t ftype = H5Aget_type(attr);
    if (ftype < 0 || H5Tget_class(ftype) != H5T_STRING) {
        if (ftype >= 0) H5Tclose(ftype);
        return -1;
    }
    int rc = -1;
    /* HDF5 converts between string lengths and paddings but not character sets: match it. */
    hid_t mtype = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mtype, H5Tget_cset(ftype));
    if (H5Tis_variable_str(ftype) > 0) {
        char *vs = NULL;
        if (H5Tset_size(mtype, H5T_VARIABLE) >= 0 && H5Aread(attr, mtype, &vs) >= 0 && vs) {
            *out = strdup(vs);
            H5free_memory(vs);
            rc = *out ? 0 : -1;
        }
    } else {
        size_t n = H5Tget_size(ftype);
        char *s = malloc(n + 1);
        if (s && n > 0 && H5Tset_size(mtype, n + 1) >= 0 && H5Tset_strpad(mtype, H5T_STR_NULLTERM) >= 0 &&
            H5Aread(attr, mtype, s) >= 0) {
            s[n] = '\0';
            *out = s;
            rc = 0;
        } else {
            free(s);
        }
    }
    H5Tclose(mtype);
    H5Tclose(ftype);
    return rc;
}

int ckpt_attr_read_str(hid_t loc, const char *name, char **out)
{
    *out = NULL;
    htri_t e = H5Aexists(loc, name);
    if (e <= 0) return e < 0 ? -1 : 1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    if (attr < 0) return -1;
    int rc = attr_read_str_open(attr, out);
    H5Aclose(attr);
    return rc;
}

int64_t ckpt_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

void ckpt_shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
}
