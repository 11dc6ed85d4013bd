/* test_comm.c: every comm.h collective checked bitwise against a serial computation of the same
 * result, on whatever transport argv[1] names (self plainly, mpi under mpirun -np N).
 * Values are small integers, so sums are exact in any order; it must never use timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "parallel/comm.h"
#ifdef LOOM_HAVE_MPI
#include "parallel/comm_mpi.h"
#endif
#define CHECK_CONTEXT() loom_error()
#include "tests/check.h"

/* Rank r's contribution at index i: an integer in [-50, 50], different per rank and index. */
static float val(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 101) - 50); }

static float sum_at(int size, size_t i)
{
    float s = 0;
    for (int r = 0; r < size; r++)
        s += val(r, i);
    return s;
}

/* The serial reference: sum over ranks, and the mean as the transports define it. */
static float expect(int size, size_t i, comm_op op)
{
    return op == COMM_AVG ? sum_at(size, i) * (1.0f / (float)size) : sum_at(size, i);
}

static float *alloc_f(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "FAIL: out of memory (%zu floats)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *x, int r, size_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = val(r, off + i);
}

/* First index where x differs bitwise from the reference, or n. */
static size_t first_bad_reduce(const float *x, int size, size_t off, size_t n, comm_op op)
{
    for (size_t i = 0; i < n; i++) {
        float e = expect(size, off + i, op);
        if (memcmp(&x[i], &e, sizeof e) != 0)
            return i;
    }
    return n;
}

static void test_allreduce(comm *c, size_t n, comm_op op)
{
    float *x = alloc_f(n);
    fill(x, c->rank, 0, n);
    CHECK(comm_allreduce(c, x, n, op, NULL) == 0, "allreduce n=%zu returned -1", n);
    size_t bad = first_bad_reduce(x, c->size, 0, n, op);
    CHECK(bad == n, "allreduce %s n=%zu rank %d: x[%zu]=%.9g want %.9g",
          op == COMM_AVG ? "avg" : "sum", n, c->rank, bad, bad < n ? x[bad] : 0,
          bad < n ? expect(c->size, bad, op) : 0);
    free(x);
}

/* send[r*count + i] = val(rank, r*count + i); the rank receives the reduced block `rank`. */
static void test_reduce_scatter(comm *c, size_t count, comm_op op)
{
    float *send = alloc_f(count * (size_t)c->size), *recv = alloc_f(count);
    fill(send, c->rank, 0, count * (size_t)c->size);
    CHECK(comm_reduce_scatter(c, recv, send, count, op, NULL) == 0, "reduce_scatter count=%zu",
          count);
    size_t off = (size_t)c->rank * count;
    size_t bad = first_bad_reduce(recv, c->size, off, count, op);
    CHECK(bad == count, "reduce_scatter count=%zu rank %d: recv[%zu]=%.9g want %.9g", count,
          c->rank, bad, bad < count ? recv[bad] : 0,
          bad < count ? expect(c->size, off + bad, op) : 0);
    free(send);
    free(recv);
}

/* recv[r*count + i] must become val(r, i). */
static size_t first_bad_gather(const float *recv, int size, size_t count)
{
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < count; i++) {
            float e = val(r, i);
            if (memcmp(&recv[(size_t)r * count + i], &e, sizeof e) != 0)
                return (size_t)r * count + i;
        }
    return (size_t)size * count;
}

static void test_allgather(comm *c, size_t count, int in_place)
{
    size_t total = count * (size_t)c->size;
    float *recv = alloc_f(total), *send = in_place ? NULL : alloc_f(count);
    for (size_t i = 0; i < total; i++)
        recv[i] = -999.0f; /* anything the gather fails to write shows up */
    float *mine = in_place ? recv + (size_t)c->rank * count : send;
    fill(mine, c->rank, 0, count);
    CHECK(comm_allgather(c, recv, mine, count, NULL) == 0, "allgather count=%zu", count);
    size_t bad = first_bad_gather(recv, c->size, count);
    CHECK(bad == total, "allgather%s count=%zu rank %d: recv[%zu]=%g", in_place ? " in place" : "",
          count, c->rank, bad, bad < total ? recv[bad] : 0);
    free(recv);
    free(send);
}

