/* cuda_needle_mix.cu: Needle's mixing layers on the GPU (backend.h, "Needle's mixing layers";
 * docs/needle.md 2.3, 2.4, 2.6): the Kronecker-factored products, column permutations and scales,
 * row softmax, the Hadamard MLP's SiLU middle, mHC's coefficients (Sinkhorn), collapse and expand,
 * and the engram gate, each with its input gradient. fp32 in every precision mode (kron_apply is
 * a plain kernel, not cuBLAS), libm-accurate expf/logf (no fast math), and every sum in a fixed
 * order (loops in index order, warp butterflies; no atomics), so each result is bitwise
 * reproducible run to run. It must never allocate except through cuda_scratch. */
#include <math.h>

#include "backends/cuda/cuda_needle_mix.h"
#include "backends/cuda/cuda_reduce.cuh"

#define GRID_STRIDE(i, n)                                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (size_t)gridDim.x * blockDim.x)

#define MIX_WARPS (CUDA_BLOCK / 32) /* warps per block of the warp-per-item kernels */
#define MIX_SINKHORN_STEPS 40       /* 20 rounds of a row and a column normalisation */

static __device__ __forceinline__ float mix_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Blocks of CUDA_BLOCK threads for `items` warps of work, one warp each. */
static unsigned mix_warp_blocks(size_t items)
{
    return (unsigned)((items + MIX_WARPS - 1) / MIX_WARPS);
}

/* --- Kronecker-factored products ---
 * out[r] = L Z R with Z = z[r] (a x b): transpose 0: L = A^T, R = Bm; 1: L = A, R = Bm^T. One
 * block runs rows r = blockIdx.x, + gridDim.x, ...; it lays L (transposed: LT[i][k] = L[k][i])
 * and R out in shared memory once, then per row stages Z, forms T = L Z (kept transposed,
 * TT[j][k] = T[k][j]) and out = T R. Both products are kron_mm: a thread owns four rows of one
 * column, so each step i reads one float4 of the left factor (the same for the threads sharing
 * the rows: a broadcast) and one float of the right (consecutive across the warp), for four FMAs.
 * LT and TT rows have stride ps = round4(a) + 4: float4-aligned, and the transposed stores of
 * consecutive columns (ps apart) fall in different banks. LT's pad columns are zero. */
#define KRON_THREADS 256
#define KRON_BLOCKS_PER_SM 4

static __host__ __device__ int kron_stride(int a) { return ((a + 3) & ~3) + 4; }

static size_t kron_smem_bytes(int a, int b)
{
    const size_t ps = (size_t)kron_stride(a);
    return (ps * ((size_t)a + b) + (size_t)b * b + (size_t)a * b) * sizeof(float);
}

/* C (m x n) = P (m x p) Q (p x n), P as PT (p rows of stride ps, P[k][i] = PT[i ps + k]), Q
 * row-major, both in shared memory: C[k][l] = sum_i P[k][i] Q[i][l], i in order. Thread item
 * f = g n + l computes rows 4g .. 4g+3 of column l; out_t = 1 stores them transposed into shared
 * C[l ps + k] (all four, pad rows included), 0 row-major into C[k n + l] for k < m only. */
static __device__ __forceinline__ void kron_mm(float *C, int out_t, const float *PT, int ps,
                                               const float *Q, int m, int n, int p)
{
    const int items = ((m + 3) >> 2) * n;
    for (int f = threadIdx.x; f < items; f += blockDim.x) {
        const int g = f / n, l = f - g * n;
        const float *pc = PT + 4 * g, *qc = Q + l;
        float4 c = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int i = 0; i < p; i++) {
            const float4 pv = *(const float4 *)(pc + (size_t)i * ps);
            const float qv = qc[(size_t)i * n];
            c.x += pv.x * qv;
            c.y += pv.y * qv;
            c.z += pv.z * qv;
            c.w += pv.w * qv;
        }
        const int k = 4 * g;
        if (out_t) {
            *(float4 *)(C + (size_t)l * ps + k) = c;
        } else {
            float *o = C + (size_t)k * n + l;
            o[0] = c.x;
            if (k + 1 < m) o[n] = c.y;
            if (k + 2 < m) o[2 * n] = c.z;
            if (k + 3 < m) o[3 * n] = c.w;
        }
    }
}

