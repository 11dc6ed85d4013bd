/* ckpt_internal.h: helpers shared by the checkpoint sources (HDF5 plumbing, durable file
 * operations, the `latest` pointer). Private to checkpoints/: not part of the ckpt.h contract.
 * Nothing here may print; every failure is a -1 plus one loom_fail line naming the path. */
#ifndef LOOM_CKPT_INTERNAL_H
#define LOOM_CKPT_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "loom-checkpoint"  /* value of the root attribute `loom_format` */
#define CKPT_LATEST "latest"          /* pointer file inside a checkpoint directory */
#define CKPT_PATH_MAX 4096

/* The open checkpoint behind ckpt.h's opaque ckpt_reader (ckpt_read.c, ckpt_info.c). */
struct ckpt_reader {
    hid_t fid;
    int version;                 /* the file's format_version */
    char path[CKPT_PATH_MAX];
};

/* --- HDF5 (ckpt_hdf5.c) --- */

/* Silence HDF5's own error-stack printing on this thread (we report through loom_fail). */
void ckpt_h5_quiet(void);
/* The innermost message on HDF5's error stack (the most specific one), or "" if none. Call it
 * right after the failing HDF5 call: the next HDF5 call clears the stack. */
void ckpt_h5_reason(char *buf, size_t len);
/* File access list: sec2 (POSIX, no MPI even in a parallel HDF5 build), 1.8 object format (dense
 * attributes, creation order), closing the file closes every object still open in it. */
hid_t ckpt_h5_fapl(void);
/* 1 if every component of the absolute path exists as a link, 0 if not, -1 on error. */
int ckpt_h5_exists(hid_t loc, const char *path);

/* Tensor data moves in pieces of whole rows of about this many bytes, each checksummed right
 * after (read) or before (write) it moves, while it is in cache: one pass over memory instead of
 * two, and on a cold read the kernel's read-ahead keeps the disk busy during the CRC. (A CRC
 * helper thread was tried: no clear gain, and 2x slower cold loads on a loaded machine.) */
#ifndef CKPT_PIECE_BYTES
#define CKPT_PIECE_BYTES (1u << 20)
#endif

/* Read (write = 0) or write the whole fp32 dataset dset of the given shape from/to x, folding the
 * bytes into *crc (CRC32C, see ckpt_crc.h). reuse = 1 puts every piece at x (x must hold
 * ckpt_piece_floats() floats): a bounded buffer for scanning. -1 on HDF5 failure (no loom_fail:
 * the caller names the tensor and adds ckpt_h5_reason). */
int ckpt_h5_pieces(hid_t dset, int ndim, const int64_t *shape, float *x, int write, int reuse, uint32_t *crc);
size_t ckpt_piece_floats(int ndim, const int64_t *shape);
/* ckpt_h5_pieces with a callback per piece (elements [e0, e0 + n) of the tensor at x, reuse = 1 is
 * the use): writing, fn fills the piece before it moves; reading, fn takes it after it moved (and
 * was checksummed). fn's -1 (with loom_fail) aborts: -2 then, -1 on HDF5 failure. */
typedef int (*ckpt_piece_fn)(void *ctx, size_t e0, size_t n, float *x);
int ckpt_h5_pieces_via(hid_t dset, int ndim, const int64_t *shape, float *x, int write, int reuse,
                       uint32_t *crc, ckpt_piece_fn fn, void *ctx);

/* Scalar attributes. Writers return 0/-1 (loom_fail names `what` and the attribute). */
int ckpt_attr_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *val,
                    const char *what);
int ckpt_attr_write_str(hid_t loc, const char *name, const char *s, const char *what);
/* Readers: 0 ok, 1 attribute absent, -1 unreadable (no loom_fail: the caller words it). */
int ckpt_attr_read(hid_t loc, const char *name, hid_t mem_type, void *val);
/* Fixed or variable length string; *out malloc'd (caller frees). */
int ckpt_attr_read_str(hid_t loc, const char *name, char **out);

