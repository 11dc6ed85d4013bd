/* cpu_attention.c: causal grouped-query attention, forward and backward, blockwise, optionally
 * within a sliding window (query i sees keys i - W < j <= i; a block reads only the keys some of
 * its queries see). An item is one kv head of one sequence (or a run of its query blocks) with
 * its G query heads stacked, so a block of queries x G heads goes through one product against the
 * shared K/V, on cpu_tile.c's kernel (single-threaded: the blocks are the parallelism). A block
 * keeps its scores transposed (key-major), so every product reads its operands in place and the
 * softmax runs along vectors. It must never hold a (T, T) matrix for all heads, nor race on
 * dk/dv (one writer per row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_skinny.h" /* cpu_skinny_isa: the CPU's widest vectors */
#include "backends/cpu/cpu_tile.h"
#include "backends/cpu/cpu_vec.h"    /* cpu_vec_hsum8 */
#include "base/log.h"

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

/* Score rows per block (queries x heads of a group): 48 x T floats. Fewer queries per block as
 * G grows, so a block's products keep this height, between 4 and 64 queries. Short blocks waste
 * little on the causal diagonal: at T = 256, D = 64, G = 3, 16-query blocks ran the backward in
 * 23 ms against 27 ms for 64-query ones (one thread, on sgemm; 32: 23, 8: 27). */
#define CPU_ATT_M 48
#define CPU_ATT_BQ_MAX 64

static int cpu_att_bq(int G)
{
    int bq = CPU_ATT_M / G;
    return bq > CPU_ATT_BQ_MAX ? CPU_ATT_BQ_MAX : bq < 4 ? 4 : bq;
}

/* Geometry of one query block of one (b, kv head): queries [i0, i0 + rows) of the G heads
 * hk G .. hk G + G - 1 (score row r G + g: query i0 + r, head hk G + g) see keys [k0, k0 + nk):
 * k0 = 0 without a window (W = 0), else the first key the block's first query sees. */
typedef struct {
    int i0, rows, k0, nk, M, G, D, W;
    size_t ldq, ldk;         /* row strides: H*D for q/out, Hkv*D for k/v */
    size_t qoff;             /* q/out offset of query i0, head hk G */
    const float *k, *v;      /* row k0 of this kv head */
} cpu_att_blk;

static cpu_att_blk cpu_att_block(const float *k, const float *v, int b, int hk, int i0, int bq,
                                 int T, int H, int Hkv, int D, int W)
{
    cpu_att_blk g;
    g.G = H / Hkv;
    g.D = D;
    g.W = W;
    g.i0 = i0;
    g.rows = T - i0 < bq ? T - i0 : bq;
    g.k0 = W > 0 && i0 - W + 1 > 0 ? i0 - W + 1 : 0;
    g.nk = i0 + g.rows - g.k0;
    g.M = g.rows * g.G;
    g.ldq = (size_t)H * D;
    g.ldk = (size_t)Hkv * D;
    g.qoff = ((size_t)b * T + i0) * g.ldq + (size_t)hk * g.G * D;
    g.k = k + ((size_t)b * T + g.k0) * g.ldk + (size_t)hk * D;
    g.v = v + ((size_t)b * T + g.k0) * g.ldk + (size_t)hk * D;
    return g;
}

/* Score rows [first, lim) of the block see its key jj (key k0 + jj): queries from that key on,
 * and (W > 0) before key + W. */
static inline int cpu_att_first(const cpu_att_blk *g, int jj)
{
    return (g->k0 + jj - g->i0) * g->G;
}

static inline int cpu_att_lim(const cpu_att_blk *g, int jj)
{
    return g->W > 0 ? (g->k0 + jj + g->W - g->i0) * g->G : g->M;
}

/* dst (M x D, packed) <- the block's rows of src (q layout): one G*D run per query. */
static void cpu_att_pack(float *dst, const float *src, const cpu_att_blk *g)
{
    size_t run = (size_t)g->G * g->D;
    for (int r = 0; r < g->rows; r++)
        memcpy(dst + r * run, src + g->qoff + r * g->ldq, run * sizeof(float));
}

#if defined(__GNUC__) && defined(__x86_64__)
/* cpu_att_pack_t for M and D multiples of 8: 8 rows x 8 columns at a time, transposed in
 * registers (unpack, shuffle, then swap 128-bit halves), stored as 8 runs of 8. */
