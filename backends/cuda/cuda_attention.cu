/* cuda_attention.cu: causal grouped-query attention, flash style, fp32, forward and backward,
 * optionally within a sliding window (cuda_attention.cuh). q (B,T,H,D), k/v (B,T,Hkv,D), lse (B,H,T). Tiles of TILE queries x TILE keys live in shared
 * memory; no (T, T) matrix is ever stored. Backward is two kernels (dK/dV per key tile, dQ per
 * query tile) that each own what they write, so there are no atomics and results are bitwise
 * reproducible. It must never be launched with D > 256 (checked) or H % Hkv != 0. */
#include <math.h>
#include <stdio.h>

#include <cuda_bf16.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_reduce.cuh"
#include "backends/cuda/cuda_attention.cuh"

#define ATT_THREADS 256      /* 16 x 16: ty = threadIdx.x / 16 picks rows, tx = % 16 columns */

/* Thread (ty, tx) of a TILE x TILE score block owns rows ty + 16 i and columns tx + 16 j
 * (i, j < TILE/16); of a TILE x D output block it owns rows ty + 16 i and columns tx + 16 jj
 * (jj < DMAX/16, guarded by d < D). The 16 threads sharing a row are one half-warp, so row
 * reductions are xor-shuffles with offsets 8, 4, 2, 1. Shared tiles are row-major with an odd
 * row stride Dp = D | 1 (resp. TILE + 1), so both row-wise and column-wise walks by 16 threads
 * hit 16 different banks. */

/* NP (1 or 2) score blocks sharing one walk over d (tiles of row stride Dp):
 *   s0[i][j] = sum_{d < D} A0[ty + 16 i][d] B0[tx + 16 j][d],  s1 likewise from A1, B1
 * (s1, A1, B1 unused when NP = 1). Plain arrays and pointers: an array of either would cost
 * the kernels registers (ptxas spilled the 32 x 256 forward for sm_80). */
template <int RI, int NP>
static __device__ __forceinline__ void att_tile_dots(float (&s0)[RI][RI], float (&s1)[RI][RI],
                                                     const float *A0, const float *B0,
                                                     const float *A1, const float *B1, int D, int Dp)
{
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int i = 0; i < RI; i++)
        for (int j = 0; j < RI; j++) {
            s0[i][j] = 0.0f;
            if (NP == 2) s1[i][j] = 0.0f;
        }
    for (int d = 0; d < D; d++) {
        float a0[RI], b0[RI], a1[RI], b1[RI];
        for (int i = 0; i < RI; i++) {
            a0[i] = A0[(ty + 16 * i) * Dp + d];
            if (NP == 2) a1[i] = A1[(ty + 16 * i) * Dp + d];
        }
        for (int j = 0; j < RI; j++) {
            b0[j] = B0[(tx + 16 * j) * Dp + d];
            if (NP == 2) b1[j] = B1[(tx + 16 * j) * Dp + d];
        }
        for (int i = 0; i < RI; i++)
            for (int j = 0; j < RI; j++) {
                s0[i][j] += a0[i] * b0[j];
                if (NP == 2) s1[i][j] += a1[i] * b1[j];
            }
    }
}

/* NP (1 or 2) output blocks sharing one walk over the TILE columns c of P (row stride Pp) and
 * rows of M (row stride Dp):  acc0[i][jj] += sum_c P0[ty + 16 i][c] M0[c][tx + 16 jj]  (d < D),
 * acc1 likewise from P1, M1 (unused when NP = 1). */
template <int TILE, int RI, int DJ, int NP>
static __device__ __forceinline__ void att_tile_accum(float (&acc0)[RI][DJ], float (&acc1)[RI][DJ],
                                                      const float *P0, const float *M0,
                                                      const float *P1, const float *M1, int Pp,
                                                      int D, int Dp)
{
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int c = 0; c < TILE; c++) {
        float p0[RI], p1[RI];
        for (int i = 0; i < RI; i++) {
            p0[i] = P0[(ty + 16 * i) * Pp + c];
            if (NP == 2) p1[i] = P1[(ty + 16 * i) * Pp + c];
        }
        for (int jj = 0; jj < DJ; jj++) {
            const int d = tx + 16 * jj;
            const float m0 = d < D ? M0[c * Dp + d] : 0.0f;
            const float m1 = NP == 2 && d < D ? M1[c * Dp + d] : 0.0f;
            for (int i = 0; i < RI; i++) {
                acc0[i][jj] += p0[i] * m0;
                if (NP == 2) acc1[i][jj] += p1[i] * m1;
            }
        }
    }
}

