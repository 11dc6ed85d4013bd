/* test_nccl.c: the nccl transport (parallel/comm_nccl.c) on cuda device buffers, run under mpirun
 * with one rank per GPU: allreduce sum/avg, reduce_scatter, allgather (also in place), broadcast,
 * host allreduce, barrier, empty and blocking calls. Argument "own": the transport is never attached
 * to the backend (comm_attach_device) and keeps its own stream. Argument "stall": rank 1 stops
 * answering; rank 0 must time out with a message naming the collective and abort the job (42).
 * Exits 77 without enough GPUs. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "parallel/comm.h"

extern const backend_entry cuda_backend_entry;

static int g_fail;

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void check_close(const char *what, int rank, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-6f * (1.0f + fabsf(want[i])))) {
            fprintf(stderr, "FAIL: rank %d: %s[%zu] = %g, want %g\n", rank, what, i, got[i], want[i]);
            g_fail++;
            return;
        }
}

/* Device buffer from host values; the event orders the comm stream after the upload. */
static float *upload(backend *be, backend_event *ev, const float *h, size_t n)
{
    float *d = backend_alloc(be, n * sizeof(float));
    if (!d) return NULL;
    backend_copy_h2d(be, d, h, n * sizeof(float));
    backend_event_record(be, ev);
    return d;
}

static void test_allreduce(backend *be, comm *c, backend_event *ev, comm_op op, int blocking)
{
    const size_t n = 1037;
    float *h = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    double ranks_sum = c->size * (c->size + 1) / 2.0; /* sum of (rank + 1) */
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)((c->rank + 1) * (int)(i % 7 + 1));
        want[i] = (float)(ranks_sum * (double)(i % 7 + 1) / (op == COMM_AVG ? c->size : 1));
    }
    float *d = upload(be, ev, h, n);
    comm_request *req = NULL;
    if (!d || comm_allreduce(c, d, n, op, blocking ? NULL : &req) != 0 ||
        (req && comm_test(c, req) < 0) || comm_wait(c, req) != 0) {
        fprintf(stderr, "FAIL: rank %d: allreduce: %s\n", c->rank, loom_error());
        g_fail++;
    } else {
        backend_copy_d2h(be, h, d, n * sizeof(float));
        check_close(op == COMM_AVG ? "allreduce avg" : "allreduce sum", c->rank, h, want, n);
    }
    backend_free(be, d);
    free(h);
    free(want);
}

/* send[j] = 1000 rank + j; rank r receives sum over ranks of send[r count + i]. */
static void test_reduce_scatter(backend *be, comm *c, backend_event *ev)
{
    const size_t count = 301, total = count * (size_t)c->size;
    float *h = malloc(total * sizeof(float)), *want = malloc(count * sizeof(float));
    for (size_t j = 0; j < total; j++) h[j] = (float)(1000 * c->rank + (int)j);
    double ranks = c->size * (c->size - 1) / 2.0;
    for (size_t i = 0; i < count; i++)
        want[i] = (float)(1000.0 * ranks + (double)c->size * (double)((size_t)c->rank * count + i));
    float *send = upload(be, ev, h, total), *recv = backend_alloc(be, count * sizeof(float));
    comm_request *req = NULL;
    if (!send || !recv || comm_reduce_scatter(c, recv, send, count, COMM_SUM, &req) != 0 ||
        comm_wait(c, req) != 0) {
        fprintf(stderr, "FAIL: rank %d: reduce_scatter: %s\n", c->rank, loom_error());
        g_fail++;
    } else {
        backend_copy_d2h(be, h, recv, count * sizeof(float));
        check_close("reduce_scatter", c->rank, h, want, count);
    }
    backend_free(be, send);
    backend_free(be, recv);
    free(h);
    free(want);
}

/* Rank r contributes 10 r + i; in place when send is recv's own block. */
static void test_allgather(backend *be, comm *c, backend_event *ev, int in_place)
{
    const size_t count = 77, total = count * (size_t)c->size;
    float *h = calloc(total, sizeof(float)), *want = malloc(total * sizeof(float));
    for (size_t j = 0; j < total; j++) want[j] = (float)(10 * (int)(j / count) + (int)(j % count));
    for (size_t i = 0; i < count; i++) h[(size_t)c->rank * count + i] = want[(size_t)c->rank * count + i];
    float *recv = upload(be, ev, h, total), *send = NULL;
    if (recv) send = in_place ? recv + (size_t)c->rank * count : upload(be, ev, h + (size_t)c->rank * count, count);
    comm_request *req = NULL;
    if (!recv || !send || comm_allgather(c, recv, send, count, &req) != 0 || comm_wait(c, req) != 0) {
        fprintf(stderr, "FAIL: rank %d: allgather: %s\n", c->rank, loom_error());
        g_fail++;
    } else {
        backend_copy_d2h(be, h, recv, total * sizeof(float));
        check_close(in_place ? "allgather in place" : "allgather", c->rank, h, want, total);
    }
    if (!in_place) backend_free(be, send);
    backend_free(be, recv);
    free(h);
    free(want);
}