__attribute__((target("avx2,fma"))) static void cpu_att_pack_t8(float *dst, const float *src,
                                                               const cpu_att_blk *g)
{
    for (int i0 = 0; i0 < g->M; i0 += 8) {
        const float *row[8];
        for (int t = 0; t < 8; t++) {
            int i = i0 + t;
            row[t] = src + g->qoff + (size_t)(i / g->G) * g->ldq + (size_t)(i % g->G) * g->D;
        }
        for (int d = 0; d < g->D; d += 8) {
            __m256 r[8], u[8], s[8];
            for (int t = 0; t < 8; t++) r[t] = _mm256_loadu_ps(row[t] + d);
            for (int t = 0; t < 8; t += 2) {
                u[t] = _mm256_unpacklo_ps(r[t], r[t + 1]);     /* r_t0 r_t+1,0 r_t1 r_t+1,1 | ... */
                u[t + 1] = _mm256_unpackhi_ps(r[t], r[t + 1]); /* elements 2, 3 | 6, 7 */
            }
            for (int t = 0; t < 8; t += 4)
                for (int h = 0; h < 2; h++) {
                    s[t + 2 * h] = _mm256_shuffle_ps(u[t + h], u[t + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
                    s[t + 2 * h + 1] = _mm256_shuffle_ps(u[t + h], u[t + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
                }
            for (int c = 0; c < 4; c++) { /* s[c]: column c | c + 4 of rows 0-3; s[c + 4]: rows 4-7 */
                _mm256_storeu_ps(dst + (size_t)(d + c) * g->M + i0,
                                 _mm256_permute2f128_ps(s[c], s[c + 4], 0x20));
                _mm256_storeu_ps(dst + (size_t)(d + c + 4) * g->M + i0,
                                 _mm256_permute2f128_ps(s[c], s[c + 4], 0x31));
            }
        }
    }
}
#endif

/* dst (D x M) <- the same rows transposed: dst[d M + i] = row i's element d. Written in order:
 * the block's M source rows (M D floats) stay in L1 while they are read across. */
static void cpu_att_pack_t(float *dst, const float *src, const cpu_att_blk *g)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (g->M % 8 == 0 && g->D % 8 == 0 && cpu_skinny_isa() >= CPU_SKINNY_AVX2) {
        cpu_att_pack_t8(dst, src, g);
        return;
    }
#endif
    const float *x = src + g->qoff;
    for (int d = 0; d < g->D; d++, dst += g->M)
        for (int r = 0; r < g->rows; r++)
            for (int gg = 0; gg < g->G; gg++)
                dst[r * g->G + gg] = x[r * g->ldq + (size_t)gg * g->D + d];
}

/* C (M x N, ldc) = alpha op(A) op(B) + beta C with explicit leading dimensions. */
static void cpu_att_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A,
                         size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* Row of a score block (its query sees `valid` keys): s_j <- e^(s_j - m) in place, zeros past
 * the diagonal; returns the sum (the 1/sum normalisation is applied to the output row, D wide,
 * instead of to the scores, nk wide). Decoding's rows. */
CPU_CLONES static float cpu_k_att_exp_row(float *s, int valid, int nk, float *m_out)
{
    float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < valid; j++) m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; j++) {
        float e = cpu_expf(s[j] - m);
        s[j] = e;
        sum += e;
    }
    for (int j = valid; j < nk; j++) s[j] = 0.0f;
    *m_out = m;
    return sum;
}

/* A block's scores stored transposed, St[j M + i] for its key j and score row i (query
 * i0 + i / G): key j is visible to row i iff cpu_att_first <= i < cpu_att_lim. Per row i,
 * m_i = max over its keys, St <- e^(St - m_i) (0 where hidden) and sum_i = the sum over j in
 * order; vectors run along the rows. Every row sees its own query's key, so m_i is finite. */
CPU_CLONES static void cpu_k_att_exp_cols(float *St, const cpu_att_blk *g, float *mx, float *sum)
{
    const int M = g->M, nk = g->nk;
    for (int i = 0; i < M; i++) mx[i] = -INFINITY, sum[i] = 0.0f;
    for (int j = 0; j < nk; j++) {
        const float *s = St + (size_t)j * M;
        int first = cpu_att_first(g, j), lim = cpu_att_lim(g, j);
#pragma omp simd
        for (int i = 0; i < M; i++) mx[i] = i >= first && i < lim && s[i] > mx[i] ? s[i] : mx[i];
    }
    for (int j = 0; j < nk; j++) {
        float *s = St + (size_t)j * M;
        int first = cpu_att_first(g, j), lim = cpu_att_lim(g, j);
#pragma omp simd
        for (int i = 0; i < M; i++) {
            float e = i >= first && i < lim ? cpu_expf(s[i] - mx[i]) : 0.0f;
            s[i] = e;
            sum[i] += e;
        }
    }
}

CPU_CLONES static void cpu_k_scaled_copy(float *o, const float *x, float a, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++) o[i] = a * x[i];
}

