/* cuda_attention_tc.cu: causal GQA attention (optionally within a sliding window) on TF32 tensor
 * cores (WMMA m16n16k8), forward and backward, for head dims D % 16 == 0, D <= 128; used when the
 * backend runs TF32 or bf16 matmuls.
 * Same math and layouts as cuda_attention.cu; every product goes through tensor cores with
 * fp32 accumulate, the softmax stays fp32. No atomics (each block owns what it writes). It must
 * never touch a fragment's elements except uniformly (the element-to-lane mapping is opaque). */
#include <math.h>

#include <mma.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"
#include "backends/cuda/cuda_attention.cuh"

using namespace nvcuda;

#define TC_WARPS 4
#define TC_THREADS (32 * TC_WARPS)
#define TC_TILE 64             /* queries per block and keys per tile (16 per warp) */
#define TC_SP (TC_TILE + 4)    /* row stride of the per-warp 16 x 64 score tiles */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> tc_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> tc_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> tc_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> tc_acc;

/* Tiles in shared memory are row-major with stride Dp = D + 4 (a multiple of 4 floats, so every
 * 16-row / 8-column fragment origin is 32-byte aligned as WMMA requires) and padded against bank
 * conflicts. Lane l of a warp owns columns l and l + 32 of its warp's 16 x 64 score tile, for
 * all 16 rows: row-wise walks by the 32 lanes hit 32 banks. */

template <class F>
static __device__ __forceinline__ void tc_to_tf32(F &f)
{
    for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

/* Copy rows [r0, r0 + TC_TILE) of one head into dst[TC_TILE][Dp]; rows >= T become 0. As float4
 * when the source rows are 16-byte aligned (D and ld are multiples of 16 floats here, so that is
 * the base pointer's alignment; the branch is uniform). */
static __device__ __forceinline__ void tc_load_tile(float *dst, const float *src, size_t ld, int r0,
                                                    int T, int D, int Dp)
{
    if (((uintptr_t)src & 15) == 0) {
        const int D4 = D / 4;
        for (int idx = threadIdx.x; idx < TC_TILE * D4; idx += TC_THREADS) {
            int r = idx / D4, d = 4 * (idx - r * D4);
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r0 + r < T) x = *(const float4 *)(src + (size_t)(r0 + r) * ld + d);
            *(float4 *)(dst + r * Dp + d) = x;
        }
        return;
    }
    att_load_tile<TC_TILE, TC_THREADS>(dst, src, ld, r0, T, D, Dp);
}

/* att_key_tiles with each key tile's K and V (kv head rows from kb, vb) staged in Ks, Vs. */
template <class Body>
static __device__ __forceinline__ void tc_kv_tiles(const att_qblock &a, float *Ks, float *Vs,
                                                   const float *kb, const float *vb, int T, int D,
                                                   int Dp, Body body)
{
    att_key_tiles<TC_TILE>(a, [&](int k0) {
        tc_load_tile(Ks, kb, a.ldk, k0, T, D, Dp);
        tc_load_tile(Vs, vb, a.ldk, k0, T, D, Dp);
    }, body);
}

/* S (16 x 64, into s, stride TC_SP) = A (16 rows of a, stride Dp) . B^T where B is 64 rows of b
 * (stride Dp): S_ij = sum_d A_id B_jd, k-steps of 8 over d < D. B read as a col-major (d, j). */
static __device__ __forceinline__ void tc_abt(float *s, const float *a, const float *b, int D, int Dp)
{
    for (int j = 0; j < TC_TILE / 16; j++) {
        tc_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < D; k0 += 8) {
            tc_a fa;
            tc_b_col fb;
            wmma::load_matrix_sync(fa, a + k0, Dp);
            wmma::load_matrix_sync(fb, b + 16 * j * Dp + k0, Dp);
            tc_to_tf32(fa);
            tc_to_tf32(fb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s + 16 * j, acc, TC_SP, wmma::mem_row_major);
    }
}

/* f(r, c) for this lane's elements of its warp's 16 x 64 score tile: rows r < 16, columns
 * c = lane and lane + 32. */
template <class F>
static __device__ __forceinline__ void tc_lane_scores(F f)
{
    const int lane = threadIdx.x & 31;
    for (int r = 0; r < 16; r++)
        for (int half = 0; half < 2; half++) f(r, lane + 32 * half);
}

/* acc[f] (16 x 16 column block f of a 16 x D result) += P (16 x 64, stride TC_SP) . V (64 rows
 * of v, stride Dp): k-steps of 8 over the 64 keys. */
