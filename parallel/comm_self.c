/* comm_self.c: the one-rank transport: every collective over one rank is an identity or a copy.
 * Needs no MPI, so it is what a plain `loom train` and the CPU-only build run on. It must never
 * dereference a device pointer on the host nor include a device header: device copies go through
 * the backend's copy handed over by comm_attach_device. */
#include "parallel/comm.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct self_impl {
    comm_device dev; /* the backend's device copy (comm_attach_device), or none: host memory */
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

/* dst <- src (bytes). With a device attached the backend copies, queued in order behind the work
 * that produced src and ahead of the work that will read dst, so "finished" holds for every later
 * device op (the host reads device data only through the backend, which orders the same way). */
static int self_copy(comm *c, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0)
        return 0;
    self_impl *s = c->impl;
    if (s->dev.copy)
        s->dev.copy(s->dev.ctx, dst, src, bytes);
    else
        memmove(dst, src, bytes);
    return 0;
}

static int self_attach(comm *c, const comm_device *dev)
{
    ((self_impl *)c->impl)->dev = *dev;
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
    .attach = self_attach,
};

comm *comm_self_init(void)
{
    comm *c = calloc(1, sizeof *c);
    self_impl *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        loom_fail("comm: out of memory creating the self transport");
        return NULL;
    }
    c->ops = &self_ops;
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->local_size = 1;
    c->impl = s;
    return c;
}
