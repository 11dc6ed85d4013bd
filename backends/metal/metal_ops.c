/* metal_ops.c: the Metal backend's lifetime, memory, dense and elementwise ops, written once
 * over metal_device_ops so the same decomposition runs on Apple GPUs and in the Linux shim.
 * Must never touch an Apple API or do math the kernels should do (only host-side reductions). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/metal/metal_internal.h"
#include "base/error.h"
#include "base/log.h"

/* --- lifetime and memory --- */

static void metal_op_destroy(backend *be)
{
    metal_ctx *c = metal_c(be);
    c->dev->sync(c->ds);
    if (c->scratch) c->dev->free(c->ds, c->scratch);
    if (c->rope_tab) c->dev->free(c->ds, c->rope_tab);
    if (c->dummy) c->dev->free(c->ds, c->dummy);
    c->dev->destroy(c->ds);
    free(c);
    free(be);
}

static void *metal_op_alloc(backend *be, size_t bytes)
{
    metal_ctx *c = metal_c(be);
    return c->dev->alloc(c->ds, bytes);
}

static void metal_op_free(backend *be, void *ptr)
{
    metal_ctx *c = metal_c(be);
    if (ptr) c->dev->free(c->ds, ptr);
}

/* Shared storage: once queued work is done the host copies directly (the destination may still
 * be read by queued kernels, so h2d waits too). */
static void metal_op_copy_h2d(backend *be, void *dst, const void *src, size_t bytes)
{
    metal_ctx *c = metal_c(be);
    c->dev->sync(c->ds);
    if (bytes) memcpy(dst, src, bytes);
}

static void metal_op_copy_d2h(backend *be, void *dst, const void *src, size_t bytes)
{
    metal_ctx *c = metal_c(be);
    c->dev->sync(c->ds);
    if (bytes) memcpy(dst, src, bytes);
}

static void metal_op_copy_d2d(backend *be, void *dst, const void *src, size_t bytes)
{
    metal_ctx *c = metal_c(be);
    if (bytes && dst != src) c->dev->copy(c->ds, dst, src, bytes);
}

static void metal_op_sync(backend *be)
{
    metal_ctx *c = metal_c(be);
    c->dev->sync(c->ds);
}

static backend_event *metal_op_event_create(backend *be)
{
    metal_ctx *c = metal_c(be);
    return (backend_event *)c->dev->event_create(c->ds);
}

static void metal_op_event_destroy(backend *be, backend_event *ev)
{
    metal_ctx *c = metal_c(be);
    if (ev) c->dev->event_destroy(c->ds, ev);
}

static void metal_op_event_record(backend *be, backend_event *ev)
{
    metal_ctx *c = metal_c(be);
    c->dev->event_record(c->ds, ev);
}

static void metal_op_event_sync(backend *be, backend_event *ev)
{
    metal_ctx *c = metal_c(be);
    c->dev->event_sync(c->ds, ev);
}

/* No stream a communication library could enqueue on: the comm layer syncs and uses host MPI. */
static void *metal_op_native_stream(backend *be, int which)
{
    (void)be;
    (void)which;
    return NULL;
}

/* --- dense algebra --- */

/* Elementwise kernels on n items in launches of at most METAL_CHUNK; bufs advanced per launch. */
static void metal_vec(metal_ctx *c, int k, float *const *ptrs, int nptrs, float a, float b, size_t n)
{
    for (size_t o = 0; o < n; o += METAL_CHUNK) {
        size_t m = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
        void *bufs[8];
        for (int i = 0; i < nptrs; i++) bufs[i] = ptrs[i] + o;
        metal_p_vec p = {(unsigned)m, a, b};
        metal_launch(c, k, m, bufs, nptrs, &p, sizeof p);
    }
}

static void metal_op_fill(backend *be, float *x, float value, size_t n)
{
    metal_vec(metal_c(be), MK_FILL, (float *[]){x}, 1, value, 0.0f, n);
}

static void metal_op_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    metal_vec(metal_c(be), MK_ADD, (float *[]){out, (float *)a, (float *)b}, 3, 0.0f, 0.0f, n);
}

static void metal_op_axpy(backend *be, float *y, float alpha, const float *x, size_t n)
{
    metal_vec(metal_c(be), MK_AXPY, (float *[]){y, (float *)x}, 2, alpha, 0.0f, n);
}

static void metal_op_scale(backend *be, float *x, float alpha, size_t n)
{
    metal_vec(metal_c(be), MK_SCALE, (float *[]){x}, 1, alpha, 0.0f, n);
}

