/* optim.c: AdamW over tensor-aligned pieces of a flat range, and the LR schedule.
 * Weight decay applies per tensor (matrices yes, norms and biases no), so the range is cut at
 * tensor boundaries; a shard boundary inside a tensor is fine. */
#include "optim.h"

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
    size_t n = state_elems ? state_elems : 1;
    o->m = be->ops->alloc(be, n * sizeof(float));
    o->v = be->ops->alloc(be, n * sizeof(float));
    if (!o->m || !o->v) { optim_destroy(o); return NULL; }
    return o;
}

void optim_destroy(optim *o)
{
    if (!o) return;
    if (o->m) o->be->ops->free(o->be, o->m);
    if (o->v) o->be->ops->free(o->be, o->v);
    free(o);
}

float optim_lr(const train_config *tc, int step)
{
    int total = tc->steps;
    float warm = tc->warmup >= 1.0f ? tc->warmup : tc->warmup * (float)total;
    if (warm > 0.0f && (float)step < warm) return tc->lr * ((float)step + 1.0f) / warm;
    float span = (float)total - warm;
    if (span <= 1.0f) return tc->lr;
    /* cosine from lr at the end of warmup to min_lr at the last step */
    float progress = ((float)step - warm) / (span - 1.0f);
    if (progress > 1.0f) progress = 1.0f;
    float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
    return tc->min_lr + (tc->lr - tc->min_lr) * cosine;
}

float optim_clip_scale(const train_config *tc, double grad_norm)
{
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
    o->be->ops->adamw(o->be, params_at + k, grads_at + k, o->m + p->state_offset + k,
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
