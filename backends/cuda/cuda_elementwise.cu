/* cuda_elementwise.cu: the memory-bound ops: fill, add, axpy, scale, sumsq, bias, GELU, SwiGLU,
 * rotary positions and the fp32 -> bf16 cast of the bf16 matmul path.
 * Grid-stride loops on the compute stream; reductions add in a fixed order (no atomics), so
 * every result is bitwise reproducible. It must never allocate except through cuda_scratch. */
#include <math.h>

#include <cuda_bf16.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"

#define GRID_STRIDE(i, n)                                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (size_t)gridDim.x * blockDim.x)

/* x[i] = value */
__global__ void cuda_fill_kernel(float *x, float value, size_t n)
{
    GRID_STRIDE(i, n) x[i] = value;
}

/* out[i] = a[i] + b[i] */
__global__ void cuda_add_kernel(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

/* y[i] += alpha x[i] */
__global__ void cuda_axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

/* x[i] *= alpha */
__global__ void cuda_scale_kernel(float *x, float alpha, size_t n)
{
    GRID_STRIDE(i, n) x[i] *= alpha;
}

/* dst[i] = bf16(src[i]), round to nearest even (__float2bfloat16_rn) */
__global__ void cuda_cast_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

cudaError_t cuda_probe_kernels(void)
{
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, cuda_fill_kernel);
}

void cuda_fill(backend *be, float *x, float value, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_fill_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(x, value, n);
    cuda_check_launch(be, "fill");
}

void cuda_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_add_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(out, a, b, n);
    cuda_check_launch(be, "add");
}

void cuda_axpy(backend *be, float *y, float alpha, const float *x, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_axpy_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(y, alpha, x, n);
    cuda_check_launch(be, "axpy");
}

void cuda_scale(backend *be, float *x, float alpha, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_scale_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(x, alpha, n);
    cuda_check_launch(be, "scale");
}

int cuda_cast_bf16(backend *be, void *dst, const float *src, size_t n)
{
    if (n == 0) return 0;
    cuda_cast_bf16_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        (__nv_bfloat16 *)dst, src, n);
    return cuda_check_launch(be, "cast to bf16");
}

/* --- sum of squares in double: block b sums x[i]^2 over a fixed contiguous chunk, then one
 * block adds the partials in block order. Chunking depends on n only (not on the device). --- */
#define SUMSQ_CHUNK 8192
#define SUMSQ_MAXB 4096

__global__ void cuda_sumsq_partial_kernel(double *partial, const float *x, size_t n, size_t chunk)
{
    __shared__ double warps[CUDA_BLOCK / 32];
    const size_t lo = (size_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s += (double)x[i] * (double)x[i];
    s = cuda_block_reduce<CUDA_BLOCK>(s, warps, cuda_sum_op());
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* out[0] = sum_b partial[b]: each thread a strided subset, then lanes and warps in order */
__global__ void cuda_sumsq_finish_kernel(double *out, const double *partial, int nb)
{
    __shared__ double warps[CUDA_BLOCK / 32];
    double s = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) s += partial[b];
    s = cuda_block_reduce<CUDA_BLOCK>(s, warps, cuda_sum_op());
    if (threadIdx.x == 0) out[0] = s;
}

double cuda_sumsq(backend *be, const float *x, size_t n)
{
    if (cuda_broken(be)) return NAN;
    if (n == 0) return 0.0;
    size_t chunk = SUMSQ_CHUNK;
    if ((n + chunk - 1) / chunk > SUMSQ_MAXB) chunk = (n + SUMSQ_MAXB - 1) / SUMSQ_MAXB;
    int nb = (int)((n + chunk - 1) / chunk);
    double *part = (double *)cuda_scratch(be, ((size_t)nb + 1) * sizeof(double));
    if (!part) return NAN;
    cudaStream_t st = cuda_im(be)->compute;
    cuda_sumsq_partial_kernel<<<nb, CUDA_BLOCK, 0, st>>>(part + 1, x, n, chunk);
    if (cuda_check_launch(be, "sumsq") != 0) return NAN;
    cuda_sumsq_finish_kernel<<<1, CUDA_BLOCK, 0, st>>>(part, part + 1, nb);
    if (cuda_check_launch(be, "sumsq") != 0) return NAN;
    double result = NAN;
    if (cuda_check(be, cudaMemcpyAsync(&result, part, sizeof result, cudaMemcpyDeviceToHost, st),
                   "sumsq copy") != 0 ||
        cuda_check(be, cudaStreamSynchronize(st), "sumsq sync") != 0)
        return NAN;
    return result;
}

/* --- bias --- */

/* out[n, c] += bias[c] */
__global__ void cuda_bias_add_kernel(float *out, const float *bias, size_t total, int C)
{
    GRID_STRIDE(i, total) out[i] += bias[i % (size_t)C];
}

void cuda_bias_add(backend *be, float *out, const float *bias, int N, int C)
{
    size_t total = (size_t)N * C;
    if (total == 0 || cuda_broken(be)) return;
    cuda_bias_add_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, bias, total, C);
    cuda_check_launch(be, "bias_add");
}

struct cuda_bias_term {
    const float *dout;
    int C;
    __device__ float2 operator()(int n, int c) const
    {
        return make_float2(dout[(size_t)n * C + c], 0.0f);
    }
};

/* dbias[c] += sum_n dout[n, c] (deterministic two-stage column sum) */
void cuda_bias_backward(backend *be, float *dbias, const float *dout, int N, int C)
{
    if (cuda_broken(be)) return;
    cuda_bias_term f = {dout, C};
    cuda_colsum(be, dbias, (float *)NULL, f, N, C, "bias_backward");
}

