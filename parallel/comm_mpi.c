/* comm_mpi.c: the comm.h transport over MPI, every operation a nonblocking MPI collective whose
 * wait polls against a deadline, so a stalled peer becomes a message naming it (the ranks that
 * time out ask each other who is alive on a side communicator), not a hang.
 * It must never be handed device pointers (host memory only), nor MPI_Abort outside abort(). */
#include "parallel/comm_mpi.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/error.h"

/* 2^28 floats = 1 GiB per MPI call: below INT_MAX elements (the MPI count type) and below the
 * 2 GiB messages some MPI transports still mishandle. */
#define CMPI_DEFAULT_MAX_CHUNK ((size_t)1 << 28)

typedef struct cmpi_impl {
    MPI_Comm world;     /* our duplicate of MPI_COMM_WORLD, with MPI_ERRORS_RETURN */
    MPI_Comm probe;     /* another duplicate, only for "still alive" messages after a timeout */
    int we_initialized; /* MPI_Init was ours, so MPI_Finalize is too */
    size_t max_chunk;   /* elements per MPI call */
    unsigned long long ops; /* operations started on this rank (op #N in the alive message) */
} cmpi_impl;

/* One comm operation = one or more MPI requests (one per chunk) + what to do once done. */
struct comm_request {
    const char *what;  /* operation name, for messages */
    size_t count;      /* its size in `unit`s, for messages */
    const char *unit;  /* "floats", "bytes", "doubles" or NULL (barrier) */
    float *scale;      /* COMM_AVG: scale[0..scale_n) *= 1/size once the sum is complete */
    size_t scale_n;
    int n;             /* MPI requests started */
    MPI_Request reqs[];
};

static int cmpi_fail(comm *c, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    return loom_fail("comm: %s failed on rank %d: %s", what, c->rank, msg);
}

static size_t cmpi_nchunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

static size_t cmpi_min(size_t a, size_t b) { return a < b ? a : b; }

static comm_request *cmpi_request_new(comm *c, size_t nreq, const char *what, size_t count,
                                     const char *unit)
{
    comm_request *r = nreq > INT_MAX ? NULL : malloc(sizeof *r + nreq * sizeof(MPI_Request));
    if (!r) {
        loom_fail("comm: cannot allocate a %s request of %zu chunks on rank %d", what, nreq,
                  c->rank);
        return NULL;
    }
    *r = (comm_request){.what = what, .count = count, .unit = unit};
    ((cmpi_impl *)c->impl)->ops++;
    return r;
}

/* A datatype of `len` contiguous floats whose extent is `stride` floats: rank r's part of
 * chunk k of a [size][count] layout is then element r of an array of this type at
 * base + k*chunk, which is how allgather is split without copies. */
static int cmpi_block_type(comm *c, size_t len, size_t stride, MPI_Datatype *t)
{
    MPI_Datatype run;
    int rc = MPI_Type_contiguous((int)len, MPI_FLOAT, &run);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Type_create_resized(run, 0, (MPI_Aint)(stride * sizeof(float)), t);
        MPI_Type_free(&run);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(t);
    return rc == MPI_SUCCESS ? 0 : cmpi_fail(c, rc, "building a chunk datatype");
}

/* x *= s: the second half of COMM_AVG (MPI has no mean), on the host. */
static void cmpi_scale(float *x, size_t n, float s)
{
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static) if (n >= ((size_t)1 << 18))
#endif
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static double cmpi_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Between two polls. Open MPI's nonblocking collectives advance only inside MPI calls (every
 * MPI_Testall advances all of them, not just the one tested), so a sleeping waiter stalls every
 * bucket in flight. For the first second, which covers any healthy operation (even 256 MB at
 * 1 GB/s), poll back-to-back and only yield the core, in case ranks outnumber cores. Past that
 * the peer is late (imbalance, a checkpoint write, or dead): sleep 50 us, doubling up to 1 ms,
 * so a waiting rank stops taking CPU from the ones still working. */
#define CMPI_SPIN_S 1.0

