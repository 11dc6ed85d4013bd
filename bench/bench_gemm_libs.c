/* bench_gemm_libs.c: sgemm GFLOP/s of each GEMM library present (OpenBLAS, BLIS, oneDNN), side by
 * side and alternated, on the matmul shapes of loom's models (forward, dx, dW orientations). Loads
 * each with dlopen (a missing one is named with its package); links nothing of loom. No asserts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_gemm.h" /* the dlsym'd entry points' types only: nothing of loom is linked */

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* cblas enum values */
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
typedef struct {
    const char *name, *install;
    void *h;
    cblas_sgemm_fn cblas;
    bli_sgemm_fn bli;
    dnnl_sgemm_fn dnnl;
    void (*omp_set_threads)(int);
    int (*dnnl_isa)(void);
    void (*set_threads)(int);
    void (*bli_set_threads)(int64_t);
    const char *(*corename)(void);
    int (*arch_id)(void);
    const char *(*arch_string)(int);
} gemm_lib;

typedef struct {
    const char *model, *what;
    int M, N, K, tA, tB;
    double per_step; /* times one training step runs it */
} shape;

/* Wall time, or with one thread the process's CPU time: on a shared machine that leaves out the
 * time other processes hold the core (with more threads it would count a partner's barrier spin). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void lib_gemm(const gemm_lib *l, const shape *s, const float *a, const float *b, float *c,
                     float beta)
{
    int lda = s->tA ? s->M : s->K, ldb = s->tB ? s->K : s->N;
    if (l->dnnl) {
        l->dnnl(s->tA ? 'T' : 'N', s->tB ? 'T' : 'N', s->M, s->N, s->K, 1.0f, a, lda, b, ldb, beta,
                c, s->N);
    } else if (l->bli) {
        float one = 1.0f;
        l->bli(s->tA ? 8 : 0, s->tB ? 8 : 0, s->M, s->N, s->K, &one, a, lda, 1, b, ldb, 1, &beta,
               c, s->N, 1);
    } else {
        l->cblas(ROW_MAJOR, s->tA ? TRANS : NO_TRANS, s->tB ? TRANS : NO_TRANS, s->M, s->N, s->K,
                 1.0f, a, lda, b, ldb, beta, c, s->N);
    }
}

static int lib_open(gemm_lib *l, const char *const *sonames)
{
    for (int i = 0; sonames[i] && !l->h; i++) l->h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!l->h) return -1;
    l->cblas = (cblas_sgemm_fn)dlsym(l->h, "cblas_sgemm");
    l->bli = (bli_sgemm_fn)dlsym(l->h, "bli_sgemm");
    l->set_threads = (void (*)(int))dlsym(l->h, "openblas_set_num_threads");
    l->bli_set_threads = (void (*)(int64_t))dlsym(l->h, "bli_thread_set_num_threads");
    l->corename = (const char *(*)(void))dlsym(l->h, "openblas_get_corename");
    l->arch_id = (int (*)(void))dlsym(l->h, "bli_arch_query_id");
    l->arch_string = (const char *(*)(int))dlsym(l->h, "bli_arch_string");
    l->dnnl = (dnnl_sgemm_fn)dlsym(l->h, "dnnl_sgemm");
    l->dnnl_isa = (int (*)(void))dlsym(l->h, "dnnl_get_effective_cpu_isa");
    l->omp_set_threads = (void (*)(int))dlsym(l->h, "omp_set_num_threads");
    return l->cblas || l->bli || l->dnnl ? 0 : -1;
}

/* Best seconds of one call over runs lasting min_s (at least 2). */
static double time_one(const gemm_lib *l, const shape *s, const float *a, const float *b, float *c,
                       double min_s)
{
    double best = 1e30, t_all = now();
    for (int it = 0; it < 2 || now() - t_all < min_s; it++) {
        double t0 = now();
        lib_gemm(l, s, a, b, c, s->tA ? 1.0f : 0.0f); /* dW accumulates: beta 1 */
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define MAXSH 64
#define NLIB 3
static int add_linear(shape *sh, int n, const char *model, const char *what, int T, int out,
                      int in, double count, int with_dw)
{
    sh[n++] = (shape){model, what, T, out, in, 0, 1, count};        /* y = x W^T */
    sh[n++] = (shape){model, "  dx", T, in, out, 0, 0, count};      /* dx = dy W */
    if (with_dw) sh[n++] = (shape){model, "  dW", out, in, T, 1, 0, count}; /* dW += dy^T x */
    return n;
}

static int build_shapes(shape *sh)
{
    int n = 0;
    /* SmolLM2-135M LoRA (frozen base: forward and dx only), B*T = 2048, head on 512 rows */
    n = add_linear(sh, n, "smol-lora", "q,o", 2048, 576, 576, 60, 0);
    n = add_linear(sh, n, "smol-lora", "k,v", 2048, 192, 576, 60, 0);
    n = add_linear(sh, n, "smol-lora", "gate,up", 2048, 1536, 576, 60, 0);
    n = add_linear(sh, n, "smol-lora", "down", 2048, 576, 1536, 30, 0);
    n = add_linear(sh, n, "smol-lora", "head", 512, 49152, 576, 1, 0);
    /* GPT-2 124M full training, B*T = 1024 */
    n = add_linear(sh, n, "gpt2-124m", "qkv", 1024, 2304, 768, 12, 1);
    n = add_linear(sh, n, "gpt2-124m", "attn.proj", 1024, 768, 768, 12, 1);
    n = add_linear(sh, n, "gpt2-124m", "fc", 1024, 3072, 768, 12, 1);
    n = add_linear(sh, n, "gpt2-124m", "mlp.proj", 1024, 768, 3072, 12, 1);
    n = add_linear(sh, n, "gpt2-124m", "head", 1024, 50304, 768, 1, 1);
    /* gpt2-small6 (6 layers, 384 wide) full training, B*T = 2048 */
    n = add_linear(sh, n, "small6", "qkv", 2048, 1152, 384, 6, 1);
    n = add_linear(sh, n, "small6", "attn.proj", 2048, 384, 384, 6, 1);
    n = add_linear(sh, n, "small6", "fc", 2048, 1536, 384, 6, 1);
    n = add_linear(sh, n, "small6", "mlp.proj", 2048, 384, 1536, 6, 1);
    n = add_linear(sh, n, "small6", "head", 2048, 50304, 384, 1, 1);
    return n;
}

static void lib_set_threads(const gemm_lib *l, int n)
{
    if (l->set_threads) l->set_threads(n);
    if (l->bli_set_threads) l->bli_set_threads(n);
    if (l->dnnl && l->omp_set_threads) l->omp_set_threads(n); /* oneDNN takes OpenMP's count */
}

static void print_libs(gemm_lib *libs, int nl)
{
    for (int i = 0; i < nl; i++) {
        if (libs[i].corename) printf("%s: kernel %s\n", libs[i].name, libs[i].corename());
        else if (libs[i].dnnl)
            printf("%s: dnnl_sgemm, ISA %#x (0x27 avx512_core, 0xe7 +bf16; ONEDNN_MAX_CPU_ISA "
                   "caps it)\n", libs[i].name, libs[i].dnnl_isa ? libs[i].dnnl_isa() : -1);
        else if (libs[i].arch_string)
            printf("%s: sub-configuration %s (BLIS_ARCH_TYPE forces one)\n", libs[i].name,
                   libs[i].arch_string(libs[i].arch_id()));
    }
}

/* Rates (GFLOP/s) of shape s for each library: the median over `rounds` rounds, the library order
 * alternating between rounds so a burst of load hits both alike. */
static void bench_shape(gemm_lib *libs, int nl, const shape *s, int rounds, double min_s,
                        double *med)
{
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gemm_libs: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < na; i++) a[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)((i * 5) % 11) * 0.01f;
    memset(c, 0, nc * 4);
    double r[NLIB][16];
    double ref = 0.0; /* warm-up, and a check that each library computes the same product */
    for (int i = 0; i < nl; i++) {
        lib_gemm(&libs[i], s, a, b, c, 0.0f);
        double sum = 0.0;
        for (size_t j = 0; j < nc; j += 97) sum += c[j] * (double)(1 + j % 5);
        if (i == 0) ref = sum;
        else if (fabs(sum - ref) > 1e-4 * fabs(ref))
            printf("%s differs from %s on %dx%dx%d: %g vs %g\n", libs[i].name, libs[0].name,
                   s->M, s->N, s->K, sum, ref);
    }
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < nl; j++) {
            int i = (k & 1) ? nl - 1 - j : j;
            r[i][k] = 2.0 * s->M * (double)s->N * s->K / time_one(&libs[i], s, a, b, c, min_s) / 1e9;
        }
    for (int i = 0; i < nl; i++) {
        qsort(r[i], (size_t)rounds, sizeof(double), cmp_dbl);
        med[i] = r[i][rounds / 2];
    }
    free(a), free(b), free(c);
}

