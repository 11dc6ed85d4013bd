/* ckpt.h: loom checkpoints: logical, unsharded, hardware-neutral fp32 tensors plus the exact
 * training state, in one HDF5 file per checkpoint, sealed by a whole-file CRC32C trailer
 * (format: docs/checkpoint-format.md).
 * The caller hands full logical tensors in host memory (gathered from shards by the caller);
 * this layer never sees ranks, devices or padding. Saving is crash-safe: temp name, fsync,
 * rename, then the `latest` pointer moves; older checkpoints beyond `keep` are removed. */
#ifndef LOOM_CKPT_H
#define LOOM_CKPT_H

#include <stddef.h>
#include <stdint.h>

/* 2: the AdamW step in `adam_step` (v1 kept it in rng_counter), `rng_counter` is the data-order
 * RNG's position, a `tensors` manifest, `base_digest`. Version 1 files still load (read as
 * described in docs/checkpoint-format.md); a save always writes the current version. */
#define CKPT_FORMAT_VERSION 2
#define CKPT_FORMAT_OLDEST 1
#define CKPT_MAX_DIMS 4
/* loom counts steps in an int: a step (or AdamW step) above this is refused on load and save. */
#define CKPT_MAX_STEP 2147483647LL

/* One named tensor inside a group's flat array. */
typedef struct ckpt_tensor {
    const char *name;              /* "h.3.attn.q.weight" */
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    size_t offset;                 /* in elements, into the group's flat data */
} ckpt_tensor;

/* A set of tensors stored under one HDF5 group path: "model", "optimizer/m", "optimizer/v",
 * "lora", "optimizer/lora_m", ... The data is host memory holding the whole flat array, or, when
 * writing, a fetch callback that hands over one tensor at a time (so the caller never holds the
 * whole state in host memory). */
typedef struct ckpt_group {
    const char *path;
    const ckpt_tensor *tensors;
    int ntensors;
    float *data;                   /* read: filled by ckpt_read_group; write: read from */
    /* write only, used when data is NULL: tensor k's contents (shape order, its offset ignored),
     * asked once per tensor, in order k = 0, 1, ... of each group in turn; the pointer must stay
     * valid until the next call. NULL aborts the save (loom_error() says why). */
    const float *(*fetch)(void *ctx, int k);
    void *fetch_ctx;
} ckpt_group;

/* The exact training state (attributes of the root group). */
typedef struct ckpt_state {
    int64_t step;                  /* optimizer steps completed */
    int64_t tokens_seen;
    int64_t sample_cursor;         /* global sample index of the next batch */
    int64_t epoch;
    uint64_t seed;
    uint64_t rng_counter;          /* position of the counter-based data-order RNG (loom: the
                                    * global sample index, = sample_cursor) */
    int64_t adam_step;             /* AdamW steps taken (bias correction); <= step (skipped steps) */
    uint64_t base_digest;          /* LoRA adapters: ckpt_group_digest of the base's /model they were
                                    * trained on; 0 = not bound to a base */
    uint64_t tokenizer_hash;       /* tokenizer_hash_of(model.tokenizer) when saved: the tokenizer's
                                    * content, so a moved file still matches; 0 = not recorded
                                    * (an older file: the attribute is optional) */
    int format_version;            /* read: the file's version (CKPT_FORMAT_OLDEST..); write: ignored */
    double lr;                     /* the LR used at the last step (informational) */
    const char *model_config_json; /* write: caller's string; read: malloc'd, caller frees */
    const char *job_config_json;   /* idem */
    /* informational only */
    int world_size;
    int zero_stage;
    const char *backend;           /* write: caller's string; read: malloc'd, caller frees */
    const char *tuning;            /* each rank's backend_tuning_save line, '\n'-joined, rank
                                    * order: what a resume on the same machines adopts to multiply
                                    * bitwise as the saved run did; "" or NULL = none (optional:
                                    * read as "" when absent) */
    const char *source;            /* what a converter recorded of the file the checkpoint was
                                    * imported from (JSON; `loom import` of a Needle base: its
                                    * metadata, dtypes and digest, checkpoints/needle_ckpt.c); ""
                                    * or NULL = none, and then not written (optional: read as "") */
} ckpt_state;

