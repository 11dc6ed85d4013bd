/* cuda_attention_bf16.cu: causal GQA attention (optionally within a sliding window) for the bf16
 * mode, forward and backward, on bf16 tensor cores through mma.sync m16n8k16 (FlashAttention-2's layout: every score, probability
 * and accumulator stays in registers). Same math, layouts and outputs as cuda_attention.cu
 * (fp32 in and out, lse (B,H,T) in natural-log units); the products' inputs are rounded to bf16
 * (q, k, v, dO as they are staged in shared memory, p and ds as they enter the second product),
 * every sum is fp32, the softmax fp32. Head dims D % 16 == 0, D <= 128. No atomics: the backward
 * is two kernels (dK/dV per key tile, dQ per query tile), each owning what it writes, so results
 * are bitwise reproducible.
 *
 * One mma.sync.m16n8k16 (per warp) is D[16x8] += A[16x16] B[16x8]. Lane l = 4g + t (g = l / 4,
 * t = l % 4) holds
 *   A: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]              (two bf16 per 32-bit register)
 *   C: c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]       (fp32)
 * so a score tile S = Q K^T (16 queries x 8 keys per mma) comes out in exactly the A layout the
 * next product P V needs: two adjacent 8-key tiles of S are one 16-key A fragment. B fragments
 * read two bf16 adjacent along the reduction index, so an operand whose reduction index is its
 * row (V in P V, K in dS K, Q and dO in the dK/dV products) is staged transposed. */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"
#include "backends/cuda/cuda_attention.cuh"

#define FB_WARPS 4
#define FB_THREADS (32 * FB_WARPS)
#define FB_TILE 64 /* queries per block (16 per warp) and keys per tile */

typedef uint16_t fb_h; /* a bf16's bits in shared memory */

/* d += a b, one warp-wide m16n8k16 bf16 product with fp32 accumulate. */
static __device__ __forceinline__ void fb_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1)
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(LOOM_CUDA_EMU)
    emu_mma_bf16_m16n8k16(d, a, b0, b1);
#endif
}

/* Two floats as bf16 (round to nearest even), lo in the low half. */
static __device__ __forceinline__ uint32_t fb_pack(float lo, float hi)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* The 32-bit word holding elements (r, c) and (r, c + 1) of a bf16 tile with row stride ld. */
static __device__ __forceinline__ uint32_t fb_word(const fb_h *s, int ld, int r, int c)
{
    return *(const uint32_t *)(s + r * ld + c);
}

/* Stage rows [r0, r0 + FB_TILE) of one head (fp32, row stride ld, head offset folded into src) as
 * bf16: row-major into dst[FB_TILE][Dp] and/or transposed into dstT[D][Tp]; rows >= T become 0 so
 * every product with them is finite. Each thread takes two adjacent rows x 4 columns (a float4
 * from each when src is 16-byte aligned, as D % 16 == 0 makes every row; else four floats: a
 * slice of a larger buffer), so the transposed stores are 32-bit words of adjacent rows: with
 * Tp = FB_TILE + 8 consecutive threads write consecutive words, no bank conflicts. */
static __device__ __forceinline__ float4 fb_row4(const float *p, int valid, int vec)
{
    if (!valid) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return vec ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
}

static __device__ __forceinline__ void fb_stage(fb_h *dst, fb_h *dstT, const float *src, size_t ld,
                                                int r0, int T, int D, int Dp, int Tp)
{
    const int D4 = D / 4, vec = ((uintptr_t)src & 15) == 0; /* uniform */
    for (int idx = threadIdx.x; idx < FB_TILE / 2 * D4; idx += FB_THREADS) {
        const int rp = idx % (FB_TILE / 2), d = 4 * (idx / (FB_TILE / 2)), r = 2 * rp;
        const float4 x = fb_row4(src + (size_t)(r0 + r) * ld + d, r0 + r < T, vec);
        const float4 y = fb_row4(src + (size_t)(r0 + r + 1) * ld + d, r0 + r + 1 < T, vec);
        if (dst) {
            *(uint2 *)(dst + r * Dp + d) = make_uint2(fb_pack(x.x, x.y), fb_pack(x.z, x.w));
            *(uint2 *)(dst + (r + 1) * Dp + d) = make_uint2(fb_pack(y.x, y.y), fb_pack(y.z, y.w));
        }
        if (dstT) {
            *(uint32_t *)(dstT + (d + 0) * Tp + r) = fb_pack(x.x, y.x);
            *(uint32_t *)(dstT + (d + 1) * Tp + r) = fb_pack(x.y, y.y);
            *(uint32_t *)(dstT + (d + 2) * Tp + r) = fb_pack(x.z, y.z);
            *(uint32_t *)(dstT + (d + 3) * Tp + r) = fb_pack(x.w, y.w);
        }
    }
}

