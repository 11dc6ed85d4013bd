/* bench_needle_ops.c: the needle family's element-wise and mixing ops on the CPU backend at the
 * default config's shapes for one B 16, T 256 step (N = 4096 rows, d 768, 4 mHC lanes, the
 * Hadamard width 1024 = 32 x 32, K = 24 coefficients), each against the bytes it must move at the
 * same run's copy rate (memcpy of 64 MB: the ceiling of a pass that reads and writes memory once).
 * Rounds alternate the ops; the median per op is printed. THREADS 1 (the default) times with the
 * calling thread's CPU clock, which other processes' load does not advance (a shared machine);
 * more threads time wall-clock. Usage: bench_needle_ops [THREADS [ROUNDS]]. No asserts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "base/error.h"

extern const backend_entry cpu_backend_entry;

enum { N = 4096, D = 768, LANES = 4, W = LANES * D, NH = 1024, KA = 32, KC = 2 * LANES + LANES * LANES };
#define MAX_ROUNDS 100

static int g_threads = 1;

static double bench_clock(void)
{
    struct timespec ts;
    clock_gettime(g_threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float *buf(backend *be, size_t n, float scale)
{
    float *p = backend_alloc(be, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_needle_ops: %s\n", loom_error());
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = scale * ((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    return p;
}

typedef struct ops_state {
    backend *be;
    float *X, *Xo, *dX, *u, *y, *dy, *du, *g;      /* streams (N, W), rows (N, D) */
    float *z, *hc, *dz, *dh, *alpha, *bias;        /* mHC coefficients (N, K) */
    float *z0, *z1, *cond, *dcond, *kA, *kB, *dvec; /* Hadamard width (N, NH) */
    float *h, *rstd, *w, *dw, *big, *big2;
    int32_t *perm;
} ops_state;

typedef struct ops_case {
    const char *name;
    double mb; /* bytes the op must read and write, MB */
    void (*run)(ops_state *s);
} ops_case;

