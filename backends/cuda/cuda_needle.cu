/* cuda_needle.cu: Needle's element-wise layers on the GPU: the causal depthwise conv taps along
 * time (forward, backward, one decode row), the sigmoid gates (element-wise and scalar) and the
 * W4 / A8 fake quantisation (backends/needle_quant.h's arithmetic, a warp per group or row).
 * Grid-stride loops on the compute stream; parameter gradients are deterministic two-stage sums
 * (cuda_colsum, a fixed grid for the scalar gate; no atomics), so every result is bitwise
 * reproducible. It must never allocate except through cuda_scratch. */
#include "backends/cuda/cuda_needle.h"
#include "backends/cuda/cuda_reduce.cuh"
#include "backends/needle_quant.h"

#define GRID_STRIDE(i, n)                                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (size_t)gridDim.x * blockDim.x)

/* --- conv taps --- */

/* out[n,c] = w[0,c] x[n,c] + sum_{j >= 1, j*dil <= t} w[j,c] x[n - j*dil, c], t = n mod T */
__global__ void cuda_taps_fwd_kernel(float *out, const float *inp, const float *w, int T, int C,
                                     int K, int dil, size_t total)
{
    GRID_STRIDE(i, total)
    {
        const size_t n = i / C;
        const int c = (int)(i % C), t = (int)(n % T);
        float y = w[c] * inp[i];
        for (int j = 1; j < K && j * dil <= t; j++)
            y += w[(size_t)j * C + c] * inp[i - (size_t)j * dil * C];
        out[i] = y;
    }
}

/* dx[n,c] = w[0,c] dout[n,c] + sum_{j >= 1, t + j*dil < T} w[j,c] dout[n + j*dil, c] */
__global__ void cuda_taps_dx_kernel(float *dinp, const float *dout, const float *w, int T, int C,
                                    int K, int dil, size_t total)
{
    GRID_STRIDE(i, total)
    {
        const size_t n = i / C;
        const int c = (int)(i % C), t = (int)(n % T);
        float y = w[c] * dout[i];
        for (int j = 1; j < K && t + j * dil < T; j++)
            y += w[(size_t)j * C + c] * dout[i + (size_t)j * dil * C];
        dinp[i] = y;
    }
}

/* Column terms of taps j and j+1: dout[n,c] x[n - j*dil, c] when t >= j*dil (else 0). */
struct cuda_taps_terms {
    const float *dout, *inp;
    int T, C, j, K, dil;
    __device__ float term(int n, int c, int jj) const
    {
        const int t = n % T;
        if (jj >= K || t < jj * dil) return 0.0f;
        return dout[(size_t)n * C + c] * inp[((size_t)n - (size_t)jj * dil) * C + c];
    }
    __device__ float2 operator()(int n, int c) const
    {
        return make_float2(term(n, c, j), term(n, c, j + 1));
    }
};

/* One thread per (r, c): the forward's sum over the state rows, then the column moves on. */
__global__ void cuda_taps_decode_kernel(float *out, float *state, const float *x, const float *w,
                                        int R, int C, int K, int dil)
{
    const size_t S = (size_t)(K - 1) * dil;
    GRID_STRIDE(i, (size_t)R * C)
    {
        const size_t r = i / C;
        const int c = (int)(i % C);
        const float xi = x[i];
        float *s = S ? state + r * S * C + c : (float *)0;
        float y = w[c] * xi;
        for (int j = 1; j < K; j++) y += w[(size_t)j * C + c] * s[(S - (size_t)j * dil) * C];
        if (S) {
            for (size_t k = 0; k + 1 < S; k++) s[k * C] = s[(k + 1) * C];
            s[(S - 1) * C] = xi;
        }
        out[i] = y;
    }
}

void cuda_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                            int T, int C, int K, int dil)
{
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)B * T * C;
    cuda_taps_fwd_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, inp, w, T, C, K, dil, total);
    cuda_check_launch(be, "conv_taps_forward");
}

void cuda_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, int B, int T, int C, int K, int dil)
{
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)B * T * C;
    if (dinp) {
        cuda_taps_dx_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
            dinp, dout, w, T, C, K, dil, total);
        if (cuda_check_launch(be, "conv_taps_backward (dinp)") != 0) return;
    }
    for (int j = 0; dw && j < K; j += 2) { /* NULL: frozen taps */
        cuda_taps_terms f = {dout, inp, T, C, j, K, dil};
        float *b = j + 1 < K ? dw + (size_t)(j + 1) * C : (float *)NULL;
        if (cuda_colsum(be, dw + (size_t)j * C, b, f, B * T, C, "conv_taps_backward (dw)") != 0)
            return;
    }
}