static void cmpi_pause(double waited_s, long *sleep_ns)
{
    if (waited_s < CMPI_SPIN_S) {
        sched_yield();
        return;
    }
    *sleep_ns = *sleep_ns < 50000 ? 50000 : (long)cmpi_min((size_t)*sleep_ns * 2, 1000000);
    struct timespec t = {0, *sleep_ns};
    nanosleep(&t, NULL);
}

/* After a timeout: which peers are alive? Every rank that times out sends "alive at op #N" to
 * every other rank on the probe communicator and listens for the same from them for a short grace
 * period: ranks that time out together (all but the culprit, when one rank stalls or dies) hear
 * each other. Bounded: receives still open are cancelled (a cancelled receive always completes),
 * unfinished sends are released to MPI; the job ends right after (the caller aborts). */
#define CMPI_GRACE_S 3.0
#define CMPI_ALIVE_TAG 7
#define CMPI_NAMES_MAX 12

/* The send buffer must outlive sends released unfinished, hence static (not in cmpi_impl). */
static unsigned long long cmpi_alive_op;

/* "rank 1", "ranks 1, 3" or "ranks 1, 2, ... (20 in all)" for the n ranks in silent[]. */
static void cmpi_rank_list(const int *silent, int n, char *out, size_t len)
{
    size_t used = (size_t)snprintf(out, len, "rank%s ", n > 1 ? "s" : "");
    for (int i = 0; i < n && i < CMPI_NAMES_MAX && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%d", i ? ", " : "", silent[i]);
    if (n > CMPI_NAMES_MAX && used < len) snprintf(out + used, len - used, ", ... (%d in all)", n);
}

/* Peers that did not answer within the grace period, into out ("" if all did). */
static void cmpi_silent_ranks(comm *c, char *out, size_t len)
{
    cmpi_impl *m = c->impl;
    int n = c->size, nsilent = 0;
    unsigned long long *heard = calloc((size_t)n, sizeof *heard);
    MPI_Request *req = malloc(2 * (size_t)n * sizeof *req), *sreq = req ? req + n : NULL;
    int *silent = malloc((size_t)n * sizeof *silent);
    snprintf(out, len, "the others (could not ask them: out of memory)");
    if (!heard || !req || !silent) goto done;
    cmpi_alive_op = m->ops;
    for (int p = 0; p < n; p++) {
        req[p] = sreq[p] = MPI_REQUEST_NULL;
        if (p == c->rank) continue;
        MPI_Irecv(&heard[p], 1, MPI_UNSIGNED_LONG_LONG, p, CMPI_ALIVE_TAG, m->probe, &req[p]);
        MPI_Isend(&cmpi_alive_op, 1, MPI_UNSIGNED_LONG_LONG, p, CMPI_ALIVE_TAG, m->probe, &sreq[p]);
    }
    /* long enough for peers that entered the operation a little later to time out as well. One
     * MPI_Test per request: MPI_Testall would leave every request untouched until all complete. */
    double grace = c->timeout_s < CMPI_GRACE_S ? c->timeout_s : CMPI_GRACE_S, start = cmpi_now();
    for (int left = n; left > 0 && cmpi_now() - start < grace;) {
        left = 0;
        for (int p = 0; p < n; p++) {
            int done = 0;
            if (req[p] != MPI_REQUEST_NULL && MPI_Test(&req[p], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
                left++;
        }
        struct timespec t = {0, 1000000};
        if (left) nanosleep(&t, NULL);
    }
    for (int p = 0; p < n; p++) {
        if (req[p] != MPI_REQUEST_NULL) { /* no answer */
            MPI_Cancel(&req[p]);
            MPI_Wait(&req[p], MPI_STATUS_IGNORE);
            silent[nsilent++] = p;
        }
        if (sreq[p] != MPI_REQUEST_NULL) MPI_Request_free(&sreq[p]);
    }
    out[0] = '\0';
    if (nsilent) cmpi_rank_list(silent, nsilent, out, len);
done:
    free(heard);
    free(req);
    free(silent);
}

static int cmpi_timed_out(comm *c, comm_request *r)
{
    char what[160], silent[200] = "";
    if (r->unit) snprintf(what, sizeof what, "%s of %zu %s", r->what, r->count, r->unit);
    else snprintf(what, sizeof what, "%s", r->what);
    if (c->size > 1) cmpi_silent_ranks(c, silent, sizeof silent);
    if (silent[0])
        return loom_fail("comm: %s timed out after %g s on rank %d: no answer from %s (dead or stalled)", what,
                         c->timeout_s, c->rank, silent);
    return loom_fail("comm: %s timed out after %g s on rank %d: every peer answered that it is alive (ranks "
                     "in different operations?)", what, c->timeout_s, c->rank);
}

/* On error or timeout r is deliberately leaked: MPI may still write into its requests and the
 * user's buffers, and the job is unusable anyway (the caller aborts). */
static int cmpi_wait(comm *c, comm_request *r)
{
    double start = cmpi_now();
    long sleep_ns = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(r->n, r->reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, r->what);
        if (done)
            break;
        double waited = cmpi_now() - start;
        if (c->timeout_s > 0 && waited > c->timeout_s)
            return cmpi_timed_out(c, r);
        cmpi_pause(waited, &sleep_ns);
    }
    if (r->scale)
        cmpi_scale(r->scale, r->scale_n, 1.0f / (float)c->size);
    free(r);
    return 0;
}

/* One non-blocking look: drives MPI's progress engine for r (and, in Open MPI, for every other
 * request in flight). Completed MPI requests become MPI_REQUEST_NULL, which cmpi_wait accepts. */
static int cmpi_test(comm *c, comm_request *r)
{
    int done = 0;
    int rc = MPI_Testall(r->n, r->reqs, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return cmpi_fail(c, rc, r->what);
    return done ? 1 : 0;
}

/* Hand the started request back (nonblocking) or finish it here (blocking). */
static int cmpi_finish(comm *c, comm_request *r, comm_request **req)
{
    if (req) {
        *req = r;
        return 0;
    }
    return cmpi_wait(c, r);
}

static int cmpi_check_op(comm *c, comm_op op, const char *what)
{
    if (op != COMM_SUM && op != COMM_AVG)
        return loom_fail("comm: %s with unknown op %d on rank %d", what, (int)op, c->rank);
    return 0;
}

static int cmpi_allreduce(comm *c, float *buf, size_t n, comm_op op, comm_request **req)
{
    cmpi_impl *m = c->impl;
    if (cmpi_check_op(c, op, "allreduce") != 0)
        return -1;
    comm_request *r = cmpi_request_new(c, cmpi_nchunks(n, m->max_chunk), "allreduce", n, "floats");
    if (!r)
        return -1;
    for (size_t off = 0; off < n; off += m->max_chunk) {
        int len = (int)cmpi_min(n - off, m->max_chunk);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, len, MPI_FLOAT, MPI_SUM, m->world,
                                &r->reqs[r->n]);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, "allreduce");
        r->n++;
    }
    if (op == COMM_AVG) {
        r->scale = buf;
        r->scale_n = n;
    }
    return cmpi_finish(c, r, req);
}

/* Chunk [off, off+len) of every rank's block, split: MPI's predefined MPI_SUM refuses derived
 * datatypes (Open MPI: MPI_ERR_OP), so instead one reduce per destination rank r, of
 * send[r*count + off ..] into rank r's recv[off ..]. Only counts past max_chunk come here. */
static int cmpi_reduce_scatter_split(comm *c, comm_request *r, float *recv, const float *send,
                                    size_t count, size_t off, int len)
{
    cmpi_impl *m = c->impl;
    for (int root = 0; root < c->size; root++) {
        const float *part = send + (size_t)root * count + off;
        const void *from = root == c->rank && part == recv + off ? MPI_IN_PLACE : part;
        int rc = MPI_Ireduce(from, recv + off, len, MPI_FLOAT, MPI_SUM, root, m->world,
                             &r->reqs[r->n]);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, "reduce_scatter");
        r->n++;
    }
    return 0;
}

