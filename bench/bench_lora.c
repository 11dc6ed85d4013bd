/* bench_lora.c: one LoRA fine-tune step (forward, backward, AdamW on the adapters) on the CPU
 * backend, SmolLM2-135M shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied, RoPE,
 * SwiGLU, RMSNorm), random base and random ids, every row full length (no padding); the loss on the
 * last FRAC of each row (where a chat example's answer sits). bench/lora.sh runs it next to PEFT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_gemm.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "core/config.h"
#include "core/model.h"
#include "bench/smol_shapes.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* CPU seconds of all threads: on a loaded machine wall time measures the neighbours, while
 * with OMP_WAIT_POLICY=passive (no spinning) this stays close to the work done. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static float *dev_zeros(backend *be, size_t n)
{
    float *p = be->ops->alloc(be, n * sizeof(float));
    if (p) be->ops->fill(be, p, 0.0f, n);
    return p;
}


/* PROFILE=1: every op of the step timed through a copy of the backend's op table whose entries
 * wrap the real ones; matmuls by shape (M N K tA tB), printed with their GFLOP/s. */
static backend_ops real, prof;
static int prof_threads; /* the backend's, for the library each matmul shape's race picked */
#define PROF_MAX 64
typedef struct { char what[48]; double s, flops; long calls; } prof_entry;
static prof_entry prof_row[PROF_MAX];
static int prof_n;

static void prof_add(const char *what, double s, double flops)
{
    int i = 0;
    while (i < prof_n && strcmp(prof_row[i].what, what)) i++;
    if (i == prof_n) {
        if (prof_n == PROF_MAX) i = PROF_MAX - 1;
        else snprintf(prof_row[prof_n++].what, sizeof prof_row[0].what, "%s", what);
    }
    prof_row[i].s += s, prof_row[i].flops += flops, prof_row[i].calls++;
}

static void p_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                     int tA, int tB, float alpha, float beta)
{
    char w[48];
    double t0 = now();
    real.matmul(be, C, A, B, M, N, K, tA, tB, alpha, beta);
    double dt = now() - t0;
    int lib = cpu_gemm_shape_lib(prof_threads, tA, tB, M, N, K, beta != 0.0f);
    snprintf(w, sizeof w, "matmul %dx%dx%d %c%c%s %s", M, N, K, tA ? 'T' : 'N', tB ? 'T' : 'N',
             beta != 0.0f ? " +=" : "", lib >= 0 ? cpu_gemm_lib_name(lib) : "");
    prof_add(w, dt, 2.0 * M * N * (double)K);
}
static void p_att_f(backend *be, float *o, float *l, const float *q, const float *k, const float *v, int B, int T, int H, int Hkv, int D)
{ double t0 = now(); real.attention_forward(be, o, l, q, k, v, B, T, H, Hkv, D); prof_add("attention_forward", now() - t0, 2.0 * B * H * (double)T * T * D); }
static void p_att_b(backend *be, float *dq, float *dk, float *dv, const float *d, const float *q, const float *k, const float *v, const float *o, const float *l, int B, int T, int H, int Hkv, int D)
{ double t0 = now(); real.attention_backward(be, dq, dk, dv, d, q, k, v, o, l, B, T, H, Hkv, D); prof_add("attention_backward", now() - t0, 5.0 * B * H * (double)T * T * D); }
static void p_rms_f(backend *be, float *o, float *r, const float *x, const float *w, int N, int C, float eps)
{ double t0 = now(); real.rmsnorm_forward(be, o, r, x, w, N, C, eps); prof_add("rmsnorm_forward", now() - t0, 0); }
static void p_rms_b(backend *be, float *dx, float *dw, const float *dy, const float *x, const float *w, const float *r, int N, int C)
{ double t0 = now(); real.rmsnorm_backward(be, dx, dw, dy, x, w, r, N, C); prof_add("rmsnorm_backward", now() - t0, 0); }
static void p_sw_f(backend *be, float *o, const float *g, const float *u, size_t n)
{ double t0 = now(); real.swiglu_forward(be, o, g, u, n); prof_add("swiglu_forward", now() - t0, 0); }
static void p_sw_b(backend *be, float *dg, float *du, const float *d, const float *g, const float *u, size_t n)
{ double t0 = now(); real.swiglu_backward(be, dg, du, d, g, u, n); prof_add("swiglu_backward", now() - t0, 0); }
static void p_rope(backend *be, float *x, int B, int T, int H, int D, float th, int inv)
{ double t0 = now(); real.rope(be, x, B, T, H, D, th, inv); prof_add("rope", now() - t0, 0); }
static void p_fill(backend *be, float *x, float v, size_t n)
{ double t0 = now(); real.fill(be, x, v, n); prof_add("fill", now() - t0, 0); }
static void p_copy(backend *be, void *d, const void *s, size_t n)
{ double t0 = now(); real.copy_d2d(be, d, s, n); prof_add("copy_d2d", now() - t0, 0); }
static void p_xent(backend *be, float *lg, float *ls, const int32_t *t, int N, int V, int Vr, float g)
{ double t0 = now(); real.softmax_xent(be, lg, ls, t, N, V, Vr, g); prof_add("softmax_xent", now() - t0, 0); }
static void p_emb_f(backend *be, float *o, const int32_t *t, const float *w, const float *p, int B, int T, int C)
{ double t0 = now(); real.embedding_forward(be, o, t, w, p, B, T, C); prof_add("embedding_forward (gathers)", now() - t0, 0); }
static void p_emb_b(backend *be, float *dw, float *dp, const float *d, const int32_t *t, int B, int T, int C, int V)
{ double t0 = now(); real.embedding_backward(be, dw, dp, d, t, B, T, C, V); prof_add("embedding_backward (scatters)", now() - t0, 0); }

