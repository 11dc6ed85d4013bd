/* optim.h: AdamW with decoupled weight decay, linear warmup + cosine decay, global-norm clipping.
 * The optimizer owns the moments (m, v) of the pieces of the model's flat parameter array that
 * this rank updates: whole regions without ZeRO, this rank's slice of each region under ZeRO 1-3.
 * The moments of piece i live at state_offset[i] of m and v ("state layout", defined by dp). */
#ifndef LOOM_OPTIM_H
#define LOOM_OPTIM_H

#include <stddef.h>

#include "backends/backend.h"
#include "core/config/config.h"
#include "core/model/model.h"

/* A range [lo, hi) of the flat parameter array whose moments start at state_offset. */
typedef struct optim_piece {
    size_t lo, hi, state_offset;
} optim_piece;

typedef struct optim {
    backend *be;
    const model *mdl;   /* for the tensor table: which elements decay, which are frozen */
    const optim_piece *pieces; /* borrowed from dp */
    int npieces;
    size_t state_elems;
    float *m, *v;       /* device, state_elems each */
    int t;              /* AdamW steps taken (bias correction) */
} optim;

optim *optim_create(backend *be, const model *mdl, const optim_piece *pieces, int npieces,
                    size_t state_elems);
void optim_destroy(optim *o);
/* Device bytes optim_create allocates for state_elems moments (m and v). */
size_t optim_state_bytes(size_t state_elems);

/* The learning rate of optimizer step `step` (0-based) of tc->steps: linear warmup from 0 and a
 * cosine to min_lr at the last step; never above tc->lr, for any warmup (see optim.c). */
float optim_lr(const train_config *tc, int step);

/* One AdamW step over every piece: params_at[i] / grads_at[i] point at element lo of piece i.
 * grad_scale multiplies every gradient first (global-norm clipping). */
void optim_step(optim *o, const train_config *tc, float *const *params_at, float *const *grads_at,
                float lr, float grad_scale);

/* The clip factor for a global gradient norm: min(1, clip / norm) (1 when clip is off: grad_clip
 * <= 0). A non-finite norm gives NaN: the caller skips that step instead (train.c does, counted
 * against train.max_bad_steps). */
float optim_clip_scale(const train_config *tc, double grad_norm);

#endif
