/* comm.h: the collectives interface between ranks (self, mpi, nccl behind one vtable).
 * Buffers are the device pointers of the rank's backend (host memory for cpu/metal, device
 * memory for nccl+cuda). Every operation can be started nonblocking (req != NULL) and finished
 * with comm_wait(); every wait honours comm->timeout_s and fails with a message naming the
 * operation instead of hanging. A failed collective leaves the job unusable: call comm_abort(). */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H

#include <stddef.h>

typedef struct comm comm;
typedef struct comm_request comm_request;

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
} comm_ops;

struct comm {
    const comm_ops *ops;
    int rank, size;             /* this rank, number of ranks */
    int local_rank, local_size; /* among the ranks sharing this node */
    double timeout_s;           /* per collective; set from parallel.timeout_s */
    void *impl;
};

/* Start the communication layer. kind: "self", "mpi", "nccl" or NULL/"auto" (mpi when the
 * process was started by mpirun/srun and MPI is compiled in, else self). native_stream: the
 * backend's communication stream for nccl (NULL otherwise). NULL + loom_fail on error. */
comm *comm_init(const char *kind, int *argc, char ***argv, void *native_stream);

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

#endif