/* s[j] (16 x 8, j < 8: a 16 x 64 tile) = A B^T over d < D, A the 16 rows of a (row-major, stride
 * lda) and B the 64 rows of b (row-major, stride ldb): the reduction runs along both rows. */
template <int DMAX>
static __device__ __forceinline__ void fb_abt(float (&s)[8][4], const fb_h *a, int lda,
                                              const fb_h *b, int ldb, int D)
{
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DMAX / 16; kk++) {
        if (16 * kk >= D) break;
        const int c = 16 * kk + 2 * t;
        const uint32_t fa[4] = {fb_word(a, lda, g, c), fb_word(a, lda, g + 8, c),
                                fb_word(a, lda, g, c + 8), fb_word(a, lda, g + 8, c + 8)};
#pragma unroll
        for (int j = 0; j < 8; j++)
            fb_mma(s[j], fa, fb_word(b, ldb, 8 * j + g, c), fb_word(b, ldb, 8 * j + g, c + 8));
    }
}

/* acc[n] (16 x 8 column block n of a 16 x D result) += P (16 x 64, the registers of a score
 * tile, rounded to bf16) . M (64 x D), M given transposed: mt[d][key], stride ldt. */
template <int DMAX>
static __device__ __forceinline__ void fb_pm(float (&acc)[DMAX / 8][4], const float (&p)[8][4],
                                             const fb_h *mt, int ldt, int D)
{
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const uint32_t fa[4] = {fb_pack(p[2 * kk][0], p[2 * kk][1]), fb_pack(p[2 * kk][2], p[2 * kk][3]),
                                fb_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                fb_pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        const int c = 16 * kk + 2 * t;
#pragma unroll
        for (int n = 0; n < DMAX / 8; n++) {
            if (8 * n >= D) break;
            fb_mma(acc[n], fa, fb_word(mt, ldt, 8 * n + g, c), fb_word(mt, ldt, 8 * n + g, c + 8));
        }
    }
}

/* Write a warp's 16 x D accumulator times mul to global rows row0 + (g, g + 8) < T, stride ld:
 * float2 stores when dst is 8-byte aligned (uniform), else single floats. */
static __device__ __forceinline__ void fb_put2(float *p, float a, float b, int vec)
{
    if (vec) *(float2 *)p = make_float2(a, b);
    else p[0] = a, p[1] = b;
}

template <int DMAX>
static __device__ __forceinline__ void fb_store(float *dst, size_t ld, int row0, int T,
                                                const float (&acc)[DMAX / 8][4], float mul0,
                                                float mul1, int D)
{
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3, vec = ((uintptr_t)dst & 7) == 0;
#pragma unroll
    for (int n = 0; n < DMAX / 8; n++) {
        if (8 * n >= D) break;
        const int c = 8 * n + 2 * t;
        if (row0 + g < T)
            fb_put2(dst + (size_t)(row0 + g) * ld + c, acc[n][0] * mul0, acc[n][1] * mul0, vec);
        if (row0 + g + 8 < T)
            fb_put2(dst + (size_t)(row0 + g + 8) * ld + c, acc[n][2] * mul1, acc[n][3] * mul1, vec);
    }
}

