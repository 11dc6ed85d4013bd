/* cpu_adamw.c: the AdamW update over n contiguous parameters (decoupled weight decay).
 * The arithmetic is adamw_update (backends/adamw_math.h, shared with CUDA); here one vectorised
 * pass per thread that reads grad and writes param, m, v. It must never touch grad (shared with
 * the reduction). */
#include "backends/adamw_math.h"
#include "backends/cpu/cpu_internal.h"

CPU_CLONES static void cpu_k_adamw(float *p, const float *grad, float *m, float *v, size_t n,
                                   adamw_k k)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) adamw_update(p + i, m + i, v + i, grad[i], k);
}

void cpu_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t,
               float grad_scale)
{
    const adamw_k k = adamw_constants(lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_adamw(param + lo, grad + lo, m + lo, v + lo, hi - lo, k);
    }
}