/* One query block of M = rows G score rows against its nk keys:
 *   Sᵀ = scale K Qᵀ (nk x M), E = e^(S - m) causal (and windowed), O = E V / rowsum(E),
 *   lse = m + log rowsum(E) saved for the backward.
 * The scores are kept transposed so that every product is cpu_tile_gemm's (A through strides, B's
 * rows contiguous) and the softmax runs along vectors of rows. scr holds M (nk + 2 D + 2). */
static void cpu_att_fwd_block(float *scr, float *out, float *lse, const float *q, const float *k,
                              const float *v, int b, int hk, int i0, int bq, int T, int H, int Hkv,
                              int D, int W)
{
    cpu_att_blk g = cpu_att_block(k, v, b, hk, i0, bq, T, H, Hkv, D, W);
    float scale = 1.0f / sqrtf((float)D);
    size_t M = (size_t)g.M;
    float *St = scr, *Qt = St + M * g.nk, *Op = Qt + M * D, *mx = Op + M * D, *sum = mx + M;
    cpu_att_pack_t(Qt, q, &g);
    cpu_tile_gemm(g.nk, g.M, D, scale, g.k, g.ldk, 1, Qt, M, 0, St, M);
    cpu_k_att_exp_cols(St, &g, mx, sum);
    cpu_tile_gemm(g.M, D, g.nk, 1.0f, St, 1, M, g.v, g.ldk, 0, Op, (size_t)D); /* A(i, j) = St[j M + i] */
    for (int r = 0; r < g.rows; r++)
        for (int gg = 0; gg < g.G; gg++) {
            int i = r * g.G + gg, h = hk * g.G + gg;
            lse[((size_t)b * H + h) * T + i0 + r] = mx[i] + logf(sum[i]);
            cpu_k_scaled_copy(out + g.qoff + r * g.ldq + (size_t)gg * D, Op + (size_t)i * D,
                              1.0f / sum[i], D);
        }
}

/* A window of T or more keys (or none, window <= 0) is plain causal attention: W = 0. */
static int cpu_att_window(int window, int T)
{
    return window > 0 && window < T ? window : 0;
}

void cpu_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int H, int Hkv, int D, int window)
{
    int W = cpu_att_window(window, T);
    /* bf16 on AMX: plain causal only (its tiles walk keys from 0); a window runs fp32 here */
    if (W == 0 && cpu_attention_amx_forward(be, out, lse, q, k, v, B, T, H, Hkv, D)) return;
    cpu_state *st = cpu_st(be);
    int G = H / Hkv, bq = cpu_att_bq(G), nq = (T + bq - 1) / bq;
    long items = (long)B * Hkv * nq;
    size_t M = (size_t)bq * G;
    if (cpu_scratch_reserve(st, M * ((size_t)T + 2 * (size_t)D + 2)) != 0) return;
    cpu_blas_enter_parallel(); /* the parallelism is ours: blocks run concurrently */
#pragma omp parallel for num_threads(st->threads) schedule(dynamic, 1)
    for (long it = 0; it < items; it++) {
        int qb = nq - 1 - (int)(it / ((long)B * Hkv)); /* longest (last) blocks first: balance */
        int bh = (int)(it % ((long)B * Hkv));
        cpu_att_fwd_block(st->scratch[CPU_TID()], out, lse, q, k, v, bh / Hkv, bh % Hkv, qb * bq,
                          bq, T, H, Hkv, D, W);
    }
}

/* The transposed block (St[j M + i] = s_ij, dPt likewise, row i hides key j unless
 * cpu_att_first <= i < cpu_att_lim): P = exp(S - lse_i) where visible (0 beyond),
 * dS = P (dP - delta_i) into dPt. */
CPU_CLONES static void cpu_k_att_dscore_cols(float *St, float *dPt, const cpu_att_blk *g,
                                             const float *l, const float *delta)
{
    const int M = g->M;
    for (int j = 0; j < g->nk; j++) {
        float *s = St + (size_t)j * M, *dp = dPt + (size_t)j * M;
        int first = cpu_att_first(g, j), lim = cpu_att_lim(g, j);
#pragma omp simd
        for (int i = 0; i < M; i++) {
            float p = i >= first && i < lim ? cpu_expf(s[i] - l[i]) : 0.0f;
            s[i] = p;
            dp[i] = p * (dp[i] - delta[i]);
        }
    }
}

CPU_CLONES static float cpu_k_dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Backward inputs and outputs; dk/dv in k's layout, written by the item of their kv head only. */
typedef struct {
    const float *dout, *q, *k, *v, *out, *lse;
    float *dq, *dk, *dv;
    int T, H, Hkv, D, bq, W;
} cpu_att_bwd_args;

/* Floats of scratch a backward block of M score rows against T keys uses (cpu_att_bwd_block). */
static size_t cpu_att_bwd_scratch(size_t M, int T, int D)
{
    return M * (2 * (size_t)T + 4 * (size_t)D + 2);
}

