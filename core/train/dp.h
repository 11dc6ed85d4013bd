/* dp.h: data parallelism over comm.h: gradients reduced in buckets as backward fills them (through
 * the model's region hooks) and ZeRO stages 1-3. Sharding is per region (FSDP-style): region r of
 * the flat array (embeddings, each layer, the head) is padded to a multiple of the world size and
 * rank k owns slice k of it, so every collective has equal counts and uneven sizes just work.
 *   stage 0: full params, full grads all-reduced in buckets, full optimizer state.
 *   stage 1: + optimizer state only for the own slices; params all-gathered after the step.
 *   stage 2: + gradients reduce-scattered region by region into the own slices (no full grads).
 *   stage 3: + parameters kept only as own slices, all-gathered per region just in time. */
#ifndef LOOM_DP_H
#define LOOM_DP_H

#include <stddef.h>

#include "backends/backend.h"
#include "core/model/model.h"
#include "core/train/optim.h"
#include "parallel/comm.h"

typedef struct dp dp;

/* Create for model m (created with full params iff stage < 3 and full grads iff stage < 2, as
 * dp_model_needs says) and install m->hooks. NULL + loom_fail. */
dp *dp_create(comm *c, backend *be, model *m, int zero_stage, size_t bucket_bytes);
void dp_destroy(dp *d);

/* Which full buffers the model must allocate itself at this stage. */
void dp_model_needs(int zero_stage, int *full_params, int *full_grads);

/* The optimizer's pieces (this rank's slices) and the device pointers at each piece's start. */
const optim_piece *dp_pieces(const dp *d, int *npieces, size_t *state_elems);
float *const *dp_param_ptrs(const dp *d);
float *const *dp_grad_ptrs(const dp *d);

/* Before the micro-batches of a step: zero the gradients. */
int dp_begin_step(dp *d);
/* Before each micro-batch's forward; last = it is the step's last (all-reduces start then). */
int dp_begin_micro(dp *d, int last);
/* After the last backward: finish every reduction (gradients are then summed over ranks). */
int dp_finish_grads(dp *d);
/* Sum of squares of the reduced gradients over all ranks (the global norm squared). */
double dp_grad_sumsq(dp *d);
/* After the optimizer step: make the full parameters current where they exist (stages 1, 2). */
int dp_finish_params(dp *d);

/* What dp_create (and optim_create on its pieces) would allocate on rank `rank` of `world` at
 * zero_stage with gradient buckets of bucket_bytes, for model m (laid out only: model_plan),
 * without a comm or a backend: bytes of the parameters and gradients the rank holds (full, or its
 * slices), the optimizer's two moments and dp's staging buffers (all-gather, reduce-scatter and
 * gather slots); the largest single reduction it starts (a bucket's all-reduce at stages 0-1, a
 * padded region's reduce-scatter at 2-3: what a transport's own temporaries scale with); and at
 * stage 3 the floats of the gathered regions a bf16 backend keeps a copy of. The same slicing and
 * bucketing code as dp_create. 0, or -1 + loom_fail (a bad stage). */
typedef struct dp_sizes {
    size_t params, grads, optimizer, staging, largest_reduce;
    size_t gathered_floats;
} dp_sizes;
int dp_plan_sizes(const model *m, int zero_stage, int world, int rank, size_t bucket_bytes, dp_sizes *out);

/* Bytes of parameters, gradients, optimizer moments and dp buffers this rank allocated. */
size_t dp_state_bytes(const dp *d);

/* Region r (model_tensor.region) of the parameters (state NULL) or of a state-layout device
 * array (an optimizer moment) into host, reg_len floats in logical order. Collective where the
 * array is sharded (every rank calls it for the same r in the same order); host may be NULL on
 * the ranks that only take part (all but a checkpoint's writer). */
int dp_gather_region(dp *d, const float *state, int r, float *host);
/* Parameters, or a state-layout device array (an optimizer moment), from host holding logical
 * elements [lo, hi) (every rank passes the same values; each keeps the slices it owns). */
int dp_load_params_range(dp *d, const float *host, size_t lo, size_t hi);
int dp_load_state_range(dp *d, float *state, const float *host, size_t lo, size_t hi);

#endif
