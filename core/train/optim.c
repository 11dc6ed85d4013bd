/* optim.c: AdamW over tensor-aligned pieces of a flat range, and the LR schedule.
 * Weight decay applies per tensor (matrices yes, norms and biases no), so the range is cut at
 * tensor boundaries; a shard boundary inside a tensor is fine. */
#include "core/train/optim.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

optim *optim_create(backend *be, const model *mdl, const optim_piece *pieces, int npieces,
                    size_t state_elems)
{
    optim *o = calloc(1, sizeof *o);
    if (!o) { loom_fail("optim: out of host memory"); return NULL; }
    o->be = be;
    o->mdl = mdl;
    o->pieces = pieces;
    o->npieces = npieces;
    o->state_elems = state_elems;
    size_t n = optim_state_bytes(state_elems) / 2;
    o->m = backend_alloc(be, n);
    o->v = backend_alloc(be, n);
    if (!o->m || !o->v) { optim_destroy(o); return NULL; }
    return o;
}

size_t optim_state_bytes(size_t state_elems) { return 2 * (state_elems ? state_elems : 1) * sizeof(float); }

void optim_destroy(optim *o)
{
    if (!o) return;
    if (o->m) backend_free(o->be, o->m);
    if (o->v) backend_free(o->be, o->v);
    free(o);
}

/* The number of warmup steps: `warmup` itself when >= 1, else ceil(warmup * steps), so a fraction
 * covers whole steps (0.05 of 50 steps = 3 steps). The 1e-6 keeps a product that float rounding
 * puts a hair above a whole number (0.05f * 20 = 1.0000000149) on that number. */
static int optim_warmup_steps(const train_config *tc)
{
    double w = tc->warmup >= 1.0f ? (double)tc->warmup : (double)tc->warmup * tc->steps;
    return w > 0.0 ? (int)ceil(w * (1.0 - 1e-6)) : 0;
}

/* With W warmup steps, step s (0-based) of L + 1 runs at
 *   lr * (s + 1) / W                                      for s < W (linear from 0, lr at s = W - 1)
 *   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2        after, p = (s - P) / (L - P), P = max(W - 1, 0)
 * a cosine from lr at the peak step P to min_lr at the last step L. A whole number of warmup
 * steps is what keeps the rate at or below lr: a fractional W ended warmup mid-step, and
 * (s + 1) / W went past 1 on that step (5x the peak at step 0 for W = 0.2). A warmup that spans
 * every step leaves no room for decay: the run ends at the peak. */
float optim_lr(const train_config *tc, int step)
{
    int warm = optim_warmup_steps(tc), last = tc->steps - 1, peak = warm > 1 ? warm - 1 : 0;
    if (step < warm) return (float)((double)tc->lr * (step + 1.0) / warm);
    if (peak >= last) return tc->lr;
    double p = (double)(step - peak) / (double)(last - peak);
    if (p > 1.0) p = 1.0;
    double cosine = p >= 1.0 ? 0.0 : 0.5 * (1.0 + cos(3.14159265358979323846 * p));
    return (float)((double)tc->min_lr + ((double)tc->lr - (double)tc->min_lr) * cosine);
}

/* A non-finite norm (a NaN or Inf among the gradients) has no valid scale: 1 would apply the bad
 * gradients as they are and 0 (clip / Inf) would look like a clipped step, so it is NaN, clip on
 * or off, and the step must not be taken (train.c skips it before calling this). */
float optim_clip_scale(const train_config *tc, double grad_norm)
{
    if (!isfinite(grad_norm)) return NAN;
    if (tc->grad_clip <= 0.0f || !(grad_norm > tc->grad_clip)) return 1.0f;
    return (float)(tc->grad_clip / grad_norm);
}

/* AdamW on the part of piece p that lies in tensor t (if any). */
static void optim_piece_tensor(optim *o, const train_config *tc, const optim_piece *p,
                               const model_tensor *t, float *params_at, float *grads_at, float lr,
                               float grad_scale)
{
    size_t a = t->offset > p->lo ? t->offset : p->lo;
    size_t b = t->offset + t->numel < p->hi ? t->offset + t->numel : p->hi;
    if (a >= b || !t->trainable) return;
    size_t k = a - p->lo;
    backend_adamw(o->be, params_at + k, grads_at + k, o->m + p->state_offset + k,
                  o->v + p->state_offset + k, b - a, lr, tc->beta1, tc->beta2, tc->eps,
                  t->decay ? tc->weight_decay : 0.0f, o->t, grad_scale);
}

void optim_step(optim *o, const train_config *tc, float *const *params_at, float *const *grads_at,
                float lr, float grad_scale)
{
    o->t++;
    for (int i = 0; i < o->npieces; i++) {
        const optim_piece *p = &o->pieces[i];
        if (p->hi <= p->lo) continue;
        for (int j = 0; j < o->mdl->ntensors; j++)
            optim_piece_tensor(o, tc, p, &o->mdl->tensors[j], params_at[i], grads_at[i], lr, grad_scale);
    }
}
