/* comm_nccl.c: the comm.h transport over NCCL, for device buffers of the cuda backend.
 * Bootstraps over the MPI transport (rank, size, local rank, the ncclUniqueId broadcast) and keeps
 * it for the host-side operations (allreduce_host, barrier, abort). Collectives run on the
 * backend's communication stream once attached (before: an own stream, each ordered after all
 * compute issued before it), and are finished by polling an event against a deadline. It must
 * never wait on NCCL without a deadline and never hand NCCL a host pointer. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "parallel/comm.h"
#include "parallel/comm_mpi.h"

/* Deadline for the bootstrap, before the caller has copied parallel.timeout_s in. */
#define NCCL_INIT_TIMEOUT_S 300.0

/* One started collective: an event recorded on the stream right after it. Requests are recycled
 * through a free list, so the step loop neither mallocs nor creates events once warm. */
struct comm_request {
    cudaEvent_t ev;
    const char *what; /* operation name, for messages */
    size_t count;     /* its size in `unit`s */
    const char *unit;
    comm_request *next;
};

typedef struct nccl_impl {
    comm *mpi;           /* the bootstrap transport; does the host-side operations */
    ncclComm_t nc;       /* NULL once aborted */
    cudaStream_t stream; /* the backend's communication stream, or our own */
    int own_stream;      /* 1: we created stream (no device attached yet) */
    int attached;        /* 1: stream is the backend's comm stream (comm_attach_device) */
    cudaEvent_t order;   /* recorded on the legacy default stream before each collective */
    int device;
    comm_request *spare; /* recycled requests */
} nccl_impl;

static double nccl_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Between polls: back-to-back (yielding) for the first 20 ms, a healthy collective's whole life;
 * then sleep 50 us doubling to 1 ms, so a rank waiting on a late peer does not burn a core. */
static void nccl_pause(double waited_s, long *sleep_ns)
{
    if (waited_s < 0.02) {
        sched_yield();
        return;
    }
    *sleep_ns = *sleep_ns < 50000 ? 50000 : (*sleep_ns * 2 > 1000000 ? 1000000 : *sleep_ns * 2);
    struct timespec t = {0, *sleep_ns};
    nanosleep(&t, NULL);
}

static int nccl_fail(comm *c, ncclResult_t rc, const char *what)
{
    nccl_impl *n = c->impl;
    const char *detail = ncclGetLastError(n->nc);
    return loom_fail("comm: nccl %s failed on rank %d: %s%s%s", what, c->rank, ncclGetErrorString(rc),
                     detail && *detail ? ": " : "", detail ? detail : "");
}

/* The communicator cannot be trusted after a failure or timeout: abort it (frees NCCL's side,
 * unblocks its kernels) so that comm_abort/exit does not hang behind it. */
static void nccl_kill(comm *c)
{
    nccl_impl *n = c->impl;
    if (n->nc) ncclCommAbort(n->nc);
    n->nc = NULL;
}

/* The communicator is nonblocking (config.blocking = 0): a call may return ncclInProgress and
 * finish in the background. Poll ncclCommGetAsyncError until it settles, against the deadline. */
static int nccl_settle(comm *c, ncclResult_t rc, const char *what)
{
    nccl_impl *n = c->impl;
    double start = nccl_now();
    long sleep_ns = 0;
    while (rc == ncclInProgress) {
        double waited = nccl_now() - start;
        if (c->timeout_s > 0 && waited > c->timeout_s) {
            loom_fail("comm: nccl %s timed out after %g s on rank %d (a peer is dead or stalled)",
                      what, c->timeout_s, c->rank);
            nccl_kill(c);
            return -1;
        }
        nccl_pause(waited, &sleep_ns);
        ncclResult_t q = ncclCommGetAsyncError(n->nc, &rc);
        if (q != ncclSuccess) rc = q;
    }
    if (rc != ncclSuccess) {
        nccl_fail(c, rc, what);
        nccl_kill(c);
        return -1;
    }
    return 0;
}

static comm_request *nccl_request_get(comm *c, const char *what, size_t count, const char *unit)
{
    nccl_impl *n = c->impl;
    comm_request *r = n->spare;
    if (r) {
        n->spare = r->next;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) {
            loom_fail("comm: out of memory for a nccl %s request on rank %d", what, c->rank);
            return NULL;
        }
        cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(r);
            loom_fail("comm: cannot create a CUDA event for nccl %s on rank %d: %s", what, c->rank,
                      cudaGetErrorString(e));
            return NULL;
        }
    }
    r->what = what;
    r->count = count;
    r->unit = unit;
    r->next = NULL;
    return r;
}