/* Forward, one block per (query tile, b, h). With s_ij = (q_i . k_j) / sqrt(D) for the keys j
 * query i sees (j <= i, and i - j < W within a window):
 *   m_i = max_j s_ij,  l_i = sum_j e^(s_ij - m_i),  o_i = sum_j e^(s_ij - m_i) v_j / l_i,
 *   lse_i = m_i + log l_i.
 * Keys are visited tile by tile with the online rescaling m' = max(m, max_tile s),
 * l' = l e^(m - m') + sum_tile e^(s - m'), o' = o e^(m - m') + sum_tile e^(s - m') v.
 * Exponentials are taken base 2 on s log2(e) (exp2f is the fast hardware path). */
template <int TILE, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
att_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T,
               int H, int Hkv, int D, int W, float scale_log2)
{
    constexpr int RI = TILE / 16, DJ = DMAX / 16;
    extern __shared__ float smem[];
    const int Dp = D | 1, Pp = TILE + 1;
    float *Qs = smem, *Ks = Qs + TILE * Dp, *Vs = Ks + TILE * Dp, *Ps = Vs + TILE * Dp;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const att_qblock a = att_query_block(TILE, T, H, Hkv, D, W);

    att_load_tile<TILE, ATT_THREADS>(Qs, q + a.qoff, a.ldq, a.q0, T, D, Dp);
    float m[RI], l[RI], o[RI][DJ];
    for (int i = 0; i < RI; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int jj = 0; jj < DJ; jj++) o[i][jj] = 0.0f;
    }
    att_key_tiles<TILE>(a, [&](int k0) {
        att_load_tile<TILE, ATT_THREADS>(Ks, k + a.koff, a.ldk, k0, T, D, Dp);
        att_load_tile<TILE, ATT_THREADS>(Vs, v + a.koff, a.ldk, k0, T, D, Dp);
    }, [&](int k0) {
        float s[RI][RI];
        att_tile_dots<RI, 1>(s, s, Qs, Ks, NULL, NULL, D, Dp);
        for (int i = 0; i < RI; i++) {
            const int row = a.q0 + ty + 16 * i;
            float mx = -INFINITY;
            for (int j = 0; j < RI; j++) {
                s[i][j] = att_score(s[i][j], k0 + tx + 16 * j, row, T, W, scale_log2);
                mx = fmaxf(mx, s[i][j]);
            }
            /* without a window column k0 <= row and k0 < T in every visited tile, so m_new is
             * finite; within one a row may see none of a tile's keys (att_base) */
            const float m_new = fmaxf(m[i], cuda_lanes_reduce<16>(mx, cuda_max_op()));
            const float base = att_base(m_new);
            const float alpha = exp2f(m[i] - base); /* 0 on the first tile (m = -inf) */
            float psum = 0.0f;
            for (int j = 0; j < RI; j++) {
                float p = exp2f(s[i][j] - base); /* masked: exp2(-inf) = 0 */
                Ps[(ty + 16 * i) * Pp + tx + 16 * j] = p;
                psum += p;
            }
            m[i] = m_new;
            l[i] = l[i] * alpha + psum; /* this thread's share; lanes are added at the end */
            for (int jj = 0; jj < DJ; jj++) o[i][jj] *= alpha;
        }
        __syncthreads();
        att_tile_accum<TILE, RI, DJ, 1>(o, o, Ps, Vs, NULL, NULL, Pp, D, Dp);
    });
    for (int i = 0; i < RI; i++) {
        const int row = a.q0 + ty + 16 * i;
        const float lt = cuda_lanes_reduce<16>(l[i], cuda_sum_op()); /* every lane takes part */
        if (row >= T) continue;
        const float inv = 1.0f / lt;
        float *orow = out + ((size_t)a.b * T + row) * a.ldq + (size_t)a.h * D;
        for (int jj = 0; jj < DJ; jj++) {
            const int d = tx + 16 * jj;
            if (d < D) orow[d] = o[i][jj] * inv;
        }
        if (tx == 0) lse[att_stats_at(a.b, a.h, H, T) + row] = m[i] * ATT_LN2 + logf(lt);
    }
}

