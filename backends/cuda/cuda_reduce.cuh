/* cuda_reduce.cuh: warp/block reductions and the deterministic column sum shared by the kernels.
 * Every reduction here adds in a fixed order that depends only on the shapes, never on timing or
 * on the device, so results are bitwise reproducible run to run. It must never use float atomics. */
#ifndef LOOM_CUDA_REDUCE_CUH
#define LOOM_CUDA_REDUCE_CUH

#include "backends/cuda/cuda_internal.h"

#define CUDA_FULL_MASK 0xffffffffu

/* A value from lane (this lane ^ off) of the warp; a float2 is shuffled as its two halves. */
static __device__ __forceinline__ float cuda_shfl_xor(float v, int off)
{
    return __shfl_xor_sync(CUDA_FULL_MASK, v, off);
}

static __device__ __forceinline__ double cuda_shfl_xor(double v, int off)
{
    return __shfl_xor_sync(CUDA_FULL_MASK, v, off);
}

static __device__ __forceinline__ float2 cuda_shfl_xor(float2 v, int off)
{
    return make_float2(__shfl_xor_sync(CUDA_FULL_MASK, v.x, off),
                       __shfl_xor_sync(CUDA_FULL_MASK, v.y, off));
}

/* The combining steps of the reductions: op(own, other). */
struct cuda_sum_op {
    template <class T>
    __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct cuda_max_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* op over each aligned group of LANES lanes (2, 4, 8, 16 or 32) by xor-shuffles (butterfly):
 * offsets LANES/2, ..., 2, 1, or with UP 1, 2, ..., LANES/2 (the bf16 attention's row sums are
 * added in that order). After log2(LANES) steps every lane of the group holds the result. All 32
 * lanes of the warp must call it. */
template <int LANES, bool UP = false, class T, class Op>
static __device__ __forceinline__ T cuda_lanes_reduce(T v, Op op)
{
    if (UP)
        for (int off = 1; off < LANES; off <<= 1) v = op(v, cuda_shfl_xor(v, off));
    else
        for (int off = LANES / 2; off > 0; off >>= 1) v = op(v, cuda_shfl_xor(v, off));
    return v;
}

/* Sum / max over the 32 lanes of a warp; every lane gets the result. */
static __device__ __forceinline__ float cuda_warp_sum(float v)
{
    return cuda_lanes_reduce<32>(v, cuda_sum_op());
}

static __device__ __forceinline__ double cuda_warp_sum_d(double v)
{
    return cuda_lanes_reduce<32>(v, cuda_sum_op());
}

static __device__ __forceinline__ float cuda_warp_max(float v)
{
    return cuda_lanes_reduce<32>(v, cuda_max_op());
}

/* op over the THREADS threads of a block (a multiple of 32; every thread calls it, and every
 * thread gets the result): each warp reduces its lanes, lane 0 puts the warp's value in
 * red[warp], then each thread combines red[0], red[1], ... in warp order. red: THREADS / 32
 * shared slots; the leading barrier lets a block use the same red again right away. */
template <int THREADS, class T, class Op>
static __device__ __forceinline__ T cuda_block_reduce(T v, T *red, Op op)
{
    v = cuda_lanes_reduce<32>(v, op);
    __syncthreads(); /* red may still be read by a previous reduction */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = red[0];
    for (int w = 1; w < THREADS / 32; w++) t = op(t, red[w]);
    return t;
}

/* Column sums over rows, in two deterministic stages:
 *   stage 1: partial[s][c] = sum_{n in split s} f(n, c)   (split s = rows [s*R, (s+1)*R))
 *   stage 2: out_a[c] += sum_s partial[s][c].x, out_b[c] += sum_s partial[s][c].y
 * f returns two channels (e.g. dweight and dbias terms) so one pass reads the data once.
 * Stage 1 blocks are (32, 8): x picks the column, y strides the rows of the split; the 8 row
 * lanes are then added in lane order through shared memory. */
#define CUDA_COLSUM_ROWS 64   /* rows per split unless that gives more than CUDA_COLSUM_MAXS */
#define CUDA_COLSUM_MAXS 1024

static inline int cuda_colsum_rows(int N)
{
    int R = CUDA_COLSUM_ROWS;
    if ((N + R - 1) / R > CUDA_COLSUM_MAXS) R = (N + CUDA_COLSUM_MAXS - 1) / CUDA_COLSUM_MAXS;
    return R;
}

template <class F>
__global__ void cuda_colsum_partial_kernel(float2 *partial, F f, int N, int C, int R)
{
    __shared__ float2 lanes[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, s = blockIdx.y;
    const int n0 = s * R, n1 = min(N, n0 + R);
    float2 acc = make_float2(0.0f, 0.0f);
    if (c < C)
        for (int n = n0 + (int)threadIdx.y; n < n1; n += 8) {
            float2 v = f(n, c);
            acc.x += v.x;
            acc.y += v.y;
        }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float2 t = lanes[0][threadIdx.x];
        for (int k = 1; k < 8; k++) {
            t.x += lanes[k][threadIdx.x].x;
            t.y += lanes[k][threadIdx.x].y;
        }
        partial[(size_t)s * C + c] = t;
    }
}

/* Stage 2, one thread per column, splits added in index order. (A template only so that every
 * translation unit including this header gets its own copy without unused-function warnings.) */
template <class P>
__global__ void cuda_colsum_finish_kernel(float *out_a, float *out_b, const P *partial, int S, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a = 0.0f, b = 0.0f;
    for (int s = 0; s < S; s++) {
        P v = partial[(size_t)s * C + c];
        a += v.x;
        b += v.y;
    }
    if (out_a) out_a[c] += a;
    if (out_b) out_b[c] += b;
}

/* Runs both stages on the compute stream; out_a and/or out_b may be NULL (that sum is skipped;
 * both NULL: nothing to do). Returns -1 on failure (logged). */
template <class F>
static int cuda_colsum(backend *be, float *out_a, float *out_b, F f, int N, int C, const char *what)
{
    if (N <= 0 || C <= 0 || (!out_a && !out_b)) return 0;
    const int R = cuda_colsum_rows(N), S = (N + R - 1) / R;
    float2 *partial = (float2 *)cuda_scratch(be, (size_t)S * C * sizeof(float2));
    if (!partial) return -1;
    cudaStream_t st = cuda_im(be)->compute;
    dim3 grid((C + 31) / 32, S), block(32, 8);
    cuda_colsum_partial_kernel<F><<<grid, block, 0, st>>>(partial, f, N, C, R);
    if (cuda_check_launch(be, what) != 0) return -1;
    cuda_colsum_finish_kernel<float2><<<(C + CUDA_BLOCK - 1) / CUDA_BLOCK, CUDA_BLOCK, 0, st>>>(
        out_a, out_b, partial, S, C);
    return cuda_check_launch(be, what);
}

#endif
