/* test_comm_fault.c: a stalled or dead peer must end in a message or a dead job, never a hang.
 * timeout: rank 0 times out alone in an allreduce, checks the message names rank 1, aborts with 42.
 * kill/exit: rank 1 dies while the others sit in an allreduce; mpirun must end the job. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "parallel/comm.h"
#include "parallel/comm_mpi.h"

enum { N = 1000, CODE_PASS = 42, CODE_FAIL = 3 };

static void stall_timeout(comm *c)
{
    static float buf[N];
    c->timeout_s = 1.0;
    if (c->rank != 0) {
        /* Skip the collective and wait for a message rank 0 never sends: only its abort ends
         * this rank (the CTest-level `timeout 60` catches a job that never ends). */
        int never;
        MPI_Recv(&never, 1, MPI_INT, 0, 99, comm_mpi_handle(c), MPI_STATUS_IGNORE);
        fprintf(stderr, "FAIL: rank %d received a message nobody sent\n", c->rank);
        comm_abort(c, CODE_FAIL);
    }
    int rc = comm_allreduce(c, buf, N, COMM_SUM, NULL);
    const char *want = "comm: allreduce of 1000 floats timed out after 1 s on rank 0: no answer "
                       "from rank 1 (dead or stalled)";
    if (rc == -1 && strcmp(loom_error(), want) == 0) {
        printf("PASS: rank 0 got: %s\n", loom_error());
        comm_abort(c, CODE_PASS);
    }
    fprintf(stderr, "FAIL: allreduce returned %d with message \"%s\", wanted -1 and \"%s\"\n", rc,
            loom_error(), want);
    comm_abort(c, CODE_FAIL);
}

/* Survivors wait in an allreduce with a timeout far past the test's 60 s guard, so only
 * mpirun's reaction to the death can end them in time. */
static int die_midway(comm *c, const char *how)
{
    static float buf[N];
    c->timeout_s = 600;
    if (comm_barrier(c) != 0) {
        fprintf(stderr, "FAIL: first barrier: %s\n", loom_error());
        return 1;
    }
    if (c->rank == 1) {
        fflush(stdout);
        if (strcmp(how, "kill") == 0)
            raise(SIGKILL);
        exit(0); /* "exit": a clean-looking exit without MPI_Finalize, the quietest death */
    }
    int rc = comm_allreduce(c, buf, N, COMM_SUM, NULL);
    fprintf(stderr, "FAIL: rank %d: allreduce returned %d after rank 1 died (%s)\n", c->rank, rc,
            loom_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    log_set_quiet(1);
    comm *c = comm_init("mpi", &argc, &argv, NULL);
    if (!c) {
        fprintf(stderr, "FAIL: comm_init: %s\n", loom_error());
        return 1;
    }
    if (c->size < 2) {
        fprintf(stderr, "FAIL: run with at least 2 ranks\n");
        comm_abort(c, CODE_FAIL);
    }
    if (strcmp(mode, "timeout") == 0) {
        stall_timeout(c);
    } else if (strcmp(mode, "kill") == 0 || strcmp(mode, "exit") == 0) {
        return die_midway(c, mode);
    } else {
        fprintf(stderr, "usage: test_comm_fault timeout|kill|exit\n");
        comm_abort(c, CODE_FAIL);
    }
    comm_destroy(c);
    return 0;
}
