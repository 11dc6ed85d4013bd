/* cuda_attention.cuh: what the three causal attention implementations share: cuda_attention.cu
 * (fp32 SIMT, and the dispatch and launch), cuda_attention_tc.cu (TF32 WMMA), cuda_attention_bf16.cu
 * (bf16 mma.sync). Where a block works, the tile loops (which skip the tiles wholly outside a
 * sliding window), the tile and row-statistics loads, the causal (and windowed) mask, the
 * backward's recompute of p and ds, and the description of a path's kernels
 * (att_kernels) are written here once; the products (register tiles, fragments) stay in each
 * file. Only those files include it. */
#ifndef LOOM_CUDA_ATTENTION_CUH
#define LOOM_CUDA_ATTENTION_CUH

#include <math.h>

#include "backends/cuda/cuda_internal.h"

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* --- device: where a block works ---
 * q (B,T,H,D), k/v (B,T,Hkv,D), lse and delta (B,H,T). Query head h reads kv head
 * hk = h / (H / Hkv); row strides ldq = H D, ldk = Hkv D. W: the sliding window (query i sees
 * keys i - W < j <= i), 0 for none; the host passes 0 for a window of T or more. */

/* Where lse and delta of (b, h) start. (Computed where used: kept live through a kernel it
 * costs the tensor-core kernels registers.) */
static __device__ __forceinline__ size_t att_stats_at(int b, int h, int H, int T)
{
    return ((size_t)b * H + h) * T;
}

/* A query-tile block (forward, dQ): grid (query tiles, B * H), the longest (last) query tiles
 * first. Head h's q rows start at qoff, kv head hk's rows at koff. Its key tiles are kt0 .. qt:
 * kt0 = 0, or within a window the tile of the first key its first query sees. */
struct att_qblock {
    int b, h, hk, qt, q0, kt0;
    size_t ldq, ldk, qoff, koff;
};

static __device__ __forceinline__ att_qblock att_query_block(int tile, int T, int H, int Hkv, int D,
                                                             int W)
{
    att_qblock a;
    a.qt = gridDim.x - 1 - blockIdx.x;
    a.b = blockIdx.y / H;
    a.h = blockIdx.y % H;
    a.hk = a.h / (H / Hkv);
    a.q0 = a.qt * tile;
    a.kt0 = W > 0 && a.q0 - W + 1 > 0 ? (a.q0 - W + 1) / tile : 0;
    a.ldq = (size_t)H * D;
    a.ldk = (size_t)Hkv * D;
    a.qoff = (size_t)a.b * T * a.ldq + (size_t)a.h * D;
    a.koff = (size_t)a.b * T * a.ldk + (size_t)a.hk * D;
    return a;
}

/* A key-tile block (dK, dV): grid (key tiles, B * Hkv), key tile 0 (the most queries after it)
 * first; it visits the G = H / Hkv query heads hk G .. hk G + G - 1 of its group and, for each,
 * the query tiles kt .. nt - 1: nt = all of them, or within a window up to the tile of the last
 * query that sees its last key. */
struct att_kblock {
    int b, hk, kt, k0, nt, G;
    size_t ldq, ldk, koff;
};

static __device__ __forceinline__ att_kblock att_key_block(int tile, int T, int H, int Hkv, int D,
                                                           int W)
{
    att_kblock a;
    a.kt = blockIdx.x;
    a.nt = gridDim.x;
    if (W > 0) {
        const int last = (a.kt * tile + tile - 1 + W - 1) / tile + 1;
        a.nt = last < a.nt ? last : a.nt;
    }
    a.G = H / Hkv;
    a.b = blockIdx.y / Hkv;
    a.hk = blockIdx.y % Hkv;
    a.k0 = a.kt * tile;
    a.ldq = (size_t)H * D;
    a.ldk = (size_t)Hkv * D;
    a.koff = (size_t)a.b * T * a.ldk + (size_t)a.hk * D;
    return a;
}

