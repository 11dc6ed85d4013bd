/* dp.c: data parallelism and ZeRO over comm.h (see dp.h for the stages and the sharding).
 * Overlap: reductions are started nonblocking from the model's region hooks as soon as backward
 * has finished a bucket or region, and waited only when their buffer is needed again or at the
 * end of backward. Never touches MPI or a device directly. */
#include "core/train/dp.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { SLOTS = 4 }; /* staging slots: region 0, head region, two rotating layer slots */

struct dp {
    comm *c;
    backend *be;
    model *m;
    int stage, W, rank, R;
    size_t *reg_lo, *reg_len, *slice; /* per region: start, length, slice length s_r */
    optim_piece *pieces;
    float **param_at, **grad_at;
    size_t state_elems, max_padded, bytes;
    float *stage_buf;                 /* W * s_r staging for all-gathers (stage >= 1) */
    float *shard_grads, *shard_params;/* state layout (stage >= 2, stage 3) */
    float *gstage[SLOTS], *grecv[SLOTS], *pgather[SLOTS];
    comm_request *greq[SLOTS];
    int greg[SLOTS];
    int nbuckets, *bucket_of, *bucket_pending, *bucket_first, *bucket_last;
    comm_request **breq;
    int last_micro;
    backend_event *ready; /* recorded after the kernels that fill a buffer, before its collective */
};

static float *dp_alloc(dp *d, size_t floats)
{
    d->bytes += floats * sizeof(float);
    return backend_alloc(d->be, (floats ? floats : 1) * sizeof(float));
}

/* A collective on device data starts only after the kernels queued so far that produced it: an
 * event on the compute stream that the comm stream waits for (no host wait). */
static void dp_order(dp *d) { backend_event_record(d->be, d->ready); }

/* The self transport's out-of-place collectives copy through the backend. */
static void dp_device_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    backend *be = ctx;
    backend_copy_d2d(be, dst, src, bytes);
}

static int dp_slot(const dp *d, int r) { return r == 0 ? 0 : r == d->R - 1 ? 1 : 2 + r % 2; }

/* Padded size (W * s_r) of the largest region a staging slot ever holds. */
static size_t dp_slot_size(const dp *d, int s)
{
    size_t most = 0;
    for (int r = 0; r < d->R; r++)
        if (dp_slot(d, r) == s && d->slice[r] * (size_t)d->W > most) most = d->slice[r] * (size_t)d->W;
    return most;
}

void dp_model_needs(int zero_stage, int *full_params, int *full_grads)
{
    *full_params = zero_stage < 3;
    *full_grads = zero_stage < 2;
}

/* Per-region slices and the optimizer pieces of this rank. */
static int dp_plan(dp *d)
{
    model *m = d->m;
    d->R = m->nregions;
    d->reg_lo = calloc((size_t)d->R, sizeof(size_t));
    d->reg_len = calloc((size_t)d->R, sizeof(size_t));
    d->slice = calloc((size_t)d->R, sizeof(size_t));
    d->pieces = calloc((size_t)d->R, sizeof(optim_piece));
    d->param_at = calloc((size_t)d->R, sizeof(float *));
    d->grad_at = calloc((size_t)d->R, sizeof(float *));
    if (!d->reg_lo || !d->reg_len || !d->slice || !d->pieces || !d->param_at || !d->grad_at)
        return loom_fail("dp: out of host memory");
    size_t off = 0;
    for (int r = 0; r < d->R; r++) {
        size_t lo = m->region_offset[r], len = m->region_offset[r + 1] - lo;
        d->reg_lo[r] = lo;
        d->reg_len[r] = len;
        optim_piece *p = &d->pieces[r];
        if (d->stage == 0) {
            d->slice[r] = len;
            p->lo = lo;
            p->hi = lo + len;
            p->state_offset = lo;
        } else {
            size_t s = (len + (size_t)d->W - 1) / (size_t)d->W, a = (size_t)d->rank * s;
            d->slice[r] = s;
            p->lo = lo + (a < len ? a : len);
            p->hi = lo + (a + s < len ? a + s : len);
            p->state_offset = off;
        }
        off += d->slice[r];
        if (d->slice[r] * (size_t)d->W > d->max_padded) d->max_padded = d->slice[r] * (size_t)d->W;
    }
    d->state_elems = off;
    return 0;
}