/* Round to TF32 as cvt.rna.tf32.f32 does (nearest, ties away from zero; 10 mantissa bits). */
static __device__ __forceinline__ float att_tf32(float x)
{
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    return __uint_as_float(u);
}

/* delta[b,h,t] = dO[b,t,h,:] . O[b,t,h,:]  (= sum_j p_ij dp_ij, used by both backward kernels).
 * One warp per (b, t, h) row. dO is rounded as the tensor cores round it for dp_ij (TF32 or
 * bf16), so that sum_j ds_ij = 0 holds to fp32 rounding (at T = 1, dq = dk = 0 up to fp32 noise). */
__global__ void att_delta_kernel(float *delta, const float *dout, const float *out, int rows,
                                 int T, int H, int D, int round)
{
    const int r = blockIdx.x * (ATT_THREADS / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *a = dout + (size_t)r * D, *o = out + (size_t)r * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) {
        const float x = round == ATT_ROUND_TF32   ? att_tf32(a[d])
                        : round == ATT_ROUND_BF16 ? __bfloat162float(__float2bfloat16_rn(a[d]))
                                                  : a[d];
        s += x * o[d];
    }
    s = cuda_warp_sum(s);
    const int h = r % H, bt = r / H, b = bt / T, t = bt % T;
    if (lane == 0) delta[((size_t)b * H + h) * T + t] = s;
}

/* dQ, one block per (query tile, b, h), the keys j query i sees tile by tile:
 *   p_ij = e^(s_ij - lse_i), dp_ij = dO_i . v_j, ds_ij = p_ij (dp_ij - delta_i),
 *   dq_i = scale sum_j ds_ij k_j   (overwrites dq). */
template <int TILE, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
att_bwd_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
                  const float *lse, const float *delta, int T, int H, int Hkv, int D, int W,
                  float scale, float scale_log2)
{
    constexpr int RI = TILE / 16, DJ = DMAX / 16;
    extern __shared__ float smem[];
    const int Dp = D | 1, Pp = TILE + 1;
    float *Qs = smem, *dOs = Qs + TILE * Dp, *Ks = dOs + TILE * Dp, *Vs = Ks + TILE * Dp;
    float *dSs = Vs + TILE * Dp, *lse2 = dSs + TILE * Pp, *dl = lse2 + TILE;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const att_qblock a = att_query_block(TILE, T, H, Hkv, D, W);

    att_load_tile<TILE, ATT_THREADS>(Qs, q + a.qoff, a.ldq, a.q0, T, D, Dp);
    att_load_tile<TILE, ATT_THREADS>(dOs, dout + a.qoff, a.ldq, a.q0, T, D, Dp);
    att_load_stats<TILE, ATT_THREADS>(lse2, dl, lse, delta, a.b, a.h, H, a.q0, T);
    float acc[RI][DJ];
    for (int i = 0; i < RI; i++)
        for (int jj = 0; jj < DJ; jj++) acc[i][jj] = 0.0f;
    att_key_tiles<TILE>(a, [&](int k0) {
        att_load_tile<TILE, ATT_THREADS>(Ks, k + a.koff, a.ldk, k0, T, D, Dp);
        att_load_tile<TILE, ATT_THREADS>(Vs, v + a.koff, a.ldk, k0, T, D, Dp);
    }, [&](int k0) {
        float s[RI][RI], dp[RI][RI];
        att_tile_dots<RI, 2>(s, dp, Qs, Ks, dOs, Vs, D, Dp);
        for (int i = 0; i < RI; i++) {
            const int r = ty + 16 * i, row = a.q0 + r;
            for (int j = 0; j < RI; j++) {
                const float p = att_prob(s[i][j], k0 + tx + 16 * j, row, T, W, scale_log2, lse2[r]);
                dSs[r * Pp + tx + 16 * j] = att_dscore(p, dp[i][j], dl[r]);
            }
        }
        __syncthreads();
        att_tile_accum<TILE, RI, DJ, 1>(acc, acc, dSs, Ks, NULL, NULL, Pp, D, Dp);
    });
    for (int i = 0; i < RI; i++) {
        const int row = a.q0 + ty + 16 * i;
        if (row >= T) continue;
        float *drow = dq + ((size_t)a.b * T + row) * a.ldq + (size_t)a.h * D;
        for (int jj = 0; jj < DJ; jj++) {
            const int d = tx + 16 * jj;
            if (d < D) drow[d] = acc[i][jj] * scale;
        }
    }
}