/* io (backend_kron_io), its parts as arguments: ip/is gather and scale the row as it is staged
 * into Zs (n_in: the row's width, zero padded to a b); with op, os or n_out < a b the product's row
 * lands in Zs (free once T = L Z ran), then is gathered and scaled into out's row of n_out. */
__global__ void __launch_bounds__(KRON_THREADS)
cuda_kron_kernel(float *out, const float *z, const float *A, const float *Bm, int N, int a, int b,
                 int tr, const int32_t *ip, const float *is, int n_in, const int32_t *op,
                 const float *os, int n_out)
{
    extern __shared__ float kron_smem[];
    const int ps = kron_stride(a);
    const size_t ab = (size_t)a * b;
    const int out_io = op || os || (size_t)n_out < ab;
    float *LT = kron_smem, *TT = LT + (size_t)a * ps, *R = TT + (size_t)b * ps;
    float *Zs = R + (size_t)b * b;
    for (int e = threadIdx.x; e < a * ps; e += blockDim.x) {
        const int i = e / ps, k = e - i * ps; /* LT[i][k] = L[k][i] */
        LT[e] = k >= a ? 0.0f : tr ? A[(size_t)k * a + i] : A[(size_t)i * a + k];
    }
    for (int e = threadIdx.x; e < b * b; e += blockDim.x) {
        const int j = e / b, l = e - j * b; /* R[j][l] */
        R[e] = tr ? Bm[(size_t)l * b + j] : Bm[e];
    }
    for (int r = blockIdx.x; r < N; r += gridDim.x) {
        const float *zr = z + (size_t)r * n_in;
        for (size_t e = threadIdx.x; e < ab; e += blockDim.x) {
            if (e >= (size_t)n_in) {
                Zs[e] = 0.0f;
                continue;
            }
            const float v = zr[ip ? ip[e] : e];
            Zs[e] = is ? v * is[e] : v;
        }
        __syncthreads(); /* Zs (and LT, R) written; every thread is past the last row's T R */
        kron_mm(TT, 1, LT, ps, Zs, a, b, a);      /* T = L Z */
        __syncthreads();                          /* TT written, Zs read */
        if (!out_io) {
            kron_mm(out + (size_t)r * ab, 0, TT, ps, R, a, b, b); /* out = T R */
            continue;
        }
        kron_mm(Zs, 0, TT, ps, R, a, b, b); /* P = T R, then out's row gathered from it */
        __syncthreads();
        float *o = out + (size_t)r * n_out;
        for (int m = threadIdx.x; m < n_out; m += blockDim.x) {
            const float v = Zs[op ? op[m] : m];
            o[m] = os ? v * os[m] : v;
        }
        __syncthreads(); /* Zs read before the next row stages into it */
    }
}