/* One query block of the backward (math in cpu_att_bwd_item), transposed as in the forward:
 * Sᵀ = scale K Qᵀ, P, dPᵀ = V dOᵀ, dS; dK += scale dSᵀ Q; dV += Pᵀ dO; dQ = scale dS K, over
 * the block's keys [k0, k0 + nk). dk/dv: this kv head's first row, ldd apart. */
static void cpu_att_bwd_block(float *scr, const cpu_att_bwd_args *a, int b, int hk, int i0,
                              float *dk, float *dv, size_t ldd)
{
    int T = a->T, H = a->H, D = a->D;
    cpu_att_blk g = cpu_att_block(a->k, a->v, b, hk, i0, a->bq, T, H, a->Hkv, D, a->W);
    float scale = 1.0f / sqrtf((float)D);
    size_t M = (size_t)g.M, nk = (size_t)g.nk;
    dk += (size_t)g.k0 * ldd, dv += (size_t)g.k0 * ldd;
    float *St = scr, *dPt = St + M * nk, *Qt = dPt + M * nk, *dOt = Qt + M * D;
    float *Qp = dOt + M * D, *dOp = Qp + M * D, *l = dOp + M * D, *delta = l + M;
    cpu_att_pack_t(Qt, a->q, &g);
    cpu_att_pack_t(dOt, a->dout, &g);
    cpu_att_pack(Qp, a->q, &g);
    cpu_att_pack(dOp, a->dout, &g);
    cpu_tile_gemm(g.nk, g.M, D, scale, g.k, g.ldk, 1, Qt, M, 0, St, M);
    cpu_tile_gemm(g.nk, g.M, D, 1.0f, g.v, g.ldk, 1, dOt, M, 0, dPt, M);
    for (int i = 0; i < g.M; i++) {
        int r = i / g.G, h = hk * g.G + i % g.G;
        const float *O = a->out + g.qoff + r * g.ldq + (size_t)(i % g.G) * D;
        delta[i] = cpu_k_dot(dOp + (size_t)i * D, O, D);
        l[i] = a->lse[((size_t)b * H + h) * T + i0 + r];
    }
    cpu_k_att_dscore_cols(St, dPt, &g, l, delta);
    cpu_tile_gemm(g.nk, D, g.M, scale, dPt, M, 1, Qp, (size_t)D, 1, dk, ldd);
    cpu_tile_gemm(g.nk, D, g.M, 1.0f, St, M, 1, dOp, (size_t)D, 1, dv, ldd);
    /* dQ lands packed in Q's place (Q is spent), then goes to its rows: each written once */
    cpu_tile_gemm(g.M, D, g.nk, scale, dPt, 1, M, g.k, g.ldk, 0, Qp, (size_t)D);
    size_t run = (size_t)g.G * D;
    for (int r = 0; r < g.rows; r++)
        memcpy(a->dq + g.qoff + r * g.ldq, Qp + r * run, run * sizeof(float));
}

/* Query blocks [q0, q1) of kv head hk of batch b (its G query heads together), in order, into
 * dk/dv (T rows, ldd apart), zeroed first. With s_ij = scale q_i.k_j and p = softmax_j(s):
 * ds_ij = p_ij (dp_ij - delta_i), delta_i = sum_j p_ij dp_ij = dO_i . O_i (since
 * O_i = sum_j p_ij v_j), dp_ij = dO_i . v_j; dK, dV sum over the group's heads and queries. */
static void cpu_att_bwd_item(float *scr, const cpu_att_bwd_args *a, int b, int hk, int q0, int q1,
                             float *dk, float *dv, size_t ldd)
{
    for (int t = 0; t < a->T; t++) {
        memset(dk + t * ldd, 0, (size_t)a->D * sizeof(float));
        memset(dv + t * ldd, 0, (size_t)a->D * sizeof(float));
    }
    for (int qb = q0; qb < q1; qb++) cpu_att_bwd_block(scr, a, b, hk, qb * a->bq, dk, dv, ldd);
}

/* Fewer (b, kv head) items than this (B = 1 with few kv heads): each is cut into segments of its
 * query blocks with private dK/dV partials, summed afterwards in segment order. The count comes
 * from the shapes only, never the threads, so the bits do not depend on the thread count. */
#define CPU_ATT_MIN_ITEMS 8

/* First query block of segment s of nseg: block qb costs ~qb + 1, so cuts at nq sqrt(s / nseg)
 * give the segments equal work; within a window (W > 0) blocks cost about the same, so cuts at
 * nq s / nseg. */
static int cpu_att_seg_start(int s, int nseg, int nq, int W)
{
    if (W > 0) return (int)((long)nq * s / nseg);
    return (int)(nq * sqrt((double)s / nseg) + 0.5);
}

