/* bench_lora.c: one LoRA fine-tune step (forward, backward, AdamW on the adapters) on the CPU
 * backend, SmolLM2-135M shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied, RoPE,
 * SwiGLU, RMSNorm), random base and random ids, every row full length (no padding); the loss on the
 * last FRAC of each row (where a chat example's answer sits). bench/lora.sh runs it next to PEFT.
 * RANK 0: a full training step (AdamW on every weight); MODEL: `tiny` (a 2-layer stand-in), `smol`
 * (the default) or a preset's name (gpt2-124m: where a GPU training step's time goes, PROFILE=1).
 * LOOM_BACKEND=NAME: another backend (bench/gpu-check.sh runs it on CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "bench/bench_prof.h"
#include "bench/smol_shapes.h"

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
    float *p = backend_alloc(be, n * sizeof(float));
    if (p) backend_fill(be, p, 0.0f, n);
    return p;
}


/* The base: the seeded init a full model of these shapes gets; the adapters their own init (the
 * values do not change the cost). */
static void bench_lora_weights(model *m, const model_config *mc)
{
    backend *be = m->be;
    if (m->lora.rank == 0) { /* a full model: its own seeded init */
        float *w = malloc(m->nparams * sizeof(float));
        model_init_values(m, 1, w);
        backend_copy_h2d(be, m->params, w, m->nparams * sizeof(float));
        free(w);
        return;
    }
    float *host = malloc(m->nbase_params * sizeof(float));
    /* the base: the same seeded init a full model of these shapes gets (values do not change the cost) */
    model *full = model_create(mc, be, 1, 1, 0, 0, MODEL_ACTS_NONE, NULL);
    model_init_values(full, 1, host);
    model_destroy(full);
    model_load_base_range(m, host, 0, m->nbase_params);
    free(host);
    host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 2, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    free(host);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: bench_lora B T RANK STEPS LOSS_FRAC [THREADS] [tiny|smol|PRESET]\n");
        return 2;
    }
    backend_prepare_process(argv);
    int B = atoi(argv[1]), T = atoi(argv[2]), r = atoi(argv[3]), steps = atoi(argv[4]);
    double frac = atof(argv[5]);
    int threads = argc > 6 ? atoi(argv[6]) : 0;
    const char *shape = argc > 7 ? argv[7] : "smol";
    model_config mc = bench_smol_config(strcmp(shape, "tiny") == 0, T);
    if (strcmp(shape, "tiny") && strcmp(shape, "smol")) {
        if (config_apply_preset(&mc, shape) != 0) {
            fprintf(stderr, "bench_lora: %s\n", loom_error());
            return 2;
        }
        mc.max_seq = T;
    }
    lora_spec ls = {.rank = r, .alpha = 2.0f * r, .targets = 0xF}; /* q, k, v, o */
    /* PRECISION=bf16: bf16 matmuls (docs/precision.md), against PEFT under torch.autocast;
     * PRECISION=tf32: TF32 tensor-core matmuls (CUDA) */
    const char *prec = getenv("PRECISION");
    backend_config bc = {.threads = threads,
                         .precision = prec && strcmp(prec, "bf16") == 0 ? BACKEND_BF16 : 0,
                         .allow_tf32 = prec && strcmp(prec, "tf32") == 0}; /* as core/train/session.c */
    backend *be = backend_select(getenv("LOOM_BACKEND") ? NULL : "cpu", &bc, NULL, 0);
    model *m = be ? model_create(&mc, be, B, T, 1, 1, MODEL_ACTS_KEEP, r > 0 ? &ls : NULL) : NULL;
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
        if (profile && s == 1) prof_threads = backend_cfg(be)->threads, prof_install(be); /* the first step pays the page faults */
        double t0 = bench_now(), c0 = cpu_now();
        long f0 = minor_faults();
        backend_fill(be, m->grads, 0.0f, m->nparams);
        model_weights_bf16(m, 1); /* as trainer_step: bf16 copies for the step's matmuls */
        model_set_batch(m, tok, tgt);
        if (model_forward(m, targets ? 1.0f / (float)targets : 0.0f, NULL) || model_backward(m)) {
            fprintf(stderr, "bench_lora: %s\n", loom_error());
            return 1;
        }
        model_weights_bf16(m, 0);
        backend_adamw(be, m->params, m->grads, mom, vel, m->nparams, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1, 1.0f);
        loss = model_take_loss(m) / (targets ? targets : 1);
        dt[s] = bench_now() - t0;
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
           m->activation_bytes / 1e6, backend_description(be));
    model_destroy(m);
    backend_free(be, mom);
    backend_free(be, vel);
    backend_destroy(be);
    free(tok), free(tgt), free(dt);
    return 0;
}