/* Product of shape[0..ndim) (1 for ndim 0). */
int64_t ckpt_numel(int ndim, const int64_t *shape);
/* "[a, b, c]" into buf. */
void ckpt_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);

/* --- the seal: a whole-file checksum trailer (ckpt_files.c) ---
 * After HDF5 closes a checkpoint, 24 bytes are appended (HDF5 ignores bytes past its end of
 * allocation): "LOOMSEAL", the little-endian u64 length of the HDF5 part before the trailer, the
 * u32 CRC32C of those bytes, the u32 trailer version. A reader checks it before HDF5 parses one
 * byte, because HDF5 1.10 itself crashes on some damaged files (bench/fuzz.sh found them). */
#define CKPT_SEAL_MAGIC "LOOMSEAL"
#define CKPT_SEAL_BYTES 24
#define CKPT_SEAL_VERSION 1

typedef enum ckpt_seal_state {
    CKPT_SEAL_OK,     /* the trailer matches the file */
    CKPT_SEAL_NONE,   /* a whole HDF5 file without a trailer (edited by HDF5, or not loom's) */
    CKPT_SEAL_STALE,  /* a trailer that does not match the bytes before it (damaged or edited) */
    CKPT_SEAL_BROKEN, /* missing, unreadable, not HDF5, truncated, or a newer trailer version */
} ckpt_seal_state;

/* Check path's seal by streaming the file through CRC32C. 0 when it matches; else -1 + one
 * loom_fail line naming the file ("checkpoint F: no seal (...)", "...: whole-file checksum
 * mismatch (damaged file)", "...: truncated (N of M bytes)", "F: not an HDF5 file (N bytes)").
 * *state (may be NULL) says which case it was. Never calls HDF5. */
int ckpt_seal_verify(const char *path, ckpt_seal_state *state);
/* Seal path's bytes as they are now, then fsync: replace = 1 overwrites the (stale) trailer at the
 * end of the file, 0 appends one. On failure the file is left as it was. Checks nothing else:
 * ckpt_seal (ckpt_info.c) verifies the tensors first. */
int ckpt_seal_write(const char *path, int replace);

/* A tensor's data as ckpt_save wrote it: its byte range in the file and the CRC32C of those bytes
 * (computed over the very buffer handed to HDF5, which stores fp32 as is: contiguous, no filter,
 * no conversion). */
typedef struct ckpt_extent {
    uint64_t off, len;
    uint32_t crc;
} ckpt_extent;
/* ckpt_seal_write(path, 0) without reading the tensors again: the whole-file CRC32C is the gaps
 * between the extents (HDF5's metadata, read back) combined with the extents' own CRCs. The seal
 * means the same (a CRC of every byte before it) and is checked the same way; extents that do not
 * tile the file (overlapping, past its end) make it read the whole file instead. ext is sorted. */
int ckpt_seal_write_known(const char *path, ckpt_extent *ext, int n);

/* ckpt_open without the seal check (ckpt_read.c): for `ckpt seal`, on a file the user vouches for. */
struct ckpt_reader *ckpt_open_unsealed(const char *file);

/* --- files and directories (ckpt_files.c) --- */

/* mkdir -p. */
int ckpt_fs_mkdirs(const char *dir);
/* fsync a directory by path (files are fsync'd by ckpt_seal_write). */
int ckpt_fs_fsync_dir(const char *dir);
/* Atomically point dir/latest at `name` (a file name inside dir): latest.tmp, fsync, rename,
 * fsync dir. */
int ckpt_latest_write(const char *dir, const char *name);
/* Read dir/latest into name (a bare file name). 0 ok, -1 + loom_fail. */
int ckpt_latest_read(const char *dir, char *name, size_t len);
/* Delete step_*.h5 files with a lower step than `current` beyond the newest `keep` (current counts
 * as one; higher steps are left alone) and leftover .step_*.h5.tmp files from crashed saves.
 * Returns the number of files it could not delete (0 normally); never fails the save. */
int ckpt_rotate(const char *dir, int keep, const char *current);

#endif
