/* comm_mpi.h: the MPI transport's constructor and hooks, for comm.c, the nccl transport (which
 * bootstraps over MPI: rank, size, local rank and the ncclUniqueId broadcast) and the tests.
 * Include only under LOOM_HAVE_MPI; model code must never include it (it talks to comm.h). */
#ifndef LOOM_COMM_MPI_H
#define LOOM_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "parallel/comm.h"

/* MPI_Init (unless MPI is already initialized), a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN, rank/size and the node-local rank/size. Buffers are host memory.
 * comm_destroy() frees it and calls MPI_Finalize if this call did the MPI_Init.
 * With Open MPI it sets OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 before MPI_Init unless
 * already set (the default in-place Iallreduce runs at half speed; see comm_mpi.c).
 * NULL + loom_fail on error. */
comm *comm_mpi_init(int *argc, char ***argv);

/* The communicator behind c (a comm from comm_mpi_init), for MPI calls comm.h lacks. */
MPI_Comm comm_mpi_handle(const comm *c);

/* Largest number of elements one MPI call carries (default 2^28 = 1 GiB of floats); longer
 * operations are split into that many chunks. Tests lower it to exercise the split. */
void comm_mpi_set_max_chunk(comm *c, size_t elems);

#endif
