/* bench_sgemm.c: sgemm GFLOP/s through the CPU backend for the matmul shapes of one GPT-2 124M
 * training step at B*T = 1024 tokens (forward, dinp and dweight of each linear layer), one column
 * per installed library (OpenBLAS, oneDNN, BLIS), each over the square 2048^3 rate. No asserts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm.h"
#include "base/error.h"
#include "base/log.h"
#include "bench/bench_clock.h"

extern const backend_entry cpu_backend_entry;

typedef struct {
    const char *what;
    int M, N, K, tA, tB;
    float beta;
    int per_step; /* how many times a GPT-2 124M step runs this shape */
} shape;

/* Best GFLOP/s over repetitions lasting at least min_s (and at least 2 timed runs). */
static double bench_shape(backend *be, const shape *s, double min_s)
{
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *a = backend_alloc(be, na * 4), *b = backend_alloc(be, nb * 4),
          *c = backend_alloc(be, nc * 4);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_sgemm: %s\n", loom_error());
        exit(1);
    }
    backend_fill(be, a, 0.01f, na);
    backend_fill(be, b, 0.02f, nb);
    backend_matmul(be, c, a, b, s->M, s->N, s->K, s->tA, s->tB, 1.0f, s->beta); /* warm-up */
    double best = 1e30, t_all = bench_now();
    for (int it = 0; it < 2 || bench_now() - t_all < min_s; it++) {
        double t0 = bench_now();
        backend_matmul(be, c, a, b, s->M, s->N, s->K, s->tA, s->tB, 1.0f, s->beta);
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    backend_free(be, a), backend_free(be, b), backend_free(be, c);
    return 2.0 * s->M * (double)s->N * s->K / best / 1e9;
}

int main(int argc, char **argv)
{
    cpu_blas_ensure_fast_kernel(argv);
    /* --peak [THREADS]: only the calibrated sgemm rate, one line */
    int peak_only = argc > 1 && strcmp(argv[1], "--peak") == 0;
    if (peak_only) argc--, argv++;
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    double min_s = argc > 2 ? atof(argv[2]) : 0.3;
    log_set_quiet(1);
    backend_config cfg = {threads, 0, BACKEND_FP32, 0};
    backend *be = cpu_backend_entry.create(&cfg);
    if (!be) {
        fprintf(stderr, "bench_sgemm: %s\n", loom_error());
        return 1;
    }
    if (peak_only) {
        printf("sgemm_gflops %.1f\n", cpu_blas_calibrate(backend_cfg(be)->threads, 0) / 1e9);
        backend_destroy(be);
        return 0;
    }
    const int T = 1024, L = 12; /* tokens per step, layers */
    /* linear layers (out, in): y = x W^T is (T,out,in) transB; dx = dy W is (T,in,out);
     * dW += dy^T x is (out,in,T) transA with beta 1. */
    const struct {
        const char *name;
        int out, in, per_step;
    } lin[] = {{"attn.qkv", 2304, 768, L},
               {"attn.proj", 768, 768, L},
               {"mlp.fc", 3072, 768, L},
               {"mlp.proj", 768, 3072, L},
               {"lm_head", 50304, 768, 1}};
    shape sh[16];
    int ns = 0;
    for (int i = 0; i < 5; i++) {
        sh[ns++] = (shape){lin[i].name, T, lin[i].out, lin[i].in, 0, 1, 0.0f, lin[i].per_step};
        sh[ns++] = (shape){"  dinp", T, lin[i].in, lin[i].out, 0, 0, 0.0f, lin[i].per_step};
        sh[ns++] = (shape){"  dweight", lin[i].out, lin[i].in, T, 1, 0, 1.0f, lin[i].per_step};
    }
    int libs[CPU_GEMM_COUNT], nl = 0;
    for (int i = 0; i < CPU_GEMM_COUNT; i++) {
        if (cpu_gemm_available(i)) libs[nl++] = i;
        else printf("%s: not installed (apt-get install %s)\n", cpu_gemm_lib_name(i),
                    cpu_gemm_lib_package(i));
    }
    /* the sgemm rate of the library the race or LOOM_GEMM picks, before any forcing */
    double peak = cpu_blas_calibrate(backend_cfg(be)->threads, 0) / 1e9;
    printf("bench_sgemm: %s, kernel %s, calibrated peak %.1f GFLOP/s (%s)\n",
           backend_description(be), cpu_blas_corename(), peak,
           cpu_gemm_lib_name(cpu_gemm_choose(backend_cfg(be)->threads)));
    shape sq = {"square", 2048, 2048, 2048, 0, 0, 0.0f, 0};
    double sq_rate[CPU_GEMM_COUNT];
    for (int l = 0; l < nl; l++) cpu_gemm_force(libs[l]), sq_rate[l] = bench_shape(be, &sq, min_s);
    printf("%-10s %6s %6s %6s %3s %3s", "shape", "M", "N", "K", "tA", "tB");
    for (int l = 0; l < nl; l++) printf(" %9s %7s", cpu_gemm_lib_name(libs[l]), "/square");
    printf("\n%-10s %6d %6d %6d %3d %3d", sq.what, sq.M, sq.N, sq.K, 0, 0);
    for (int l = 0; l < nl; l++) printf(" %9.1f %7.2f", sq_rate[l], 1.0);
    printf("\n");
    double flops = 0.0, secs[CPU_GEMM_COUNT] = {0};
    for (int i = 0; i < ns; i++) {
        double f = 2.0 * sh[i].M * (double)sh[i].N * sh[i].K * sh[i].per_step;
        flops += f;
        printf("%-10s %6d %6d %6d %3d %3d", sh[i].what, sh[i].M, sh[i].N, sh[i].K, sh[i].tA,
               sh[i].tB);
        for (int l = 0; l < nl; l++) { /* the libraries alternate shape by shape */
            cpu_gemm_force(libs[l]);
            double r = bench_shape(be, &sh[i], min_s);
            secs[l] += f / (r * 1e9);
            printf(" %9.1f %7.2f", r, r / sq_rate[l]);
        }
        printf("\n");
        fflush(stdout);
    }
    for (int l = 0; l < nl; l++)
        printf("%s: one step's matmuls: %.1f GFLOP in %.3f s = %.1f GFLOP/s, %.2f of square\n",
               cpu_gemm_lib_name(libs[l]), flops / 1e9, secs[l], flops / secs[l] / 1e9,
               flops / secs[l] / 1e9 / sq_rate[l]);
    backend_destroy(be);
    return 0;
}
