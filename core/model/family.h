/* family.h: what differs between model families, as one table of functions per family: a layer's
 * tensors, views, initial values, activations and FLOPs, and its forward, backward, decode and
 * batched generation step. The generic code (table and buffers, embedding, trunk loop, head and
 * loss, KV cache and batching) calls a layer only through it. Private to core/model/. */
#ifndef LOOM_FAMILY_H
#define LOOM_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/model/model_internal.h"

/* One batched generation step of a layer (model_gen_step): R rows, one new token each. */
typedef struct gen_step {
    model_gen *g;          /* for model_gen_rope: RoPE of each row at its own position */
    const float *x;        /* (R, C) the residual entering the layer */
    float *x_out;          /* (R, C) the residual leaving it */
    float *kc, *vc;        /* the layer's KV cache: row r's position p at (r * cap + p) * width */
    const int32_t *pos;    /* device, R: each row's position (where its new token goes) */
    int R, cap;
} gen_step;

/* A family fills every entry. m->acts, m->B, m->T and the sequences are the pass's (training,
 * model_prefill, or model_gen's views and shape while it runs a pass or a step). */
typedef struct model_family {
    const char *name;
    /* Layer l's tensors, appended in forward order with model_layout_add (region l + 1). */
    int (*layout_layer)(model *m, int *cap, int l);
    /* Layer l's named views (layer_params fields) from the tensors of s; NULL where absent. */
    void (*layer_views)(const model *m, const tensor_set *s, int l, layer_params *p);
    /* How tensor t of the table (embeddings and head included) starts: 1 with *value the constant
     * of every element, or 0 with *value the std of its seeded N(0, std) elements. */
    int (*init_rule)(const model *m, const model_tensor *t, float *value);
    /* One layer's activations for N rows (every layer_acts field but x), and the backward scratch
     * of a layer for N rows (model fields), from the arena in this order. */
    void (*carve_layer)(const model *m, model_arena *a, layer_acts *s, size_t N);
    void (*carve_scratch)(model *m, model_arena *a, size_t N);
    /* Floats of one position of a layer's key and value cache (model_gen), as layer_acts' k, v. */
    void (*kv_widths)(const model_config *c, int *k, int *v);
    /* Per layer: the matmul weights a token multiplies by (2 flops each forward, 4 backward) and
     * a token's other FLOPs (attention's mixing, forward + backward) in rows of T. */
    void (*flops)(const model_config *c, int T, double *weights, double *other);
    /* Layer l from m->acts[l].x to its activations; x_out (the next residual) when non-NULL. */
    void (*layer_forward)(model *m, int l, float *x_out);
    /* m->dres enters as dL/d(layer output) and leaves as dL/d(layer input); gradients += . */
    void (*layer_backward)(model *m, int l);
    /* model_decode: layer l for the token at position t of batch row 0 (rows 0..t-1 cached). */
    void (*layer_decode)(model *m, int l, int t, float *x_out);
    /* model_gen_step: layer l for s's rows (m->acts[l] is the step's scratch, shape R x 1). */
    void (*layer_step)(model *m, int l, const gen_step *s);
} model_family;

/* The families (one file each, family_<name>.c). */
extern const model_family family_decoder; /* GPT-2, Llama, Mistral, Qwen: family_decoder.c */

/* The family of a model config; NULL + loom_fail if none (family.c). */
const model_family *model_family_of(const model_config *c);

#endif