void cuda_conv_taps_decode(backend *be, float *out, float *state, const float *x,
                           const float *w, int R, int C, int K, int dil)
{
    if (R <= 0 || C <= 0 || K <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)R * C;
    cuda_taps_decode_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, state, x, w, R, C, K, dil);
    cuda_check_launch(be, "conv_taps_decode");
}

/* --- sigmoid gates --- */

static __device__ __forceinline__ float cuda_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

/* out = x s, s = sigmoid(g) */
__global__ void cuda_gate_fwd_kernel(float *out, const float *x, const float *g, size_t n)
{
    GRID_STRIDE(i, n) out[i] = x[i] * cuda_sigmoid(g[i]);
}

/* dx = dout s, dg = dout x s (1 - s) */
__global__ void cuda_gate_bwd_kernel(float *dx, float *dg, const float *dout, const float *x,
                                     const float *g, size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float s = cuda_sigmoid(g[i]), d = dout[i];
        dx[i] = d * s;
        dg[i] = d * x[i] * s * (1.0f - s);
    }
}

/* out = sigmoid(s[0]) x */
__global__ void cuda_scalar_gate_fwd_kernel(float *out, const float *x, const float *s, size_t n)
{
    const float a = cuda_sigmoid(s[0]);
    GRID_STRIDE(i, n) out[i] = a * x[i];
}

/* The scalar gate's sum in a fixed shape: CUDA_GATE_BLOCKS blocks of CUDA_BLOCK threads, thread
 * (b, t) adding dout x over i = (b CUDA_BLOCK + t) + k CUDA_GATE_BLOCKS CUDA_BLOCK, the block's
 * threads reduced (cuda_block_reduce), then one block adding the block sums the same way. */
#define CUDA_GATE_BLOCKS 256

__global__ void cuda_scalar_gate_part_kernel(float *part, const float *dout, const float *x,
                                             size_t n)
{
    __shared__ float red[CUDA_BLOCK / 32];
    float acc = 0.0f;
    GRID_STRIDE(i, n) acc += dout[i] * x[i];
    acc = cuda_block_reduce<CUDA_BLOCK>(acc, red, cuda_sum_op());
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* ds[0] += sigmoid'(s) sum_b part[b]; one block */
__global__ void cuda_scalar_gate_ds_kernel(float *ds, const float *part, const float *s)
{
    __shared__ float red[CUDA_BLOCK / 32];
    float acc = 0.0f;
    for (int b = threadIdx.x; b < CUDA_GATE_BLOCKS; b += CUDA_BLOCK) acc += part[b];
    acc = cuda_block_reduce<CUDA_BLOCK>(acc, red, cuda_sum_op());
    if (threadIdx.x == 0) {
        const float a = cuda_sigmoid(s[0]);
        ds[0] += a * (1.0f - a) * acc;
    }
}

/* dx = sigmoid(s[0]) dout */
__global__ void cuda_scalar_gate_dx_kernel(float *dx, const float *dout, const float *s, size_t n)
{
    const float a = cuda_sigmoid(s[0]);
    GRID_STRIDE(i, n) dx[i] = a * dout[i];
}

void cuda_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_gate_fwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(out, x, g, n);
    cuda_check_launch(be, "sigmoid_gate_forward");
}

void cuda_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                                const float *x, const float *g, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_gate_bwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dx, dg, dout, x, g, n);
    cuda_check_launch(be, "sigmoid_gate_backward");
}

void cuda_scalar_gate_forward(backend *be, float *out, const float *x, const float *s, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cuda_scalar_gate_fwd_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, x, s, n);
    cuda_check_launch(be, "scalar_gate_forward");
}

/* ds first (dx may overwrite dout), then dx */
void cuda_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                               const float *x, const float *s, size_t n)
{
    if (n == 0 || cuda_broken(be)) return;
    cudaStream_t st = cuda_im(be)->compute;
    if (ds) { /* NULL: a frozen gate */
        float *part = (float *)cuda_scratch(be, CUDA_GATE_BLOCKS * sizeof(float));
        if (!part) return;
        cuda_scalar_gate_part_kernel<<<CUDA_GATE_BLOCKS, CUDA_BLOCK, 0, st>>>(part, dout, x, n);
        if (cuda_check_launch(be, "scalar_gate_backward (ds)") != 0) return;
        cuda_scalar_gate_ds_kernel<<<1, CUDA_BLOCK, 0, st>>>(ds, part, s);
        if (cuda_check_launch(be, "scalar_gate_backward (ds)") != 0) return;
    }
    cuda_scalar_gate_dx_kernel<<<cuda_grid_for(be, n), CUDA_BLOCK, 0, st>>>(dx, dout, s, n);
    cuda_check_launch(be, "scalar_gate_backward (dx)");
}

/* --- W4 (CQ) and A8 fake quantisation --- */

#define WARPS_PER_BLOCK (CUDA_BLOCK / 32)