static void prof_install(backend *be)
{
    real = prof = *be->ops;
    prof.matmul = p_matmul; prof.attention_forward = p_att_f; prof.attention_backward = p_att_b;
    prof.rmsnorm_forward = p_rms_f; prof.rmsnorm_backward = p_rms_b; prof.swiglu_forward = p_sw_f;
    prof.swiglu_backward = p_sw_b; prof.rope = p_rope; prof.fill = p_fill; prof.copy_d2d = p_copy;
    prof.softmax_xent = p_xent; prof.embedding_forward = p_emb_f; prof.embedding_backward = p_emb_b;
    be->ops = &prof;
}

static int prof_cmp(const void *a, const void *b)
{
    double x = ((const prof_entry *)a)->s, y = ((const prof_entry *)b)->s;
    return (x < y) - (x > y);
}

static void prof_print(int steps, double step_s)
{
    qsort(prof_row, (size_t)prof_n, sizeof prof_row[0], prof_cmp);
    double tot = 0;
    for (int i = 0; i < prof_n; i++) tot += prof_row[i].s;
    printf("profile over %d steps: %.2f s/step in ops of %.2f s/step\n", steps, tot / steps, step_s);
    for (int i = 0; i < prof_n; i++)
        printf("  %-36s %6ld calls/step %8.3f s/step %5.1f%% %7.1f GFLOP/s\n", prof_row[i].what,
               prof_row[i].calls / steps, prof_row[i].s / steps, 100 * prof_row[i].s / tot,
               prof_row[i].flops ? prof_row[i].flops / prof_row[i].s / 1e9 : 0.0);
}

/* The base: the seeded init a full model of these shapes gets; the adapters their own init (the
 * values do not change the cost). */
