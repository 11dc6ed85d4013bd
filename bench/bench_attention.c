/* bench_attention.c: causal attention forward and backward on the CPU backend (blocks of
 * cpu_attention.c, products on cpu_tile.c's kernel) against the sgemm rate of the same threads,
 * alternated per round: GFLOP/s of the products the causal math needs (scores and mix forward,
 * 2 T(T+1)/2 D per head and sequence each; the backward's five) and their ratio to a 1024^3
 * sgemm's. Default shapes: a SmolLM2-135M LoRA step's (B 8, T 256, 9 heads on 3 kv heads, D 64).
 * Usage: bench_attention [THREADS [ROUNDS [B T H Hkv D]]]. No asserts. */
#include <stdio.h>
#include <stdlib.h>

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#define BENCH_SET_THREADS(n) ((void)(n))
#else
#include <cblas.h>
#define BENCH_SET_THREADS(n) openblas_set_num_threads(n)
#endif

#include "backends/backend.h"
#include "base/error.h"
#include "bench/bench_clock.h"

extern const backend_entry cpu_backend_entry;

static float *buf(backend *be, size_t n)
{
    float *p = backend_alloc(be, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_attention: %s\n", loom_error());
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
    int B = 8, T = 256, H = 9, Hkv = 3, D = 64;
    if (argc > 7) B = atoi(argv[3]), T = atoi(argv[4]), H = atoi(argv[5]), Hkv = atoi(argv[6]), D = atoi(argv[7]);
    if (threads < 1 || rounds < 1 || rounds > 100 || B < 1 || T < 1 || Hkv < 1 || H % Hkv || D < 1) {
        fprintf(stderr, "usage: bench_attention [THREADS [ROUNDS [B T H Hkv D]]]\n");
        return 2;
    }
    backend_config cfg = {threads, 0, BACKEND_FP32, 0};
    backend *be = cpu_backend_entry.create(&cfg);
    if (!be) {
        fprintf(stderr, "bench_attention: %s\n", loom_error());
        return 1;
    }
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
    float *q = buf(be, nq), *k = buf(be, nk), *v = buf(be, nk), *o = buf(be, nq);
    float *lse = buf(be, (size_t)B * H * T), *dout = buf(be, nq);
    float *dq = buf(be, nq), *dk = buf(be, nk), *dv = buf(be, nk);
    const int S = 1024;
    float *sa = buf(be, (size_t)S * S), *sb = buf(be, (size_t)S * S), *sc = buf(be, (size_t)S * S);
    BENCH_SET_THREADS(threads);
    double prod = 2.0 * B * H * ((double)T * (T + 1) / 2) * D; /* one causal product's FLOPs */
    double tf[100], tb[100], ts[100];
    backend_attention_forward(be, o, lse, q, k, v, B, T, H, Hkv, D, 0); /* warm-up: scratch */
    backend_attention_backward(be, dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, D, 0);
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        backend_attention_forward(be, o, lse, q, k, v, B, T, H, Hkv, D, 0);
        double t1 = bench_now();
        backend_attention_backward(be, dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, D, 0);
        double t2 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, sa, S, sb, S, 0.0f,
                    sc, S);
        tf[r] = t1 - t0, tb[r] = t2 - t1, ts[r] = bench_now() - t2;
    }
    qsort(tf, rounds, sizeof *tf, cmp_dbl), qsort(tb, rounds, sizeof *tb, cmp_dbl);
    qsort(ts, rounds, sizeof *ts, cmp_dbl);
    double f = tf[rounds / 2], b = tb[rounds / 2], s = ts[rounds / 2];
    double sg = 2.0 * S * S * (double)S / s * 1e-9;
    printf("attention B %d T %d H %d/%d D %d, %d threads, median of %d alternated rounds\n", B, T,
           H, Hkv, D, threads, rounds);
    printf("%-10s %10s %10s %16s %8s\n", "pass", "ms", "GFLOP/s", "sgemm 1024^3", "ratio");
    printf("%-10s %10.2f %10.1f %16.1f %8.2f\n", "forward", f * 1e3, 2 * prod / f * 1e-9, sg,
           2 * prod / f * 1e-9 / sg);
    printf("%-10s %10.2f %10.1f %16.1f %8.2f\n", "backward", b * 1e3, 5 * prod / b * 1e-9, sg,
           5 * prod / b * 1e-9 / sg);
    backend_destroy(be);
    return 0;
}