/* One butterfly stage across lanes (h = 4 xo elements apart: partner lane l ^ xo): the lane with
 * bit xo clear holds the lower element a and keeps a + b, the other keeps a - b. */
static __device__ __forceinline__ float cq_xstage(float v, int xo, int upper)
{
    const float o = cuda_shfl_xor(v, xo);
    return upper ? NQ_SUB(o, v) : NQ_ADD(v, o);
}

/* cq_fwht with lane l holding v[4l .. 4l+3] in r[0..3]: stages 1, 2 in the lane, 4 .. 64 across */
static __device__ __forceinline__ void cq_warp_fwht(float (&r)[4], int lane)
{
    float a = r[0], b = r[1], c = r[2], d = r[3];
    r[0] = NQ_ADD(a, b), r[1] = NQ_SUB(a, b), r[2] = NQ_ADD(c, d), r[3] = NQ_SUB(c, d);
    a = r[0], b = r[1], c = r[2], d = r[3];
    r[0] = NQ_ADD(a, c), r[1] = NQ_ADD(b, d), r[2] = NQ_SUB(a, c), r[3] = NQ_SUB(b, d);
    for (int xo = 1; xo < 32; xo <<= 1)
        for (int m = 0; m < 4; m++) r[m] = cq_xstage(r[m], xo, lane & xo);
}

/* A warp per group: cq_group in the same order (cq_sumsq's per-lane sums and xor butterfly are
 * this warp's own), out = w + (what - w) on the group's real values. */
__global__ void cuda_cq_kernel(float *out, const float *w, const float *codebook, int cols,
                               int gpr, size_t G)
{
    const size_t g = (size_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (g >= G) return; /* the whole warp leaves together */
    float cb[CQ_CODES];
    for (int k = 0; k < CQ_CODES; k++) cb[k] = codebook[k];
    const size_t row = g / (size_t)gpr;
    const int c0 = (int)(g % (size_t)gpr) * CQ_GROUP, len = min(CQ_GROUP, cols - c0);
    const float *wg = w + row * cols + c0;
    float r[4], wv[4];
    for (int m = 0; m < 4; m++) {
        const int k = 4 * lane + m;
        wv[m] = k < len ? wg[k] : 0.0f;
        r[m] = wv[m];
    }
    cq_warp_fwht(r, lane);
    for (int m = 0; m < 4; m++) r[m] = NQ_MUL(r[m], CQ_HS);
    float p = NQ_ADD(NQ_MUL(r[0], r[0]), NQ_MUL(r[1], r[1]));
    p = NQ_ADD(p, NQ_MUL(r[2], r[2]));
    p = NQ_ADD(p, NQ_MUL(r[3], r[3]));
    p = cuda_lanes_reduce<32>(p, cuda_sum_op()); /* offsets 16, 8, 4, 2, 1 */
    const float nu = sqrtf(p);
    const float den = nu > 1e-12f ? nu : 1e-12f, nu16 = cq_round_fp16(nu);
    for (int m = 0; m < 4; m++) r[m] = NQ_MUL(cb[cq_code(NQ_DIV(r[m], den), cb)], nu16);
    cq_warp_fwht(r, lane);
    float *og = out + row * cols + c0;
    for (int m = 0; m < 4; m++) {
        const int k = 4 * lane + m;
        if (k < len) og[k] = nq_ste(wv[m], NQ_MUL(r[m], CQ_HS));
    }
}

/* A warp per row: the absolute maximum by butterfly (exact), then each element's A8 value. */
__global__ void cuda_a8_kernel(float *out, const float *x, int rows, int cols)
{
    const int row = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *xr = x + (size_t)row * cols;
    float amax = 0.0f;
    for (int c = lane; c < cols; c += 32) amax = fmaxf(amax, fabsf(xr[c]));
    const float s = a8_scale(cuda_warp_max(amax));
    float *o = out + (size_t)row * cols;
    for (int c = lane; c < cols; c += 32) o[c] = a8_quant(xr[c], s);
}

void cuda_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                      int cols)
{
    if (rows <= 0 || cols <= 0 || cuda_broken(be)) return;
    const int gpr = (cols + CQ_GROUP - 1) / CQ_GROUP;
    const size_t G = (size_t)rows * gpr, blocks = (G + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    cuda_cq_kernel<<<(unsigned)blocks, CUDA_BLOCK, 0, cuda_im(be)->compute>>>(out, w, codebook,
                                                                             cols, gpr, G);
    cuda_check_launch(be, "cq_w4_quant");
}

void cuda_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols)
{
    if (rows <= 0 || cols <= 0 || cuda_broken(be)) return;
    const unsigned blocks = (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    cuda_a8_kernel<<<blocks, CUDA_BLOCK, 0, cuda_im(be)->compute>>>(out, x, rows, cols);
    cuda_check_launch(be, "fake_quant_a8");
}
