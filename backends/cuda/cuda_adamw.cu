/* cuda_adamw.cu: the AdamW update over n contiguous parameters (decoupled weight decay).
 * The arithmetic is adamw_update (backends/adamw_math.h, shared with the CPU backend, whose
 * bias corrections it also shares); the kernel is one elementwise pass writing param, m, v.
 * It must never write grad (shared with the reduction). */
#include "backends/adamw_math.h"
#include "backends/cuda/cuda_internal.h"

__global__ void cuda_adamw_kernel(float *p, const float *grad, float *m, float *v, size_t n,
                                  adamw_k k)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_update(p + i, m + i, v + i, grad[i], k);
}

void cuda_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                float grad_scale)
{
    if (n == 0 || cuda_broken(be)) return;
    const adamw_k k = adamw_constants(lr, beta1, beta2, eps, weight_decay, t, grad_scale);
    cuda_adamw_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        param, grad, m, v, n, k);
    cuda_check_launch(be, "adamw");
}