void cuda_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                     int N, int a, int b, int transpose, const backend_kron_io *io)
{
    if (N <= 0 || a <= 0 || b <= 0 || cuda_broken(be)) return;
    cuda_impl *im = cuda_im(be);
    const size_t smem = kron_smem_bytes(a, b);
    if (smem > im->smem_optin) {
        log_warn("cuda: kron_apply a=%d b=%d needs %zu bytes of shared memory per block; this "
                 "device allows %zu", a, b, smem, im->smem_optin);
        cuda_check(be, cudaErrorInvalidValue, "kron_apply");
        return;
    }
    if (smem > 48 * 1024 &&
        cuda_check(be, cudaFuncSetAttribute(cuda_kron_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "kron_apply (smem attribute)") != 0)
        return;
    size_t grid = (size_t)(im->sm_count > 0 ? im->sm_count : 1) * KRON_BLOCKS_PER_SM;
    if (grid > (size_t)N) grid = (size_t)N;
    const backend_kron_io none = {NULL, NULL, a * b, NULL, NULL, a * b};
    const backend_kron_io *x = io ? io : &none;
    cuda_kron_kernel<<<(unsigned)grid, KRON_THREADS, smem, im->compute>>>(
        out, z, A, Bm, N, a, b, transpose, x->in_perm, x->in_scale, x->n_in, x->out_perm,
        x->out_scale, x->n_out);
    cuda_check_launch(be, "kron_apply");
}

/* --- column permutations and scales --- */

/* gather out[r][m] = x[r][perm[m]], or (inverse) scatter out[r][perm[m]] = x[r][m] */
__global__ void cuda_permute_kernel(float *out, const float *x, const int32_t *perm, int n,
                                    int inverse, size_t total)
{
    GRID_STRIDE(i, total)
    {
        const size_t row = i - i % (size_t)n;
        const int32_t p = perm[i % (size_t)n];
        if (inverse)
            out[row + p] = x[i];
        else
            out[i] = x[row + p];
    }
}

/* out[r][c] = x[r][c] d[c] for c < min(n_in, n_out), else 0 */
__global__ void cuda_scale_cols_kernel(float *out, const float *x, const float *d, int n_in,
                                       int n_out, size_t total)
{
    const int m = n_in < n_out ? n_in : n_out;
    GRID_STRIDE(i, total)
    {
        const size_t r = i / (size_t)n_out;
        const int c = (int)(i - r * n_out);
        out[i] = c < m ? x[r * n_in + c] * d[c] : 0.0f;
    }
}

void cuda_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                       int inverse)
{
    if (N <= 0 || n <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * n;
    cuda_permute_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, x, perm, n, inverse, total);
    cuda_check_launch(be, "permute_cols");
}

void cuda_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                     int n_out)
{
    if (N <= 0 || n_out <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * n_out;
    cuda_scale_cols_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, x, d, n_in, n_out, total);
    cuda_check_launch(be, "scale_cols");
}

/* --- row softmax: a warp per row, lanes striding the columns --- */

/* mx = max x, e = exp(x - mx) into out, sum = warp_sum(e), out = e / sum. Each lane reads and
 * writes only its own columns, so out may be x. */
__global__ void cuda_softmax_rows_kernel(float *out, const float *x, int N, int n)
{
    const int row = blockIdx.x * MIX_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together */
    const float *xr = x + (size_t)row * n;
    float *o = out + (size_t)row * n;
    float mx = -INFINITY;
    for (int c = lane; c < n; c += 32) mx = fmaxf(mx, xr[c]);
    mx = cuda_warp_max(mx);
    float sum = 0.0f;
    for (int c = lane; c < n; c += 32) {
        const float e = expf(xr[c] - mx);
        o[c] = e;
        sum += e;
    }
    sum = cuda_warp_sum(sum);
    for (int c = lane; c < n; c += 32) o[c] = o[c] / sum;
}

/* dx = s (dout - <s, dout>); the dot is complete (the butterfly) before any lane writes, so dx
 * may be dout. */
__global__ void cuda_softmax_bwd_kernel(float *dx, const float *dout, const float *s, int N, int n)
{
    const int row = blockIdx.x * MIX_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *sr = s + (size_t)row * n, *g = dout + (size_t)row * n;
    float *o = dx + (size_t)row * n, dot = 0.0f;
    for (int c = lane; c < n; c += 32) dot += sr[c] * g[c];
    dot = cuda_warp_sum(dot);
    for (int c = lane; c < n; c += 32) o[c] = sr[c] * (g[c] - dot);
}

void cuda_softmax_rows(backend *be, float *out, const float *x, int N, int n)
{
    if (N <= 0 || n <= 0 || cuda_broken(be)) return;
    cuda_softmax_rows_kernel<<<mix_warp_blocks((size_t)N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, x, N, n);
    cuda_check_launch(be, "softmax_rows");
}

void cuda_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s, int N,
                                int n)
{
    if (N <= 0 || n <= 0 || cuda_broken(be)) return;
    cuda_softmax_bwd_kernel<<<mix_warp_blocks((size_t)N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dx, dout, s, N, n);
    cuda_check_launch(be, "softmax_rows_backward");
}

/* --- the Hadamard MLP's middle --- */