/* dk[b, t, hk] = sum over segments in order of part[(b Hkv + hk) nseg + s] (T x D each, dK, then
 * `half` floats later dV). */
static void cpu_att_reduce_segments(float *dk, float *dv, const float *part, int B, int T, int Hkv,
                                    int D, int nseg, int threads)
{
    size_t half = (size_t)B * Hkv * nseg * T * D;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < (long)B * T; r++) {
        int b = (int)(r / T), t = (int)(r % T);
        for (int hk = 0; hk < Hkv; hk++) {
            float *ok = dk + ((size_t)r * Hkv + hk) * D, *ov = dv + ((size_t)r * Hkv + hk) * D;
            for (int d = 0; d < D; d++) ok[d] = ov[d] = 0.0f;
            for (int s = 0; s < nseg; s++) {
                const float *pk = part + ((((size_t)b * Hkv + hk) * nseg + s) * T + t) * D;
                for (int d = 0; d < D; d++) ok[d] += pk[d], ov[d] += pk[half + d];
            }
        }
    }
}

/* Parallel over (b, kv head[, segment]): each item owns its dk/dv rows (or its partial) and its
 * blocks' dq rows, so there are no races and the same bits come out on every run and every
 * thread count. */
void cpu_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, int B, int T, int H, int Hkv, int D, int window)
{
    int W = cpu_att_window(window, T);
    if (W == 0 && cpu_attention_amx_backward(be, dq, dk, dv, dout, q, k, v, out, lse, B, T, H,
                                             Hkv, D))
        return; /* precision bf16 on AMX (plain causal only, as the forward) */
    cpu_state *st = cpu_st(be);
    int G = H / Hkv, bq = cpu_att_bq(G), nq = (T + bq - 1) / bq, heads = B * Hkv;
    int nseg = heads >= CPU_ATT_MIN_ITEMS ? 1 : (CPU_ATT_MIN_ITEMS + heads - 1) / heads;
    if (nseg > nq) nseg = nq;
    size_t M = (size_t)bq * G, ldk = (size_t)Hkv * D, half = (size_t)heads * nseg * T * D;
    if (cpu_scratch_reserve(st, cpu_att_bwd_scratch(M, T, D)) != 0) return;
    if (nseg > 1 && 2 * half > st->att_part_cap) {
        float *p = malloc(2 * half * sizeof(float));
        if (!p) {
            log_warn("cpu backend: out of memory for attention partials (%zu floats)", 2 * half);
            return;
        }
        free(st->att_part);
        st->att_part = p;
        st->att_part_cap = 2 * half;
    }
    cpu_att_bwd_args a = {dout, q, k, v, out, lse, dq, dk, dv, T, H, Hkv, D, bq, W};
    cpu_blas_enter_parallel();
#pragma omp parallel for num_threads(st->threads) schedule(dynamic, 1)
    for (int it = 0; it < heads * nseg; it++) {
        int bh = it / nseg, sg = it % nseg, b = bh / Hkv, hk = bh % Hkv;
        int q0 = cpu_att_seg_start(sg, nseg, nq, W), q1 = cpu_att_seg_start(sg + 1, nseg, nq, W);
        if (nseg == 1)
            cpu_att_bwd_item(st->scratch[CPU_TID()], &a, b, hk, 0, nq,
                             dk + (size_t)b * T * ldk + (size_t)hk * D,
                             dv + (size_t)b * T * ldk + (size_t)hk * D, ldk);
        else {
            float *pk = st->att_part + (size_t)it * T * D;
            cpu_att_bwd_item(st->scratch[CPU_TID()], &a, b, hk, q0, q1, pk, pk + half, (size_t)D);
        }
    }
    if (nseg > 1) cpu_att_reduce_segments(dk, dv, st->att_part, B, T, Hkv, D, nseg, st->threads);
}

#if defined(__GNUC__) && defined(__x86_64__)
/* Key/value rows prefetched this far ahead of the one in use (strided rows: the hardware
 * prefetcher does not follow them far enough). */
#define CPU_ATT_DEC_AHEAD 16

/* Decoding's products for the G query heads of one kv head, AVX-512, D a multiple of 16.
 * Scores: S[g][j] = scale q_g . k_j, for 4 keys and up to 4 heads at a time: 16 independent
 * 16-lane chains (one chain per dot product was bound by its FMA latency), each reduced across
 * its lanes at the end. Each lane sums d = l, l + 16, ... in order: the bits of a row's scores
 * do not depend on the batch, the threads or the other heads. */