/* Stage 0/1 buckets: consecutive regions from the head down, each at least bucket_bytes. */
static int dp_plan_buckets(dp *d, size_t bucket_bytes)
{
    d->bucket_of = calloc((size_t)d->R, sizeof(int));
    d->bucket_pending = calloc((size_t)d->R, sizeof(int));
    d->bucket_first = calloc((size_t)d->R, sizeof(int));
    d->bucket_last = calloc((size_t)d->R, sizeof(int));
    d->breq = calloc((size_t)d->R, sizeof(comm_request *));
    if (!d->bucket_of || !d->bucket_pending || !d->bucket_first || !d->bucket_last || !d->breq)
        return loom_fail("dp: out of host memory");
    size_t acc = 0;
    int open = 0; /* a bucket is being filled (regions may be empty: LoRA's embedding and head) */
    d->nbuckets = 0;
    for (int r = d->R - 1; r >= 0; r--) {
        if (!open) d->bucket_last[d->nbuckets] = r; /* buckets run from high to low regions */
        open = 1;
        d->bucket_of[r] = d->nbuckets;
        d->bucket_first[d->nbuckets] = r;
        acc += d->reg_len[r] * sizeof(float);
        if (acc >= bucket_bytes || r == 0) {
            d->nbuckets++;
            acc = 0;
            open = 0;
        }
    }
    return 0;
}

static int dp_region_begin(void *ctx, int r, int backward);
static int dp_region_end(void *ctx, int r, int backward);

/* The floats of each buffer dp allocates at its stage (0: none), from the slices dp_plan cut:
 * dp_alloc_buffers allocates these and dp_plan_sizes reports them. */
typedef struct dp_bufs {
    size_t stage_buf, shard_grads, shard_params, gstage[SLOTS], grecv[SLOTS], pgather[SLOTS];
} dp_bufs;

static void dp_buffer_floats(const dp *d, dp_bufs *b)
{
    memset(b, 0, sizeof *b);
    if (d->stage >= 1) b->stage_buf = d->max_padded;
    if (d->stage >= 2) b->shard_grads = d->state_elems;
    if (d->stage >= 3) b->shard_params = d->state_elems;
    for (int s = 0; s < SLOTS; s++) {
        if (d->stage >= 2) b->gstage[s] = dp_slot_size(d, s), b->grecv[s] = dp_slot_size(d, s) / (size_t)d->W;
        if (d->stage >= 3) b->pgather[s] = dp_slot_size(d, s);
    }
}

static int dp_alloc_buffers(dp *d)
{
    model *m = d->m;
    dp_bufs b;
    dp_buffer_floats(d, &b);
    for (int r = 0; r < d->R; r++) {
        d->param_at[r] = m->params ? m->params + d->pieces[r].lo : NULL;
        d->grad_at[r] = m->grads ? m->grads + d->pieces[r].lo : NULL;
    }
    if (d->stage >= 1 && !(d->stage_buf = dp_alloc(d, b.stage_buf))) return -1;
    if (d->stage >= 2) {
        if (!(d->shard_grads = dp_alloc(d, b.shard_grads))) return -1;
        for (int s = 0; s < SLOTS; s++) {
            if (!(d->gstage[s] = dp_alloc(d, b.gstage[s]))) return -1;
            if (!(d->grecv[s] = dp_alloc(d, b.grecv[s]))) return -1;
        }
        for (int r = 0; r < d->R; r++) d->grad_at[r] = d->shard_grads + d->pieces[r].state_offset;
    }
    if (d->stage >= 3) {
        if (!(d->shard_params = dp_alloc(d, b.shard_params))) return -1;
        for (int s = 0; s < SLOTS; s++)
            if (!(d->pgather[s] = dp_alloc(d, b.pgather[s]))) return -1;
        for (int r = 0; r < d->R; r++) d->param_at[r] = d->shard_params + d->pieces[r].state_offset;
    }
    return 0;
}

/* The host arrays dp_plan fills. */
static void dp_free_plan(dp *d)
{
    free(d->reg_lo); free(d->reg_len); free(d->slice); free(d->pieces);
    free(d->param_at); free(d->grad_at);
}