/* --- activations --- */
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

/* out = 0.5 x (1 + tanh(s (x + k x^3))) */
__global__ void cuda_gelu_fwd_kernel(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float t = tanhf(GELU_S * (x + GELU_K * x * x * x));
        out[i] = 0.5f * x * (1.0f + t);
    }
}

/* dinp = dout (0.5 (1 + t) + 0.5 x (1 - t^2) s (1 + 3 k x^2)), t = tanh(s (x + k x^3)) */
__global__ void cuda_gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float t = tanhf(GELU_S * (x + GELU_K * x * x * x));
        float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * GELU_K * x * x);
        dinp[i] = g * dout[i];
    }
}

/* out = silu(g) u, silu(g) = g sigma(g), sigma(g) = 1 / (1 + e^-g) */
__global__ void cuda_swiglu_fwd_kernel(float *out, const float *gate, const float *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        out[i] = g * sig * up[i];
    }
}

/* dgate = dout u sigma (1 + g (1 - sigma)),  dup = dout silu(g) */
__global__ void cuda_swiglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                       const float *gate, const float *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float g = gate[i], u = up[i], d = dout[i];
        float sig = 1.0f / (1.0f + expf(-g));
        dgate[i] = d * u * sig * (1.0f + g * (1.0f - sig));
        dup[i] = d * g * sig;
    }
}

void cuda_gelu_forward(backend *be, float *out, const float *inp, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_gelu_fwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(out, inp, n);
    cuda_check_launch(be, "gelu_forward");
}

void cuda_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_gelu_bwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dinp, inp, dout, n);
    cuda_check_launch(be, "gelu_backward");
}

void cuda_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_swiglu_fwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, gate, up, n);
    cuda_check_launch(be, "swiglu_forward");
}

void cuda_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_swiglu_bwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dgate, dup, dout, gate, up, n);
    cuda_check_launch(be, "swiglu_backward");
}

/* --- rotary positions: x (B, T, H, D), pair i of position t rotated by a = sgn t theta^(-2i/D):
 * (x0, x1) <- (x0 cos a - x1 sin a, x0 sin a + x1 cos a). cos/sin come from double precision
 * (t * freq loses ~1e-4 rad in float at t ~ 1000) and are rounded to float, as the CPU table. --- */
__global__ void cuda_rope_kernel(float *x, size_t pairs, int T, int H, int D, double theta, float sgn)
{
    const int half = D / 2;
    GRID_STRIDE(p, pairs)
    {
        int i = (int)(p % (size_t)half);
        size_t row = p / (size_t)half;             /* (b, t, h) */
        int t = (int)((row / (size_t)H) % (size_t)T);
        double freq = pow(theta, -2.0 * i / D);
        float c = (float)cos(t * freq), s = sgn * (float)sin(t * freq);
        float *v = x + row * (size_t)D + 2 * i;
        float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
    }
}

/* Rows at their own positions (batched generation): x (R, H, D), row r at pos[r]; the same
 * double-precision angles as cuda_rope_kernel (freqs: as the rope_freqs kernel), so a position
 * gets the same bits either way. */
__global__ void cuda_rope_rows_kernel(float *x, const int32_t *pos, size_t pairs, int H, int D, double theta,
                                      const float *freqs)
{
    const int half = D / 2;
    GRID_STRIDE(p, pairs)
    {
        int i = (int)(p % (size_t)half);
        size_t row = p / (size_t)half;             /* (r, h) */
        int t = pos[row / (size_t)H];
        double freq = freqs ? (double)freqs[i] : pow(theta, -2.0 * i / D);
        float c = (float)cos(t * freq), s = (float)sin(t * freq);
        float *v = x + row * (size_t)D + 2 * i;
        float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
    }
}

void cuda_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta, const float *freqs)
{
    size_t pairs = (size_t)R * H * (D / 2);
    if (pairs == 0 || cuda_broken(be)) return;
    cuda_rope_rows_kernel<<<cuda_grid_for(be, pairs), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        x, pos, pairs, H, D, (double)theta, freqs);
    cuda_check_launch(be, "rope_rows");
}

/* The same rotation with pair i's inverse frequency from freqs[i] (device, D/2 floats). */
__global__ void cuda_rope_freqs_kernel(float *x, size_t pairs, int T, int H, int D, const float *freqs,
                                       float sgn)
{
    const int half = D / 2;
    GRID_STRIDE(p, pairs)
    {
        int i = (int)(p % (size_t)half);
        size_t row = p / (size_t)half;             /* (b, t, h) */
        int t = (int)((row / (size_t)H) % (size_t)T);
        double a = (double)t * (double)freqs[i];
        float c = (float)cos(a), s = sgn * (float)sin(a);
        float *v = x + row * (size_t)D + 2 * i;
        float x0 = v[0], x1 = v[1];
        v[0] = x0 * c - x1 * s;
        v[1] = x0 * s + x1 * c;
    }
}

void cuda_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs, int inverse)
{
    size_t pairs = (size_t)B * T * H * (D / 2);
    if (pairs == 0 || cuda_broken(be)) return;
    cuda_rope_freqs_kernel<<<cuda_grid_for(be, pairs), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        x, pairs, T, H, D, freqs, inverse ? -1.0f : 1.0f);
    cuda_check_launch(be, "rope_freqs");
}

void cuda_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse)
{
    size_t pairs = (size_t)B * T * H * (D / 2);
    if (pairs == 0 || cuda_broken(be)) return;
    cuda_rope_kernel<<<cuda_grid_for(be, pairs), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        x, pairs, T, H, D, (double)theta, inverse ? -1.0f : 1.0f);
    cuda_check_launch(be, "rope");
}
