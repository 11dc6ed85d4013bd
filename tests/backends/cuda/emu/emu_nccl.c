/* emu_nccl.c: the emulator's NCCL (see include/nccl.h): collectives are blocking MPI calls on
 * host memory; argument checks follow NCCL's rules (in-place forms, roots, init protocol).
 * Test-only. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

struct emu_nccl_comm {
    MPI_Comm mc;
    int rank, size, polls_left, finalized;
};

static const char emu_magic[] = "emu-nccl-id";

ncclResult_t ncclGetVersion(int *v) { *v = 22809; return ncclSuccess; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    memcpy(id->internal, emu_magic, sizeof emu_magic);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *cfg)
{
    int wsize = 0, wrank = 0;
    if (memcmp(id.internal, emu_magic, sizeof emu_magic) != 0) return ncclInvalidArgument;
    if (!cfg || cfg->magic != 0xcafebeef) return ncclInvalidArgument;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (nranks != wsize || rank != wrank) return ncclInvalidArgument;
    struct emu_nccl_comm *c = calloc(1, sizeof *c);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mc);
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    if (cfg->blocking == 0) {
        c->polls_left = 3; /* the caller must poll ncclCommGetAsyncError until it settles */
        return ncclInProgress;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    if (!c) return ncclInvalidArgument;
    *err = c->polls_left > 0 ? (c->polls_left--, ncclInProgress) : ncclSuccess;
    return ncclSuccess;
}

static ncclResult_t emu_ready(ncclComm_t c)
{
    if (!c || c->finalized) return ncclInvalidUsage;
    return c->polls_left > 0 ? ncclInvalidUsage : ncclSuccess; /* used before init settled */
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    if (emu_ready(c) != ncclSuccess) return ncclInvalidUsage;
    c->finalized = 1;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c || !c->finalized) return ncclInvalidUsage; /* comm_nccl always finalizes first */
    MPI_Comm_free(&c->mc);
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c) return ncclInvalidArgument;
    free(c); /* the MPI communicator is abandoned, as a real abort would */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
const char *ncclGetLastError(ncclComm_t c) { (void)c; return ""; }

static MPI_Datatype emu_type(ncclDataType_t t) { return t == ncclFloat32 ? MPI_FLOAT : MPI_BYTE; }

static void emu_avg(ncclComm_t c, void *buf, size_t n, ncclDataType_t t, ncclRedOp_t op)
{
    if (op != ncclAvg || t != ncclFloat32) return;
    for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= (float)c->size;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    if (emu_ready(c) || !s || (op != ncclSum && op != ncclAvg) || t != ncclFloat32) return ncclInvalidArgument;
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, c->mc);
    emu_avg(c, recv, count, t, op);
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t rc, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    if (emu_ready(c) || !s || (op != ncclSum && op != ncclAvg) || t != ncclFloat32) return ncclInvalidArgument;
    if ((const float *)send + (size_t)c->rank * rc != (float *)recv) {
        /* not in place: recv must not overlap send */
        const char *a = send, *b = recv;
        size_t sb = rc * c->size * 4;
        if (b < a + sb && a < b + rc * 4) return ncclInvalidArgument;
    }
    float *tmp = malloc(rc * c->size * 4);
    MPI_Allreduce(send, tmp, (int)(rc * c->size), MPI_FLOAT, MPI_SUM, c->mc);
    memcpy(recv, tmp + (size_t)c->rank * rc, rc * 4);
    free(tmp);
    emu_avg(c, recv, rc, t, op);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sc, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t s)
{
    if (emu_ready(c) || !s) return ncclInvalidArgument;
    size_t es = t == ncclFloat32 ? 4 : 1;
    int in_place = (const char *)send == (char *)recv + (size_t)c->rank * sc * es;
    MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)sc, emu_type(t), recv, (int)sc, emu_type(t), c->mc);
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t s)
{
    if (emu_ready(c) || !s || root < 0 || root >= c->size) return ncclInvalidArgument;
    size_t es = t == ncclFloat32 ? 4 : 1;
    if (c->rank == root && send != recv) memcpy(recv, send, count * es);
    MPI_Bcast(recv, (int)count, emu_type(t), root, c->mc);
    return ncclSuccess;
}