static int cmpi_reduce_scatter(comm *c, float *recv, const float *send, size_t count, comm_op op,
                              comm_request **req)
{
    cmpi_impl *m = c->impl;
    if (cmpi_check_op(c, op, "reduce_scatter") != 0)
        return -1;
    size_t nch = cmpi_nchunks(count, m->max_chunk);
    comm_request *r = cmpi_request_new(c, nch == 1 ? 1 : nch * (size_t)c->size, "reduce_scatter",
                                      count, "floats");
    if (!r)
        return -1;
    if (nch == 1) {
        int rc = MPI_Ireduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, m->world,
                                           &r->reqs[0]);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, "reduce_scatter");
        r->n = 1;
    }
    for (size_t off = 0; nch > 1 && off < count; off += m->max_chunk) {
        int len = (int)cmpi_min(count - off, m->max_chunk);
        if (cmpi_reduce_scatter_split(c, r, recv, send, count, off, len) != 0)
            return -1;
    }
    if (op == COMM_AVG) {
        r->scale = recv;
        r->scale_n = count;
    }
    return cmpi_finish(c, r, req);
}

static int cmpi_allgather(comm *c, float *recv, const float *send, size_t count,
                         comm_request **req)
{
    cmpi_impl *m = c->impl;
    size_t nch = cmpi_nchunks(count, m->max_chunk);
    /* In place: MPI then takes this rank's block from recv + rank*count itself. */
    int in_place = send == recv + (size_t)c->rank * count;
    comm_request *r = cmpi_request_new(c, nch, "allgather", count, "floats");
    if (!r)
        return -1;
    for (size_t off = 0; off < count; off += m->max_chunk) {
        int len = (int)cmpi_min(count - off, m->max_chunk);
        const void *from = in_place ? MPI_IN_PLACE : (const void *)(send + off);
        int rc;
        if (nch == 1) {
            rc = MPI_Iallgather(from, len, MPI_FLOAT, recv, len, MPI_FLOAT, m->world,
                                &r->reqs[r->n]);
        } else {
            MPI_Datatype t;
            if (cmpi_block_type(c, (size_t)len, count, &t) != 0)
                return -1;
            rc = MPI_Iallgather(from, len, MPI_FLOAT, recv + off, 1, t, m->world,
                                &r->reqs[r->n]);
            MPI_Type_free(&t);
        }
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, "allgather");
        r->n++;
    }
    return cmpi_finish(c, r, req);
}

