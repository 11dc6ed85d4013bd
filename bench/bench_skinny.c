/* bench_skinny.c: a decode step's products (rows x a weight's rows, NT) on loom's few-rows kernel
 * (cpu_skinny.c) against OpenBLAS's sgemm on the same operands and threads, alternated, GFLOP/s
 * and the ratio. SmolLM2-135M's shapes (q/o 576x576, k/v 192x576, gate/up 1536x576, down
 * 576x1536, head 49152x576) at 1-64 rows. Each shape is timed twice: with its weight in cache
 * (one weight, called repeatedly) and from memory (enough distinct copies to pass 512 MB, as a
 * decode step meets each weight once). Usage: bench_skinny [THREADS [ROUNDS [avx2]]] (avx2: that
 * kernel, on a CPU that also has AVX-512). No asserts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __APPLE__
#define BENCH_SET_THREADS(n) ((void)(n)) /* Accelerate picks its own */
#else
#include <cblas.h>
#define BENCH_SET_THREADS(n) openblas_set_num_threads(n)
#endif

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_skinny.h"
#include "bench/bench_clock.h"

typedef struct {
    const char *what;
    int N, K;
} weight;

static const weight weights[] = {{"q, o", 576, 576},      {"k, v", 192, 576},
                                 {"gate, up", 1536, 576}, {"down", 576, 1536},
                                 {"head", 49152, 576}};
static const int rows[] = {1, 2, 8, 16, 32, 40, 48, 64};

/* Seconds per call of one side over `reps` calls cycling through `nw` weights. */
static double time_side(int skinny, int isa, int threads, int M, int N, int K, const float *A,
                        float **W, int nw, float *C, int reps)
{
    double t = bench_now();
    for (int r = 0; r < reps; r++) {
        const float *w = W[r % nw];
        if (!skinny || !cpu_skinny_nt_isa(isa, threads, M, N, K, 1.0f, A, K, w, K, 0.0f, C, N))
            cpu_gemm_lib(CPU_GEMM_OPENBLAS, 0, 1, M, N, K, 1.0f, A, K, w, K, 0.0f, C, N);
    }
    return (bench_now() - t) / reps;
}

int main(int argc, char **argv)
{
    cpu_blas_ensure_fast_kernel(argv);
    int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 3;
    int isa = cpu_skinny_isa();
    if (argc > 3 && strcmp(argv[3], "avx2") == 0 && isa >= CPU_SKINNY_AVX2) isa = CPU_SKINNY_AVX2;
    if (threads < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_skinny [THREADS [ROUNDS [avx2]]]\n");
        return 2;
    }
    BENCH_SET_THREADS(threads);
    cpu_gemm_set_threads(threads);
    printf("few-rows kernel: %s; OpenBLAS %s; %d threads; best of %d alternated rounds\n",
           isa == CPU_SKINNY_AVX512 ? "avx512" : isa == CPU_SKINNY_AVX2 ? "avx2" : "none (sgemm)",
           cpu_blas_corename(), threads, rounds);
    printf("%-9s %5s %6s %5s | %9s %9s %6s | %9s %9s %6s\n", "weight", "rows", "N", "K",
           "cache sk", "openblas", "ratio", "mem sk", "openblas", "ratio");
    for (size_t w = 0; w < sizeof weights / sizeof *weights; w++) {
        int N = weights[w].N, K = weights[w].K;
        size_t nk = (size_t)N * K;
        int nw = (int)(((size_t)512 << 20) / (nk * sizeof(float))) + 1;
        float **W = malloc((size_t)nw * sizeof *W);
        for (int i = 0; i < nw; i++) {
            W[i] = malloc(nk * sizeof(float));
            for (size_t j = 0; j < nk; j++) W[i][j] = (float)((j * 7 + i) % 13) * 0.01f - 0.06f;
        }
        for (size_t m = 0; m < sizeof rows / sizeof *rows; m++) {
            int M = rows[m];
            float *A = malloc((size_t)M * K * sizeof(float));
            float *C = malloc((size_t)M * N * sizeof(float));
            for (size_t j = 0; j < (size_t)M * K; j++) A[j] = (float)(j % 11) * 0.01f - 0.05f;
            double flop = 2.0 * M * N * K, best[4] = {1e30, 1e30, 1e30, 1e30};
            int reps = (int)(2e8 / flop) + 2;
            for (int r = 0; r < rounds; r++)
                for (int s = 0; s < 2; s++) {
                    int side = (r + s) % 2; /* alternate which goes first */
                    double tc = time_side(!side, isa, threads, M, N, K, A, W, 1, C, reps);
                    double tm = time_side(!side, isa, threads, M, N, K, A, W, nw, C, nw);
                    if (tc < best[side]) best[side] = tc;
                    if (tm < best[2 + side]) best[2 + side] = tm;
                }
            printf("%-9s %5d %6d %5d | %9.1f %9.1f %5.2fx | %9.1f %9.1f %5.2fx\n", weights[w].what,
                   M, N, K, flop / best[0] * 1e-9, flop / best[1] * 1e-9, best[1] / best[0],
                   flop / best[2] * 1e-9, flop / best[3] * 1e-9, best[3] / best[2]);
            free(A), free(C);
        }
        for (int i = 0; i < nw; i++) free(W[i]);
        free(W);
    }
    printf("(GFLOP/s; cache: one weight called again and again; mem: %s)\n",
           "distinct copies past 512 MB, each met once per pass");
    return 0;
}
