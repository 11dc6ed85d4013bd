/* activation.metal: GELU (tanh approximation) and SwiGLU, forward and backward, elementwise.
 * Input gradients are overwritten (backend.h convention); one thread per element. */
#include "metal_shim.h"
#include "metal_params.h"

/* out = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi) */
kernel void loom_gelu_forward(device float *out LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                              constant metal_p_vec &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float x = inp[gid];
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    out[gid] = 0.5f * x * (1.0f + metal::tanh(u));
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 * 0.044715 x^2); dinp = dout d/dx */
kernel void loom_gelu_backward(device float *dinp LOOM_BUFFER(0), device const float *inp LOOM_BUFFER(1),
                               device const float *dout LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                               uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float x = inp[gid];
    float k = 0.7978845608028654f;
    float th = metal::tanh(k * (x + 0.044715f * x * x * x));
    float dudx = k * (1.0f + 3.0f * 0.044715f * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dudx;
    dinp[gid] = dout[gid] * grad;
}

/* out = silu(gate) up, silu(g) = g s(g), s(g) = 1 / (1 + e^-g) */
kernel void loom_swiglu_forward(device float *out LOOM_BUFFER(0), device const float *gate LOOM_BUFFER(1),
                                device const float *up LOOM_BUFFER(2), constant metal_p_vec &p LOOM_BUFFER(3),
                                uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float g = gate[gid];
    float s = 1.0f / (1.0f + metal::exp(-g));
    out[gid] = g * s * up[gid];
}

/* dgate = dout up s (1 + g (1 - s))   (d silu/dg), dup = dout g s */
kernel void loom_swiglu_backward(device float *dgate LOOM_BUFFER(0), device float *dup LOOM_BUFFER(1),
                                 device const float *dout LOOM_BUFFER(2), device const float *gate LOOM_BUFFER(3),
                                 device const float *up LOOM_BUFFER(4), constant metal_p_vec &p LOOM_BUFFER(5),
                                 uint gid LOOM_GID)
{
    if (gid >= p.n) return;
    float g = gate[gid], d = dout[gid];
    float s = 1.0f / (1.0f + metal::exp(-g));
    dgate[gid] = d * up[gid] * s * (1.0f + g * (1.0f - s));
    dup[gid] = d * g * s;
}