static int cmpi_broadcast(comm *c, void *buf, size_t bytes, int root, comm_request **req)
{
    cmpi_impl *m = c->impl;
    if (root < 0 || root >= c->size)
        return loom_fail("comm: broadcast from root %d on rank %d, but there are %d ranks", root,
                         c->rank, c->size);
    size_t chunk = cmpi_min(m->max_chunk * sizeof(float), INT_MAX);
    comm_request *r = cmpi_request_new(c, cmpi_nchunks(bytes, chunk), "broadcast", bytes, "bytes");
    if (!r)
        return -1;
    for (size_t off = 0; off < bytes; off += chunk) {
        int len = (int)cmpi_min(bytes - off, chunk);
        int rc = MPI_Ibcast((char *)buf + off, len, MPI_BYTE, root, m->world, &r->reqs[r->n]);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(c, rc, "broadcast");
        r->n++;
    }
    return cmpi_finish(c, r, req);
}

static int cmpi_allreduce_host(comm *c, double *buf, int n)
{
    cmpi_impl *m = c->impl;
    if (n < 0)
        return loom_fail("comm: allreduce_host of %d doubles on rank %d", n, c->rank);
    comm_request *r = cmpi_request_new(c, 1, "allreduce_host", (size_t)n, "doubles");
    if (!r)
        return -1;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, m->world, &r->reqs[0]);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(c, rc, "allreduce_host");
    r->n = 1;
    return cmpi_wait(c, r);
}

static int cmpi_barrier(comm *c)
{
    cmpi_impl *m = c->impl;
    comm_request *r = cmpi_request_new(c, 1, "barrier", 0, NULL);
    if (!r)
        return -1;
    int rc = MPI_Ibarrier(m->world, &r->reqs[0]);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(c, rc, "barrier");
    r->n = 1;
    return cmpi_wait(c, r);
}