__attribute__((target("avx512f"))) static void cpu_att_dec_scores16(float *S, const float *q,
                                                                     const float *k, int Tk,
                                                                     int G, int D, size_t ldk,
                                                                     float scale)
{
    for (int g0 = 0; g0 < G; g0 += 4) {
        int ng = G - g0 < 4 ? G - g0 : 4;
        for (int j = 0; j < Tk; j += 4) {
            int nj = Tk - j < 4 ? Tk - j : 4;
            const float *kr[4];
            for (int t = 0; t < 4; t++) kr[t] = k + (size_t)(j + (t < nj ? t : nj - 1)) * ldk;
            __m512 acc[4][4];
            for (int g = 0; g < 4; g++)
                for (int t = 0; t < 4; t++) acc[g][t] = _mm512_setzero_ps();
            for (int t = 0; t < 4 && j + CPU_ATT_DEC_AHEAD + t < Tk; t++) { /* rows ahead */
                const float *ahead = k + (size_t)(j + CPU_ATT_DEC_AHEAD + t) * ldk;
                for (int d = 0; d < D; d += 16)
                    _mm_prefetch((const char *)(ahead + d), _MM_HINT_T0);
            }
            for (int d = 0; d < D; d += 16) {
                __m512 kv[4];
                for (int t = 0; t < 4; t++) kv[t] = _mm512_loadu_ps(kr[t] + d);
                for (int g = 0; g < ng; g++) {
                    __m512 qv = _mm512_loadu_ps(q + (size_t)(g0 + g) * D + d);
                    for (int t = 0; t < 4; t++) acc[g][t] = _mm512_fmadd_ps(qv, kv[t], acc[g][t]);
                }
            }
            for (int g = 0; g < ng; g++)
                for (int t = 0; t < nj; t++)
                    S[(size_t)(g0 + g) * Tk + j + t] = scale * _mm512_reduce_add_ps(acc[g][t]);
        }
    }
}

/* O[g] = sum_j E[g][j] v_j, 64 columns and up to 4 heads at a time in registers, each value row
 * read once per pass; O[g][d] sums j in order. */
__attribute__((target("avx512f"))) static void cpu_att_dec_mix16(float *O, const float *E,
                                                                  const float *v, int Tk, int G,
                                                                  int D, size_t ldk)
{
    for (int d0 = 0; d0 < D; d0 += 64) {
        int nd = (D - d0 < 64 ? D - d0 : 64) / 16;
        for (int g0 = 0; g0 < G; g0 += 4) {
            int ng = G - g0 < 4 ? G - g0 : 4;
            __m512 acc[4][4];
            for (int g = 0; g < 4; g++)
                for (int c = 0; c < 4; c++) acc[g][c] = _mm512_setzero_ps();
            for (int j = 0; j < Tk; j++) {
                const float *vj = v + (size_t)j * ldk + d0;
                if (j + CPU_ATT_DEC_AHEAD < Tk)
                    for (int c = 0; c < nd; c++)
                        _mm_prefetch((const char *)(vj + (size_t)CPU_ATT_DEC_AHEAD * ldk + 16 * c),
                                     _MM_HINT_T0);
                __m512 vv[4];
                for (int c = 0; c < nd; c++) vv[c] = _mm512_loadu_ps(vj + 16 * c);
                for (int g = 0; g < ng; g++) {
                    __m512 e = _mm512_set1_ps(E[(size_t)(g0 + g) * Tk + j]);
                    for (int c = 0; c < nd; c++) acc[g][c] = _mm512_fmadd_ps(e, vv[c], acc[g][c]);
                }
            }
            for (int g = 0; g < ng; g++)
                for (int c = 0; c < nd; c++)
                    _mm512_storeu_ps(O + (size_t)(g0 + g) * D + d0 + 16 * c, acc[g][c]);
        }
    }
}

/* The same two products with AVX2 + FMA (16 registers), D a multiple of 8. Scores: 3 keys x up to
 * 3 heads, 9 independent 8-lane chains + 3 key vectors + 1 query vector; each lane sums d = l,
 * l + 8, ... in order. */
