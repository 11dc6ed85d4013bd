/* cuda_adamw.cu: the AdamW update over n contiguous parameters (decoupled weight decay).
 * Bias corrections are computed once per call on the host in double; the kernel is one
 * elementwise pass writing param, m, v. It must never write grad (shared with the reduction). */
#include <math.h>

#include "backends/cuda/cuda_internal.h"

/* g = grad gs; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p), bc1 = 1 - b1^t, bc2 = 1 - b2^t
 * (ibc1 = 1/bc1, ibc2 = 1/bc2 as in the CPU reference). */
__global__ void cuda_adamw_kernel(float *p, const float *grad, float *m, float *v, size_t n,
                                  float lr, float b1, float b2, float eps, float wd, float gs,
                                  float ibc1, float ibc2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * ibc1) / (sqrtf(vi * ibc2) + eps) + wd * p[i]);
    }
}

void cuda_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                float grad_scale)
{
    if (n == 0 || cuda_broken(be)) return;
    float bc1 = (float)(1.0 - pow(beta1, t)), bc2 = (float)(1.0 - pow(beta2, t));
    cuda_adamw_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, 1.0f / bc1,
        1.0f / bc2);
    cuda_check_launch(be, "adamw");
}