/* Forward, one block per (query tile, b, h), warp w owning queries q0 + 16w .. + 15, one pass
 * over the causal key tiles (in the window) with the online softmax (log2 units, s = q.k scale
 * log2(e), j over the keys the row sees):
 *   m' = max(m, max_j s_j), l = l 2^(m - m') + sum_j 2^(s_j - m'), o = o 2^(m - m') + sum_j 2^(s_j - m') v_j
 * and at the end out = o / l, lse = (m + log2 l) ln 2. A lane holds rows g and g + 8 of its
 * warp's 16, columns 2t, 2t + 1 of each 8-key block: row max and sum reduce over the 4 lanes of
 * a quad (xor 1, 2); l stays per lane until the end. */
template <int DMAX>
__global__ void __launch_bounds__(FB_THREADS)
fb_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T, int H,
              int Hkv, int D, int W, float scale_log2)
{
    extern __shared__ __align__(16) fb_h fb_smem[];
    const int Dp = D + 8, Tp = FB_TILE + 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    fb_h *Qs = fb_smem, *Ks = Qs + FB_TILE * Dp, *Vt = Ks + FB_TILE * Dp;
    const att_qblock a = att_query_block(FB_TILE, T, H, Hkv, D, W);
    const int r0 = a.q0 + 16 * warp;
    const float *kb = k + a.koff, *vb = v + a.koff;
    fb_stage(Qs, NULL, q + a.qoff, a.ldq, a.q0, T, D, Dp, Tp);

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, o[DMAX / 8][4], s[8][4];
#pragma unroll
    for (int n = 0; n < DMAX / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    att_key_tiles<FB_TILE>(a, [&](int k0) {
        fb_stage(Ks, NULL, kb, a.ldk, k0, T, D, Dp, Tp);
        fb_stage(NULL, Vt, vb, a.ldk, k0, T, D, Dp, Tp);
    }, [&](int k0) {
        fb_abt<DMAX>(s, Qs + 16 * warp * Dp, Dp, Ks, Dp, D);
        float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + 2 * t + (e & 1), row = r0 + g + 8 * (e >> 1);
                s[j][e] = att_score(s[j][e], key, row, T, W, scale_log2);
            }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
            x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
        }
        x0 = cuda_lanes_reduce<4, true>(x0, cuda_max_op()); /* over the quad */
        x1 = cuda_lanes_reduce<4, true>(x1, cuda_max_op());
        /* without a window key k0 <= every row of the tile once kt = 0, so m is finite from the
         * first tile on and a tile whose keys are all masked for a row leaves m as it was; within
         * one a row may see no key of its first tiles (m = -inf: att_base) */
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
        const float b0 = att_base(n0), b1 = att_base(n1);
        const float c0 = exp2f(m0 - b0), c1 = exp2f(m1 - b1); /* 2^-inf = 0 the first time */
        m0 = n0, m1 = n1, l0 *= c0, l1 *= c1;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            s[j][0] = exp2f(s[j][0] - b0), s[j][1] = exp2f(s[j][1] - b0);
            s[j][2] = exp2f(s[j][2] - b1), s[j][3] = exp2f(s[j][3] - b1);
            l0 += s[j][0] + s[j][1], l1 += s[j][2] + s[j][3];
        }
#pragma unroll
        for (int n = 0; n < DMAX / 8; n++) o[n][0] *= c0, o[n][1] *= c0, o[n][2] *= c1, o[n][3] *= c1;
        fb_pm<DMAX>(o, s, Vt, Tp, D);
    });
    l0 = cuda_lanes_reduce<4, true>(l0, cuda_sum_op());
    l1 = cuda_lanes_reduce<4, true>(l1, cuda_sum_op());
    fb_store<DMAX>(out + a.qoff, a.ldq, r0, T, o, 1.0f / l0, 1.0f / l1, D);
    float *lrow = lse + att_stats_at(a.b, a.h, H, T);
    if (t == 0 && r0 + g < T) lrow[r0 + g] = (m0 + log2f(l0)) * ATT_LN2;
    if (t == 0 && r0 + g + 8 < T) lrow[r0 + g + 8] = (m1 + log2f(l1)) * ATT_LN2;
}

