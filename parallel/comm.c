/* comm.c: picks a transport (self, mpi, nccl) by name and forwards the comm_X calls to it.
 * Holds no transport logic and never calls MPI itself, so a build without MPI links and runs
 * (self only). It must never exit(): every failure is a NULL/-1 plus loom_fail(). */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#ifdef LOOM_HAVE_MPI
#include "parallel/comm_mpi.h"
#endif

/* Constructors of the transports (each in its own file). */
comm *comm_self_init(void);
#ifdef LOOM_HAVE_NCCL
comm *comm_nccl_init(int *argc, char ***argv);
#endif

/* Until the caller copies parallel.timeout_s in: long enough for any healthy collective of
 * a small model, short enough that a stalled peer is reported within minutes. */
#define COMM_DEFAULT_TIMEOUT_S 300.0

int comm_launched_by_mpi(void)
{
    /* The first variable present decides: mpirun -np 1 inside a Slurm allocation of 4 tasks
     * is one rank, whatever SLURM_NTASKS says. SLURM_STEP_NUM_TASKS is set only inside an
     * srun step, SLURM_NTASKS also in the batch script itself (hence last). */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                                       "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v) > 1;
    }
    return 0;
}

comm_features comm_compiled(void)
{
    comm_features f = {0, 0};
#ifdef LOOM_HAVE_MPI
    f.mpi = 1;
#endif
#ifdef LOOM_HAVE_NCCL
    f.nccl = 1;
#endif
    return f;
}

static const char *comm_reason(char *why, size_t len, const char *kind, const char *text)
{
    if (why && len) snprintf(why, len, "%s", text);
    return kind;
}

const char *comm_choose(const char *kind, const char *backend, int launched, comm_features f,
                        char *why, size_t why_len)
{
    if (kind && kind[0] && strcmp(kind, "auto") != 0)
        return comm_reason(why, why_len, kind, "parallel.comm names it");
    int cuda = backend && strcmp(backend, "cuda") == 0;
    if (!launched)
        return comm_reason(why, why_len, "self", "auto: one process (not started by mpirun/srun)");
    if (!f.mpi)
        return comm_reason(why, why_len, NULL, "auto: started as one rank of a launched job, but "
                           "this loom was built without MPI (reconfigure with -DLOOM_MPI=ON)");
    if (cuda && f.nccl)
        return comm_reason(why, why_len, "nccl", "auto: backend cuda and NCCL compiled in; "
                           "MPI bootstraps it and carries the host-side values");
    if (cuda)
        return comm_reason(why, why_len, NULL, "auto: backend cuda with several ranks needs NCCL "
                           "(MPI must never get device pointers), and this loom was built "
                           "without it (needs CUDA, NCCL and MPI at configure time)");
    return comm_reason(why, why_len, "mpi", "auto: launched by mpirun/srun, host backend");
}

static comm *comm_open(const char *kind, int *argc, char ***argv)
{
    (void)argc, (void)argv; /* used only by the transports compiled in */
    if (strcmp(kind, "self") == 0)
        return comm_self_init();
    if (strcmp(kind, "mpi") == 0) {
#ifdef LOOM_HAVE_MPI
        return comm_mpi_init(argc, argv);
#else
        loom_fail("comm: kind \"mpi\" asked for, but this loom was built without MPI "
                  "(reconfigure with -DLOOM_MPI=ON and an MPI installed)");
        return NULL;
#endif
    }
    if (strcmp(kind, "nccl") == 0) {
#ifdef LOOM_HAVE_NCCL
        return comm_nccl_init(argc, argv);
#else
        loom_fail("comm: kind \"nccl\" asked for, but this loom was built without NCCL "
                  "(needs CUDA, NCCL and MPI at configure time)");
        return NULL;
#endif
    }
    loom_fail("comm: unknown kind \"%s\" (known: auto, self, mpi, nccl)", kind);
    return NULL;
}

comm *comm_init(const char *kind, int *argc, char ***argv, const char *backend)
{
    char why[256];
    const char *pick = comm_choose(kind, backend, comm_launched_by_mpi(), comm_compiled(), why, sizeof why);
    if (!pick) {
        loom_fail("comm: parallel.comm = auto cannot work: %s", why);
        return NULL;
    }
    comm *c = comm_open(pick, argc, argv);
    if (!c)
        return NULL;
    if (c->timeout_s <= 0)
        c->timeout_s = COMM_DEFAULT_TIMEOUT_S;
    log_set_rank(c->rank, c->size);
    log_info("comm: %s, %d rank%s (%d on this node); %s", c->ops->name, c->size,
             c->size == 1 ? "" : "s", c->local_size, why);
    return c;
}

int comm_attach_device(comm *c, const comm_device *dev)
{
    return c->ops->attach ? c->ops->attach(c, dev) : 0;
}

void comm_destroy(comm *c)
{
    if (c)
        c->ops->destroy(c);
}

int comm_allreduce(comm *c, float *buf, size_t n, comm_op op, comm_request **req)
{
    return c->ops->allreduce(c, buf, n, op, req);
}

int comm_reduce_scatter(comm *c, float *recv, const float *send, size_t count, comm_op op,
                        comm_request **req)
{
    return c->ops->reduce_scatter(c, recv, send, count, op, req);
}

int comm_allgather(comm *c, float *recv, const float *send, size_t count, comm_request **req)
{
    return c->ops->allgather(c, recv, send, count, req);
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root, comm_request **req)
{
    return c->ops->broadcast(c, buf, bytes, root, req);
}

int comm_allreduce_host(comm *c, double *buf, int n) { return c->ops->allreduce_host(c, buf, n); }

int comm_barrier(comm *c) { return c->ops->barrier(c); }

/* A NULL request is one that finished when it was started (nothing to wait for). */
int comm_wait(comm *c, comm_request *req) { return req ? c->ops->wait(c, req) : 0; }

int comm_test(comm *c, comm_request *req)
{
    if (!req) return 1;
    return c->ops->test ? c->ops->test(c, req) : 0;
}

int comm_agree_failure(comm *c, int failed_here)
{
    double failed = failed_here != 0;
    if (comm_allreduce_host(c, &failed, 1)) return -1;
    if (failed > 0) c->failed_together = 1;
    return (int)failed;
}

void comm_abort(comm *c, int code)
{
    c->ops->abort(c, code);
    _Exit(code); /* a transport's abort never returns; this only keeps the promise if one does */
}