/* Where query head h of a key block's group starts in q and dO. */
static __device__ __forceinline__ size_t att_head_qoff(const att_kblock &a, int h, int T, int D)
{
    return (size_t)a.b * T * a.ldq + (size_t)h * D;
}

/* --- device: loads --- */

/* Rows [r0, r0 + ROWS) of one head (row stride ld floats, head offset folded into src) into
 * dst[ROWS][Dp] by THREADS threads; rows >= T become 0 so every later product with them is
 * finite. */
template <int ROWS, int THREADS>
static __device__ __forceinline__ void att_load_tile(float *dst, const float *src, size_t ld, int r0,
                                                     int T, int D, int Dp)
{
    for (int idx = threadIdx.x; idx < ROWS * D; idx += THREADS) {
        int r = idx / D, d = idx - r * D;
        dst[r * Dp + d] = (r0 + r < T) ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}

/* lse_i log2(e) and delta_i of query row i = r0 + r of the (b, h) whose stats start at li; 0
 * for rows >= T (padding rows, whose p the mask zeroes anyway). */
static __device__ __forceinline__ float att_lse2(const float *lse, size_t li, int r0, int r, int T)
{
    return r0 + r < T ? lse[li + r0 + r] * ATT_LOG2E : 0.0f;
}

static __device__ __forceinline__ float att_delta(const float *delta, size_t li, int r0, int r, int T)
{
    return r0 + r < T ? delta[li + r0 + r] : 0.0f;
}

/* Both, for the TILE query rows from q0 of (b, h), into shared lse2[TILE] and dl[TILE]. */
template <int TILE, int THREADS>
static __device__ __forceinline__ void att_load_stats(float *lse2, float *dl, const float *lse,
                                                      const float *delta, int b, int h, int H,
                                                      int q0, int T)
{
    for (int r = threadIdx.x; r < TILE; r += THREADS) {
        lse2[r] = att_lse2(lse, att_stats_at(b, h, H, T), q0, r, T);
        dl[r] = att_delta(delta, att_stats_at(b, h, H, T), q0, r, T);
    }
}

/* --- device: the tile loops ---
 * A query-tile block walks the causal key tiles kt0 .. qt; a key-tile block walks, for each query
 * head of its group, the query tiles kt .. nt - 1 (att_query_block, att_key_block: the tiles a
 * window hides wholly are never visited): always in this order, so what they sum is
 * bitwise reproducible. Each step: a barrier (the previous tile is no longer read), stage loads
 * the tile into shared memory, a barrier publishes it, body uses it. */
template <int TILE, class Stage, class Body>
static __device__ __forceinline__ void att_key_tiles(const att_qblock &a, Stage stage, Body body)
{
    for (int kt = a.kt0; kt <= a.qt; kt++) {
        const int k0 = kt * TILE;
        __syncthreads();
        stage(k0);
        __syncthreads();
        body(k0);
    }
}

/* stage(qoff, q0) loads the query tile (q and dO rows from qoff, head h's offset); the tile's
 * lse (log2 units) and delta are loaded here into shared lse2[TILE], dl[TILE]. */
template <int TILE, int THREADS, class Stage, class Body>
static __device__ __forceinline__ void att_query_tiles(const att_kblock &a, int T, int H, int D,
                                                       const float *lse, const float *delta,
                                                       float *lse2, float *dl, Stage stage,
                                                       Body body)
{
    for (int h = a.hk * a.G; h < (a.hk + 1) * a.G; h++) {
        const size_t qoff = att_head_qoff(a, h, T, D);
        for (int qt = a.kt; qt < a.nt; qt++) {
            const int q0 = qt * TILE;
            __syncthreads();
            stage(qoff, q0);
            att_load_stats<TILE, THREADS>(lse2, dl, lse, delta, a.b, h, H, q0, T);
            __syncthreads();
            body(q0);
        }
    }
}

/* --- device: the mask and the backward's recompute ---
 * s is a raw q_i . k_j, scale_log2 = log2(e) / sqrt(D): exponentials are base 2 on s scale_log2
 * (exp2f is the fast hardware path). */

/* Query row sees key: causal (key <= row), a real key (key < T) and, with a window W > 0,
 * row - key < W. */
static __device__ __forceinline__ bool att_visible(int key, int row, int T, int W)
{
    return key <= row && key < T && (W <= 0 || row - key < W);
}

/* The forward's score in log2 units, -inf where masked (2^-inf = 0 drops it from every sum). */
static __device__ __forceinline__ float att_score(float s, int key, int row, int T, int W,
                                                  float scale_log2)
{
    return att_visible(key, row, T, W) ? s * scale_log2 : -INFINITY;
}

/* The base an online softmax subtracts: its running max m, or 0 while m = -inf (within a window
 * a row may see no key of its first tiles: 2^(-inf - m) then gives 0, not NaN). m as it is
 * whenever it is finite, as always without a window. */
static __device__ __forceinline__ float att_base(float m) { return m == -INFINITY ? 0.0f : m; }

/* The backward's p_ij = e^(s_ij / sqrt(D) - lse_i) = 2^(s scale_log2 - l2), l2 = lse_i log2(e),
 * recomputed from the forward's lse; 0 where masked and for padding rows (row >= T). */
static __device__ __forceinline__ float att_prob(float s, int key, int row, int T, int W,
                                                 float scale_log2, float l2)
{
    return att_visible(key, row, T, W) && row < T ? exp2f(s * scale_log2 - l2) : 0.0f;
}

/* ds_ij = p_ij (dp_ij - delta_i), dp_ij = dO_i . v_j, delta_i = dO_i . O_i = sum_j p_ij dp_ij. */
static __device__ __forceinline__ float att_dscore(float p, float dp, float dl) { return p * (dp - dl); }

/* --- host: a path's kernels ---
 * Every path has the same three kernels (the head-dim bound DMAX a template argument):
 *   forward  (out, lse, q, k, v, T, H, Hkv, D, W, scale_log2), grid (query tiles, B * H);
 *   dK, dV   (dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, W, scale, scale_log2),
 *            grid (key tiles, B * Hkv);
 *   dQ       (dq, dout, q, k, v, lse, delta, T, H, Hkv, D, W, scale, scale_log2),
 *            grid (query tiles, B * H). */
typedef void (*att_fwd_fn)(float *, float *, const float *, const float *, const float *, int, int,
                           int, int, int, float);
typedef void (*att_dkv_fn)(float *, float *, const float *, const float *, const float *,
                           const float *, const float *, const float *, int, int, int, int, int,
                           float, float);
typedef void (*att_dq_fn)(float *, const float *, const float *, const float *, const float *,
                          const float *, const float *, int, int, int, int, int, float, float);

/* How the delta kernel rounds dO: as the tensor cores of the path that computes dp_ij do. */
enum { ATT_ROUND_NONE = 0, ATT_ROUND_TF32 = 1, ATT_ROUND_BF16 = 2 };

/* One path's kernels for one head dim, their launch shapes and what is checked before a launch:
 * smem_*: dynamic shared memory of each launch; need_fwd / need_bwd: the bytes the device must
 * allow before the forward / backward runs (a tensor-core path asks for its largest launch
 * before either). what_*: the launch's name in an error. */
struct att_kernels {
    att_fwd_fn fwd;
    att_dkv_fn dkv;
    att_dq_fn dq;
    int tile, threads, round;
    size_t smem_fwd, smem_dkv, smem_dq, need_fwd, need_bwd;
    const char *what_fwd, *what_dkv, *what_dq;
};

/* cuda_attention_tc.cu / cuda_attention_bf16.cu: whether the path takes head dim D
 * (D % 16 == 0, 16 <= D <= 128), and its kernels for D. */
int cuda_attention_tc_supported(int D);
att_kernels cuda_attention_tc_kernels(int D);
int cuda_attention_bf16_supported(int D);
att_kernels cuda_attention_bf16_kernels(int D);

#endif