/* One row per shape (rates, then each library's rate over the first's), and per model the time
 * its step's matmuls would take at those rates. */
static void run_table(gemm_lib *libs, int nl, int rounds, double min_s, const char *only)
{
    printf("%-10s %-10s %6s %6s %6s %2s %2s", "model", "shape", "M", "N", "K", "tA", "tB");
    for (int i = 0; i < nl; i++) printf(" %9s", libs[i].name);
    for (int i = 1; i < nl; i++) printf(" %6.6s/", libs[i].name);
    printf("\n");
    shape sh[MAXSH];
    int ns = build_shapes(sh);
    double step_f = 0, step_t[NLIB] = {0};
    for (int s = 0; s < ns; s++) {
        if (only && strcmp(only, sh[s].model) != 0) continue;
        double med[NLIB];
        bench_shape(libs, nl, &sh[s], rounds, min_s, med);
        double fl = 2.0 * sh[s].M * (double)sh[s].N * sh[s].K * sh[s].per_step;
        printf("%-10s %-10s %6d %6d %6d %2d %2d", sh[s].model, sh[s].what, sh[s].M, sh[s].N,
               sh[s].K, sh[s].tA, sh[s].tB);
        for (int i = 0; i < nl; i++) printf(" %9.1f", med[i]), step_t[i] += fl / (med[i] * 1e9);
        for (int i = 1; i < nl; i++) printf(" %7.2f", med[i] / med[0]);
        printf("\n");
        step_f += fl;
        if (s + 1 == ns || strcmp(sh[s + 1].model, sh[s].model) != 0) {
            printf("%-10s %-10s %.1f GFLOP of matmuls per step:", sh[s].model, "step", step_f / 1e9);
            for (int i = 0; i < nl; i++) printf(" %s %.3f s", libs[i].name, step_t[i]);
            for (int i = 1; i < nl; i++) printf(", %s speed-up %.2f", libs[i].name, step_t[0] / step_t[i]);
            printf("\n");
            fflush(stdout);
            step_f = 0;
            for (int i = 0; i < nl; i++) step_t[i] = 0;
        }
    }
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
    double min_s = argc > 3 ? atof(argv[3]) : 0.05;
    const char *only = argc > 4 ? argv[4] : NULL; /* one model's shapes */
    if (rounds < 1 || rounds > 16) rounds = 5;
    if (threads == 1 && !getenv("BENCH_WALL")) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    static const char *const ob[] = {"libopenblas.so.0", NULL};
    static const char *const bl[] = {"libblis.so.4", "libblis-mt.so.4", NULL};
    static const char *const dn[] = {"libdnnl.so.2", "libdnnl.so.3", NULL};
    gemm_lib all[NLIB] = {{.name = "openblas", .install = "apt-get install libopenblas0-openmp"},
                          {.name = "blis", .install = "apt-get install libblis4-openmp"},
                          {.name = "onednn", .install = "apt-get install libdnnl2"}};
    const char *const *so[NLIB] = {ob, bl, dn};
    gemm_lib libs[NLIB];
    int nl = 0;
    for (int i = 0; i < NLIB; i++) {
        if (lib_open(&all[i], so[i]) == 0) libs[nl++] = all[i];
        else printf("%s: not found (%s)\n", all[i].name, all[i].install);
    }
    if (nl == 0) return 1;
    for (int i = 0; i < nl; i++) lib_set_threads(&libs[i], threads);
    print_libs(libs, nl);
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    if (f) fclose(f);
    printf("threads %d, median of %d alternated rounds (best call over %.2f s each), %s time, "
           "load %.2f\n", threads, rounds, min_s,
           bench_clock == CLOCK_MONOTONIC ? "wall" : "CPU", load[0]);
    run_table(libs, nl, rounds, min_s, only);
    return 0;
}
