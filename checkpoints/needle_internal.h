/* needle_internal.h: what needle.c and needle_ckpt.c share behind needle.h's opaque needle_file:
 * the struct, and the loom checkpoint `loom import` makes of a base, read as that base's file.
 * Private to checkpoints/: not part of the needle.h contract. */
#ifndef LOOM_NEEDLE_INTERNAL_H
#define LOOM_NEEDLE_INTERNAL_H

#include "checkpoints/needle.h"

/* A tensor of a rung (needle_open_rung): the stored tensor `src` cut along `axis`. */
typedef struct needle_cut {
    st_tensor t;      /* the rung's name (owned), shape and numel; begin/end unused */
    int axis;         /* -1: the stored tensor whole; else the rows rows[0 .. nrows) of this axis */
    int nrows;
    const int *rows;  /* the file's sel or hrows */
    void *bytes;      /* the cut's bytes once needle_file_bytes asked (owned) */
} needle_cut;

typedef struct needle_ckpt needle_ckpt;

struct needle_file {
    st_file *st;      /* the mapped file; an imported checkpoint: its table without a mapping (map
                       * NULL: names, dtypes, shapes, in the original file's order) */
    needle_ckpt *ck;  /* non-NULL: the tensors come from this loom checkpoint (needle_ckpt.c) */
    void **own;       /* ck: stored tensor j's bytes in its dtype once asked (owned, one per st->t) */
    float *whole;     /* needle_file_read_range's copy of one whole tensor (a cut or ck) */
    int whole_i;      /* its kept index, -1 none */
    needle_config cfg;
    int n;            /* kept tensors */
    int *idx;         /* their st indices, in file order */
    int nmeta;
    char **mkey, **mval;
    needle_cut *cut;  /* a rung: one per kept tensor; NULL: the file as stored */
    int sel[NEEDLE_MAX_LIST], hrows[NEEDLE_MAX_LIST + 1]; /* kept layers; the heads' kept rows */
};

/* 1 if `path` is a loom checkpoint (a folder, or a file that starts with HDF5's signature), which
 * needle_open reads through needle_ckpt_open; 0 for anything else (a safetensors file). */
int needle_ckpt_is(const char *path);
/* Open the checkpoint `path` that needle_ckpt_save wrote: f->st (the table), f->nmeta / mkey / mval
 * (the file's metadata, its order) and f->ck; needle_open then checks it as it checks a file.
 * -1 + loom_fail naming `path` (not a checkpoint, not a Needle base's, a damaged record). */
int needle_ckpt_open(needle_file *f, const char *path);
void needle_ckpt_close(needle_ckpt *c);
/* The source file's needle_file_digest, recorded at import. */
uint64_t needle_ckpt_digest(const needle_ckpt *c);
/* Stored tensor j (of f->st->t) whole as fp32 into out[0 .. numel). -1 + loom_fail. */
int needle_ckpt_read(needle_ckpt *c, int j, float *out, size_t numel);
/* x[0 .. n) as dtype dt's bytes into out, each value exactly (an import's values came from dt, so
 * this is the inverse of st's widening, NaN payloads included); -1 + loom_fail naming `path` and
 * tensor `name` for a value dt cannot hold exactly (not what an import wrote). */
int needle_ckpt_narrow(const float *x, size_t n, st_dtype dt, void *out, const char *path, const char *name);

#endif