__attribute__((target("avx2,fma"))) static void cpu_att_dec_scores8(float *S, const float *q,
                                                                   const float *k, int Tk, int G,
                                                                   int D, size_t ldk, float scale)
{
    for (int g0 = 0; g0 < G; g0 += 3) {
        int ng = G - g0 < 3 ? G - g0 : 3;
        for (int j = 0; j < Tk; j += 3) {
            int nj = Tk - j < 3 ? Tk - j : 3;
            const float *kr[3];
            for (int t = 0; t < 3; t++) kr[t] = k + (size_t)(j + (t < nj ? t : nj - 1)) * ldk;
            __m256 acc[3][3];
            for (int g = 0; g < 3; g++)
                for (int t = 0; t < 3; t++) acc[g][t] = _mm256_setzero_ps();
            for (int t = 0; t < 3 && j + CPU_ATT_DEC_AHEAD + t < Tk; t++) { /* rows ahead */
                const float *ahead = k + (size_t)(j + CPU_ATT_DEC_AHEAD + t) * ldk;
                for (int d = 0; d < D; d += 16)
                    _mm_prefetch((const char *)(ahead + d), _MM_HINT_T0);
            }
            for (int d = 0; d < D; d += 8) {
                __m256 kv[3];
                for (int t = 0; t < 3; t++) kv[t] = _mm256_loadu_ps(kr[t] + d);
                for (int g = 0; g < ng; g++) {
                    __m256 qv = _mm256_loadu_ps(q + (size_t)(g0 + g) * D + d);
                    for (int t = 0; t < 3; t++) acc[g][t] = _mm256_fmadd_ps(qv, kv[t], acc[g][t]);
                }
            }
            for (int g = 0; g < ng; g++)
                for (int t = 0; t < nj; t++)
                    S[(size_t)(g0 + g) * Tk + j + t] = scale * cpu_vec_hsum8(acc[g][t]);
        }
    }
}

/* O[g] = sum_j E[g][j] v_j, 32 columns and up to 3 heads at a time: 12 accumulators and 3
 * broadcast weights, the value row read by the multiply-adds themselves; O[g][d] sums j in
 * order. */
__attribute__((target("avx2,fma"))) static void cpu_att_dec_mix8(float *O, const float *E,
                                                                const float *v, int Tk, int G,
                                                                int D, size_t ldk)
{
    for (int d0 = 0; d0 < D; d0 += 32) {
        int nd = (D - d0 < 32 ? D - d0 : 32) / 8;
        for (int g0 = 0; g0 < G; g0 += 3) {
            int ng = G - g0 < 3 ? G - g0 : 3;
            __m256 acc[3][4];
            for (int g = 0; g < 3; g++)
                for (int c = 0; c < 4; c++) acc[g][c] = _mm256_setzero_ps();
            for (int j = 0; j < Tk; j++) {
                const float *vj = v + (size_t)j * ldk + d0;
                if (j + CPU_ATT_DEC_AHEAD < Tk)
                    for (int c = 0; c < nd; c += 2)
                        _mm_prefetch((const char *)(vj + (size_t)CPU_ATT_DEC_AHEAD * ldk + 8 * c),
                                     _MM_HINT_T0);
                for (int g = 0; g < ng; g++) {
                    __m256 e = _mm256_set1_ps(E[(size_t)(g0 + g) * Tk + j]);
                    for (int c = 0; c < nd; c++)
                        acc[g][c] = _mm256_fmadd_ps(e, _mm256_loadu_ps(vj + 8 * c), acc[g][c]);
                }
            }
            for (int g = 0; g < ng; g++)
                for (int c = 0; c < nd; c++)
                    _mm256_storeu_ps(O + (size_t)(g0 + g) * D + d0 + 8 * c, acc[g][c]);
        }
    }
}

/* The kernel a decode runs for head size D, at most `isa` wide: AVX-512 needs D % 16 == 0,
 * AVX2 D % 8 == 0; else none (sgemm). */
static int cpu_att_dec_kernel(int isa, int D)
{
    if (isa >= CPU_SKINNY_AVX512 && cpu_skinny_isa() >= CPU_SKINNY_AVX512 && D % 16 == 0)
        return CPU_SKINNY_AVX512;
    if (isa >= CPU_SKINNY_AVX2 && cpu_skinny_isa() >= CPU_SKINNY_AVX2 && D % 8 == 0)
        return CPU_SKINNY_AVX2;
    return CPU_SKINNY_NONE;
}
#else
static int cpu_att_dec_kernel(int isa, int D) { (void)isa, (void)D; return CPU_SKINNY_NONE; }
#define cpu_att_dec_scores16(...) ((void)0)
#define cpu_att_dec_mix16(...) ((void)0)
#define cpu_att_dec_scores8(...) ((void)0)
#define cpu_att_dec_mix8(...) ((void)0)
#endif

/* The G query heads of one kv head, one query each, over Tk cached keys (row stride ldk):
 * S = scale Q K^T (G x Tk), E = e^(S - max) per row, O = (E V) / rowsum(E), each key and value
 * row read once for the whole group. Written out (AVX-512, AVX2) so the strided cache rows can be
 * prefetched: a batch-32 step of SmolLM2-135M's shapes streams ~377 MB of cache, and its
 * attention took 23-24 ms as two sgemm calls per group, 26 ms written out without the prefetch,
 * 19-20 ms with it (PROFILE=1 bench_generate, 2 AMX Xeon cores); on 2 AVX2-only Zen 3 cores the
 * sgemm calls took 43 ms. With the old per-key loop (a scalar expf per key and head) 55 steps
 * took 9.3 s; with the sgemm calls 6.1 s.
 * q/o: the group's G heads, D apart; scr holds G (Tk + D + 1) floats; kern from
 * cpu_att_dec_kernel. */
