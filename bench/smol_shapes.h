/* smol_shapes.h: SmolLM2-135M's shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied
 * embeddings, rope theta 1e5) for the C benchmarks (bench_generate, bench_lora), the twin of
 * smol_shapes.py, so loom and its references time the same model; `tiny` is a 2-layer 64-wide
 * stand-in for trying a benchmark out. */
#ifndef LOOM_BENCH_SMOL_SHAPES_H
#define LOOM_BENCH_SMOL_SHAPES_H

#include "core/config/config.h"

static inline model_config bench_smol_config(int tiny, int max_seq)
{
    job_config cfg;
    config_defaults(&cfg);
    model_config mc = cfg.model;
    config_apply_preset(&mc, "llama-small");
    mc.vocab = tiny ? 512 : 49152; mc.d_model = tiny ? 64 : 576; mc.n_layer = tiny ? 2 : 30;
    mc.n_head = tiny ? 4 : 9; mc.n_kv_head = tiny ? 1 : 3; mc.d_ff = tiny ? 128 : 1536;
    mc.tied_embeddings = 1; mc.rope_theta = 100000.0f; mc.max_seq = max_seq;
    return mc;
}

#endif
