/* bench_cpu_step.c: the op sequence of one GPT-2 style training step (default 124M, B*T = 1024) on
 * the CPU backend, timed per op family, against its matmuls' own rate and the sgemm rates (square,
 * and each of the step's matmul shapes alone): where a step loses to sgemm. One layer's buffers
 * serve all layers; a benchmark, no asserts. Usage: bench_cpu_step [--sgemm] [THREADS [STEPS [L C H B T]]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_blas.h"
#include "base/error.h"
#include "base/log.h"
#include "bench/bench_clock.h"

extern const backend_entry cpu_backend_entry;

enum { F_MATMUL, F_ATTN, F_XENT, F_NORM, F_ELEM, F_EMB, F_ADAM, F_COUNT };
static const char *fam_name[F_COUNT] = {"matmul",        "attention", "softmax_xent", "norms",
                                        "gelu/bias/add", "embedding", "adamw+sumsq"};
static double fam_t[F_COUNT];
static double mm_flops;
static backend *be;

#define TIMED(fam, call)                                                                           \
    do {                                                                                           \
        double t0_ = bench_now();                                                                  \
        call;                                                                                      \
        fam_t[fam] += bench_now() - t0_;                                                           \
    } while (0)

static void mm(float *C, const float *A, const float *B, int M, int N, int K, int tA, int tB,
               float beta)
{
    TIMED(F_MATMUL, backend_matmul(be, C, A, B, M, N, K, tA, tB, 1.0f, beta));
    mm_flops += 2.0 * M * (double)N * K;
}

static float *buf(size_t n)
{
    float *p = backend_alloc(be, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_cpu_step: %s\n", loom_error());
        exit(1);
    }
    backend_fill(be, p, 0.01f, n);
    return p;
}

/* Shapes and buffers of the step (one layer's worth, reused by all layers). */
typedef struct {
    int B, T, N, C, H, D, L, V, Vr;
    size_t NC, chunk;
    float *x, *ln, *mean, *rstd, *qkv, *q, *k, *v, *att, *lse, *fc, *gl, *dx, *dln, *dfc;
    float *dq, *dk, *dv, *dqkv, *logits, *wqkv, *wproj, *wfc, *wfp, *wte, *wpe;
    float *gqkv, *gproj, *gfc, *gfp, *gwte, *gwpe, *lnw, *lnb, *glnw, *glnb, *bias, *gb, *losses;
    float *p, *m, *vv;
    int32_t *tok, *tgt;
} step_bufs;

static void step_alloc(step_bufs *s, int L, int C, int H, int B, int T)
{
    size_t nparams = (size_t)L * 12 * C * C + (size_t)(50304 + 1024) * C;
    *s = (step_bufs){.B = B,
                     .T = T,
                     .N = B * T,
                     .C = C,
                     .H = H,
                     .D = C / H,
                     .L = L,
                     .V = 50304,
                     .Vr = 50304,
                     .chunk = nparams / 10}; /* AdamW: 10 chunks = the parameters */
    size_t NC = s->NC = (size_t)s->N * s->C, CC = (size_t)s->C * s->C;
    s->x = buf(NC), s->ln = buf(NC), s->mean = buf(s->N), s->rstd = buf(s->N), s->qkv = buf(3 * NC);
    s->q = buf(NC), s->k = buf(NC), s->v = buf(NC), s->att = buf(NC),
    s->lse = buf((size_t)s->H * s->N);
    s->fc = buf(4 * NC), s->gl = buf(4 * NC), s->dx = buf(NC), s->dln = buf(NC),
    s->dfc = buf(4 * NC);
    s->dq = buf(NC), s->dk = buf(NC), s->dv = buf(NC), s->dqkv = buf(3 * NC);
    s->logits = buf((size_t)s->N * s->V);
    s->wqkv = buf(3 * CC), s->wproj = buf(CC), s->wfc = buf(4 * CC), s->wfp = buf(4 * CC);
    s->wte = buf((size_t)s->V * s->C), s->wpe = buf((size_t)1024 * s->C);
    s->gqkv = buf(3 * CC), s->gproj = buf(CC), s->gfc = buf(4 * CC), s->gfp = buf(4 * CC);
    s->gwte = buf((size_t)s->V * s->C), s->gwpe = buf((size_t)1024 * s->C);
    s->lnw = buf(s->C), s->lnb = buf(s->C), s->glnw = buf(s->C), s->glnb = buf(s->C);
    s->bias = buf(4 * (size_t)s->C), s->gb = buf(4 * (size_t)s->C), s->losses = buf(s->N);
    s->p = buf(s->chunk), s->m = buf(s->chunk), s->vv = buf(s->chunk);
    s->tok = backend_alloc(be, s->N * sizeof(int32_t));
    s->tgt = backend_alloc(be, s->N * sizeof(int32_t));
    for (int i = 0; i < s->N; i++) s->tok[i] = (i * 7919) % s->Vr, s->tgt[i] = (i * 104729) % s->Vr;
}