static void test_broadcast(comm *c, size_t bytes)
{
    int root = c->size - 1; /* non-zero whenever there is more than one rank */
    unsigned char *b = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++)
        b[i] = c->rank == root ? (unsigned char)(i * 31 + 7) : 0xEE;
    CHECK(comm_broadcast(c, b, bytes, root, NULL) == 0, "broadcast %zu bytes", bytes);
    size_t bad = bytes;
    for (size_t i = 0; i < bytes && bad == bytes; i++)
        if (b[i] != (unsigned char)(i * 31 + 7))
            bad = i;
    CHECK(bad == bytes, "broadcast %zu bytes from %d, rank %d: byte %zu wrong", bytes, root,
          c->rank, bad);
    free(b);
}

static void test_host_and_barrier(comm *c)
{
    double v[3] = {1.0, (double)c->rank, 0.5};
    CHECK(comm_allreduce_host(c, v, 3) == 0, "allreduce_host");
    double want1 = (double)c->size * (c->size - 1) / 2;
    CHECK(v[0] == c->size && v[1] == want1 && v[2] == 0.5 * c->size,
          "allreduce_host rank %d: %g %g %g", c->rank, v[0], v[1], v[2]);
    CHECK(comm_barrier(c) == 0, "barrier");
}

/* Several operations in flight at once, waited in the reverse order of starting. */
static void test_nonblocking(comm *c, size_t n)
{
    float *a = alloc_f(n), *b = alloc_f(n), *g = alloc_f(n * (size_t)c->size);
    float *rs = alloc_f(n * (size_t)c->size), *rr = alloc_f(n);
    fill(a, c->rank, 0, n);
    fill(b, c->rank, 0, n);
    fill(g + (size_t)c->rank * n, c->rank, 0, n);
    fill(rs, c->rank, 0, n * (size_t)c->size);
    comm_request *req[4] = {0};
    CHECK(comm_allreduce(c, a, n, COMM_SUM, &req[0]) == 0 && req[0], "start allreduce sum");
    CHECK(comm_allreduce(c, b, n, COMM_AVG, &req[1]) == 0 && req[1], "start allreduce avg");
    CHECK(comm_allgather(c, g, g + (size_t)c->rank * n, n, &req[2]) == 0 && req[2],
          "start allgather");
    CHECK(comm_reduce_scatter(c, rr, rs, n, COMM_SUM, &req[3]) == 0 && req[3],
          "start reduce_scatter");
    for (int k = 3; k >= 0; k--)
        CHECK(comm_wait(c, req[k]) == 0, "wait request %d", k);
    CHECK(first_bad_reduce(a, c->size, 0, n, COMM_SUM) == n, "nonblocking allreduce sum n=%zu", n);
    CHECK(first_bad_reduce(b, c->size, 0, n, COMM_AVG) == n, "nonblocking allreduce avg n=%zu", n);
    CHECK(first_bad_gather(g, c->size, n) == n * (size_t)c->size, "nonblocking allgather n=%zu", n);
    CHECK(first_bad_reduce(rr, c->size, (size_t)c->rank * n, n, COMM_SUM) == n,
          "nonblocking reduce_scatter n=%zu", n);
    free(a), free(b), free(g), free(rs), free(rr);
}

static void run_suite(comm *c)
{
    static const size_t sizes[] = {1, 7, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        test_allreduce(c, n, COMM_SUM);
        test_allreduce(c, n, COMM_AVG);
        test_reduce_scatter(c, n, COMM_SUM);
        test_reduce_scatter(c, n, COMM_AVG);
        test_allgather(c, n, 0);
        test_allgather(c, n, 1);
        test_broadcast(c, n);
        test_nonblocking(c, n);
    }
    test_host_and_barrier(c);
}