/* dK, dV, one block per (key tile, b, kv head hk); every query head h of the group
 * (h / (H/Hkv) == hk) and every query tile with keys of this tile in its past (and window), in a
 * fixed order:
 *   p_ij = e^(s_ij - lse_i), dv_j = sum_i p_ij dO_i,
 *   ds_ij = p_ij (dO_i . v_j - delta_i), dk_j = scale sum_i ds_ij q_i   (overwrites dk, dv).
 * Here the thread's rows are keys (c = ty + 16 i) and its score columns are queries. */
template <int TILE, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
att_bwd_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
                   const float *v, const float *lse, const float *delta, int T, int H, int Hkv,
                   int D, int W, float scale, float scale_log2)
{
    constexpr int RI = TILE / 16, DJ = DMAX / 16;
    extern __shared__ float smem[];
    const int Dp = D | 1, Pp = TILE + 1;
    float *Ks = smem, *Vs = Ks + TILE * Dp, *Qs = Vs + TILE * Dp, *dOs = Qs + TILE * Dp;
    float *PTs = dOs + TILE * Dp, *dSTs = PTs + TILE * Pp, *lse2 = dSTs + TILE * Pp, *dl = lse2 + TILE;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const att_kblock a = att_key_block(TILE, T, H, Hkv, D, W);

    att_load_tile<TILE, ATT_THREADS>(Ks, k + a.koff, a.ldk, a.k0, T, D, Dp);
    att_load_tile<TILE, ATT_THREADS>(Vs, v + a.koff, a.ldk, a.k0, T, D, Dp);
    float gk[RI][DJ], gv[RI][DJ];
    for (int i = 0; i < RI; i++)
        for (int jj = 0; jj < DJ; jj++) gk[i][jj] = gv[i][jj] = 0.0f;
    att_query_tiles<TILE, ATT_THREADS>(a, T, H, D, lse, delta, lse2, dl, [&](size_t qoff, int q0) {
        att_load_tile<TILE, ATT_THREADS>(Qs, q + qoff, a.ldq, q0, T, D, Dp);
        att_load_tile<TILE, ATT_THREADS>(dOs, dout + qoff, a.ldq, q0, T, D, Dp);
    }, [&](int q0) {
        float s[RI][RI], dp[RI][RI]; /* [key i][query j] */
        att_tile_dots<RI, 2>(s, dp, Ks, Qs, Vs, dOs, D, Dp);
        for (int i = 0; i < RI; i++) {
            const int c = ty + 16 * i, key = a.k0 + c;
            for (int j = 0; j < RI; j++) {
                const int r = tx + 16 * j;
                const float p = att_prob(s[i][j], key, q0 + r, T, W, scale_log2, lse2[r]);
                PTs[c * Pp + r] = p;
                dSTs[c * Pp + r] = att_dscore(p, dp[i][j], dl[r]);
            }
        }
        __syncthreads();
        att_tile_accum<TILE, RI, DJ, 2>(gv, gk, PTs, dOs, dSTs, Qs, Pp, D, Dp);
    });
    for (int i = 0; i < RI; i++) {
        const int key = a.k0 + ty + 16 * i;
        if (key >= T) continue;
        float *krow = dk + a.koff + (size_t)key * a.ldk, *vrow = dv + a.koff + (size_t)key * a.ldk;
        for (int jj = 0; jj < DJ; jj++) {
            const int d = tx + 16 * jj;
            if (d < D) {
                krow[d] = gk[i][jj] * scale;
                vrow[d] = gv[i][jj];
            }
        }
    }
}

/* --- host side --- */

/* Shared memory of each kernel, in floats. */
static size_t att_smem_fwd(int tile, int D) { return (size_t)3 * tile * (D | 1) + (size_t)tile * (tile + 1); }
static size_t att_smem_dq(int tile, int D)
{
    return (size_t)4 * tile * (D | 1) + (size_t)tile * (tile + 1) + 2 * (size_t)tile;
}
static size_t att_smem_dkv(int tile, int D)
{
    return (size_t)4 * tile * (D | 1) + 2 * (size_t)tile * (tile + 1) + 2 * (size_t)tile;
}