static void nccl_request_put(comm *c, comm_request *r)
{
    nccl_impl *n = c->impl;
    r->next = n->spare;
    n->spare = r;
}

/* 1 if r has completed, 0 if not yet, -1 (communicator aborted) if it or NCCL failed. */
static int nccl_poll(comm *c, comm_request *r)
{
    nccl_impl *n = c->impl;
    cudaError_t e = cudaEventQuery(r->ev);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) {
        loom_fail("comm: nccl %s of %zu %s failed on rank %d: %s", r->what, r->count, r->unit,
                  c->rank, cudaGetErrorString(e));
        nccl_kill(c);
        return -1;
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(n->nc, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
        nccl_fail(c, async, r->what);
        nccl_kill(c);
        return -1;
    }
    return 0;
}

/* Waits for r's event against the deadline. On error or timeout the communicator is aborted and
 * r leaked (the job is unusable; the caller aborts). */
static int nccl_wait(comm *c, comm_request *r)
{
    nccl_impl *n = c->impl;
    double start = nccl_now();
    long sleep_ns = 0;
    if (!n->nc)
        return loom_fail("comm: nccl %s wait on rank %d after the communicator was aborted",
                         r->what, c->rank);
    for (;;) {
        int done = nccl_poll(c, r);
        if (done < 0) return -1;
        if (done) break;
        double waited = nccl_now() - start;
        if (c->timeout_s > 0 && waited > c->timeout_s) {
            loom_fail("comm: nccl %s of %zu %s timed out after %g s on rank %d (a peer is dead or "
                      "stalled); communicator aborted", r->what, r->count, r->unit, c->timeout_s,
                      c->rank);
            nccl_kill(c);
            return -1;
        }
        nccl_pause(waited, &sleep_ns);
    }
    nccl_request_put(c, r);
    return 0;
}

/* comm.h test: NCCL progresses on its own, so this only looks (comm_wait still frees r). */
static int nccl_test(comm *c, comm_request *r)
{
    nccl_impl *n = c->impl;
    if (!r) return 1;
    if (!n->nc)
        return loom_fail("comm: nccl %s test on rank %d after the communicator was aborted",
                         r->what, c->rank);
    return nccl_poll(c, r);
}

/* Order the next collective after the work that produced its input. Attached to the backend's
 * comm stream, the caller has done it (backend event_record after the kernels that filled the
 * buffer makes that stream wait for them, and no more). On our own stream: after every kernel and
 * copy issued so far on the device's blocking streams: an event recorded on the legacy default
 * stream completes only after all earlier work of blocking streams (the cuda backend's compute
 * stream is one), and our stream waits for it. Either way later compute does not wait for the
 * collective (the stream is non-blocking): overlap stays. */
