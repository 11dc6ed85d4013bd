/* cuda_xent.cu: fused softmax + cross-entropy over (N, V) logits; dlogits written in place.
 * One block per row: an online max/sum pass, then one pass writing the gradient. Columns >=
 * V_real are never exponentiated and get gradient 0. It must never read a masked target as valid. */
#include <math.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"

#define XENT_THREADS 512

/* Merge two partial softmax sums (m1, s1), (m2, s2) where s = sum e^(x - m):
 * m = max(m1, m2), s = s1 e^(m1 - m) + s2 e^(m2 - m). An empty part has m = -inf, s = 0. */
static __device__ __forceinline__ void xent_merge(float &m, float &s, float m2, float s2)
{
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/* xent_merge on (m, s) pairs, as a reduction step. */
struct xent_merge_op {
    __device__ __forceinline__ float2 operator()(float2 a, float2 b) const
    {
        xent_merge(a.x, a.y, b.x, b.y);
        return a;
    }
};

/* For row x with target y (0 <= y < Vr): m = max_j x_j, s = sum_j e^(x_j - m) over j < Vr,
 * loss = log s + m - x_y,  dx_j = g (e^(x_j - m) / s - [j == y]) for j < Vr, 0 for j >= Vr.
 * A masked row (y < 0 or y >= Vr) gets loss 0 and an all-zero gradient. */
__global__ void __launch_bounds__(XENT_THREADS)
cuda_xent_kernel(float *logits, float *losses, const int32_t *targets, int V, int Vr, float g)
{
    __shared__ float2 red[XENT_THREADS / 32];
    const int n = blockIdx.x, tid = threadIdx.x;
    float *x = logits + (size_t)n * V;
    const int y = targets[n];
    if (y < 0 || y >= Vr) { /* uniform across the block: no barrier below is skipped by some */
        for (int j = tid; j < V; j += blockDim.x) x[j] = 0.0f;
        if (tid == 0) losses[n] = 0.0f;
        return;
    }
    const float xy = x[y]; /* read before any thread overwrites the row */
    float m = -INFINITY, s = 0.0f;
    for (int j = tid; j < Vr; j += blockDim.x) {
        float v = x[j];
        if (v > m) {
            s = s * expf(m - v) + 1.0f; /* e^(-inf) = 0 on the first element */
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    /* lanes, then warps in order; every thread gets the row's (m, s) */
    const float2 ms = cuda_block_reduce<XENT_THREADS>(make_float2(m, s), red, xent_merge_op());
    if (tid == 0) losses[n] = logf(ms.y) + ms.x - xy;
    const float M = ms.x, k = g / ms.y;
    for (int j = tid; j < V; j += blockDim.x)
        x[j] = j < Vr ? expf(x[j] - M) * k - (j == y ? g : 0.0f) : 0.0f;
}

void cuda_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets, int N,
                       int V, int V_real, float grad_scale)
{
    if (N <= 0 || V <= 0 || cuda_broken(be)) return;
    if (V_real > V || V_real <= 0) V_real = V;
    cuda_xent_kernel<<<N, XENT_THREADS, 0, cuda_im(be)->compute>>>(logits, losses, targets, V,
                                                                  V_real, grad_scale);
    cuda_check_launch(be, "softmax_xent");
}
