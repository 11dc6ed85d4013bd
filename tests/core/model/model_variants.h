/* model_variants.h: the small model configurations the core model tests run, one per family
 * (0: GPT-2-style; 1: Llama-style GQA; 2: Qwen-style: q/k/v biases, per-head q/k RMSNorm, Llama 3
 * rope scaling, a head_dim that is not d_model / n_head), at the widths a test picks. */
#ifndef LOOM_TESTS_MODEL_VARIANTS_H
#define LOOM_TESTS_MODEL_VARIANTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/config/config.h"

static inline backend *variants_cpu(int threads)
{
    backend_config bc = {.threads = threads};
    backend *be = backend_select("cpu", &bc, NULL, 0);
    if (!be) { printf("FAIL: no cpu backend\n"); exit(1); }
    return be;
}

/* 2 layers, 4 heads (2 kv heads for the Llama families); the Qwen family's queries are
 * 4 * d_model/2 wide, twice the residual (Qwen3-0.6B's shape), and its rope_original_max_seq 16
 * puts head dims 8 and 16 into the kept, smoothed and fully scaled bands. */
static inline model_config model_variant(int family, int vocab, int d_model, int d_ff, int max_seq)
{
    job_config cfg;
    config_defaults(&cfg);
    model_config m = cfg.model;
    config_apply_preset(&m, "tiny");
    m.vocab = vocab; m.d_model = d_model; m.n_layer = 2; m.n_head = 4; m.d_ff = d_ff; m.max_seq = max_seq;
    m.n_kv_head = family ? 2 : 4;
    if (family) {
        strcpy(m.norm, "rmsnorm"); strcpy(m.mlp, "swiglu"); strcpy(m.positions, "rope");
        m.tied_embeddings = 0; m.bias = 0;
    }
    if (family == 2) {
        m.qkv_bias = 1; m.qk_norm = 1; m.tied_embeddings = 1;
        strcpy(m.rope_scaling, "llama3");
        m.head_dim = d_model / 2;
        m.rope_original_max_seq = 16;
    }
    m.init_std = 0.3f; /* large weights so every path carries signal */
    return m;
}

#endif