/* Checks the shapes and the shared memory a launch needs; -1 (sticky error) if impossible. */
static int att_check(backend *be, int T, int H, int Hkv, int D, size_t smem_bytes, const char *what)
{
    if (D > 256 || D <= 0 || Hkv <= 0 || H % Hkv != 0) {
        log_warn("cuda: %s: unsupported shape T=%d H=%d Hkv=%d D=%d (needs D <= 256, H %% Hkv == 0)",
                 what, T, H, Hkv, D);
        return cuda_check(be, cudaErrorInvalidValue, what);
    }
    if (smem_bytes > cuda_im(be)->smem_optin) {
        log_warn("cuda: %s needs %zu bytes of shared memory per block; this device allows %zu",
                 what, smem_bytes, cuda_im(be)->smem_optin);
        return cuda_check(be, cudaErrorInvalidValue, what);
    }
    return 0;
}

/* The fp32 SIMT kernels for head dims up to DMAX with TILE-row tiles. */
template <int TILE, int DMAX>
static att_kernels att_simt_set(int D)
{
    const size_t dq = att_smem_dq(TILE, D) * sizeof(float), dkv = att_smem_dkv(TILE, D) * sizeof(float);
    att_kernels ks = {att_fwd_kernel<TILE, DMAX>, att_bwd_dkv_kernel<TILE, DMAX>,
                      att_bwd_dq_kernel<TILE, DMAX>, TILE, ATT_THREADS, ATT_ROUND_NONE,
                      att_smem_fwd(TILE, D) * sizeof(float), dkv, dq,
                      att_smem_fwd(TILE, D) * sizeof(float), dkv > dq ? dkv : dq,
                      "attention_forward", "attention_backward (dk, dv)", "attention_backward (dq)"};
    return ks;
}

/* The tensor-core path (cuda_attention_tc.cu) runs when matmuls may round to TF32 (TF32 or bf16
 * mode) and the head dim suits WMMA tiles; exact fp32 SIMT kernels otherwise. In bf16 mode the
 * bf16 path (cuda_attention_bf16.cu) runs instead: its products round their inputs to bf16 as
 * the mode's matmuls do. Tile 64 keeps 16 scores per thread for head dims up to 128; at 256 the
 * four D-wide tiles of the SIMT backward only fit the 227 KB of shared memory with 32-row tiles. */
static att_kernels att_pick(backend *be, int D)
{
    if (be->cfg.precision == BACKEND_BF16 && cuda_attention_bf16_supported(D))
        return cuda_attention_bf16_kernels(D);
    if ((be->cfg.allow_tf32 || be->cfg.precision == BACKEND_BF16) && cuda_attention_tc_supported(D))
        return cuda_attention_tc_kernels(D);
    if (D <= 32) return att_simt_set<64, 32>(D);
    if (D <= 64) return att_simt_set<64, 64>(D);
    if (D <= 128) return att_simt_set<64, 128>(D);
    return att_simt_set<32, 256>(D);
}

/* Opts kernel in to smem bytes of dynamic shared memory (above 48 KB needs it). */
template <class K>
static int att_allow(backend *be, K *kernel, size_t smem, const char *what)
{
    return cuda_check(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem), what);
}

/* The kernels' window W: 0 (plain causal) for none and for one of T keys or more. */
static int att_window(int window, int T)
{
    return window > 0 && window < T ? window : 0;
}

void cuda_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int Hkv, int D, int window)
{
    if (B <= 0 || T <= 0 || H <= 0 || cuda_broken(be)) return;
    const att_kernels ks = att_pick(be, D);
    if (att_check(be, T, H, Hkv, D, ks.need_fwd, "attention_forward") != 0) return;
    const att_fwd_fn fwd = ks.fwd;
    if (att_allow(be, fwd, ks.smem_fwd, "attention_forward (smem attribute)") != 0)
        return;
    dim3 grid((unsigned)((T + ks.tile - 1) / ks.tile), (unsigned)(B * H));
    fwd<<<grid, ks.threads, ks.smem_fwd, cuda_im(be)->compute>>>(
        out, lse, q, k, v, T, H, Hkv, D, att_window(window, T), ATT_LOG2E / sqrtf((float)D));
    cuda_check_launch(be, ks.what_fwd);
}