static void bench_lora_weights(model *m, const model_config *mc)
{
    backend *be = m->be;
    float *host = malloc(m->nbase_params * sizeof(float));
    /* the base: the same seeded init a full model of these shapes gets (values do not change the cost) */
    model *full = model_create(mc, be, 1, 1, 0, 0, MODEL_ACTS_NONE, NULL);
    model_init_values(full, 1, host);
    model_destroy(full);
    model_load_base_range(m, host, 0, m->nbase_params);
    free(host);
    host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 2, host);
    be->ops->copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    free(host);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: bench_lora B T RANK STEPS LOSS_FRAC [THREADS] [tiny]\n");
        return 2;
    }
    backend_prepare_process(argv);
    int B = atoi(argv[1]), T = atoi(argv[2]), r = atoi(argv[3]), steps = atoi(argv[4]);
    double frac = atof(argv[5]);
    int threads = argc > 6 ? atoi(argv[6]) : 0, tiny = argc > 7 && strcmp(argv[7], "tiny") == 0;
    model_config mc = bench_smol_config(tiny, T);
    lora_spec ls = {.rank = r, .alpha = 2.0f * r, .targets = 0xF}; /* q, k, v, o */
    backend_config bc = {.threads = threads};
    backend *be = backend_select("cpu", &bc, NULL, 0);
    model *m = be ? model_create(&mc, be, B, T, 1, 1, MODEL_ACTS_KEEP, &ls) : NULL;
    float *mom = m ? dev_zeros(be, m->nparams) : NULL, *vel = m ? dev_zeros(be, m->nparams) : NULL;
    if (!mom || !vel) {
        fprintf(stderr, "bench_lora: %s\n", loom_error());
        return 1;
    }
    bench_lora_weights(m, &mc);

    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t)), *tgt = malloc((size_t)B * T * sizeof(int32_t));
    int first = T - (int)(frac * T + 0.5), targets = 0;
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(rng_u64(7, (uint64_t)i) % (uint64_t)mc.vocab);
    for (int i = 0; i < B * T; i++) {
        int t = i % T;
        tgt[i] = t + 1 >= first && t + 1 < T ? tok[i + 1] : -1;
        targets += tgt[i] >= 0;
    }
    int profile = getenv("PROFILE") && atoi(getenv("PROFILE"));
    double *dt = malloc(2 * (size_t)steps * sizeof(double)), *dc = dt + steps, loss = 0.0;
    for (int s = 0; s < steps; s++) {
        if (profile && s == 1) prof_threads = be->cfg.threads, prof_install(be); /* the first step pays the page faults */
        double t0 = now(), c0 = cpu_now();
        long f0 = minor_faults();
        be->ops->fill(be, m->grads, 0.0f, m->nparams);
        model_set_batch(m, tok, tgt);
        if (model_forward(m, targets ? 1.0f / (float)targets : 0.0f, NULL) || model_backward(m)) {
            fprintf(stderr, "bench_lora: %s\n", loom_error());
            return 1;
        }
        be->ops->adamw(be, m->params, m->grads, mom, vel, m->nparams, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1, 1.0f);
        loss = model_take_loss(m) / (targets ? targets : 1);
        dt[s] = now() - t0;
        dc[s] = cpu_now() - c0;
        fprintf(stderr, "bench_lora: step %d %.3f s (cpu %.3f s) loss %.4f, %ld page faults\n", s + 1,
                dt[s], dc[s], loss, minor_faults() - f0);
    }
    int k = steps > 1 ? steps - 1 : 1; /* the first step pays the page faults: median of the rest */
    double med = bench_median(dt + (steps > 1), k), cmed = bench_median(dc + (steps > 1), k);
    if (profile && steps > 1) prof_print(steps - 1, med);
    printf("loom lora: %zu base + %zu adapter params, B %d T %d r %d, %d loss positions, "
           "median %.3f s/step, %.1f tokens/s, cpu %.3f s/step, activations %.0f MB (%s)\n",
           m->nbase_params, m->nparams, B, T, r, targets, med, B * T / med, cmed,
           m->activation_bytes / 1e6, be->description);
    model_destroy(m);
    be->ops->free(be, mom);
    be->ops->free(be, vel);
    backend_destroy(be);
    free(tok), free(tgt), free(dt);
    return 0;
}