int dp_plan_sizes(const model *m, int zero_stage, int world, int rank, size_t bucket_bytes, dp_sizes *out)
{
    memset(out, 0, sizeof *out);
    if (zero_stage < 0 || zero_stage > 3) return loom_fail("parallel.zero_stage must be 0..3, got %d", zero_stage);
    dp d = {0};
    d.m = (model *)m; /* dp_plan only reads it */
    d.stage = zero_stage;
    d.W = world;
    d.rank = rank;
    int rc = dp_plan(&d) || dp_plan_buckets(&d, bucket_bytes ? bucket_bytes : 1) ? -1 : 0;
    if (rc == 0) {
        dp_bufs b;
        dp_buffer_floats(&d, &b);
        int fp, fg;
        dp_model_needs(zero_stage, &fp, &fg);
        size_t f = sizeof(float), slots = 0, gather = 0;
        for (int s = 0; s < SLOTS; s++) slots += b.gstage[s] + b.grecv[s], gather += b.pgather[s];
        out->params = (fp ? m->nparams : b.shard_params) * f;
        out->grads = (fg ? m->nparams : b.shard_grads) * f;
        out->optimizer = optim_state_bytes(d.state_elems);
        out->staging = (b.stage_buf + slots + gather) * f;
        for (int b = 0; b < d.nbuckets && zero_stage < 2; b++) { /* an all-reduce's count, stages 0, 1 */
            size_t lo = d.reg_lo[d.bucket_first[b]], hi = d.reg_lo[d.bucket_last[b]] + d.reg_len[d.bucket_last[b]];
            if ((hi - lo) * f > out->largest_reduce) out->largest_reduce = (hi - lo) * f;
        }
        if (zero_stage >= 2) out->largest_reduce = d.max_padded * f; /* a reduce-scatter's */
        /* stage 3 casts each gathered region into the bf16 copy of its slot's buffer, which grows
         * to the slot's largest region (dp_region_begin) */
        for (int s = 0; s < SLOTS && zero_stage >= 3; s++) {
            size_t most = 0;
            for (int r = 0; r < d.R; r++)
                if (dp_slot(&d, r) == s && d.reg_len[r] > most) most = d.reg_len[r];
            out->gathered_floats += most;
        }
    }
    dp_free_plan(&d);
    free(d.bucket_of); free(d.bucket_pending); free(d.bucket_first); free(d.bucket_last);
    free(d.breq);
    return rc;
}

dp *dp_create(comm *c, backend *be, model *m, int zero_stage, size_t bucket_bytes)
{
    dp *d = calloc(1, sizeof *d);
    if (!d) { loom_fail("dp: out of host memory"); return NULL; }
    d->c = c;
    d->be = be;
    d->m = m;
    d->stage = zero_stage;
    d->W = c->size;
    d->rank = c->rank;
    for (int s = 0; s < SLOTS; s++) d->greg[s] = -1; /* no reduce-scatter in flight */
    if (zero_stage < 0 || zero_stage > 3) {
        loom_fail("parallel.zero_stage must be 0..3, got %d", zero_stage);
        goto fail;
    }
    int fp, fg;
    dp_model_needs(zero_stage, &fp, &fg);
    if ((fp && !m->params) || (!fp && m->params) || (m->grads && !fg)) {
        loom_fail("dp: model buffers do not match ZeRO stage %d", zero_stage);
        goto fail;
    }
    if (dp_plan(d) || dp_plan_buckets(d, bucket_bytes ? bucket_bytes : 1) || dp_alloc_buffers(d))
        goto fail;
    comm_device dev = {backend_native_stream(be, 1), dp_device_copy, be};
    if (!(d->ready = backend_event_create(be)) || comm_attach_device(c, &dev)) goto fail;
    d->bytes += (m->params ? m->nparams : 0) * sizeof(float) + (m->grads ? m->nparams : 0) * sizeof(float);
    m->hooks.ctx = d;
    m->hooks.region_begin = dp_region_begin;
    m->hooks.region_end = dp_region_end;
    return d;
fail:
    dp_destroy(d);
    return NULL;
}

void dp_destroy(dp *d)
{
    if (!d) return;
    backend *be = d->be;
    float *bufs[] = {d->stage_buf, d->shard_grads, d->shard_params};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) backend_free(be, bufs[i]);
    for (int s = 0; s < SLOTS; s++) {
        if (d->gstage[s]) backend_free(be, d->gstage[s]);
        if (d->grecv[s]) backend_free(be, d->grecv[s]);
        if (d->pgather[s]) backend_free(be, d->pgather[s]);
    }
    if (d->ready) backend_event_destroy(be, d->ready);
    if (d->m && d->m->hooks.ctx == d) memset(&d->m->hooks, 0, sizeof d->m->hooks);
    dp_free_plan(d);
    free(d->bucket_of); free(d->bucket_pending); free(d->bucket_first); free(d->bucket_last);
    free(d->breq);
    free(d);
}

