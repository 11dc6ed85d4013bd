/* adamw.metal: the AdamW update (decoupled weight decay), one thread per parameter: the update
 * of backends/adamw_math.h (adamw_update, which MSL cannot include; test_metal_adamw_shim checks
 * this kernel against it element-wise). The bias corrections 1 - beta^t arrive precomputed from
 * the host; nothing here depends on the step count beyond them. */
#include "metal_shim.h"
#include "metal_params.h"

/* g = grad * grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr ( (m / bc1) / (sqrt(v / bc2) + eps) + wd p ),  bc1 = 1 - b1^t, bc2 = 1 - b2^t */
kernel void loom_adamw(device float *param LOOM_BUFFER(0), device const float *grad LOOM_BUFFER(1),
                       device float *m LOOM_BUFFER(2), device float *v LOOM_BUFFER(3),
                       constant metal_p_adamw &p LOOM_BUFFER(4), uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float g = grad[gid] * p.grad_scale;
    float mi = p.beta1 * m[gid] + (1.0f - p.beta1) * g;
    float vi = p.beta2 * v[gid] + (1.0f - p.beta2) * g * g;
    m[gid] = mi;
    v[gid] = vi;
    float mhat = mi / p.bc1, vhat = vi / p.bc2;
    float w = param[gid];
    param[gid] = w - p.lr * (mhat / (metal::sqrt(vhat) + p.eps) + p.weight_decay * w);
}