static void cmpi_abort(comm *c, int code)
{
    cmpi_impl *m = c->impl;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(m->world, code);
    _Exit(code); /* MPI_Abort does not return; this only keeps abort()'s promise if it did */
}

static void cmpi_destroy(comm *c)
{
    cmpi_impl *m = c->impl;
    int finalized = 0;
    MPI_Comm_free(&m->world);
    MPI_Comm_free(&m->probe);
    MPI_Finalized(&finalized);
    if (m->we_initialized && !finalized)
        MPI_Finalize();
    free(m);
    free(c);
}

static const comm_ops cmpi_ops = {
    .name = "mpi",
    .destroy = cmpi_destroy,
    .allreduce = cmpi_allreduce,
    .reduce_scatter = cmpi_reduce_scatter,
    .allgather = cmpi_allgather,
    .broadcast = cmpi_broadcast,
    .allreduce_host = cmpi_allreduce_host,
    .barrier = cmpi_barrier,
    .wait = cmpi_wait,
    .test = cmpi_test,
    .abort = cmpi_abort,
};

/* MPI_Init unless someone (the caller, or an earlier comm) already did. Only the main thread
 * calls MPI (OpenMP workers never do), hence FUNNELED. */
static int cmpi_start(int *argc, char ***argv, int *we_initialized)
{
    int initialized = 0, finalized = 0, provided = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
        return loom_fail("comm: MPI was already finalized in this process and cannot restart");
    *we_initialized = !initialized;
#ifdef OMPI_MAJOR_VERSION
    /* Open MPI's nonblocking Iallreduce (libnbc) takes its binomial algorithm (reduce to rank
     * 0, then broadcast: the whole buffer crosses twice, one after the other) whenever the
     * operation is in place or there are fewer than 4 ranks; ours always is in place. Measured
     * with 2 ranks (bench_allreduce): 0.45x the speed of MPI_Allreduce at every size from 1 MB
     * to 256 MB. Algorithm 3 (Rabenseifner: reduce-scatter + allgather) matches MPI_Allreduce.
     * Read at MPI_Init; a value the user set wins (setenv does not overwrite). */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
#endif
    if (!initialized && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return loom_fail("comm: MPI_Init failed");
    /* Errors come back as codes (turned into messages) instead of killing the job silently. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return 0;
}

static int cmpi_topology(comm *c, MPI_Comm world)
{
    MPI_Comm node;
    int rc = MPI_Comm_rank(world, &c->rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(world, &c->size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(c, rc, "finding rank and node topology");
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
    return 0;
}

comm *comm_mpi_init(int *argc, char ***argv)
{
    int we_initialized = 0;
    if (cmpi_start(argc, argv, &we_initialized) != 0)
        return NULL;
    comm *c = calloc(1, sizeof *c);
    cmpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        loom_fail("comm: out of memory creating the mpi transport");
        return NULL;
    }
    *m = (cmpi_impl){.world = MPI_COMM_NULL, .probe = MPI_COMM_NULL, .we_initialized = we_initialized,
                     .max_chunk = CMPI_DEFAULT_MAX_CHUNK};
    c->ops = &cmpi_ops;
    c->impl = m;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_dup(m->world, &m->probe); /* inherits MPI_ERRORS_RETURN */
    if (rc != MPI_SUCCESS || cmpi_topology(c, m->world) != 0) {
        if (rc != MPI_SUCCESS)
            cmpi_fail(c, rc, "duplicating MPI_COMM_WORLD");
        free(m);
        free(c);
        return NULL;
    }
    return c;
}

MPI_Comm comm_mpi_handle(const comm *c) { return ((const cmpi_impl *)c->impl)->world; }

void comm_mpi_set_max_chunk(comm *c, size_t elems)
{
    cmpi_impl *m = c->impl;
    m->max_chunk = elems < 1 ? 1 : cmpi_min(elems, INT_MAX);
}