const optim_piece *dp_pieces(const dp *d, int *npieces, size_t *state_elems)
{
    *npieces = d->R;
    *state_elems = d->state_elems;
    return d->pieces;
}
float *const *dp_param_ptrs(const dp *d) { return d->param_at; }
float *const *dp_grad_ptrs(const dp *d) { return d->grad_at; }
size_t dp_state_bytes(const dp *d) { return d->bytes + 2 * d->state_elems * sizeof(float); }

/* All-gather region r into the padded buffer `buf` from each rank's slice (own slice read from
 * `own`, valid length hi - lo). Afterwards buf[0..len_r) is the full region. */
static int dp_allgather_region(dp *d, int r, const float *own, float *buf)
{
    backend *be = d->be;
    size_t s = d->slice[r], valid = d->pieces[r].hi - d->pieces[r].lo;
    float *mine = buf + (size_t)d->rank * s;
    if (valid) backend_copy_d2d(be, mine, own, valid * sizeof(float));
    if (valid < s) backend_fill(be, mine + valid, 0.0f, s - valid);
    dp_order(d);
    return comm_allgather(d->c, buf, mine, s, NULL);
}

/* Finish the reduce-scatter in flight on staging slot s and add it to the own gradient slice. */
static int dp_drain_slot(dp *d, int s)
{
    if (d->greg[s] < 0) return 0;
    int r = d->greg[s];
    if (comm_wait(d->c, d->greq[s])) return -1;
    backend_axpy(d->be, d->shard_grads + d->pieces[r].state_offset, 1.0f, d->grecv[s], d->slice[r]);
    d->greg[s] = -1;
    return 0;
}

/* Give region r's gradients a zeroed staging slot (stage >= 2). */
static int dp_stage_grads(dp *d, int r)
{
    int s = dp_slot(d, r);
    if (dp_drain_slot(d, s)) return -1;
    backend_fill(d->be, d->gstage[s], 0.0f, d->slice[r] * (size_t)d->W);
    model_bind_region(d->m, r, NULL, d->gstage[s]);
    return 0;
}

/* MPI advances nonblocking collectives only inside MPI calls: one test of every reduction in
 * flight per region of backward keeps them moving while the next layers compute. */
static int dp_progress(dp *d)
{
    for (int b = 0; b < d->nbuckets; b++)
        if (d->breq[b] && comm_test(d->c, d->breq[b]) < 0) return -1;
    for (int s = 0; s < SLOTS; s++)
        if (d->greg[s] >= 0 && comm_test(d->c, d->greq[s]) < 0) return -1;
    return 0;
}

static int dp_region_begin(void *ctx, int r, int backward)
{
    dp *d = ctx;
    if (backward && d->W > 1 && dp_progress(d)) return -1;
    if (d->stage >= 3) { /* parameters just in time (the head and a tied embedding stay bound) */
        int kept = backward && (r == d->R - 1 || (r == 0 && d->m->cfg.tied_embeddings));
        if (!kept) {
            float *buf = d->pgather[dp_slot(d, r)];
            if (dp_allgather_region(d, r, d->shard_params + d->pieces[r].state_offset, buf)) return -1;
            model_bind_region(d->m, r, buf, NULL);
            /* bf16: the region's copy is cast once per gather (the buffer changes only here) */
            backend_weights_bf16(d->be, buf, d->reg_len[r]); /* a no-op without bf16 copies */
        }
    }
    if (backward && d->stage >= 2 && d->W > 1 && r != 0 && r != d->R - 1) return dp_stage_grads(d, r);
    return 0;
}

static int dp_region_end(void *ctx, int r, int backward)
{
    dp *d = ctx;
    if (!backward || d->W == 1) return 0;
    if (d->stage >= 2) { /* every micro-batch: reduce-scatter the region into the own slices */
        int s = dp_slot(d, r);
        d->greg[s] = r;
        dp_order(d);
        return comm_reduce_scatter(d->c, d->grecv[s], d->gstage[s], d->slice[r], COMM_SUM, &d->greq[s]);
    }
    if (!d->last_micro) return 0;
    int b = d->bucket_of[r];
    if (--d->bucket_pending[b] > 0) return 0;
    size_t lo = d->reg_lo[d->bucket_first[b]];
    size_t hi = d->reg_lo[d->bucket_last[b]] + d->reg_len[d->bucket_last[b]];
    dp_order(d); /* the bucket's last region of backward is queued: reduce from here */
    return comm_allreduce(d->c, d->m->grads + lo, hi - lo, COMM_SUM, &d->breq[b]);
}