/* u = (d2 cond) z1 + b2, out = u sigmoid(u); out may be z1 (each element read, then written) */
__global__ void cuda_hada_fwd_kernel(float *out, const float *z1, const float *cond,
                                     const float *d2, const float *b2, int n, size_t total)
{
    GRID_STRIDE(i, total)
    {
        const int c = (int)(i % (size_t)n);
        const float u = (d2[c] * cond[i]) * z1[i] + b2[c];
        out[i] = u * mix_sigmoid(u);
    }
}

/* du = dout sigmoid(u) (1 + u (1 - sigmoid(u))), dz1 = (d2 cond) du, dcond = d2 (z1 du) */
__global__ void cuda_hada_bwd_kernel(float *dz1, float *dcond, const float *dout, const float *z1,
                                     const float *cond, const float *d2, const float *b2, int n,
                                     size_t total)
{
    GRID_STRIDE(i, total)
    {
        const int c = (int)(i % (size_t)n);
        const float dc = d2[c] * cond[i], z = z1[i];
        const float u = dc * z + b2[c], s = mix_sigmoid(u);
        const float du = dout[i] * (s * (1.0f + u * (1.0f - s)));
        dz1[i] = dc * du;
        dcond[i] = d2[c] * (z * du);
    }
}

void cuda_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                           const float *d2, const float *b2, int N, int n)
{
    if (N <= 0 || n <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * n;
    cuda_hada_fwd_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, z1, cond, d2, b2, n, total);
    cuda_check_launch(be, "hada_mid_forward");
}

void cuda_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                            const float *z1, const float *cond, const float *d2, const float *b2,
                            int N, int n)
{
    if (N <= 0 || n <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * n;
    cuda_hada_bwd_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dz1, dcond, dout, z1, cond, d2, b2, n, total);
    cuda_check_launch(be, "hada_mid_backward");
}

/* --- mHC: coefficients ---
 * One thread per row (the matrices are lanes x lanes, 4 x 4 in Needle): the CPU's arithmetic in
 * the CPU's order. Matrices are addressed with an element stride, so the same steps run on a
 * row's own columns of h (stride 1) and on the backward's trace in scratch, where element q of
 * step t of row r sits at (t L^2 + q) rows + r: consecutive rows' threads read consecutive
 * floats. */
#define MHC_THREADS 128

/* The pre and post gates' arguments (k < L: pre; L <= k < 2L: post):
 * pre: (alpha0 z + b) + (8 [k == lane] - 4);  post: (alpha1 z + b) - 4 [k != lane] */
static __device__ __forceinline__ float mhc_gate_arg(const float *z, const float *alpha,
                                                     const float *bias, int k, int L, int lane)
{
    if (k < L) return (alpha[0] * z[k] + bias[k]) + (k == lane ? 4.0f : -4.0f);
    return (alpha[1] * z[k] + bias[k]) - (k - L != lane ? 4.0f : 0.0f);
}

/* Sinkhorn step t on the L x L matrix `in` (element (i, j) at in[(i L + j) is]) into `out`
 * (stride os; may be in): t even subtracts from every row its logsumexp, t odd from every column:
 * lse = mx + log(sum_j exp(x_j - mx)), mx the line's max, j in order. */
static __device__ void mhc_sink_step(float *out, size_t os, const float *in, size_t is, int L,
                                     int t)
{
    const size_t along = t % 2 ? (size_t)L : 1, across = t % 2 ? 1 : (size_t)L;
    for (int i = 0; i < L; i++) {
        const size_t o = (size_t)i * across;
        float mx = in[o * is], sum = 0.0f;
        for (int j = 1; j < L; j++) {
            const float x = in[(o + j * along) * is];
            mx = x > mx ? x : mx;
        }
        for (int j = 0; j < L; j++) sum += expf(in[(o + j * along) * is] - mx);
        const float lse = mx + logf(sum);
        for (int j = 0; j < L; j++) out[(o + j * along) * os] = in[(o + j * along) * is] - lse;
    }
}