static int nccl_order(comm *c, const char *what)
{
    nccl_impl *n = c->impl;
    if (!n->nc)
        return loom_fail("comm: nccl %s on rank %d after the communicator was aborted", what, c->rank);
    if (n->attached) return 0;
    cudaError_t e = cudaEventRecord(n->order, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(n->stream, n->order, 0);
    if (e != cudaSuccess)
        return loom_fail("comm: cannot order the nccl %s after compute on rank %d: %s", what,
                         c->rank, cudaGetErrorString(e));
    return 0;
}

/* Common tail of every collective: settle the enqueue, mark the stream, hand back or wait. */
static int nccl_finish(comm *c, ncclResult_t rc, const char *what, size_t count, const char *unit,
                       comm_request **req)
{
    nccl_impl *n = c->impl;
    if (nccl_settle(c, rc, what) != 0) return -1;
    comm_request *r = nccl_request_get(c, what, count, unit);
    if (!r) return -1;
    cudaError_t e = cudaEventRecord(r->ev, n->stream);
    if (e != cudaSuccess) {
        nccl_request_put(c, r);
        return loom_fail("comm: cannot record the nccl %s on rank %d: %s", what, c->rank,
                         cudaGetErrorString(e));
    }
    if (req) {
        *req = r;
        return 0;
    }
    return nccl_wait(c, r);
}

/* 0 if the communicator is usable, count > 0 and the collective is ordered after compute; 1 if
 * there is nothing to do (req = NULL: a finished request); -1 on failure. */
static int nccl_ready(comm *c, size_t count, const char *what, comm_request **req)
{
    if (count == 0) {
        if (req) *req = NULL;
        return 1;
    }
    return nccl_order(c, what);
}

static ncclRedOp_t nccl_op(comm_op op) { return op == COMM_AVG ? ncclAvg : ncclSum; }

static int nccl_allreduce(comm *c, float *buf, size_t count, comm_op op, comm_request **req)
{
    nccl_impl *n = c->impl;
    int st = nccl_ready(c, count, "allreduce", req);
    if (st != 0) return st < 0 ? -1 : 0;
    ncclResult_t rc = ncclAllReduce(buf, buf, count, ncclFloat32, nccl_op(op), n->nc, n->stream);
    return nccl_finish(c, rc, "allreduce", count, "floats", req);
}

static int nccl_reduce_scatter(comm *c, float *recv, const float *send, size_t count, comm_op op,
                               comm_request **req)
{
    nccl_impl *n = c->impl;
    int st = nccl_ready(c, count, "reduce_scatter", req);
    if (st != 0) return st < 0 ? -1 : 0;
    ncclResult_t rc = ncclReduceScatter(send, recv, count, ncclFloat32, nccl_op(op), n->nc, n->stream);
    return nccl_finish(c, rc, "reduce_scatter", count, "floats per rank", req);
}

/* In place when send == recv + rank * count, which NCCL supports as such. */
static int nccl_allgather(comm *c, float *recv, const float *send, size_t count, comm_request **req)
{
    nccl_impl *n = c->impl;
    int st = nccl_ready(c, count, "allgather", req);
    if (st != 0) return st < 0 ? -1 : 0;
    ncclResult_t rc = ncclAllGather(send, recv, count, ncclFloat32, n->nc, n->stream);
    return nccl_finish(c, rc, "allgather", count, "floats per rank", req);
}

static int nccl_broadcast(comm *c, void *buf, size_t bytes, int root, comm_request **req)
{
    nccl_impl *n = c->impl;
    if (root < 0 || root >= c->size)
        return loom_fail("comm: broadcast from root %d on rank %d, but there are %d ranks", root,
                         c->rank, c->size);
    int st = nccl_ready(c, bytes, "broadcast", req);
    if (st != 0) return st < 0 ? -1 : 0;
    ncclResult_t rc = ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->nc, n->stream);
    return nccl_finish(c, rc, "broadcast", bytes, "bytes", req);
}

/* Host-side operations go through MPI, with this communicator's deadline. */
static int nccl_allreduce_host(comm *c, double *buf, int count)
{
    nccl_impl *n = c->impl;
    n->mpi->timeout_s = c->timeout_s;
    return n->mpi->ops->allreduce_host(n->mpi, buf, count);
}

static int nccl_barrier(comm *c)
{
    nccl_impl *n = c->impl;
    n->mpi->timeout_s = c->timeout_s;
    return n->mpi->ops->barrier(n->mpi);
}

static void nccl_abort(comm *c, int code)
{
    nccl_impl *n = c->impl;
    nccl_kill(c);
    n->mpi->ops->abort(n->mpi, code); /* MPI_Abort: ends every rank; does not return */
}

static void nccl_destroy(comm *c)
{
    nccl_impl *n = c->impl;
    if (n->nc) {
        /* Finalize flushes queued collectives; on failure or timeout settle aborts instead. */
        if (nccl_settle(c, ncclCommFinalize(n->nc), "finalize") == 0) ncclCommDestroy(n->nc);
        else log_warn("%s", loom_error());
        n->nc = NULL;
    }
    while (n->spare) {
        comm_request *r = n->spare;
        n->spare = r->next;
        cudaEventDestroy(r->ev);
        free(r);
    }
    if (n->order) cudaEventDestroy(n->order);
    if (n->own_stream) cudaStreamDestroy(n->stream);
    if (n->mpi) n->mpi->ops->destroy(n->mpi); /* the vtable directly: comm.c calls into this file */
    free(n);
    free(c);
}

