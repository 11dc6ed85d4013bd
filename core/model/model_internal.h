/* model_internal.h: helpers shared by the files of core/model/ (the generic passes and the family
 * files, family.h). Not part of the model's contract: nothing outside core/model/ includes it. */
#ifndef LOOM_MODEL_INTERNAL_H
#define LOOM_MODEL_INTERNAL_H

#include <string.h>

#include "core/model/model.h"

static inline int model_uses_rope(const model_config *c) { return strcmp(c->positions, "rope") == 0; }
static inline int model_uses_rope_freq(const model_config *c)
{
    return model_uses_rope(c) && strcmp(c->rope_scaling, "llama3") == 0;
}
static inline int model_uses_swiglu(const model_config *c) { return strcmp(c->mlp, "swiglu") == 0; }
static inline int model_uses_layernorm(const model_config *c) { return strcmp(c->norm, "layernorm") == 0; }

/* The sequences a pass runs attention over: the B rows of T, or a ragged pass's (B = 1 each);
 * sequence s has *B x *T rows. */
static inline int model_seq_count(const model *m) { return m->nseg ? m->nseg : 1; }
static inline void model_seq_shape(const model *m, int s, int *B, int *T)
{
    *B = m->nseg ? 1 : m->B;
    *T = m->nseg ? m->seg[s] : m->T;
}

/* Bump allocation over one device arena: every activation in one allocation, so the count of bytes
 * is exact and there is one free (a dry run with base == NULL sizes it). */
typedef struct model_arena { char *base; size_t used; } model_arena;
static inline float *model_arena_take(model_arena *a, size_t floats)
{
    size_t bytes = (floats * sizeof(float) + 255) & ~(size_t)255;
    float *p = a->base ? (float *)(a->base + a->used) : NULL;
    a->used += bytes;
    return p;
}

/* model.c: the table. A set of tensors and where each one lives now; the pointer of a tensor by
 * name (NULL if absent); one tensor appended to the table being laid out (model_layout). */
typedef struct tensor_set { const model_tensor *t; int n; float **ptr; } tensor_set;
float *model_tensor_ptr(const tensor_set *s, const char *name);
int model_layout_add(model *m, int *cap, const char *name, int64_t rows, int64_t cols, int region,
                     int decay);

/* model_forward.c and model_backward.c: the ops every family's layers are made of. */
void model_linear(model *m, float *y, const float *x, const float *W, const float *b, int N,
                  int in, int out);
void model_linear_backward(model *m, float *dx, float *dW, float *db, const float *dy,
                           const float *x, const float *W, int N, int in, int out, int accumulate);
void model_norm_forward(model *m, float *out, float *mean, float *rstd, const float *x,
                        const float *w, const float *b, int N);
void model_norm_backward(model *m, float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, const float *mean, const float *rstd, int N);
void model_adapt(model *m, int l, int t, float *y, const float *x, int N);
void model_adapt_backward(model *m, int l, int t, float *dx, const float *dy, const float *x, int N);
int model_begin(model *m, int region, int backward); /* the hooks, when installed */
int model_end(model *m, int region, int backward);
double model_sum_losses(model *m, const float *losses);
int model_trunk_forward(model *m); /* embeddings, layers, final norm (into m->lnf) */
/* x = wte[tokens] (+ wpe[position]) for the pass's tokens, positions from 0 in every sequence. */
void model_embed(model *m, float *x, const int32_t *tokens);
int model_upload_rope_freq(model *m); /* rope_scaling: the scaled frequencies to m->rope_freq */
/* RoPE on x (B, T, H heads): plain theta, or the scaled frequency table when rope_scaling. */
void model_rope(model *m, float *x, int B, int T, int H, int inverse);
/* model_gen.c: RoPE on R rows of x (R, H, D), row r at its own position (the step's); `scratch`
 * holds the context's forward rows of H*D. */
void model_gen_rope(model_gen *g, float *x, float *scratch, int R, int H, int D);

#endif