/* Step t's backward, g (stride gs) in place from the step's input `in` (stride is): along each
 * line, out = in - lse(in) gives din = dout - softmax(in) sum(dout); softmax(in)_j =
 * exp(x_j - mx) / sum, the sums over j in order. */
static __device__ void mhc_sink_step_backward(float *g, size_t gs, const float *in, size_t is,
                                              int L, int t)
{
    const size_t along = t % 2 ? (size_t)L : 1, across = t % 2 ? 1 : (size_t)L;
    for (int i = 0; i < L; i++) {
        const size_t o = (size_t)i * across;
        float mx = in[o * is], sum = 0.0f, gsum = 0.0f;
        for (int j = 1; j < L; j++) {
            const float x = in[(o + j * along) * is];
            mx = x > mx ? x : mx;
        }
        for (int j = 0; j < L; j++) {
            sum += expf(in[(o + j * along) * is] - mx);
            gsum += g[(o + j * along) * gs];
        }
        for (int j = 0; j < L; j++) {
            const float p = expf(in[(o + j * along) * is] - mx);
            g[(o + j * along) * gs] -= (p / sum) * gsum;
        }
    }
}

/* Row r: h_pre = sigmoid(.), h_post = 2 sigmoid(.), H = exp(Sinkhorn(alpha2 z_res + b_res)),
 * the Sinkhorn run in place in h's res columns. Each element of h is written from z's same
 * element first, so h may be z. */
__global__ void
cuda_mhc_coeffs_fwd_kernel(float *h, const float *z, const float *alpha, const float *bias, int N,
                           int L, int lane)
{
    const int r = blockIdx.x * MHC_THREADS + threadIdx.x;
    if (r >= N) return;
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L;
    const float *zr = z + r * K;
    float *hr = h + r * K, *Z = hr + 2 * L;
    for (int k = 0; k < 2 * L; k++) {
        const float s = mix_sigmoid(mhc_gate_arg(zr, alpha, bias, k, L, lane));
        hr[k] = k < L ? s : 2.0f * s;
    }
    for (size_t q = 0; q < LL; q++) Z[q] = alpha[2] * zr[2 * L + q] + bias[2 * L + q];
    for (int t = 0; t < MIX_SINKHORN_STEPS; t++) mhc_sink_step(Z, 1, Z, 1, L, t);
    for (size_t q = 0; q < LL; q++) Z[q] = expf(Z[q]);
}

/* Rows r0 + [0, n): dz from dh. The gates: sigmoid' (times 2 for post) times alpha. Sinkhorn:
 * the steps recomputed into the trace (slot t: step t's input; slot 40: the result; rows of the
 * chunk n apart), dZ = dH exp(Z_final) in dz's res columns, back through the steps last first,
 * times alpha2. dh is read before dz's same element is written, so dz may be dh. */
__global__ void
cuda_mhc_coeffs_bwd_kernel(float *dz, const float *dh, const float *z, const float *alpha,
                           const float *bias, float *trace, int r0, int n, int L, int lane)
{
    const int rr = blockIdx.x * MHC_THREADS + threadIdx.x;
    if (rr >= n) return;
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L, r = (size_t)r0 + rr;
    const size_t slot = LL * (size_t)n; /* floats between two steps' matrices */
    const float *zr = z + r * K, *g = dh + r * K;
    float *dzr = dz + r * K, *dZ = dzr + 2 * L, *tr = trace + rr;
    for (int k = 0; k < 2 * L; k++) {
        const float s = mix_sigmoid(mhc_gate_arg(zr, alpha, bias, k, L, lane));
        const float dv = k < L ? g[k] * (s * (1.0f - s)) : g[k] * (2.0f * (s * (1.0f - s)));
        dzr[k] = alpha[k < L ? 0 : 1] * dv;
    }
    for (size_t q = 0; q < LL; q++) tr[q * n] = alpha[2] * zr[2 * L + q] + bias[2 * L + q];
    for (int t = 0; t < MIX_SINKHORN_STEPS; t++)
        mhc_sink_step(tr + (t + 1) * slot, (size_t)n, tr + t * slot, (size_t)n, L, t);
    const float *fin = tr + MIX_SINKHORN_STEPS * slot;
    for (size_t q = 0; q < LL; q++) dZ[q] = g[2 * L + q] * expf(fin[q * n]);
    for (int t = MIX_SINKHORN_STEPS - 1; t >= 0; t--)
        mhc_sink_step_backward(dZ, 1, tr + t * slot, (size_t)n, L, t);
    for (size_t q = 0; q < LL; q++) dZ[q] = alpha[2] * dZ[q];
}