/* Move onto the backend's comm stream: what was queued on our own stream finishes first. */
static int nccl_attach(comm *c, const comm_device *dev)
{
    nccl_impl *n = c->impl;
    if (!dev->stream || (n->attached && n->stream == (cudaStream_t)dev->stream)) return 0;
    int device = -1;
    cudaError_t e = cudaStreamGetDevice((cudaStream_t)dev->stream, &device);
    if (e == cudaSuccess && device != n->device)
        return loom_fail("comm: nccl rank %d runs on device %d, but the backend's stream is on "
                         "device %d", c->rank, n->device, device);
    if (e == cudaSuccess && n->own_stream) e = cudaStreamSynchronize(n->stream);
    if (e != cudaSuccess)
        return loom_fail("comm: nccl rank %d cannot move onto the backend's stream: %s", c->rank,
                         cudaGetErrorString(e));
    if (n->own_stream) cudaStreamDestroy(n->stream);
    n->stream = (cudaStream_t)dev->stream;
    n->own_stream = 0;
    n->attached = 1;
    log_info("comm: nccl rank %d runs on the backend's communication stream", c->rank);
    return 0;
}

static const comm_ops nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .allreduce_host = nccl_allreduce_host,
    .barrier = nccl_barrier,
    .wait = nccl_wait,
    .abort = nccl_abort,
    .test = nccl_test,
    .attach = nccl_attach,
};

/* Rank 0 makes the id and broadcasts it (with whether that worked) over MPI; every rank then
 * joins the nonblocking ncclCommInitRankConfig and settles it against the deadline. */
static int nccl_bootstrap(comm *c)
{
    nccl_impl *n = c->impl;
    struct {
        int ok;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (c->rank == 0) {
        ncclResult_t rc = ncclGetUniqueId(&boot.id);
        boot.ok = rc == ncclSuccess;
        if (!boot.ok) nccl_fail(c, rc, "ncclGetUniqueId");
    }
    if (n->mpi->ops->broadcast(n->mpi, &boot, sizeof boot, 0, NULL) != 0) return -1;
    if (!boot.ok)
        return c->rank == 0 ? -1 : loom_fail("comm: rank 0 could not create the NCCL id (rank %d)", c->rank);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&n->nc, c->size, boot.id, c->rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_fail(c, rc, "ncclCommInitRankConfig");
        n->nc = NULL;
        return -1;
    }
    return nccl_settle(c, rc, "ncclCommInitRankConfig");
}

/* Device local_rank (what the session hands the cuda backend as device_index) and a stream of
 * our own until comm_attach_device hands over the backend's. */
static int nccl_stream_setup(comm *c)
{
    nccl_impl *n = c->impl;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e == cudaSuccess && c->local_rank >= ndev)
        return loom_fail("comm: nccl rank %d is local rank %d but this node has %d CUDA device%s",
                         c->rank, c->local_rank, ndev, ndev == 1 ? "" : "s");
    n->device = c->local_rank;
    if (e == cudaSuccess) e = cudaSetDevice(n->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    n->own_stream = e == cudaSuccess;
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->order, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return loom_fail("comm: nccl rank %d cannot set up device %d and its stream: %s", c->rank,
                         n->device, cudaGetErrorString(e));
    return 0;
}

/* On failure the MPI transport is left initialised on purpose: MPI_Finalize could wait forever
 * on peers still in the bootstrap, and the caller exits (which makes mpirun end the job). */
comm *comm_nccl_init(int *argc, char ***argv)
{
    comm *mpi = comm_mpi_init(argc, argv);
    if (!mpi) return NULL;
    comm *c = calloc(1, sizeof *c);
    nccl_impl *n = calloc(1, sizeof *n);
    if (!c || !n) {
        free(c);
        free(n);
        loom_fail("comm: out of memory creating the nccl transport");
        return NULL;
    }
    *n = (nccl_impl){.mpi = mpi};
    *c = (comm){.ops = &nccl_ops, .rank = mpi->rank, .size = mpi->size, .local_rank = mpi->local_rank,
                .local_size = mpi->local_size, .timeout_s = NCCL_INIT_TIMEOUT_S, .impl = n};
    mpi->timeout_s = NCCL_INIT_TIMEOUT_S;
    if (nccl_stream_setup(c) != 0 || nccl_bootstrap(c) != 0) {
        if (n->order) cudaEventDestroy(n->order);
        if (n->own_stream) cudaStreamDestroy(n->stream);
        free(n);
        free(c);
        return NULL;
    }
    int ver = 0;
    ncclGetVersion(&ver);
    log_info("comm: nccl %d.%d.%d on device %d, rank %d of %d", ver / 10000, (ver / 100) % 100,
             ver % 100, n->device, c->rank, c->size);
    return c;
}
