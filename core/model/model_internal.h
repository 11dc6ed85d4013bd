/* model_internal.h: helpers shared by model.c, model_forward.c and model_backward.c only.
 * Not part of the model's contract: nothing outside core/model/ includes it. */
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

/* The sequences a pass runs attention over: the B rows of T, or a ragged pass's (B = 1 each);
 * sequence s has *B x *T rows. */
static inline int model_seq_count(const model *m) { return m->nseg ? m->nseg : 1; }
static inline void model_seq_shape(const model *m, int s, int *B, int *T)
{
    *B = m->nseg ? 1 : m->B;
    *T = m->nseg ? m->seg[s] : m->T;
}

void model_linear(model *m, float *y, const float *x, const float *W, const float *b, int N,
                  int in, int out);
void model_norm_forward(model *m, float *out, float *mean, float *rstd, const float *x,
                        const float *w, const float *b, int N);
void model_layer_forward(model *m, int l, float *x_out);
void model_adapt(model *m, int l, int t, float *y, const float *x, int N);
void model_qkv_forward(model *m, int l, const layer_acts *a, const float *x, int N);
void model_mlp_forward(model *m, int l, const layer_acts *a, float *x_out, int N);
int model_begin(model *m, int region, int backward); /* the hooks, when installed */
int model_end(model *m, int region, int backward);
double model_sum_losses(model *m, const float *losses);
int model_trunk_forward(model *m); /* embeddings, layers, final norm (into m->lnf) */
/* x = wte[tokens] (+ wpe[position]) for the pass's tokens, positions from 0 in every sequence. */
void model_embed(model *m, float *x, const int32_t *tokens);
int model_upload_rope_freq(model *m); /* rope_scaling: the scaled frequencies to m->rope_freq */
/* RoPE on x (B, T, H heads): plain theta, or the scaled frequency table when rope_scaling. */
void model_rope(model *m, float *x, int B, int T, int H, int inverse);

#endif