template <int DF>
static __device__ __forceinline__ void tc_pv(tc_acc (&acc)[DF], const float *p, const float *v, int D, int Dp)
{
    for (int k0 = 0; k0 < TC_TILE; k0 += 8) {
        tc_a fa;
        wmma::load_matrix_sync(fa, p + k0, TC_SP);
        tc_to_tf32(fa);
        for (int f = 0; f < DF; f++)
            if (16 * f < D) {
                tc_b_row fb;
                wmma::load_matrix_sync(fb, v + k0 * Dp + 16 * f, Dp);
                tc_to_tf32(fb);
                wmma::mma_sync(acc[f], fa, fb, acc[f]);
            }
    }
}

/* Store a warp's 16 x D accumulator through its 16 rows of stage (stride Dp) to global rows
 * row0.. (stride ld), skipping rows >= T, multiplied by mul. */
template <int DF>
static __device__ __forceinline__ void tc_store_rows(float *g, size_t ld, int row0, int T,
                                                     tc_acc (&acc)[DF], float *stage, int D, int Dp,
                                                     float mul)
{
    for (int f = 0; f < DF; f++)
        if (16 * f < D) {
            for (int i = 0; i < acc[f].num_elements; i++) acc[f].x[i] *= mul;
            wmma::store_matrix_sync(stage + 16 * f, acc[f], Dp, wmma::mem_row_major);
        }
    __syncwarp();
    const int lane = threadIdx.x & 31;
    for (int idx = lane; idx < 16 * D; idx += 32) {
        int r = idx / D, d = idx - r * D;
        if (row0 + r < T) g[(size_t)(row0 + r) * ld + d] = stage[r * Dp + d];
    }
}

/* Forward, one block per (query tile, b, h), warp w owning queries q0 + 16w .. + 15, in two
 * passes over the causal key tiles (no rescaling of the tensor-core accumulators is needed);
 * j runs over the keys query i sees:
 *   pass 1: s_ij = (q_i . k_j) / sqrt(D); m_i = max_j s_ij, l_i = sum_j e^(s_ij - m_i)
 *           (online, per lane over its columns, merged across lanes at the end),
 *           lse_i = m_i + log l_i;
 *   pass 2: o_i = sum_j e^(s_ij - lse_i) v_j.
 * Exponentials are base 2 on s log2(e). */
template <int DMAX>
__global__ void __launch_bounds__(TC_THREADS, 2)
att_tc_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T,
                  int H, int Hkv, int D, int W, float scale_log2)
{
    constexpr int DF = DMAX / 16;
    extern __shared__ __align__(128) float smem[];
    const int Dp = D + 4, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Qs = smem, *Ks = Qs + TC_TILE * Dp, *Vs = Ks + TC_TILE * Dp;
    float *Sw = Vs + TC_TILE * Dp + warp * 16 * TC_SP;
    const att_qblock a = att_query_block(TC_TILE, T, H, Hkv, D, W);
    const int r0 = a.q0 + 16 * warp; /* this warp's first query */
    const float *kb = k + a.koff, *vb = v + a.koff;
    tc_load_tile(Qs, q + a.qoff, a.ldq, a.q0, T, D, Dp);

    float m[16], l[16]; /* this lane's running max / sum for each of the warp's 16 rows */
    for (int r = 0; r < 16; r++) m[r] = -INFINITY, l[r] = 0.0f;
    att_key_tiles<TC_TILE>(a, [&](int k0) {
        tc_load_tile(Ks, kb, a.ldk, k0, T, D, Dp);
    }, [&](int k0) {
        tc_abt(Sw, Qs + 16 * warp * Dp, Ks, D, Dp);
        __syncwarp();
        tc_lane_scores([&](int r, int c) {
            if (!att_visible(k0 + c, r0 + r, T, W)) return;
            const float s = Sw[r * TC_SP + c] * scale_log2;
            if (s > m[r]) {
                l[r] = l[r] * exp2f(m[r] - s) + 1.0f; /* exp2(-inf) = 0 the first time */
                m[r] = s;
            } else {
                l[r] += exp2f(s - m[r]);
            }
        });
        __syncwarp();
    });
    /* merge the 32 lanes' (m, l) per row: m = max, l = sum l_lane 2^(m_lane - m) */
    for (int r = 0; r < 16; r++) {
        const float mx = cuda_warp_max(m[r]);
        float part = m[r] == -INFINITY ? 0.0f : l[r] * exp2f(m[r] - mx);
        m[r] = mx + log2f(cuda_warp_sum(part)); /* now lse_r in log2 units (a real row sees its
                                                    own key; -inf only for padding rows) */
    }
    if (lane < 16 && r0 + lane < T) {
        float mine = m[0];
        for (int r = 1; r < 16; r++) mine = lane == r ? m[r] : mine;
        lse[att_stats_at(a.b, a.h, H, T) + r0 + lane] = mine * ATT_LN2;
    }

    tc_acc acc[DF];
    for (int f = 0; f < DF; f++) wmma::fill_fragment(acc[f], 0.0f);
    tc_kv_tiles(a, Ks, Vs, kb, vb, T, D, Dp, [&](int k0) {
        tc_abt(Sw, Qs + 16 * warp * Dp, Ks, D, Dp);
        __syncwarp();
        tc_lane_scores([&](int r, int c) {
            float *s = Sw + r * TC_SP + c;
            *s = att_visible(k0 + c, r0 + r, T, W) ? exp2f(*s * scale_log2 - m[r]) : 0.0f;
        });
        __syncwarp();
        tc_pv<DF>(acc, Sw, Vs, D, Dp);
    });
    __syncwarp();
    tc_store_rows<DF>(out + a.qoff, a.ldq, r0, T, acc,
                      Qs + 16 * warp * Dp, D, Dp, 1.0f);
}