void cuda_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                             const float *q, const float *k, const float *v, const float *out,
                             const float *lse, int B, int T, int H, int Hkv, int D, int window)
{
    if (B <= 0 || T <= 0 || H <= 0 || cuda_broken(be)) return;
    if (att_check(be, T, H, Hkv, D, 0, "attention_backward") != 0) return;
    const int W = att_window(window, T);
    const int rows = B * T * H;
    float *delta = (float *)cuda_scratch(be, (size_t)rows * sizeof(float));
    if (!delta) return;
    const att_kernels ks = att_pick(be, D);
    cudaStream_t st = cuda_im(be)->compute;
    att_delta_kernel<<<(rows + ATT_THREADS / 32 - 1) / (ATT_THREADS / 32), ATT_THREADS, 0, st>>>(
        delta, dout, out, rows, T, H, D, ks.round);
    if (cuda_check_launch(be, "attention_backward (delta)") != 0) return;
    if (att_check(be, T, H, Hkv, D, ks.need_bwd, "attention_backward") != 0) return;
    const att_dq_fn dqk = ks.dq;
    const att_dkv_fn dkvk = ks.dkv;
    if (att_allow(be, dqk, ks.smem_dq, "attention_backward (smem attribute)") != 0 ||
        att_allow(be, dkvk, ks.smem_dkv, "attention_backward (smem attribute)") != 0)
        return;
    const float scale = 1.0f / sqrtf((float)D), scale_log2 = ATT_LOG2E * scale;
    const unsigned tiles = (unsigned)((T + ks.tile - 1) / ks.tile);
    dkvk<<<dim3(tiles, (unsigned)(B * Hkv)), ks.threads, ks.smem_dkv, st>>>(
        dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, W, scale, scale_log2);
    if (cuda_check_launch(be, ks.what_dkv) != 0) return;
    dqk<<<dim3(tiles, (unsigned)(B * H)), ks.threads, ks.smem_dq, st>>>(
        dq, dout, q, k, v, lse, delta, T, H, Hkv, D, W, scale, scale_log2);
    cuda_check_launch(be, ks.what_dq);
}

/* --- decoding with a KV cache: one query per head over Tk cached keys (batch row 0) ---
 * s_j = q . k_j / sqrt(D), out = sum_j e^(s_j - m) v_j / sum_j e^(s_j - m), m = max_j s_j.
 * One block per head; the Tk scores go through scratch. Block reductions add warps in order. */
/* One block, one query head over Tk keys/values of row stride ldk (scores through s). */
static __device__ void att_decode_head(float *o, float *s, const float *qh, const float *kh,
                                       const float *vh, int Tk, size_t ldk, int D, float scale)
{
    __shared__ float red[ATT_THREADS / 32];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < Tk; j += ATT_THREADS) {
        float acc = 0.0f;
        for (int d = 0; d < D; d++) acc += qh[d] * kh[(size_t)j * ldk + d];
        s[j] = acc * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = cuda_block_reduce<ATT_THREADS>(mx, red, cuda_max_op());
    float sum = 0.0f;
    for (int j = threadIdx.x; j < Tk; j += ATT_THREADS) {
        float p = expf(s[j] - mx);
        s[j] = p;
        sum += p;
    }
    sum = cuda_block_reduce<ATT_THREADS>(sum, red, cuda_sum_op()); /* its barriers publish s[j] */
    for (int d = threadIdx.x; d < D; d += ATT_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < Tk; j++) acc += s[j] * vh[(size_t)j * ldk + d];
        o[d] = acc / sum;
    }
}

__global__ void __launch_bounds__(ATT_THREADS)
att_decode_kernel(float *out, float *scores, const float *q, const float *k, const float *v, int Tk,
                  int H, int Hkv, int D, float scale)
{
    const int h = blockIdx.x, hk = h / (H / Hkv);
    const size_t ldk = (size_t)Hkv * D;
    att_decode_head(out + (size_t)h * D, scores + (size_t)h * Tk, q + (size_t)h * D,
                    k + (size_t)hk * D, v + (size_t)hk * D, Tk, ldk, D, scale);
}