static void test_errors(comm *c)
{
    char byte = 0;
    loom_error_clear();
    CHECK(comm_broadcast(c, &byte, 1, c->size, NULL) == -1 && strstr(loom_error(), "root"),
          "broadcast from a root that does not exist must fail");
    CHECK(comm_init("carrier-pigeon", NULL, NULL, NULL) == NULL &&
              strstr(loom_error(), "carrier-pigeon") && strstr(loom_error(), "self") &&
              strstr(loom_error(), "mpi") && strstr(loom_error(), "nccl"),
          "unknown kind must fail and list the kinds");
#ifndef LOOM_HAVE_MPI
    CHECK(comm_init("mpi", NULL, NULL, NULL) == NULL && strstr(loom_error(), "without MPI"),
          "kind mpi in a build without MPI must fail saying so");
#endif
#ifndef LOOM_HAVE_NCCL
    CHECK(comm_init("nccl", NULL, NULL, NULL) == NULL && strstr(loom_error(), "without NCCL"),
          "kind nccl in a build without NCCL must fail saying so");
#endif
}

/* comm_launched_by_mpi reads only the environment: check its rules directly. */
static void test_launch_detection(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                                       "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    CHECK(comm_launched_by_mpi() == 0, "no launcher variables: not launched");
    setenv("SLURM_NTASKS", "4", 1);
    CHECK(comm_launched_by_mpi() == 1, "SLURM_NTASKS=4: launched");
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    CHECK(comm_launched_by_mpi() == 0, "mpirun -np 1 inside a 4-task allocation: one rank");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(comm_launched_by_mpi() == 1, "OMPI_COMM_WORLD_SIZE=2: launched");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("SLURM_NTASKS");
}

int main(int argc, char **argv)
{
    /* test_comm KIND TRANSPORT SIZE: comm_init(KIND) must pick TRANSPORT with SIZE ranks. */
    if (argc != 4) {
        fprintf(stderr, "usage: test_comm auto|self|mpi self|mpi SIZE\n");
        return 2;
    }
    const char *kind = argv[1], *transport = argv[2];
    int expect_size = atoi(argv[3]);
    log_set_quiet(1);
    int launched = comm_launched_by_mpi();
    comm *c = comm_init(kind, &argc, &argv, NULL);
    if (!c) {
        fprintf(stderr, "FAIL: comm_init(%s): %s\n", kind, loom_error());
        return 1;
    }
    CHECK(strcmp(c->ops->name, transport) == 0, "comm_init(%s) chose %s, expected %s", kind,
          c->ops->name, transport);
    CHECK(c->size == expect_size, "size %d, expected %d", c->size, expect_size);
    CHECK(launched == (expect_size > 1), "comm_launched_by_mpi()=%d with %d ranks", launched,
          expect_size);
    CHECK(c->local_size >= 1 && c->local_rank >= 0 && c->local_rank < c->local_size &&
              c->local_size <= c->size,
          "local rank %d of %d", c->local_rank, c->local_size);
    CHECK(c->timeout_s > 0, "a default timeout is set");
    run_suite(c);
#ifdef LOOM_HAVE_MPI
    if (strcmp(transport, "mpi") == 0) {
        /* Again with tiny chunks, so 1000003 elements go through the >INT_MAX split path. */
        comm_mpi_set_max_chunk(c, 4099);
        run_suite(c);
    }
#endif
    test_errors(c);
    if (c->rank == 0 && strcmp(transport, "self") == 0)
        test_launch_detection();
    double f = failures;
    if (comm_allreduce_host(c, &f, 1) != 0) /* every rank fails if any rank failed */
        f = 1;
    if (c->rank == 0)
        printf("%s: %s on %d rank(s)\n", f == 0 ? "PASS" : "FAIL", transport, c->size);
    comm_destroy(c);
    return f == 0 ? 0 : 1;
}