static void cpu_att_decode_group(int kern, float *o, float *scr, const float *q, const float *k,
                                 const float *v, int Tk, int G, int D, size_t ldk, float scale)
{
    float *S = scr, *O = S + (size_t)G * Tk, *rs = O + (size_t)G * D;
    if (kern == CPU_SKINNY_AVX512)
        cpu_att_dec_scores16(S, q, k, Tk, G, D, ldk, scale);
    else if (kern == CPU_SKINNY_AVX2)
        cpu_att_dec_scores8(S, q, k, Tk, G, D, ldk, scale);
    else
        cpu_att_gemm(0, 1, G, Tk, D, scale, q, (size_t)D, k, ldk, 0.0f, S, (size_t)Tk);
    for (int g = 0; g < G; g++) {
        float m;
        rs[g] = 1.0f / cpu_k_att_exp_row(S + (size_t)g * Tk, Tk, Tk, &m);
    }
    if (kern == CPU_SKINNY_AVX512)
        cpu_att_dec_mix16(O, S, v, Tk, G, D, ldk);
    else if (kern == CPU_SKINNY_AVX2)
        cpu_att_dec_mix8(O, S, v, Tk, G, D, ldk);
    else
        cpu_att_gemm(0, 0, G, D, Tk, 1.0f, S, (size_t)Tk, v, ldk, 0.0f, O, (size_t)D);
    for (int g = 0; g < G; g++)
        cpu_k_scaled_copy(o + (size_t)g * D, O + (size_t)g * D, rs[g], D);
}

/* One query per head over Tk cached keys (generation), parallel over kv heads (their G query
 * heads together); scores live in per-thread scratch. */
void cpu_attention_decode_isa(backend *be, int isa, float *out, const float *q, const float *k,
                              const float *v, int Tk, int H, int Hkv, int D)
{
    cpu_state *st = cpu_st(be);
    int G = H / Hkv, kern = cpu_att_dec_kernel(isa, D);
    if (cpu_scratch_reserve(st, (size_t)G * ((size_t)Tk + D + 1)) != 0) return;
    int nt = (size_t)Tk * H * D < CPU_PAR_MIN ? 1 : st->threads;
    float scale = 1.0f / sqrtf((float)D);
    size_t ldk = (size_t)Hkv * D;
    cpu_blas_enter_parallel();
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int hk = 0; hk < Hkv; hk++) {
        size_t qo = (size_t)hk * G * D;
        cpu_att_decode_group(kern, out + qo, st->scratch[CPU_TID()], q + qo, k + (size_t)hk * D,
                             v + (size_t)hk * D, Tk, G, D, ldk, scale);
    }
}

void cpu_attention_decode(backend *be, float *out, const float *q, const float *k, const float *v,
                          int Tk, int H, int Hkv, int D)
{
    cpu_attention_decode_isa(be, cpu_skinny_isa(), out, q, k, v, Tk, H, Hkv, D);
}

/* R sequences at their own positions: store each row's new key/value in its cache row, then the
 * same per-head computation as cpu_attention_decode over positions 0..pos[r]. */
void cpu_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                               const float *vnew, float *kc, float *vc, const int32_t *pos, int R,
                               int cap, int H, int Hkv, int D)
{
    cpu_state *st = cpu_st(be);
    size_t ldk = (size_t)Hkv * D, work = 0;
    for (int r = 0; r < R; r++) {
        size_t at = ((size_t)r * cap + (size_t)pos[r]) * ldk;
        memcpy(kc + at, knew + (size_t)r * ldk, ldk * sizeof(float));
        memcpy(vc + at, vnew + (size_t)r * ldk, ldk * sizeof(float));
        work += (size_t)(pos[r] + 1) * H * D;
    }
    int G = H / Hkv;
    if (cpu_scratch_reserve(st, (size_t)G * ((size_t)cap + D + 1)) != 0) return;
    int nt = work < CPU_PAR_MIN ? 1 : st->threads, items = R * Hkv;
    int kern = cpu_att_dec_kernel(cpu_skinny_isa(), D);
    float scale = 1.0f / sqrtf((float)D);
    cpu_blas_enter_parallel();
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        int r = it / Hkv, hk = it % Hkv;
        size_t base = (size_t)r * cap * ldk + (size_t)hk * D;
        size_t qo = ((size_t)r * H + (size_t)hk * G) * D;
        cpu_att_decode_group(kern, out + qo, st->scratch[CPU_TID()], q + qo, kc + base, vc + base,
                             pos[r] + 1, G, D, ldk, scale);
    }
}