/* Save into directory `dir` as `dir/step_<step>.h5` and point `dir/latest` at it; keep the newest
 * `keep` checkpoints (0 = keep all). 0 on success, -1 + loom_fail (the previous checkpoint and
 * `latest` untouched) on failure. */
int ckpt_save(const char *dir, const ckpt_state *state, const ckpt_group *groups, int ngroups, int keep);

/* ckpt_save of the one group g whose tensors come in pieces (g->data and g->fetch NULL), for a
 * writer that should hold no whole tensor: pieces(ctx, k, e0, n, dst) puts elements [e0, e0 + n)
 * of tensor k into dst, asked in order (whole rows of about 1 MB); -1 + loom_fail aborts. */
typedef int (*ckpt_pieces_fn)(void *ctx, int k, size_t e0, size_t n, float *dst);
int ckpt_save_pieces(const char *dir, const ckpt_state *state, const ckpt_group *g, ckpt_pieces_fn pieces,
                     void *ctx, int keep);

/* Resolve a directory (its `latest`) or a file to the checkpoint file path. */
int ckpt_resolve(const char *dir_or_file, char *path_out, size_t path_len);

typedef struct ckpt_reader ckpt_reader;

/* Open and validate: the whole-file seal first (a CRC32C over the file, checked before HDF5 reads
 * anything), then format version and completeness. NULL + loom_fail naming the file. */
ckpt_reader *ckpt_open(const char *file);
/* ckpt_open for a look before the load (what kind of checkpoint a base is): the next sealed open
 * of the same unchanged file in this process, and only that one, does not read it all again. */
ckpt_reader *ckpt_open_peek(const char *file);
/* Fill *state (strings malloc'd) and range-check it (ckpt_state_check): -1 + one loom_fail line
 * naming the file and the attribute. A version 1 file's adam_step comes from its rng_counter. */
int ckpt_read_state(ckpt_reader *r, ckpt_state *state);
/* The ranges every state must be in, whatever wrote it: step, adam_step in [0, CKPT_MAX_STEP],
 * adam_step <= step, tokens_seen, sample_cursor, epoch >= 0, lr finite and >= 0, world_size >= 1,
 * zero_stage 0..3. (How step, sample_cursor, tokens_seen and rng_counter relate is the trainer's
 * rule: core/train/session_ckpt.c checks it against the job config in the file.) -1 + loom_fail
 * "WHAT: attribute NAME = V ..." on the first one out of range. */
int ckpt_state_check(const ckpt_state *state, const char *what);
/* Every shape of g's tensors as stored, against g's table, without reading data: -1 + loom_fail
 * naming the first missing or mis-shaped tensor. */
int ckpt_check_shapes(ckpt_reader *r, const ckpt_group *g);
/* Identity of the tensors of g as stored: a 64-bit FNV-1a digest of each tensor's name, shape and
 * stored crc32, in table order (never 0). Reads attributes only (ckpt_read_group verifies the
 * crc32s against the data). -1 + loom_fail naming a missing tensor. */
int ckpt_group_digest(ckpt_reader *r, const ckpt_group *g, uint64_t *digest);
/* 1 if the group exists in the file. */
int ckpt_has_group(ckpt_reader *r, const char *path);
/* Read every tensor of g into g->data at its offset, checking shape and checksum;
 * -1 + loom_fail naming the tensor on a missing dataset, shape mismatch or bad checksum. */
int ckpt_read_group(ckpt_reader *r, const ckpt_group *g);
/* Tensor t of `group` (t's offset ignored) in pieces through buf (ckpt_piece_size(t) floats):
 * put(ctx, x, n) is handed each piece in order; its checksum is checked after the last one, so a
 * caller must treat what it was given as void on -1 (+ loom_fail naming the tensor, as
 * ckpt_read_group's; put's own -1 aborts with its loom_fail). */
int ckpt_read_pieces(ckpt_reader *r, const char *group, const ckpt_tensor *t, float *buf,
                     int (*put)(void *ctx, const float *x, size_t n), void *ctx);
/* Floats ckpt_read_pieces's buf must hold for t: about 1 MB, or one row if that is longer. */
size_t ckpt_piece_size(const ckpt_tensor *t);
void ckpt_close(ckpt_reader *r);
/* Free the strings ckpt_read_state allocated. */
void ckpt_state_free(ckpt_state *state);