/* dQ, one block per (query tile, b, h), warp w owning 16 queries; for each causal key tile (in
 * the window), over the keys j query i sees:
 *   p_ij = 2^(s_ij - lse_i log2 e), dp_ij = dO_i . v_j, ds_ij = p_ij (dp_ij - delta_i),
 *   dq_i = scale sum_j ds_ij k_j   (overwrites dq). */
/* (Its register budget set outright: under __launch_bounds__(FB_THREADS) ptxas for sm_80..89 kept
 * it to 128 registers and spilled; 168 fits the 4 warps of 3 blocks per multiprocessor.) */
template <int DMAX>
__global__ void __maxnreg__(168)
fb_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
             const float *lse, const float *delta, int T, int H, int Hkv, int D, int W,
             float scale, float scale_log2)
{
    extern __shared__ __align__(16) fb_h fb_smem[];
    const int Dp = D + 8, Tp = FB_TILE + 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    fb_h *Qs = fb_smem, *dOs = Qs + FB_TILE * Dp, *Ks = dOs + FB_TILE * Dp, *Vs = Ks + FB_TILE * Dp;
    fb_h *Kt = Vs + FB_TILE * Dp;
    const att_qblock a = att_query_block(FB_TILE, T, H, Hkv, D, W);
    const int r0 = a.q0 + 16 * warp;
    const float *kb = k + a.koff, *vb = v + a.koff;
    fb_stage(Qs, NULL, q + a.qoff, a.ldq, a.q0, T, D, Dp, Tp);
    fb_stage(dOs, NULL, dout + a.qoff, a.ldq, a.q0, T, D, Dp, Tp);
    const size_t li = att_stats_at(a.b, a.h, H, T);
    const float l20 = att_lse2(lse, li, r0, g, T), l21 = att_lse2(lse, li, r0, g + 8, T);
    const float d0 = att_delta(delta, li, r0, g, T), d1 = att_delta(delta, li, r0, g + 8, T);

    float acc[DMAX / 8][4], s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < DMAX / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    att_key_tiles<FB_TILE>(a, [&](int k0) {
        fb_stage(Ks, Kt, kb, a.ldk, k0, T, D, Dp, Tp);
        fb_stage(Vs, NULL, vb, a.ldk, k0, T, D, Dp, Tp);
    }, [&](int k0) {
        fb_abt<DMAX>(s, Qs + 16 * warp * Dp, Dp, Ks, Dp, D);
        fb_abt<DMAX>(dp, dOs + 16 * warp * Dp, Dp, Vs, Dp, D);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + 2 * t + (e & 1), hi = e >> 1, row = r0 + g + 8 * hi;
                const float p = att_prob(s[j][e], key, row, T, W, scale_log2, hi ? l21 : l20);
                s[j][e] = att_dscore(p, dp[j][e], hi ? d1 : d0);
            }
        fb_pm<DMAX>(acc, s, Kt, Tp, D);
    });
    fb_store<DMAX>(dq + a.qoff, a.ldq, r0, T, acc, scale, scale, D);
}

/* dK, dV, one block per (key tile, b, kv head hk), warp w owning keys k0 + 16w .. + 15; every
 * query head of the group and every query tile at or after the key tile (and within the window),
 * in a fixed order:
 *   p_ij = 2^(s_ij - lse_i log2 e), dv_j = sum_i p_ij dO_i,
 *   ds_ij = p_ij (dO_i . v_j - delta_i), dk_j = scale sum_i ds_ij q_i   (overwrites dk, dv).
 * The warp's tiles are transposed (rows its keys, columns the 64 queries), so P^T and dS^T are
 * A fragments for the products with dO and Q, staged transposed. */
