/* adamw_math.h: AdamW's per-parameter update, written once for the backends that can include C:
 * cpu_adamw.c and cuda_adamw.cu run exactly this arithmetic; Metal (adamw.metal, Metal Shading
 * Language) cannot include it and tests/backends/metal checks it against this element-wise.
 * Header-only, no state; it must never depend on a backend. */
#ifndef LOOM_ADAMW_MATH_H
#define LOOM_ADAMW_MATH_H

#include <math.h>

#include "backends/loom_hd.h"

/* One step's constants: learning rate, betas, eps, weight decay, gradient scale, and the
 * reciprocal bias corrections ibc1 = 1 / (1 - b1^t), ibc2 = 1 / (1 - b2^t). */
typedef struct adamw_k {
    float lr, b1, b2, eps, wd, gs, ibc1, ibc2;
} adamw_k;

/* The constants of step t (t >= 1): the bias corrections 1 - beta^t are computed in double,
 * rounded to float once, and inverted in float (host code). */
static inline adamw_k adamw_constants(float lr, float beta1, float beta2, float eps,
                                      float weight_decay, int t, float grad_scale)
{
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    adamw_k k = {lr, beta1, beta2, eps, weight_decay, grad_scale, 1.0f / bc1, 1.0f / bc2};
    return k;
}

/* AdamW (Loshchilov & Hutter, decoupled weight decay) on one parameter p with moments m, v:
 *   g = grad gs                                   (gs: the loss scale, e.g. 1 / micro-batches)
 *   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
 *   p -= lr ( (m / bc1) / (sqrt(v / bc2) + eps) + wd p ),   bc1 = 1 - b1^t, bc2 = 1 - b2^t
 * m / bc1 and v / bc2 are the bias-corrected moments (both start at 0); the decay wd p is added
 * to the step itself, never to g, so the adaptive denominator does not scale it. Divisions by
 * bc1, bc2 are multiplications by k.ibc1, k.ibc2. k by value: the compiler may keep it in
 * registers while it stores to p, m, v. */
static inline LOOM_HD void adamw_update(float *p, float *m, float *v, float grad, adamw_k k)
{
    const float g = grad * k.gs;
    const float mi = k.b1 * *m + (1.0f - k.b1) * g;
    const float vi = k.b2 * *v + (1.0f - k.b2) * g * g;
    *m = mi;
    *v = vi;
    *p -= k.lr * ((mi * k.ibc1) / (sqrtf(vi * k.ibc2) + k.eps) + k.wd * *p);
}

#endif