static void run_coeffs_fwd(ops_state *s) { backend_mhc_coeffs_forward(s->be, s->hc, s->z, s->alpha, s->bias, N, LANES, 1); }
static void run_coeffs_bwd(ops_state *s) { backend_mhc_coeffs_backward(s->be, s->dz, s->dh, s->z, s->alpha, s->bias, N, LANES, 1); }
static void run_collapse(ops_state *s) { backend_mhc_collapse(s->be, s->u, s->X, s->hc, KC, N, LANES, D); }
static void run_collapse_bwd(ops_state *s) { backend_mhc_collapse_backward(s->be, s->dX, s->dh, s->du, s->X, s->hc, KC, N, LANES, D); }
static void run_expand(ops_state *s) { backend_mhc_expand(s->be, s->Xo, s->X, s->hc, s->y, N, LANES, D); }
static void run_expand_bwd(ops_state *s) { backend_mhc_expand_backward(s->be, s->dX, s->dh, s->dy, s->g, s->X, s->hc, s->y, N, LANES, D); }
static void run_kron(ops_state *s) { backend_kron_apply(s->be, s->z1, s->z0, s->kA, s->kB, N, KA, NH / KA, 0, NULL); }
static void run_kron_io(ops_state *s)
{
    const backend_kron_io io = {NULL, s->dvec, D, s->perm, NULL, NH}; /* the MLP's first: D1 pad in, P1 out */
    backend_kron_apply(s->be, s->z1, s->u, s->kA, s->kB, N, KA, NH / KA, 0, &io);
}
static void run_permute(ops_state *s) { backend_permute_cols(s->be, s->z1, s->z0, s->perm, N, NH, 0); }
static void run_permute_inv(ops_state *s) { backend_permute_cols(s->be, s->z1, s->z0, s->perm, N, NH, 1); }
static void run_scale_pad(ops_state *s) { backend_scale_cols(s->be, s->z0, s->u, s->dvec, N, D, NH); }
static void run_hada_fwd(ops_state *s) { backend_hada_mid_forward(s->be, s->z1, s->z0, s->cond, s->dvec, s->dvec, N, NH); }
static void run_hada_bwd(ops_state *s) { backend_hada_mid_backward(s->be, s->z1, s->dcond, s->z0, s->z0, s->cond, s->dvec, s->dvec, N, NH); }
static void run_a8_d(ops_state *s) { backend_fake_quant_a8(s->be, s->h, s->u, N, D); }
static void run_a8_w(ops_state *s) { backend_fake_quant_a8(s->be, s->big2, s->big, N, W); }
static void run_a8_in_place(ops_state *s) { backend_fake_quant_a8(s->be, s->h, s->h, N, D); }
static void run_rms_d(ops_state *s) { backend_rmsnorm_forward(s->be, s->h, s->rstd, s->u, s->w, N, D, 1e-6f); }
static void run_rms_w(ops_state *s) { backend_rmsnorm_forward(s->be, s->big2, s->rstd, s->big, s->w, N, W, 1e-6f); }
static void run_rms_bwd(ops_state *s) { backend_rmsnorm_backward(s->be, s->du, s->dw, s->dy, s->u, s->w, s->rstd, N, D); }
static void run_copy(ops_state *s) { memcpy(s->big2, s->big, (size_t)N * W * sizeof(float)); }

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    g_threads = argc > 1 ? atoi(argv[1]) : 1;
    const int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (g_threads < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_needle_ops [THREADS [ROUNDS (1..%d)]]\n", MAX_ROUNDS);
        return 2;
    }
    backend_config cfg = {g_threads, 0, BACKEND_FP32, 0};
    backend *be = cpu_backend_entry.create(&cfg);
    if (!be) {
        fprintf(stderr, "bench_needle_ops: %s\n", loom_error());
        return 1;
    }
    ops_state s = {.be = be};
    s.X = buf(be, (size_t)N * W, 1.0f), s.Xo = buf(be, (size_t)N * W, 1.0f), s.dX = buf(be, (size_t)N * W, 1.0f);
    s.g = buf(be, (size_t)N * W, 1.0f), s.big = buf(be, (size_t)N * W, 1.0f), s.big2 = buf(be, (size_t)N * W, 1.0f);
    s.u = buf(be, (size_t)N * D, 1.0f), s.y = buf(be, (size_t)N * D, 1.0f), s.dy = buf(be, (size_t)N * D, 1.0f);
    s.du = buf(be, (size_t)N * D, 1.0f), s.h = buf(be, (size_t)N * D, 1.0f);
    s.z = buf(be, (size_t)N * KC, 2.0f), s.hc = buf(be, (size_t)N * KC, 1.0f), s.dz = buf(be, (size_t)N * KC, 1.0f);
    s.dh = buf(be, (size_t)N * KC, 1.0f), s.alpha = buf(be, 3, 1.0f), s.bias = buf(be, KC, 1.0f);
    s.z0 = buf(be, (size_t)N * NH, 1.0f), s.z1 = buf(be, (size_t)N * NH, 1.0f), s.cond = buf(be, (size_t)N * NH, 1.0f);
    s.dcond = buf(be, (size_t)N * NH, 1.0f), s.kA = buf(be, KA * KA, 0.2f), s.kB = buf(be, (NH / KA) * (NH / KA), 0.2f);
    s.dvec = buf(be, NH, 1.0f), s.rstd = buf(be, N, 1.0f), s.w = buf(be, W, 1.0f), s.dw = buf(be, W, 1.0f);
    s.perm = backend_alloc(be, NH * sizeof(int32_t));
    for (int i = 0; i < NH; i++) s.perm[i] = (int32_t)((i * 37 + 11) % NH); /* 37 is prime to 1024 */
    const double f = sizeof(float) / 1e6, nw = (double)N * W * f, nd = (double)N * D * f, nh = (double)N * NH * f;
    const double nk = (double)N * KC * f;
    const ops_case cases[] = {
        {"copy (the ceiling: read + write)", 2 * nw, run_copy},
        {"mhc_coeffs_forward", 2 * nk, run_coeffs_fwd},
        {"mhc_coeffs_backward", 3 * nk, run_coeffs_bwd},
        {"mhc_collapse", nw + nd, run_collapse},
        {"mhc_collapse_backward", 2 * nw + 2 * nd, run_collapse_bwd},
        {"mhc_expand", 2 * nw + nd, run_expand},
        {"mhc_expand_backward", 3 * nw + 2 * nd, run_expand_bwd},
        {"kron_apply 32x32", 2 * nh, run_kron},
        {"kron_apply 32x32, scale-pad in, gather out", nd + nh, run_kron_io},
        {"permute_cols 1024 (gather)", 2 * nh, run_permute},
        {"permute_cols 1024 (scatter)", 2 * nh, run_permute_inv},
        {"scale_cols 768 -> 1024", nd + nh, run_scale_pad},
        {"hada_mid_forward", 3 * nh, run_hada_fwd},
        {"hada_mid_backward", 5 * nh, run_hada_bwd},
        {"fake_quant_a8 (N, 768)", 2 * nd, run_a8_d},
        {"fake_quant_a8 (N, 3072)", 2 * nw, run_a8_w},
        {"fake_quant_a8 (N, 768) in place", 2 * nd, run_a8_in_place},
        {"rmsnorm_forward (N, 768)", 2 * nd, run_rms_d},
        {"rmsnorm_forward (N, 3072)", 2 * nw, run_rms_w},
        {"rmsnorm_backward (N, 768)", 4 * nd, run_rms_bwd},
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    static double t[sizeof cases / sizeof cases[0]][MAX_ROUNDS];
    for (int c = 0; c < nc; c++) cases[c].run(&s); /* first touch and scratch */
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < nc; c++) {
            const double t0 = bench_clock();
            cases[c].run(&s);
            t[c][r] = bench_clock() - t0;
        }
    double med[sizeof cases / sizeof cases[0]];
    for (int c = 0; c < nc; c++) qsort(t[c], (size_t)rounds, sizeof(double), cmp_dbl), med[c] = t[c][rounds / 2];
    const double copy_rate = cases[0].mb / 1e3 / med[0];
    printf("needle ops at N %d (B 16 T 256), %d thread(s), %s clock, median of %d rounds\n", N, g_threads,
           g_threads == 1 ? "thread CPU" : "wall", rounds);
    printf("%-34s %9s %9s %9s %12s\n", "op", "ms", "MB moved", "GB/s", "of copy rate");
    for (int c = 0; c < nc; c++) {
        const double gbs = cases[c].mb / 1e3 / med[c];
        printf("%-34s %9.3f %9.1f %9.2f %12.2f\n", cases[c].name, 1e3 * med[c], cases[c].mb, gbs, gbs / copy_rate);
    }
    backend_destroy(be);
    return 0;
}
