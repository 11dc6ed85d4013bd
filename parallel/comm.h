/* comm.h: the collectives interface between ranks (self, mpi, nccl behind one vtable).
 * Buffers are the device pointers of the rank's backend (host memory for cpu/metal, device
 * memory for cuda); no transport but nccl (NCCL is CUDA) includes a device header. Every
 * operation can be started nonblocking (req != NULL) and finished with comm_wait(); every wait
 * honours comm->timeout_s and fails with a message naming the operation instead of hanging. A failed collective leaves the job unusable: call comm_abort(). */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include <stddef.h>

typedef struct comm comm;
typedef struct comm_request comm_request;
typedef struct comm_device comm_device;

typedef enum { COMM_SUM = 0, COMM_AVG = 1 } comm_op;

typedef struct comm_ops {
    const char *name;
    void (*destroy)(comm *c);
    /* In place: buf[0..n) becomes the sum (or mean) over ranks. */
    int (*allreduce)(comm *c, float *buf, size_t n, comm_op op, comm_request **req);
    /* send holds size*count elements; rank r receives the reduced block r into recv[0..count). */
    int (*reduce_scatter)(comm *c, float *recv, const float *send, size_t count, comm_op op,
                          comm_request **req);
    /* Each rank contributes send[0..count); recv[r*count ..] receives rank r's block.
     * send may alias recv + rank*count (in place). */
    int (*allgather)(comm *c, float *recv, const float *send, size_t count, comm_request **req);
    int (*broadcast)(comm *c, void *buf, size_t bytes, int root, comm_request **req);
    /* Host memory, blocking: element-wise sum of doubles (losses, token counts, flags). */
    int (*allreduce_host)(comm *c, double *buf, int n);
    int (*barrier)(comm *c);
    /* Finishes req (and frees it). -1 + loom_fail("... timed out after N s ...") on timeout. */
    int (*wait)(comm *c, comm_request *req);
    /* Ends every rank of the job now with exit code `code` (never returns). */
    void (*abort)(comm *c, int code);
    /* Optional: advance req without blocking; 1 if it has completed (comm_wait is still needed to
     * finish and free it), 0 if not, -1 on error. MPI moves nonblocking collectives forward only
     * inside MPI calls, so dp calls this between layers to overlap reduction with backward. */
    int (*test)(comm *c, comm_request *req);
    /* Optional: take the device of comm_attach_device (NULL: the transport needs none). */
    int (*attach)(comm *c, const comm_device *dev);
} comm_ops;

struct comm {
    const comm_ops *ops;
    int rank, size;             /* this rank, number of ranks */
    int local_rank, local_size; /* among the ranks sharing this node */
    double timeout_s;           /* per collective; set from parallel.timeout_s */
    int failed_together;        /* set by comm_agree_failure: every rank knows the job fails */
    void *impl;
};

/* What the build holds, for comm_choose (comm_compiled() gives this binary's). */
typedef struct comm_features {
    int mpi, nccl;
} comm_features;
comm_features comm_compiled(void);

/* Which transport comm_init starts: a pure function of the build (f), the backend that will run
 * (its registry name "cpu", "cuda", "metal"; NULL = a host backend), the asked kind ("self",
 * "mpi", "nccl", or NULL/""/"auto") and whether this process is one rank of a launched job.
 * auto: one process -> self; launched with backend cuda and NCCL compiled in -> nccl (MPI
 * bootstraps it and carries the host-side values); launched otherwise -> mpi. Returns the kind
 * and writes the one-line reason to why; NULL + reason when auto cannot work (a launched cuda
 * job without NCCL would hand device pointers to MPI, or a launched job without MPI). */
const char *comm_choose(const char *kind, const char *backend, int launched, comm_features f,
                        char *why, size_t why_len);

/* Start the communication layer: the transport comm_choose(kind, backend, comm_launched_by_mpi(),
 * comm_compiled()) names; logs it and why. NULL + loom_fail on error. */
comm *comm_init(const char *kind, int *argc, char ***argv, const char *backend);

/* The device the collectives' buffers live on, handed over once the backend exists (the comm
 * starts first: its local rank picks the device). */
struct comm_device {
    /* The backend's communication stream (native_stream(be, 1)), NULL on host backends. With it,
     * nccl runs its collectives there and orders each only after the work the caller made that
     * stream wait for (backend event_record); without it, after all work issued on the device. */
    void *stream;
    /* dst <- src, device bytes, in order with the work queued before it (the backend's copy_d2d):
     * what the self transport's out-of-place collectives copy with. NULL: host memmove. */
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void *ctx;
};

/* Hand the transport its device (dev is copied). 0, or -1 + loom_fail. */
int comm_attach_device(comm *c, const comm_device *dev);

/* Finalize (collective). NULL is fine. */
void comm_destroy(comm *c);

/* 1 if this process looks like one rank of a launched job (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * SLURM_NTASKS ... > 1). Needs no MPI. */
int comm_launched_by_mpi(void);

/* Convenience wrappers: c->ops->X(c, ...). Blocking when req is NULL. */
int comm_allreduce(comm *c, float *buf, size_t n, comm_op op, comm_request **req);
int comm_reduce_scatter(comm *c, float *recv, const float *send, size_t count, comm_op op, comm_request **req);
int comm_allgather(comm *c, float *recv, const float *send, size_t count, comm_request **req);
int comm_broadcast(comm *c, void *buf, size_t bytes, int root, comm_request **req);
int comm_allreduce_host(comm *c, double *buf, int n);
int comm_barrier(comm *c);
int comm_wait(comm *c, comm_request *req);
int comm_test(comm *c, comm_request *req); /* 1 = done (or no test op: treated as not done = 0) */
void comm_abort(comm *c, int code);

/* Every rank says whether it failed (a host sum of the flags): returns how many did, or -1 when
 * the collective itself failed. When one did, c->failed_together is set on every rank: the job can
 * then end through comm_destroy on each rank, which delivers every rank's last lines, rather than
 * comm_abort, whose kill may drop lines still on their way to mpirun (a refusal's reason, say). */
int comm_agree_failure(comm *c, int failed_here);

#endif