template <int DMAX>
__global__ void __launch_bounds__(FB_THREADS)
fb_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
              const float *v, const float *lse, const float *delta, int T, int H, int Hkv, int D,
              int W, float scale, float scale_log2)
{
    extern __shared__ __align__(16) fb_h fb_smem[];
    const int Dp = D + 8, Tp = FB_TILE + 8, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    fb_h *Ks = fb_smem, *Vs = Ks + FB_TILE * Dp, *Qs = Vs + FB_TILE * Dp, *dOs = Qs + FB_TILE * Dp;
    fb_h *Qt = dOs + FB_TILE * Dp, *dOt = Qt + D * Tp;
    float *lse2 = (float *)(dOt + D * Tp), *dl = lse2 + FB_TILE;
    const att_kblock a = att_key_block(FB_TILE, T, H, Hkv, D, W);
    const int c0 = a.k0 + 16 * warp;
    fb_stage(Ks, NULL, k + a.koff, a.ldk, a.k0, T, D, Dp, Tp);
    fb_stage(Vs, NULL, v + a.koff, a.ldk, a.k0, T, D, Dp, Tp);
    float gk[DMAX / 8][4], gv[DMAX / 8][4], s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < DMAX / 8; n++)
        gk[n][0] = gk[n][1] = gk[n][2] = gk[n][3] = gv[n][0] = gv[n][1] = gv[n][2] = gv[n][3] = 0.0f;
    att_query_tiles<FB_TILE, FB_THREADS>(a, T, H, D, lse, delta, lse2, dl, [&](size_t qoff, int q0) {
        fb_stage(Qs, Qt, q + qoff, a.ldq, q0, T, D, Dp, Tp);
        fb_stage(dOs, dOt, dout + qoff, a.ldq, q0, T, D, Dp, Tp);
    }, [&](int q0) {
        fb_abt<DMAX>(s, Ks + 16 * warp * Dp, Dp, Qs, Dp, D);  /* s^T: (key, query) */
        fb_abt<DMAX>(dp, Vs + 16 * warp * Dp, Dp, dOs, Dp, D); /* dp^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * j + 2 * t + (e & 1), row = q0 + c, key = c0 + g + 8 * (e >> 1);
                const float p = att_prob(s[j][e], key, row, T, W, scale_log2, lse2[c]);
                s[j][e] = p;
                dp[j][e] = att_dscore(p, dp[j][e], dl[c]);
            }
        fb_pm<DMAX>(gv, s, dOt, Tp, D); /* dV += P^T dO */
        fb_pm<DMAX>(gk, dp, Qt, Tp, D); /* dK += dS^T Q */
    });
    fb_store<DMAX>(dk + a.koff, a.ldk, c0, T, gk, scale, scale, D);
    fb_store<DMAX>(dv + a.koff, a.ldk, c0, T, gv, 1.0f, 1.0f, D);
}

/* --- host side --- */

int cuda_attention_bf16_supported(int D) { return D % 16 == 0 && D >= 16 && D <= 128; }

/* Shared memory in bytes: forward Q, K (D + 8 stride) and V^T (D rows of FB_TILE + 8); dQ Q, dO,
 * K, V and K^T; dK/dV K, V, Q, dO and Q^T, dO^T, plus lse and delta for the 64 queries. */
static size_t fb_smem_fwd(int D) { return 2 * ((size_t)2 * FB_TILE * (D + 8) + (size_t)D * (FB_TILE + 8)); }
static size_t fb_smem_dq(int D) { return 2 * ((size_t)4 * FB_TILE * (D + 8) + (size_t)D * (FB_TILE + 8)); }
static size_t fb_smem_dkv(int D)
{
    return 2 * ((size_t)4 * FB_TILE * (D + 8) + (size_t)2 * D * (FB_TILE + 8)) + 2 * FB_TILE * sizeof(float);
}

template <int DMAX>
static att_kernels fb_set(int D)
{
    const size_t need = fb_smem_dkv(D); /* the largest launch: checked before either */
    att_kernels ks = {fb_fwd_kernel<DMAX>, fb_dkv_kernel<DMAX>, fb_dq_kernel<DMAX>, FB_TILE,
                      FB_THREADS, ATT_ROUND_BF16, fb_smem_fwd(D), fb_smem_dkv(D), fb_smem_dq(D),
                      need, need, "attention_forward (bf16 tensor cores)",
                      "attention_backward (bf16 tensor cores, dk, dv)",
                      "attention_backward (bf16 tensor cores, dq)"};
    return ks;
}

att_kernels cuda_attention_bf16_kernels(int D) { return D <= 64 ? fb_set<64>(D) : fb_set<128>(D); }