int dp_begin_step(dp *d)
{
    backend *be = d->be;
    if (d->m->grads) backend_fill(be, d->m->grads, 0.0f, d->m->nparams);
    if (d->shard_grads) backend_fill(be, d->shard_grads, 0.0f, d->state_elems);
    return 0;
}

int dp_begin_micro(dp *d, int last)
{
    d->last_micro = last;
    for (int b = 0; b < d->nbuckets; b++) {
        d->bucket_pending[b] = d->bucket_last[b] - d->bucket_first[b] + 1;
        d->breq[b] = NULL;
    }
    /* the head (and a tied embedding) gets gradients from the forward on (the head's backward runs
     * in the training forward, model.h), the embedding at the end of backward: both staged here */
    if (d->stage >= 2) {
        if (d->W == 1) {
            for (int r = 0; r < d->R; r++) model_bind_region(d->m, r, NULL, d->grad_at[r]);
            return 0;
        }
        if (dp_stage_grads(d, 0) || dp_stage_grads(d, d->R - 1)) return -1;
    }
    return 0;
}

int dp_finish_grads(dp *d)
{
    if (d->W == 1) return 0;
    for (int b = 0; b < d->nbuckets; b++)
        if (d->breq[b] && comm_wait(d->c, d->breq[b])) return -1;
    for (int b = 0; b < d->nbuckets; b++) d->breq[b] = NULL;
    for (int s = 0; s < SLOTS; s++)
        if (dp_drain_slot(d, s)) return -1;
    return 0;
}

double dp_grad_sumsq(dp *d)
{
    backend *be = d->be;
    if (d->stage < 2) return backend_sumsq(be, d->m->grads, d->m->nparams);
    double s = backend_sumsq(be, d->shard_grads, d->state_elems);
    if (comm_allreduce_host(d->c, &s, 1)) return 0.0 / 0.0;
    return s;
}

int dp_finish_params(dp *d)
{
    if (d->stage == 0 || d->stage == 3 || d->W == 1) return 0;
    for (int r = 0; r < d->R; r++) {
        if (dp_allgather_region(d, r, d->param_at[r], d->stage_buf)) return -1;
        backend_copy_d2d(d->be, d->m->params + d->reg_lo[r], d->stage_buf,
                         d->reg_len[r] * sizeof(float));
    }
    return 0;
}

int dp_gather_region(dp *d, const float *state, int r, float *host)
{
    backend *be = d->be;
    size_t bytes = d->reg_len[r] * sizeof(float);
    if (!state && d->stage != 3) { /* the full parameters live on every rank */
        if (host) backend_copy_d2h(be, host, d->m->params + d->reg_lo[r], bytes);
        return 0;
    }
    if (!state) state = d->shard_params;
    if (d->stage == 0) { /* unsharded state is laid out like the parameters */
        if (host) backend_copy_d2h(be, host, state + d->reg_lo[r], bytes);
        return 0;
    }
    if (dp_allgather_region(d, r, state + d->pieces[r].state_offset, d->stage_buf)) return -1;
    if (host) backend_copy_d2h(be, host, d->stage_buf, bytes);
    return 0;
}

/* host holds logical elements [lo, hi): each optimizer piece takes its intersection. */
int dp_load_state_range(dp *d, float *state, const float *host, size_t lo, size_t hi)
{
    for (int r = 0; r < d->R; r++) {
        const optim_piece *p = &d->pieces[r];
        size_t a = p->lo > lo ? p->lo : lo, b = p->hi < hi ? p->hi : hi;
        if (b > a)
            backend_copy_h2d(d->be, state + p->state_offset + (a - p->lo), host + (a - lo),
                             (b - a) * sizeof(float));
    }
    return 0;
}

int dp_load_params_range(dp *d, const float *host, size_t lo, size_t hi)
{
    if (d->stage == 3) return dp_load_state_range(d, d->shard_params, host, lo, hi);
    if (hi > lo)
        backend_copy_h2d(d->be, d->m->params + lo, host, (hi - lo) * sizeof(float));
    return 0;
}