static void step_forward(step_bufs *s)
{
    int N = s->N, C = s->C;
    TIMED(F_EMB, backend_embedding_forward(be, s->x, s->tok, s->wte, s->wpe, s->B, s->T, C));
    for (int l = 0; l < s->L; l++) {
        TIMED(F_NORM, backend_layernorm_forward(be, s->ln, s->mean, s->rstd, s->x, s->lnw, s->lnb,
                                                N, C, 1e-5f));
        mm(s->qkv, s->ln, s->wqkv, N, 3 * C, C, 0, 1, 0.0f);
        TIMED(F_ELEM, backend_bias_add(be, s->qkv, s->bias, N, 3 * C));
        TIMED(F_ATTN, backend_attention_forward(be, s->att, s->lse, s->q, s->k, s->v, s->B, s->T,
                                                s->H, s->H, s->D, 0));
        mm(s->ln, s->att, s->wproj, N, C, C, 0, 1, 0.0f);
        TIMED(F_ELEM, backend_add(be, s->x, s->x, s->ln, s->NC));
        TIMED(F_NORM, backend_layernorm_forward(be, s->ln, s->mean, s->rstd, s->x, s->lnw, s->lnb,
                                                N, C, 1e-5f));
        mm(s->fc, s->ln, s->wfc, N, 4 * C, C, 0, 1, 0.0f);
        TIMED(F_ELEM, backend_bias_add(be, s->fc, s->bias, N, 4 * C));
        TIMED(F_ELEM, backend_gelu_forward(be, s->gl, s->fc, 4 * s->NC));
        mm(s->ln, s->gl, s->wfp, N, C, 4 * C, 0, 1, 0.0f);
        TIMED(F_ELEM, backend_add(be, s->x, s->x, s->ln, s->NC));
    }
    TIMED(F_NORM, backend_layernorm_forward(be, s->ln, s->mean, s->rstd, s->x, s->lnw, s->lnb, N,
                                            C, 1e-5f));
    mm(s->logits, s->ln, s->wte, N, s->V, C, 0, 1, 0.0f);
    TIMED(F_XENT,
          backend_softmax_xent(be, s->logits, s->losses, s->tgt, N, s->V, s->Vr, 1.0f / N));
}