/* Batched generation: row r's new key/value into its cache row at pos[r] (one thread per value). */
__global__ void att_kv_store_kernel(float *kc, float *vc, const float *knew, const float *vnew,
                                    const int32_t *pos, int R, int cap, int W)
{
    size_t n = (size_t)R * W;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / W, e = i % W, at = (r * cap + (size_t)pos[r]) * W + e;
        kc[at] = knew[i];
        vc[at] = vnew[i];
    }
}

/* Batched generation: one block per (row, head) over cache positions 0..pos[r]. */
__global__ void __launch_bounds__(ATT_THREADS)
att_decode_rows_kernel(float *out, float *scores, const float *q, const float *kc, const float *vc,
                       const int32_t *pos, int cap, int H, int Hkv, int D, float scale)
{
    const int r = blockIdx.x / H, h = blockIdx.x % H, hk = h / (H / Hkv);
    const size_t ldk = (size_t)Hkv * D, base = (size_t)r * cap * ldk + (size_t)hk * D;
    const size_t qo = ((size_t)r * H + h) * D;
    att_decode_head(out + qo, scores + (size_t)blockIdx.x * cap, q + qo, kc + base, vc + base,
                    pos[r] + 1, ldk, D, scale);
}

void cuda_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                                const float *vnew, float *kc, float *vc, const int32_t *pos, int R,
                                int cap, int H, int Hkv, int D)
{
    if (R <= 0 || cap <= 0 || H <= 0 || D <= 0 || cuda_broken(be)) return;
    if (att_check(be, cap, H, Hkv, D, 0, "attention_decode_rows") != 0) return;
    float *scores = (float *)cuda_scratch(be, (size_t)R * H * cap * sizeof(float));
    if (!scores) return;
    cudaStream_t st = cuda_im(be)->compute;
    size_t n = (size_t)R * Hkv * D;
    int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    att_kv_store_kernel<<<blocks, 256, 0, st>>>(kc, vc, knew, vnew, pos, R, cap, Hkv * D);
    att_decode_rows_kernel<<<R * H, ATT_THREADS, 0, st>>>(out, scores, q, kc, vc, pos, cap, H, Hkv, D,
                                                          1.0f / sqrtf((float)D));
    cuda_check_launch(be, "attention_decode_rows");
}

void cuda_attention_decode(backend *be, float *out, const float *q, const float *k, const float *v,
                           int Tk, int H, int Hkv, int D)
{
    if (Tk <= 0 || H <= 0 || D <= 0 || cuda_broken(be)) return;
    if (att_check(be, Tk, H, Hkv, D, 0, "attention_decode") != 0) return;
    float *scores = (float *)cuda_scratch(be, (size_t)H * Tk * sizeof(float));
    if (!scores) return;
    att_decode_kernel<<<H, ATT_THREADS, 0, cuda_im(be)->compute>>>(out, scores, q, k, v, Tk, H, Hkv,
                                                                  D, 1.0f / sqrtf((float)D));
    cuda_check_launch(be, "attention_decode");
}

/* Why cuDNN's fused SDPA is not used (and cuDNN not linked): its graph API (tensor, operation and
 * engine-config descriptors for the whole fused pattern, forward and backward) cannot be checked
 * without a device, while the bf16 kernels here run on the host emulator in every test run; and
 * its flash attention is fp16/bf16 only, so the fp32 and TF32 modes would still need these. On an
 * H200 (gpt2-124m shapes, B 16, T 1024) cuDNN's bf16 SDPA took 85 us forward / 274 us backward a
 * layer, against which bench/gpu-check.sh measures the bf16 kernels. */
const char *cuda_attention_choice(backend *be)
{
    static char line[320];
    const char *how = be->cfg.precision == BACKEND_BF16
                          ? "bf16 tensor cores (mma.sync) for head dims 16..128 in steps of 16, fp32 otherwise"
                      : be->cfg.allow_tf32 ? "TF32 tensor cores for head dims 16..128 in steps of 16, fp32 otherwise"
                                           : "fp32 (TF32 off)";
    snprintf(line, sizeof line, "attention: own flash kernels, %s (cuDNN SDPA not built in)", how);
    return line;
}