/* Partials (hi, lo) per thread on the device, then sum_g hi_g + lo_g in double on the host. */
static double metal_op_sumsq(backend *be, const float *x, size_t n)
{
    metal_ctx *c = metal_c(be);
    double total = 0.0;
    for (size_t o = 0; o < n; o += METAL_CHUNK) {
        size_t m = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
        unsigned parts = m < 65536 ? (unsigned)m : 65536u;
        float *part = metal_scratch(c, 2 * (size_t)parts);
        if (!part) return NAN;
        metal_p_sumsq p = {(unsigned)m, parts};
        metal_launch(c, MK_SUMSQ_PARTIAL, parts, (void *[]){part, (void *)(x + o)}, 2, &p, sizeof p);
        c->dev->sync(c->ds);
        for (unsigned g = 0; g < parts; g++) total += (double)part[2 * g] + (double)part[2 * g + 1];
    }
    return total;
}

/* C = alpha op(A) op(B) + beta C in MPS terms: A stored (M,K) or, transA, (K,M); B stored (K,N)
 * or, transB, (N,K); C (M,N). K = 0 leaves beta C. */
static void metal_op_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                            int transA, int transB, float alpha, float beta)
{
    metal_ctx *c = metal_c(be);
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        size_t n = (size_t)M * (size_t)N;
        if (beta == 0.0f)
            metal_op_fill(be, C, 0.0f, n);
        else if (beta != 1.0f)
            metal_op_scale(be, C, beta, n);
        return;
    }
    metal_mm mm = {
        .left = A, .right = B, .result = C,
        .left_rows = transA ? K : M, .left_cols = transA ? M : K,
        .right_rows = transB ? N : K, .right_cols = transB ? K : N,
        .result_rows = M, .result_cols = N,
        .trans_left = transA != 0, .trans_right = transB != 0,
        .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
    };
    c->dev->matmul(c->ds, &mm);
}

static void metal_op_bias_add(backend *be, float *out, const float *bias, int N, int C)
{
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C};
    metal_launch(metal_c(be), MK_BIAS_ADD, (size_t)N * C, (void *[]){out, (void *)bias}, 2, &p, sizeof p);
}

/* dbias += column sums of dout, through per-chunk partials (deterministic, no atomics). */
static void metal_op_bias_backward(backend *be, float *dbias, const float *dout, int N, int C)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || C <= 0) return;
    metal_p_rows p = {.N = (unsigned)N, .C = (unsigned)C};
    metal_colsum_plan(N, C, &p.nchunks, &p.chunk_rows);
    float *part = metal_scratch(c, (size_t)p.nchunks * C);
    if (!part) return;
    metal_launch(c, MK_COLSUM_PARTIAL, (size_t)p.nchunks * C, (void *[]){part, (void *)dout}, 2, &p, sizeof p);
    metal_launch(c, MK_COLSUM_FINAL, (size_t)C, (void *[]){dbias, part}, 2, &p, sizeof p);
}

/* --- construction --- */

backend *metal_backend_wrap(const char *name, const metal_device_ops *dev_ops, void *dev,
                            const backend_config *cfg, const char *description, double peak_flops)
{
    backend *be = calloc(1, sizeof *be);
    metal_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        dev_ops->destroy(dev);
        loom_fail("metal: out of host memory creating the %s backend", name);
        return NULL;
    }
    c->dev = dev_ops;
    c->ds = dev;
    c->dummy = dev_ops->alloc(dev, 16);
    if (!c->dummy) {
        dev_ops->destroy(dev);
        free(c);
        free(be);
        return NULL;
    }
    backend_ops *o = &c->ops;
    o->name = name;
    o->destroy = metal_op_destroy;
    o->alloc = metal_op_alloc;
    o->free = metal_op_free;
    o->copy_h2d = metal_op_copy_h2d;
    o->copy_d2h = metal_op_copy_d2h;
    o->copy_d2d = metal_op_copy_d2d;
    o->fill = metal_op_fill;
    o->sync = metal_op_sync;
    o->event_create = metal_op_event_create;
    o->event_destroy = metal_op_event_destroy;
    o->event_record = metal_op_event_record;
    o->event_sync = metal_op_event_sync;
    o->native_stream = metal_op_native_stream;
    o->matmul = metal_op_matmul;
    o->add = metal_op_add;
    o->axpy = metal_op_axpy;
    o->scale = metal_op_scale;
    o->sumsq = metal_op_sumsq;
    o->bias_add = metal_op_bias_add;
    o->bias_backward = metal_op_bias_backward;
    metal_ops_nn_fill(o);
    metal_ops_needle_fill(o);
    metal_ops_needle_mix_fill(o);
    be->ops = o;
    if (cfg) be->cfg = *cfg;
    be->cfg.precision = BACKEND_FP32; /* every kernel computes fp32 (docs/precision.md) */
    be->cfg.allow_tf32 = 0;
    snprintf(be->description, sizeof be->description, "%s", description ? description : name);
    be->peak_flops = peak_flops;
    be->impl = c;
    return be;
}