void cuda_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                             const float *bias, int N, int lanes, int lane)
{
    if (N <= 0 || lanes <= 0 || cuda_broken(be)) return;
    const unsigned blocks = (unsigned)((N + MHC_THREADS - 1) / MHC_THREADS);
    cuda_mhc_coeffs_fwd_kernel<<<blocks, MHC_THREADS, 0, cuda_im(be)->compute>>>(h, z, alpha, bias,
                                                                                N, lanes, lane);
    cuda_check_launch(be, "mhc_coeffs_forward");
}

/* The trace takes 41 L^2 floats a row; rows go in chunks that keep it under MHC_TRACE_BYTES. */
#define MHC_TRACE_BYTES ((size_t)64 << 20)

void cuda_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                              const float *alpha, const float *bias, int N, int lanes, int lane)
{
    if (N <= 0 || lanes <= 0 || cuda_broken(be)) return;
    const size_t per_row = (MIX_SINKHORN_STEPS + 1) * (size_t)lanes * lanes * sizeof(float);
    size_t chunk = MHC_TRACE_BYTES / per_row;
    if (chunk < 1) chunk = 1;
    if (chunk > (size_t)N) chunk = (size_t)N;
    float *trace = (float *)cuda_scratch(be, chunk * per_row);
    if (!trace) return;
    for (int r0 = 0; r0 < N; r0 += (int)chunk) {
        const int n = N - r0 < (int)chunk ? N - r0 : (int)chunk;
        const unsigned blocks = (unsigned)((n + MHC_THREADS - 1) / MHC_THREADS);
        cuda_mhc_coeffs_bwd_kernel<<<blocks, MHC_THREADS, 0, cuda_im(be)->compute>>>(
            dz, dh, z, alpha, bias, trace, r0, n, lanes, lane);
        if (cuda_check_launch(be, "mhc_coeffs_backward") != 0) return;
    }
}

/* --- mHC: collapse and expand --- */

/* u[r][c] = sum_k h[r hs + k] X[r][k][c], k in order */
__global__ void cuda_mhc_collapse_kernel(float *u, const float *X, const float *h, int hs, int L,
                                         int d, size_t total)
{
    GRID_STRIDE(i, total)
    {
        const size_t r = i / (size_t)d, c = i - r * d;
        const float *hr = h + r * hs, *x = X + r * L * d + c;
        float acc = hr[0] * x[0];
        for (int k = 1; k < L; k++) acc += hr[k] * x[(size_t)k * d];
        u[i] = acc;
    }
}

/* A warp per (r, k): dX[r][k] += h[r hs + k] du[r]; dh[r hs + k] = <du[r], X[r][k]> (lanes'
 * partial sums, then the butterfly; dh NULL: not computed) */
__global__ void cuda_mhc_collapse_bwd_kernel(float *dX, float *dh, const float *du, const float *X,
                                             const float *h, int hs, int L, int d, size_t items)
{
    const size_t w = (size_t)blockIdx.x * MIX_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (w >= items) return;
    const size_t r = w / (size_t)L, k = w - r * L;
    const float hk = h[r * hs + k], *g = du + r * d, *x = X + w * d;
    float *dx = dX + w * d, acc = 0.0f;
    for (int c = lane; c < d; c += 32) {
        dx[c] += hk * g[c];
        acc += g[c] * x[c];
    }
    acc = cuda_warp_sum(acc);
    if (dh && lane == 0) dh[r * hs + k] = acc;
}

void cuda_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                       int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * d;
    cuda_mhc_collapse_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        u, X, h, hs, lanes, d, total);
    cuda_check_launch(be, "mhc_collapse");
}

