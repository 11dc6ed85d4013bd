/* cpu_adamw.c: the AdamW update over n contiguous parameters (decoupled weight decay).
 * Bias corrections are computed once per call in double; the loop is one vectorised pass that
 * reads grad and writes param, m, v. It must never touch grad (shared with the reduction). */
#include <math.h>

#include "backends/cpu/cpu_internal.h"

typedef struct {
    float lr, b1, b2, eps, wd, gs, bc1, bc2;
} cpu_adam_k;

/* g = grad gs; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p), bc1 = 1 - b1^t, bc2 = 1 - b2^t */
CPU_CLONES static void cpu_k_adamw(float *p, const float *grad, float *m, float *v, size_t n,
                                   const cpu_adam_k *k)
{
    const float lr = k->lr, b1 = k->b1, b2 = k->b2, eps = k->eps, wd = k->wd, gs = k->gs;
    const float ibc1 = 1.0f / k->bc1, ibc2 = 1.0f / k->bc2;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * ibc1) / (sqrtf(vi * ibc2) + eps) + wd * p[i]);
    }
}

void cpu_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t,
               float grad_scale)
{
    cpu_adam_k k = {lr, beta1, beta2, eps, weight_decay, grad_scale,
                    (float)(1.0 - pow(beta1, t)), (float)(1.0 - pow(beta2, t))};
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_adamw(param + lo, grad + lo, m + lo, v + lo, hi - lo, &k);
    }
}