/* dQ, one block per (query tile, b, h), warp w owning 16 queries; for each causal key tile (in
 * the window), over the keys j query i sees:
 *   p_ij = e^(s_ij - lse_i), dp_ij = dO_i . v_j, ds_ij = p_ij (dp_ij - delta_i),
 *   dq_i = scale sum_j ds_ij k_j   (overwrites dq). */
template <int DMAX>
__global__ void __launch_bounds__(TC_THREADS, 2)
att_tc_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
                 const float *lse, const float *delta, int T, int H, int Hkv, int D, int W,
                 float scale, float scale_log2)
{
    constexpr int DF = DMAX / 16;
    extern __shared__ __align__(128) float smem[];
    const int Dp = D + 4, warp = threadIdx.x >> 5;
    float *Qs = smem, *dOs = Qs + TC_TILE * Dp, *Ks = dOs + TC_TILE * Dp, *Vs = Ks + TC_TILE * Dp;
    float *Sw = Vs + TC_TILE * Dp + warp * 2 * 16 * TC_SP, *Pw = Sw + 16 * TC_SP;
    const att_qblock a = att_query_block(TC_TILE, T, H, Hkv, D, W);
    const int r0 = a.q0 + 16 * warp;
    const float *kb = k + a.koff, *vb = v + a.koff;
    tc_load_tile(Qs, q + a.qoff, a.ldq, a.q0, T, D, Dp);
    tc_load_tile(dOs, dout + a.qoff, a.ldq, a.q0, T, D, Dp);
    float l2[16], dl[16]; /* lse (log2 units) and delta of the warp's 16 rows, in every lane */
    const size_t li = att_stats_at(a.b, a.h, H, T);
    for (int r = 0; r < 16; r++) {
        l2[r] = att_lse2(lse, li, r0, r, T);
        dl[r] = att_delta(delta, li, r0, r, T);
    }
    tc_acc acc[DF];
    for (int f = 0; f < DF; f++) wmma::fill_fragment(acc[f], 0.0f);
    tc_kv_tiles(a, Ks, Vs, kb, vb, T, D, Dp, [&](int k0) {
        tc_abt(Sw, Qs + 16 * warp * Dp, Ks, D, Dp);
        tc_abt(Pw, dOs + 16 * warp * Dp, Vs, D, Dp);
        __syncwarp();
        tc_lane_scores([&](int r, int c) {
            const float p = att_prob(Sw[r * TC_SP + c], k0 + c, r0 + r, T, W, scale_log2, l2[r]);
            Sw[r * TC_SP + c] = att_dscore(p, Pw[r * TC_SP + c], dl[r]);
        });
        __syncwarp();
        tc_pv<DF>(acc, Sw, Ks, D, Dp);
    });
    __syncwarp();
    tc_store_rows<DF>(dq + a.qoff, a.ldq, r0, T, acc, Qs + 16 * warp * Dp, D, Dp, scale);
}

/* dK, dV, one block per (key tile, b, kv head hk), warp w owning 16 keys; every query head of the
 * group and every query tile at or after the key tile (and within the window), in a fixed order:
 *   p_ij = e^(s_ij - lse_i), dv_j = sum_i p_ij dO_i,
 *   ds_ij = p_ij (dO_i . v_j - delta_i), dk_j = scale sum_i ds_ij q_i   (overwrites dk, dv).
 * The warp's score tile is transposed: rows are its keys, columns the tile's 64 queries. */