/* hs = 0 (one h shared by every row) takes no dh, as on the CPU: every row would write it. */
void cuda_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du, const float *X,
                                const float *h, int hs, int N, int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0 || cuda_broken(be)) return;
    if (hs == 0) dh = NULL;
    const size_t items = (size_t)N * lanes;
    cuda_mhc_collapse_bwd_kernel<<<mix_warp_blocks(items), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        dX, dh, du, X, h, hs, lanes, d, items);
    cuda_check_launch(be, "mhc_collapse_backward");
}

/* Xo[r][i][c] = sum_j H[i][j] X[r][j][c] (j in order) + h_post[i] y[r][c] */
__global__ void cuda_mhc_expand_kernel(float *Xo, const float *X, const float *h, const float *y,
                                       int L, int d, size_t total)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    GRID_STRIDE(e, total)
    {
        const size_t ri = e / (size_t)d, c = e - ri * d, r = ri / (size_t)L, i = ri - r * L;
        const float *hr = h + r * K, *Hi = hr + 2 * L + i * L, *x = X + r * L * d + c;
        float acc = Hi[0] * x[0];
        for (int j = 1; j < L; j++) acc += Hi[j] * x[(size_t)j * d];
        Xo[e] = acc + hr[L + i] * y[r * d + c];
    }
}

/* Over (r, j, c) with j <= L: j < L gives dX[r][j][c] = sum_i H[i][j] g[r][i][c], j = L gives
 * dy[r][c] = sum_i h_post[i] g[r][i][c], i in order. */
__global__ void cuda_mhc_expand_bwd_kernel(float *dX, float *dy, const float *g, const float *h,
                                           int L, int d, size_t total)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    GRID_STRIDE(e, total)
    {
        const size_t rj = e / (size_t)d, c = e - rj * d, r = rj / (size_t)(L + 1);
        const size_t j = rj - r * (L + 1);
        const float *hr = h + r * K, *gr = g + r * L * d + c;
        /* the weights of g[r][i]: column j of H (stride L), or h_post (stride 1) */
        const float *w = j < (size_t)L ? hr + 2 * L + j : hr + L;
        const size_t ws = j < (size_t)L ? (size_t)L : 1;
        float acc = w[0] * gr[0];
        for (int i = 1; i < L; i++) acc += w[i * ws] * gr[(size_t)i * d];
        if (j < (size_t)L)
            dX[(r * L + j) * d + c] = acc;
        else
            dy[r * d + c] = acc;
    }
}

/* A warp per (r, i, j), j <= L: dh's res column (i, j) = <g[r][i], X[r][j]> for j < L, its post
 * column i = <g[r][i], y[r]> for j = L (lanes' partial sums, then the butterfly). */
__global__ void cuda_mhc_expand_dh_kernel(float *dh, const float *g, const float *X, const float *y,
                                          int L, int d, size_t items)
{
    const size_t w = (size_t)blockIdx.x * MIX_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (w >= items) return;
    const size_t K = 2 * (size_t)L + (size_t)L * L, ri = w / (size_t)(L + 1), j = w - ri * (L + 1);
    const size_t r = ri / (size_t)L, i = ri - r * L;
    const float *gi = g + ri * d, *o = j < (size_t)L ? X + (r * L + j) * d : y + r * d;
    float acc = 0.0f;
    for (int c = lane; c < d; c += 32) acc += gi[c] * o[c];
    acc = cuda_warp_sum(acc);
    if (lane == 0) dh[r * K + (j < (size_t)L ? 2 * L + i * L + j : L + i)] = acc;
}

void cuda_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y, int N,
                     int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0 || cuda_broken(be)) return;
    const size_t total = (size_t)N * lanes * d;
    cuda_mhc_expand_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        Xo, X, h, y, lanes, d, total);
    cuda_check_launch(be, "mhc_expand");
}

