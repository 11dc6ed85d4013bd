/* bench_generate.c: batched greedy decoding through model_gen on the CPU backend, SmolLM2-135M
 * shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied, RoPE) with random weights:
 * one prefill of B prompts of P tokens, then N-1 steps (N new tokens per row, no early stop).
 * Prints generated tokens/s the way transformers' generate is timed (prefill included), after
 * the same warm-up bench/hf_generate.py gives transformers (8-token prompts, one step).
 * PROFILE=1: the timed prefill's and steps' ops (bench_prof.h), each part on its own.
 * PROMPT_MIN=M: prompts of mixed lengths, row r's M + (P - M) r / (B - 1) tokens (an evaluation's
 * batch; transformers would pad every row to P).
 * LOOM_BACKEND=NAME: another backend (bench/gpu-check.sh runs it on CUDA).
 * PRECISION=bf16: the backend's bf16 matmuls (docs/precision.md: the prefill's products; a decode
 * step's few-row products and attention stay fp32), against transformers in bf16. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "bench/bench_prof.h"
#include "bench/smol_shapes.h"

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_generate BATCH PROMPT_TOKENS NEW_TOKENS [THREADS] [tiny]\n");
        return 2;
    }
    backend_prepare_process(argv);
    int B = atoi(argv[1]), P = atoi(argv[2]), N = atoi(argv[3]);
    int threads = argc > 4 ? atoi(argv[4]) : 0, tiny = argc > 5 && strcmp(argv[5], "tiny") == 0;
    model_config mc = bench_smol_config(tiny, P + N);
    if (tiny) mc.n_head = 4, mc.n_kv_head = 1;
    const char *prec = getenv("PRECISION");
    backend_config bc = {.threads = threads,
                         .precision = prec && strcmp(prec, "bf16") == 0 ? BACKEND_BF16 : 0};
    backend *be = backend_select(getenv("LOOM_BACKEND") ? NULL : "cpu", &bc, NULL, 0);
    model *m = be ? model_create(&mc, be, 1, P + N, 1, 0, MODEL_ACTS_NONE, NULL) : NULL;
    model_gen *g = m ? model_gen_create(m, B, P + N, B * P) : NULL;
    if (!g) {
        fprintf(stderr, "bench_generate: %s\n", loom_error());
        return 1;
    }
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 1, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    free(host);
    int32_t *tok = malloc((size_t)B * P * sizeof(int32_t)), *next = malloc((size_t)B * sizeof(int32_t));
    const int32_t **prompts = malloc((size_t)B * sizeof *prompts);
    int *lens = malloc((size_t)B * sizeof(int));
    float *logits = malloc((size_t)B * mc.vocab * sizeof(float));
    for (int i = 0; i < B * P; i++) tok[i] = (int32_t)(rng_u64(7, (uint64_t)i) % (uint64_t)mc.vocab);
    int pmin = getenv("PROMPT_MIN") ? atoi(getenv("PROMPT_MIN")) : P, warm = P < 8 ? P : 8, sum = 0;
    if (pmin < 1 || pmin > P) pmin = P;
    for (int r = 0; r < B; r++) prompts[r] = tok + (size_t)r * P, lens[r] = warm;
    int rc = model_gen_prefill(g, prompts, lens, B, logits);
    for (int r = 0; r < B; r++) {
        next[r] = argmax(logits + (size_t)r * mc.vocab, mc.vocab);
        sum += lens[r] = B > 1 ? pmin + (int)((long)(P - pmin) * r / (B - 1)) : P;
    }
    if (rc == 0) rc = model_gen_step(g, next, logits);
    int profile = getenv("PROFILE") && atoi(getenv("PROFILE"));
    if (profile) prof_threads = backend_cfg(be)->threads, prof_install(be);
    double t0 = bench_now();
    if (rc == 0) rc = model_gen_prefill(g, prompts, lens, B, logits);
    double t1 = bench_now();
    if (profile) prof_print(1, t1 - t0), prof_reset();
    for (int k = 1; rc == 0 && k < N; k++) {
        for (int r = 0; r < B; r++) next[r] = argmax(logits + (size_t)r * mc.vocab, mc.vocab);
        rc = model_gen_step(g, next, logits);
    }
    double t2 = bench_now();
    if (profile && N > 1) prof_print(N - 1, (t2 - t1) / (N - 1));
    if (rc) {
        fprintf(stderr, "bench_generate: %s\n", loom_error());
        return 1;
    }
    printf("loom batch %d: %zu params, prefill %d x %d..%d (%d tokens) in %.2f s, %d steps in %.2f s, "
           "%.1f generated tokens/s, context %.0f MB (%s)\n", B, m->nparams, B, pmin, P, sum, t1 - t0,
           N - 1, t2 - t1, (double)B * N / (t2 - t0), model_gen_bytes(g) / 1e6,
           backend_description(be));
    model_gen_destroy(g);
    model_destroy(m);
    backend_destroy(be);
    free(tok), free(next), free(prompts), free(lens), free(logits);
    return 0;
}