/* One tensor as ckpt_inspect found it; the pointers are valid during the call only. */
typedef struct ckpt_tensor_report {
    const char *name;      /* its dataset path in the file: "model/h.0.attn.q.weight" */
    int ndim;              /* -1: its dataspace could not be read (0 when the dataset did not open) */
    const int64_t *shape;  /* ndim values as stored */
    int64_t numel;         /* 0 when ndim is -1 */
    const char *status;    /* "ok", "BAD" (checksum mismatch), "no crc32", "unreadable", or "missing"
                            * (named by the `tensors` manifest, not in the file: ndim -1, no shape) */
} ckpt_tensor_report;

/* What ckpt_inspect hands its caller, in this order; any member (or fns itself) may be NULL. */
typedef struct ckpt_inspect_fns {
    /* First, once: the file FILE_OR_DIR resolved to, its format tag ("loom-checkpoint") and the
     * state as ckpt_read_state reads it. */
    void (*state)(void *ctx, const char *file, const char *format, const ckpt_state *s);
    /* Once the tensors are listed, before the first is checked: the datasets found in the file
     * (creation order, else name order) and the manifest's names not among them. */
    void (*listed)(void *ctx, const char *const *found, size_t nfound, const char *const *missing,
                   size_t nmissing);
    /* Each tensor once checked: the found ones in that order, then the missing ones. */
    void (*tensor)(void *ctx, const ckpt_tensor_report *t);
} ckpt_inspect_fns;

/* `loom ckpt info FILE_OR_DIR`: open the checkpoint as a load does (seal, format, state), list
 * every dataset, read each in bounded pieces and verify its checksum, reporting it all through fns
 * (the CLI formats it). Never modifies the file; reports (does not stop at) every bad tensor.
 * 0 if the file is sound: every tensor of the file's `tensors` manifest (version 2) present, and
 * every tensor found readable with a matching checksum. Else -1 + loom_fail naming the file: it
 * did not open or its state did not read (nothing reported), its tensors could not be listed
 * (only the state reported), or a tensor is not "ok" (all reported; the first one named). */
int ckpt_inspect(const char *file, const ckpt_inspect_fns *fns, void *ctx);

/* `loom ckpt seal FILE_OR_DIR`: accept a checkpoint whose seal is missing or stale (edited with
 * h5py, say): open it with HDF5 (the user vouches for it), check the format and every tensor's
 * crc32, and only then write a fresh seal (fsync'd; on any failure the file is left as it was).
 * 0 sealed now, 1 already sealed (unchanged), -1 + loom_fail naming the file (a truncated or
 * non-HDF5 file, a tensor failing its checksum). */
int ckpt_seal(const char *file);

/* One writer per checkpoint folder: an exclusive flock on dir/writer.lock (created, with dir),
 * holding "pid <pid> host <host>" of the holder. The lock lives until ckpt_unlock or the process
 * ends (the kernel drops it, so a crash never leaves a stale lock). -1 + loom_fail naming the
 * folder and the other job's pid and host when another process holds it. *fd_out: pass it to
 * ckpt_unlock. */
/* The checkpoints in folder dir (its step_<digits>.h5 files; a missing folder holds none): how
 * many, -1 + loom_fail if dir cannot be read; *newest = the highest step (-1 when none). */
int ckpt_count(const char *dir, long long *newest);
/* Remove every checkpoint of folder dir (a new run replaces the old one there): `latest` first (so
 * it never names a removed file), then step_<digits>.h5 and leftover .step_<digits>.h5.tmp files,
 * nothing else. A missing folder is empty. 0, or -1 + loom_fail naming the file left. */
int ckpt_clear(const char *dir);

#define CKPT_LOCK_NAME "writer.lock"
int ckpt_lock(const char *dir, int *fd_out);
void ckpt_unlock(int fd);
/* Bytes per second of writing `bytes` (write + fsync) into the checkpoint folder whose lock
 * ckpt_lock gave lock_fd: the write rate a save there can expect before any save has been timed.
 * The bytes go into the lock file past its note and are cut off again. 0 when it cannot tell. */
double ckpt_write_rate(int lock_fd, size_t bytes);

#endif