void cuda_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                              const float *X, const float *h, const float *y, int N, int lanes,
                              int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0 || cuda_broken(be)) return;
    cudaStream_t st = cuda_im(be)->compute;
    const size_t total = (size_t)N * (lanes + 1) * d, items = (size_t)N * lanes * (lanes + 1);
    cuda_mhc_expand_bwd_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, st>>>(dX, dy, g, h,
                                                                                lanes, d, total);
    if (cuda_check_launch(be, "mhc_expand_backward (dX, dy)") != 0) return;
    cuda_mhc_expand_dh_kernel<<<mix_warp_blocks(items), CUDA_BLOCK, 0, st>>>(dh, g, X, y, lanes, d,
                                                                            items);
    cuda_check_launch(be, "mhc_expand_backward (dh)");
}

/* --- the engram gate: a warp per row --- */

/* rsqrt(mean(z^2) + 1e-6) of the row's d values (the butterfly: every lane gets it) */
static __device__ __forceinline__ float engram_rms_inv(const float *z, int d, int lane)
{
    float acc = 0.0f;
    for (int c = lane; c < d; c += 32) acc += z[c] * z[c];
    return 1.0f / sqrtf(cuda_warp_sum(acc) / (float)d + 1e-6f);
}

/* sigmoid(c), c = <u su, k sk> / sqrt(d) */
static __device__ __forceinline__ float engram_gate(const float *u, const float *k, float su,
                                                    float sk, int d, int lane)
{
    float acc = 0.0f;
    for (int c = lane; c < d; c += 32) acc += (u[c] * su) * (k[c] * sk);
    return mix_sigmoid(cuda_warp_sum(acc) / sqrtf((float)d));
}

/* out = u + sigmoid(c) v; the scalars first (every lane past the butterflies), so out may be u */
__global__ void cuda_engram_fwd_kernel(float *out, const float *u, const float *k, const float *v,
                                       int N, int d)
{
    const int row = blockIdx.x * MIX_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * d;
    const float *ur = u + o, *kr = k + o, *vr = v + o;
    const float su = engram_rms_inv(ur, d, lane), sk = engram_rms_inv(kr, d, lane);
    const float s = engram_gate(ur, kr, su, sk, d, lane);
    for (int c = lane; c < d; c += 32) out[o + c] = ur[c] + s * vr[c];
}

/* dc = s (1 - s) <dout, v>; with w = dc / sqrt(d) the gradient reaching r(u) is w r(k), and
 * r(u) = u su's backward gives du = dout + w su r(k) - u (w su^3 <u, r(k)> / d), r(k) = k sk.
 * The scalars first, so du may be dout. */
__global__ void cuda_engram_bwd_kernel(float *du, const float *dout, const float *u, const float *k,
                                       const float *v, int N, int d)
{
    const int row = blockIdx.x * MIX_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * d;
    const float *ur = u + o, *kr = k + o, *vr = v + o, *g = dout + o;
    const float su = engram_rms_inv(ur, d, lane), sk = engram_rms_inv(kr, d, lane);
    const float s = engram_gate(ur, kr, su, sk, d, lane);
    float gv = 0.0f, uk = 0.0f;
    for (int c = lane; c < d; c += 32) {
        gv += g[c] * vr[c];
        uk += ur[c] * (kr[c] * sk);
    }
    gv = cuda_warp_sum(gv);
    uk = cuda_warp_sum(uk);
    const float w = (s * (1.0f - s)) * gv / sqrtf((float)d);
    const float a = w * su * sk, b = w * su * su * su * uk / (float)d;
    for (int c = lane; c < d; c += 32) du[o + c] = g[c] + a * kr[c] - b * ur[c];
}

void cuda_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                              const float *v, int N, int d)
{
    if (N <= 0 || d <= 0 || cuda_broken(be)) return;
    cuda_engram_fwd_kernel<<<mix_warp_blocks((size_t)N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, u, k, v, N, d);
    cuda_check_launch(be, "engram_gate_forward");
}

void cuda_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                               const float *k, const float *v, int N, int d)
{
    if (N <= 0 || d <= 0 || cuda_broken(be)) return;
    cuda_engram_bwd_kernel<<<mix_warp_blocks((size_t)N), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        du, dout, u, k, v, N, d);
    cuda_check_launch(be, "engram_gate_backward");
}