static void test_broadcast(backend *be, comm *c, backend_event *ev)
{
    const int root = c->size - 1;
    unsigned char h[13], *d = backend_alloc(be, sizeof h);
    for (int i = 0; i < 13; i++) h[i] = (unsigned char)(c->rank == root ? 200 + i : 0);
    comm_request *req = NULL;
    if (d) {
        backend_copy_h2d(be, d, h, sizeof h);
        backend_event_record(be, ev);
    }
    if (!d || comm_broadcast(c, d, sizeof h, root, &req) != 0 || comm_wait(c, req) != 0) {
        fprintf(stderr, "FAIL: rank %d: broadcast: %s\n", c->rank, loom_error());
        g_fail++;
    } else {
        backend_copy_d2h(be, h, d, sizeof h);
        for (int i = 0; i < 13; i++)
            if (h[i] != 200 + i) {
                fprintf(stderr, "FAIL: rank %d: broadcast byte %d = %d, want %d\n", c->rank, i, h[i], 200 + i);
                g_fail++;
                break;
            }
    }
    backend_free(be, d);
}

static void test_host_ops(comm *c)
{
    double v[2] = {c->rank + 1.0, 1.0};
    if (comm_allreduce_host(c, v, 2) != 0 || v[0] != c->size * (c->size + 1) / 2.0 || v[1] != c->size) {
        fprintf(stderr, "FAIL: rank %d: allreduce_host gave %g %g (%s)\n", c->rank, v[0], v[1], loom_error());
        g_fail++;
    }
    if (comm_barrier(c) != 0) {
        fprintf(stderr, "FAIL: rank %d: barrier: %s\n", c->rank, loom_error());
        g_fail++;
    }
    comm_request *req = (comm_request *)1;
    if (comm_allreduce(c, NULL, 0, COMM_SUM, &req) != 0 || req != NULL) {
        fprintf(stderr, "FAIL: rank %d: an empty allreduce must finish at once\n", c->rank);
        g_fail++;
    }
}

/* Rank 1 never joins the allreduce: rank 0's wait must end at the deadline, not hang. */
static int test_stall(backend *be, comm *c, backend_event *ev)
{
    if (c->size < 2) {
        printf("SKIP: the stall test needs 2 ranks (2 CUDA devices)\n");
        return 77;
    }
    c->timeout_s = 2.0;
    float h[64] = {0};
    float *d = upload(be, ev, h, 64);
    if (c->rank == 1) {
        sleep(120); /* stops answering; rank 0's abort ends this process */
        comm_abort(c, 1);
    }
    comm_request *req = NULL;
    int rc = d ? comm_allreduce(c, d, 64, COMM_SUM, &req) : -1;
    if (rc == 0) rc = comm_wait(c, req);
    int ok = rc != 0 && strstr(loom_error(), "timed out") && strstr(loom_error(), "allreduce");
    fprintf(stderr, "%s: rank 0: %s\n", ok ? "PASS" : "FAIL", loom_error());
    comm_abort(c, ok ? 42 : 1);
    return 1;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    int local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    if (ndev < local_size) { /* NCCL refuses two ranks on one GPU */
        printf("SKIP: %d ranks on this node need %d CUDA devices, found %d\n", local_size, local_size, ndev);
        return 77;
    }
    log_set_quiet(1);
    backend_config cfg = {.threads = 0, .device_index = local_rank, .precision = BACKEND_FP32, .allow_tf32 = 1};
    backend *be = cuda_backend_entry.create(&cfg);
    if (!be) {
        fprintf(stderr, "FAIL: cuda backend: %s\n", loom_error());
        return 1;
    }
    int own = argc > 1 && strcmp(argv[1], "own") == 0;
    int stall = argc > 1 && strcmp(argv[1], "stall") == 0;
    comm *c = comm_init("nccl", &argc, &argv, "cuda");
    comm_device dev = {backend_native_stream(be, 1), NULL, NULL};
    if (!c || (!own && comm_attach_device(c, &dev) != 0)) {
        fprintf(stderr, "FAIL: comm_init(nccl): %s\n", loom_error());
        backend_destroy(be);
        return 1;
    }
    c->timeout_s = 60;
    backend_event *ev = backend_event_create(be);
    if (stall) return test_stall(be, c, ev);
    test_allreduce(be, c, ev, COMM_SUM, 0);
    test_allreduce(be, c, ev, COMM_AVG, 0);
    test_allreduce(be, c, ev, COMM_SUM, 1);
    test_reduce_scatter(be, c, ev);
    test_allgather(be, c, ev, 0);
    test_allgather(be, c, ev, 1);
    test_broadcast(be, c, ev);
    test_host_ops(c);
    backend_event_destroy(be, ev);
    int rank = c->rank, size = c->size;
    comm_destroy(c);
    backend_destroy(be);
    if (g_fail) return 1;
    printf("PASS: nccl rank %d of %d\n", rank, size);
    return 0;
}
