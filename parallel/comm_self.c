/* comm_self.c: the one-rank transport: every collective over one rank is an identity or a copy.
 * Needs no MPI, so it is what a plain `loom train` and the CPU-only build run on. It must never
 * dereference a device pointer on the host (a CUDA build copies with cudaMemcpy instead). */
#include "parallel/comm.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct self_impl {
    void *stream; /* the backend's communication stream (cudaStream_t) or NULL */
} self_impl;

/* Every self operation has finished when it returns: requests are this sentinel. */
static char self_done;
#define SELF_DONE ((comm_request *)(void *)&self_done)

static int self_finish(comm_request **req)
{
    if (req)
        *req = SELF_DONE;
    return 0;
}

#ifdef LOOM_HAVE_CUDA
/* 1 if p is CUDA device or managed memory. Fails quietly (0) on a machine without a GPU. */
static int self_is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
#endif

/* dst <- src (bytes), on the device when the buffers live there. Without a stream the copy
 * first waits for the whole device, since the producing kernels may sit on a non-blocking
 * stream that a plain cudaMemcpy would not wait for. With one, the copy is queued behind the
 * work the backend ordered on that stream and waited for here: the request this transport
 * returns is already "done", so the copy must be finished when it returns. */
static int self_copy(comm *c, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0)
        return 0;
#ifdef LOOM_HAVE_CUDA
    if (self_is_device(dst) || self_is_device(src)) {
        self_impl *s = c->impl;
        cudaError_t e = s->stream
            ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s->stream)
            : cudaDeviceSynchronize();
        if (e == cudaSuccess)
            e = s->stream ? cudaStreamSynchronize((cudaStream_t)s->stream)
                          : cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
        if (e != cudaSuccess)
            return loom_fail("comm: self copy of %zu bytes on rank 0 failed: %s", bytes,
                             cudaGetErrorString(e));
        return 0;
    }
#else
    (void)c;
#endif
    memmove(dst, src, bytes);
    return 0;
}

static void self_destroy(comm *c)
{
    free(c->impl);
    free(c);
}

/* Sum and mean over one rank are the values themselves. */
static int self_allreduce(comm *c, float *buf, size_t n, comm_op op, comm_request **req)
{
    (void)c, (void)buf, (void)n, (void)op;
    return self_finish(req);
}

static int self_reduce_scatter(comm *c, float *recv, const float *send, size_t count,
                               comm_op op, comm_request **req)
{
    (void)op;
    if (self_copy(c, recv, send, count * sizeof(float)) != 0)
        return -1;
    return self_finish(req);
}

static int self_allgather(comm *c, float *recv, const float *send, size_t count,
                          comm_request **req)
{
    if (self_copy(c, recv, send, count * sizeof(float)) != 0)
        return -1;
    return self_finish(req);
}

static int self_broadcast(comm *c, void *buf, size_t bytes, int root, comm_request **req)
{
    (void)c, (void)buf, (void)bytes;
    if (root != 0)
        return loom_fail("comm: broadcast from root %d, but the self transport has only rank 0",
                         root);
    return self_finish(req);
}

static int self_allreduce_host(comm *c, double *buf, int n)
{
    (void)c, (void)buf, (void)n;
    return 0;
}

static int self_barrier(comm *c)
{
    (void)c;
    return 0;
}

static int self_wait(comm *c, comm_request *req)
{
    (void)c;
    if (req != SELF_DONE)
        return loom_fail("comm: self wait on a request it did not start");
    return 0;
}

static void self_abort(comm *c, int code)
{
    (void)c;
    exit(code); /* one rank: ending this process ends the job; exit() flushes the logs */
}

static const comm_ops self_ops = {
    .name = "self",
    .destroy = self_destroy,
    .allreduce = self_allreduce,
    .reduce_scatter = self_reduce_scatter,
    .allgather = self_allgather,
    .broadcast = self_broadcast,
    .allreduce_host = self_allreduce_host,
    .barrier = self_barrier,
    .wait = self_wait,
    .abort = self_abort,
};

comm *comm_self_init(void *native_stream)
{
    comm *c = calloc(1, sizeof *c);
    self_impl *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        loom_fail("comm: out of memory creating the self transport");
        return NULL;
    }
    s->stream = native_stream;
    c->ops = &self_ops;
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->local_size = 1;
    c->impl = s;
    return c;
}
