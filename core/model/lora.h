/* lora.h: low-rank adapters on a model's linear projections: y = x W^T + b + s (x A^T) B^T with
 * A (r, in) random, B (out, r) zero (so training starts exactly at the base model) and
 * s = alpha / r. In a LoRA model the flat trainable array (what dp, the optimizer and checkpoints
 * see) holds only the adapters; the base weights are frozen in a buffer of their own. */
#ifndef LOOM_LORA_H
#define LOOM_LORA_H

#include <stdint.h>

#include "core/config/config.h"

enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_FC, LORA_GATE, LORA_UP, LORA_PROJ, LORA_NTARGETS };

typedef struct lora_pair { float *A, *B; } lora_pair;
typedef struct layer_lora { lora_pair t[LORA_NTARGETS]; } layer_lora;

typedef struct lora_spec {
    int rank;
    float alpha;
    unsigned targets; /* bit i = LORA_i */
} lora_spec;

/* From finetune.lora_targets ("q,k,v,o", also fc, proj, gate, up, down, the HF names q_proj ...
 * down_proj, and all-linear = every projection of the architecture). A target the
 * architecture does not have (fc with swiglu) is an error naming it. */
int lora_spec_from_config(const finetune_config *ft, const model_config *mc, lora_spec *out);

/* LORA_* index of a target name: loom's (q, k, v, o, fc, gate, up, proj, down) or the HF/PEFT
 * one (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj); -1 if unknown. */
int lora_target_index(const char *name);

/* Input and output width of target t's projection. */
void lora_dims(const model_config *mc, int t, int *in, int *out);

/* The tensor-name stem of target t ("attn.q", "mlp.down", ...). */
const char *lora_stem(const model_config *mc, int t);

#endif
