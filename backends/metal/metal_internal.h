/* metal_internal.h: state shared by metal_launch.c and the op files metal_ops*.c (the op layer
 * of the Metal backend). Only they include it; devices see metal_ops.h alone.
 * Scratch and tables only grow, so the step loop allocates nothing after its first pass. */
#ifndef LOOM_METAL_INTERNAL_H
#define LOOM_METAL_INTERNAL_H

#include <stddef.h>

#include "backends/backend_impl.h"
#include "backends/metal/metal_kernels.h"
#include "backends/metal/metal_ops.h"
#include "backends/metal/metal_params.h"

/* Partial reductions per row (lanes of loom_*_partial kernels). */
#define METAL_LANES 32u
/* Elementwise ops on more items than this run as several launches (thread ids are 32-bit). */
#define METAL_CHUNK ((size_t)1 << 30)

typedef struct metal_ctx {
    backend_ops ops; /* this backend's table: the shared ops under this backend's name */
    const metal_device_ops *dev;
    void *ds;             /* the device's own state */
    float *scratch;       /* device scratch for multi-pass ops, scratch_cap floats */
    size_t scratch_cap;
    float *rope_tab;      /* (rope_tcap, rope_d/2) pairs (cos, sin), built in double */
    size_t rope_tcap;
    int rope_d;
    float rope_theta;
    float rope_key[512];  /* rope_freqs: the D/2 frequencies the table holds (rope_keyed) */
    int rope_keyed;
    float *dummy;         /* bound in place of an absent optional tensor */
} metal_ctx;

static inline metal_ctx *metal_c(backend *be) { return (metal_ctx *)be->impl; }

/* Launch kernel k over grid threads (0 = nothing; > 2^32-1 is refused with a warning, as
 * thread ids are 32-bit). NULL buffers are replaced by the dummy buffer. */
void metal_launch(metal_ctx *c, int k, size_t grid, void *const *bufs, int nbufs, const void *params,
                  size_t params_bytes);
/* Device scratch of at least n floats (contents undefined); NULL + warning on OOM. */
float *metal_scratch(metal_ctx *c, size_t n);
/* Row chunks for column sums of (N, C): about 64k threads, at least 32 rows per chunk. */
void metal_colsum_plan(int N, int C, unsigned *nchunks, unsigned *chunk_rows);

/* metal_ops_nn.c: fills the model ops of the table. */
void metal_ops_nn_fill(backend_ops *ops);
/* metal_ops_needle.c: fills the ops of Needle's layers. */
void metal_ops_needle_fill(backend_ops *ops);
/* metal_ops_needle_mix.c: fills Needle's mixing layers (the whole BACKEND_OP_NEEDLE_MIX group). */
void metal_ops_needle_mix_fill(backend_ops *ops);

#endif