static void step_backward(step_bufs *s, int t)
{
    int N = s->N, C = s->C;
    mm(s->dln, s->logits, s->wte, N, C, s->V, 0, 0, 0.0f);
    mm(s->gwte, s->logits, s->ln, s->V, C, N, 1, 0, 1.0f);
    TIMED(F_NORM, backend_layernorm_backward(be, s->dx, s->glnw, s->glnb, s->dln, s->x, s->lnw,
                                             s->mean, s->rstd, N, C));
    for (int l = 0; l < s->L; l++) {
        mm(s->dfc, s->dx, s->wfp, N, 4 * C, C, 0, 0, 0.0f);
        mm(s->gfp, s->dx, s->gl, C, 4 * C, N, 1, 0, 1.0f);
        TIMED(F_ELEM, backend_bias_backward(be, s->gb, s->dx, N, C));
        TIMED(F_ELEM, backend_gelu_backward(be, s->dfc, s->fc, s->dfc, 4 * s->NC));
        mm(s->dln, s->dfc, s->wfc, N, C, 4 * C, 0, 0, 0.0f);
        mm(s->gfc, s->dfc, s->ln, 4 * C, C, N, 1, 0, 1.0f);
        TIMED(F_ELEM, backend_bias_backward(be, s->gb, s->dfc, N, 4 * C));
        TIMED(F_NORM, backend_layernorm_backward(be, s->dx, s->glnw, s->glnb, s->dln, s->x, s->lnw,
                                                 s->mean, s->rstd, N, C));
        mm(s->att, s->dx, s->wproj, N, C, C, 0, 0, 0.0f);
        mm(s->gproj, s->dx, s->att, C, C, N, 1, 0, 1.0f);
        TIMED(F_ELEM, backend_bias_backward(be, s->gb, s->dx, N, C));
        TIMED(F_ATTN, backend_attention_backward(be, s->dq, s->dk, s->dv, s->att, s->q, s->k, s->v,
                                                 s->att, s->lse, s->B, s->T, s->H, s->H, s->D, 0));
        mm(s->dln, s->dqkv, s->wqkv, N, C, 3 * C, 0, 0, 0.0f);
        mm(s->gqkv, s->dqkv, s->ln, 3 * C, C, N, 1, 0, 1.0f);
        TIMED(F_ELEM, backend_bias_backward(be, s->gb, s->dqkv, N, 3 * C));
        TIMED(F_NORM, backend_layernorm_backward(be, s->dx, s->glnw, s->glnb, s->dln, s->x, s->lnw,
                                                 s->mean, s->rstd, N, C));
    }
    TIMED(F_EMB,
          backend_embedding_backward(be, s->gwte, s->gwpe, s->dx, s->tok, s->B, s->T, C, s->V));
    for (int c = 0; c < 10; c++) {
        TIMED(F_ADAM, (void)backend_sumsq(be, s->vv, s->chunk));
        TIMED(F_ADAM, backend_adamw(be, s->p, s->m, s->m, s->vv, s->chunk, 1e-4f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, t, 1.0f));
    }
}

/* Best GFLOP/s of one matmul shape over repetitions lasting at least min_s (2 runs at least). */
static double shape_rate(int M, int N, int K, int tA, int tB, float beta, double min_s)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = buf(na), *b = buf(nb), *c = buf(nc);
    backend_matmul(be, c, a, b, M, N, K, tA, tB, 1.0f, beta); /* warm-up */
    double best = 1e30, t_all = bench_now();
    for (int it = 0; it < 2 || bench_now() - t_all < min_s; it++) {
        double t0 = bench_now();
        backend_matmul(be, c, a, b, M, N, K, tA, tB, 1.0f, beta);
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    backend_free(be, a), backend_free(be, b), backend_free(be, c);
    return 2.0 * M * (double)N * K / best / 1e9;
}

/* The sgemm rate on the step's own matmul shapes (GPT-2's fused qkv, o, fc, proj per layer and the
 * tied head; forward, input gradient, weight gradient of each), each timed alone: the step's
 * matmul FLOPs over the time they take at those rates. The MFU reference "on the model's shapes".
 * The head is timed on a quarter of the vocab (rates are flat at that size; a full one takes seconds). */
static double shapes_rate(int L, int C, int N, int V, double min_s)
{
    const int out[5] = {3 * C, C, 4 * C, C, V}, in[5] = {C, C, C, 4 * C, C};
    double flops = 0.0, secs = 0.0;
    for (int i = 0; i < 5; i++) {
        double per = i < 4 ? L : 1, f = 2.0 * N * (double)out[i] * in[i] * per;
        int o = i < 4 ? out[i] : out[i] / 4;
        double r = shape_rate(N, o, in[i], 0, 1, 0.0f, min_s) * 1e9;          /* y = x W^T */
        double r2 = shape_rate(N, in[i], o, 0, 0, 0.0f, min_s) * 1e9;         /* dx = dy W */
        double r3 = shape_rate(o, in[i], N, 1, 0, 1.0f, min_s) * 1e9;         /* dW += dy^T x */
        flops += 3 * f, secs += f / r + f / r2 + f / r3;
    }
    return flops / secs;
}