template <int DMAX>
__global__ void __launch_bounds__(TC_THREADS, 2)
att_tc_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
                  const float *v, const float *lse, const float *delta, int T, int H, int Hkv,
                  int D, int W, float scale, float scale_log2)
{
    constexpr int DF = DMAX / 16;
    extern __shared__ __align__(128) float smem[];
    const int Dp = D + 4, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Ks = smem, *Vs = Ks + TC_TILE * Dp, *Qs = Vs + TC_TILE * Dp, *dOs = Qs + TC_TILE * Dp;
    float *lse2 = dOs + TC_TILE * Dp, *dl = lse2 + TC_TILE;
    float *Sw = dl + TC_TILE + warp * 2 * 16 * TC_SP, *Pw = Sw + 16 * TC_SP;
    const att_kblock a = att_key_block(TC_TILE, T, H, Hkv, D, W);
    const int c0 = a.k0 + 16 * warp;
    tc_load_tile(Ks, k + a.koff, a.ldk, a.k0, T, D, Dp);
    tc_load_tile(Vs, v + a.koff, a.ldk, a.k0, T, D, Dp);
    tc_acc gk[DF], gv[DF];
    for (int f = 0; f < DF; f++) {
        wmma::fill_fragment(gk[f], 0.0f);
        wmma::fill_fragment(gv[f], 0.0f);
    }
    att_query_tiles<TC_TILE, TC_THREADS>(a, T, H, D, lse, delta, lse2, dl, [&](size_t qoff, int q0) {
        tc_load_tile(Qs, q + qoff, a.ldq, q0, T, D, Dp);
        tc_load_tile(dOs, dout + qoff, a.ldq, q0, T, D, Dp);
    }, [&](int q0) {
        tc_abt(Sw, Ks + 16 * warp * Dp, Qs, D, Dp);  /* s^T: (key, query) */
        tc_abt(Pw, Vs + 16 * warp * Dp, dOs, D, Dp); /* dp^T */
        __syncwarp();
        for (int half = 0; half < 2; half++) {
            const int c = lane + 32 * half, row = q0 + c;
            const float l2 = lse2[c], dlc = dl[c];
            for (int r = 0; r < 16; r++) {
                const float p = att_prob(Sw[r * TC_SP + c], c0 + r, row, T, W, scale_log2, l2);
                Sw[r * TC_SP + c] = p;
                Pw[r * TC_SP + c] = att_dscore(p, Pw[r * TC_SP + c], dlc);
            }
        }
        __syncwarp();
        tc_pv<DF>(gv, Sw, dOs, D, Dp); /* dV += P^T dO */
        tc_pv<DF>(gk, Pw, Qs, D, Dp);  /* dK += dS^T Q */
    });
    __syncwarp();
    tc_store_rows<DF>(dk + a.koff, a.ldk, c0, T, gk, Ks + 16 * warp * Dp, D, Dp, scale);
    tc_store_rows<DF>(dv + a.koff, a.ldk, c0, T, gv, Vs + 16 * warp * Dp, D, Dp, 1.0f);
}

/* --- host side --- */

int cuda_attention_tc_supported(int D) { return D % 16 == 0 && D >= 16 && D <= 128; }

/* Shared memory in floats: fwd Q, K, V + a 16 x 64 tile per warp; backward four D-wide tiles,
 * two 16 x 64 tiles per warp (+ lse, delta for dK/dV). */
static size_t tc_smem_fwd(int D) { return (size_t)3 * TC_TILE * (D + 4) + (size_t)TC_WARPS * 16 * TC_SP; }
static size_t tc_smem_bwd(int D)
{
    return (size_t)4 * TC_TILE * (D + 4) + 2 * (size_t)TC_TILE + (size_t)TC_WARPS * 2 * 16 * TC_SP;
}

template <int DMAX>
static att_kernels tc_set(int D)
{
    const size_t bwd = tc_smem_bwd(D) * sizeof(float); /* the larger: checked before either */
    att_kernels ks = {att_tc_fwd_kernel<DMAX>, att_tc_dkv_kernel<DMAX>, att_tc_dq_kernel<DMAX>,
                      TC_TILE, TC_THREADS, ATT_ROUND_TF32, tc_smem_fwd(D) * sizeof(float), bwd, bwd,
                      bwd, bwd, "attention_forward (tensor cores)",
                      "attention_backward (tensor cores, dk, dv)", "attention_backward (tensor cores, dq)"};
    return ks;
}

att_kernels cuda_attention_tc_kernels(int D) { return D <= 64 ? tc_set<64>(D) : tc_set<128>(D); }
