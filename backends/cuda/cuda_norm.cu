/* cuda_norm.cu: LayerNorm and RMSNorm over the last dim C of (N, C), forward and backward.
 * One warp per row for the row work; weight/bias gradients are column sums done by the
 * deterministic two-stage cuda_colsum (no atomics), so backward is bitwise reproducible.
 * Gradients accumulate (+=) into dinp, dweight, dbias, as backend.h requires; never overwrite.
 * dweight/dbias may be NULL (frozen weights): those column sums are skipped. */
#include <math.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"

#define ROWS_PER_BLOCK (CUDA_BLOCK / 32)

/* mean = sum x / C; var = sum (x - mean)^2 / C; rstd = 1/sqrt(var + eps);
 * out = (x - mean) rstd w + b.  One warp per row; lanes stride the columns. */
__global__ void cuda_ln_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C, float eps)
{
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return; /* whole warp leaves together: no shuffle is left half-populated */
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = cuda_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrtf(cuda_warp_sum(v) / C + eps);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * rs * w[c] + (b ? b[c] : 0.0f);
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* With xh = (x - mean) rstd and g = dout w:  dx += rstd (g - mean_c(g) - xh mean_c(g xh)). */
__global__ void cuda_ln_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N, int C)
{
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    const float m = mean[row], rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = d[c] * w[c];
        sg += g;
        sgx += g * (x[c] - m) * rs;
    }
    sg = cuda_warp_sum(sg) / C;
    sgx = cuda_warp_sum(sgx) / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xh = (x[c] - m) * rs;
        dx[c] += rs * (d[c] * w[c] - sg - xh * sgx);
    }
}

/* Column terms of the LayerNorm backward: (dout xh, dout) -> dweight, dbias. */
struct cuda_ln_terms {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const
    {
        size_t i = (size_t)n * C + c;
        float d = dout[i];
        return make_float2(d * (inp[i] - mean[n]) * rstd[n], d);
    }
};

/* rstd = 1/sqrt(mean(x^2) + eps); out = x rstd w */
__global__ void cuda_rms_fwd_kernel(float *out, float *rstd, const float *inp, const float *w,
                                    int N, int C, float eps)
{
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c] * x[c];
    const float rs = 1.0f / sqrtf(cuda_warp_sum(s) / C + eps);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * rs * w[c];
    if (lane == 0 && rstd) rstd[row] = rs;
}

/* With xh = x rstd and g = dout w:  dx += rstd (g - xh mean_c(g xh)). */
__global__ void cuda_rms_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *rstd, int N, int C)
{
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    const float rs = rstd[row];
    float sgx = 0.0f;
    for (int c = lane; c < C; c += 32) sgx += d[c] * w[c] * x[c] * rs;
    sgx = cuda_warp_sum(sgx) / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xh = x[c] * rs;
        dx[c] += rs * (d[c] * w[c] - xh * sgx);
    }
}

/* Column term of the RMSNorm backward: dout xh -> dweight. */
struct cuda_rms_terms {
    const float *dout, *inp, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const
    {
        size_t i = (size_t)n * C + c;
        return make_float2(dout[i] * inp[i] * rstd[n], 0.0f);
    }
};

static unsigned cuda_row_blocks(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

void cuda_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int N, int C, float eps)
{
    if (N <= 0 || C <= 0 || cuda_broken(be)) return;
    cuda_ln_fwd_kernel<<<cuda_row_blocks(N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps);
    cuda_check_launch(be, "layernorm_forward");
}

void cuda_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0 || cuda_broken(be)) return;
    cuda_ln_bwd_kernel<<<cuda_row_blocks(N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    if (cuda_check_launch(be, "layernorm_backward") != 0) return;
    cuda_ln_terms f = {dout, inp, mean, rstd, C};
    cuda_colsum(be, dweight, dbias, f, N, C, "layernorm_backward (dweight, dbias)");
}

void cuda_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps)
{
    if (N <= 0 || C <= 0 || cuda_broken(be)) return;
    cuda_rms_fwd_kernel<<<cuda_row_blocks(N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, rstd, inp, weight, N, C, eps);
    cuda_check_launch(be, "rmsnorm_forward");
}

void cuda_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0 || cuda_broken(be)) return;
    cuda_rms_bwd_kernel<<<cuda_row_blocks(N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dinp, dout, inp, weight, rstd, N, C);
    if (cuda_check_launch(be, "rmsnorm_backward") != 0) return;
    cuda_rms_terms f = {dout, inp, rstd, C};
    cuda_colsum(be, dweight, (float *)NULL, f, N, C, "rmsnorm_backward (dweight)");
}