int main(int argc, char **argv)
{
    cpu_blas_ensure_fast_kernel(argv);
    int sgemm_only = argc > 1 && strcmp(argv[1], "--sgemm") == 0;
    if (sgemm_only) argc--, argv++;
    int threads = argc > 1 ? atoi(argv[1]) : 0, steps = argc > 2 ? atoi(argv[2]) : 2;
    int L = argc > 3 ? atoi(argv[3]) : 12, C = argc > 4 ? atoi(argv[4]) : 768;
    int H = argc > 5 ? atoi(argv[5]) : 12, B = argc > 6 ? atoi(argv[6]) : 1;
    int T = argc > 7 ? atoi(argv[7]) : 1024;
    if (L < 1 || C < 1 || H < 1 || C % H || B < 1 || T < 1 || T > 1024) {
        fprintf(stderr, "bench_cpu_step: bad shape L %d C %d H %d B %d T %d\n", L, C, H, B, T);
        return 1;
    }
    log_set_quiet(1);
    backend_config cfg = {threads, 0, BACKEND_FP32, 0};
    be = cpu_backend_entry.create(&cfg);
    if (!be) return fprintf(stderr, "bench_cpu_step: %s\n", loom_error()), 1;
    if (sgemm_only) { /* one line for bench/train.sh: the square rate, then the shapes' rate */
        double sq = cpu_blas_calibrate(backend_cfg(be)->threads, 0) / 1e9;
        printf("sgemm_gflops %.1f shapes_gflops %.1f\n", sq, shapes_rate(L, C, B * T, 50304, 0.2) / 1e9);
        return 0;
    }
    step_bufs s;
    step_alloc(&s, L, C, H, B, T);
    double t_total = 0.0;
    for (int step = 0; step <= steps; step++) { /* step 0 warms up (scratch growth, page faults) */
        if (step == 1) {
            for (int f = 0; f < F_COUNT; f++) fam_t[f] = 0.0;
            mm_flops = 0.0;
        }
        double t0 = bench_now();
        step_forward(&s);
        step_backward(&s, step + 1);
        if (step > 0) t_total += bench_now() - t0;
    }
    double peak = cpu_blas_calibrate(backend_cfg(be)->threads, 0); /* the sgemm rate, not the FMA peak */
    printf("bench_cpu_step: %s, %d step(s) of a GPT-2 (%d layers, width %d, %d heads) at B %d x T %d\n",
           backend_description(be), steps, L, C, H, B, T);
    for (int f = 0; f < F_COUNT; f++)
        printf("  %-14s %8.1f ms/step %5.1f%%\n", fam_name[f], 1e3 * fam_t[f] / steps,
               100 * fam_t[f] / t_total);
    printf("  step %.1f ms; matmuls %.1f GFLOP/s = %.2f of the calibrated sgemm peak %.1f GFLOP/s\n",
           1e3 * t_total / steps, mm_flops / fam_t[F_MATMUL] / 1e9,
           mm_flops / fam_t[F_MATMUL] / peak, peak / 1e9);
    /* the MFU bar: step rate over the sgemm rate. The matmul share of the step is that ratio
     * with the matmuls' own speed factored out (robust when other jobs share the cores). */
    printf("  step %.1f GFLOP/s (matmul FLOPs) = %.2f of the sgemm peak; matmul share of the step "
           "%.2f\n",
           mm_flops / t_total / 1e9, mm_flops / t_total / peak, fam_t[F_MATMUL] / t_total);
    double shapes = shapes_rate(L, C, s.N, s.V, 0.2);
    printf("  sgemm on the step's shapes, each alone: %.1f GFLOP/s; the step's matmuls reach %.2f of "
           "it, the whole step %.2f\n",
           shapes / 1e9, mm_flops / fam_t[F_MATMUL] / shapes, mm_flops / t_total / shapes);
    return 0;
}
