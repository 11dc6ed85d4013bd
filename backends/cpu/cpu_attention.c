/* cpu_attention.c: causal grouped-query attention, forward and backward, blockwise.
 * Forward work items are (b, h, block of CPU_ATT_BQ queries), backward items (b, h); a block's
 * scores against its causal keys (BQ x T at most) live in per-thread scratch and go through sgemm.
 * It must never hold a (T, T) matrix for all heads, nor race on dk/dv (one writer per row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_internal.h"
#include "base/log.h"

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

#define CPU_ATT_BQ 64 /* queries per block: scores block is 64 x T floats (256 KB at T = 1024) */

/* Geometry of one query block of one (b, h): rows [i0, i1) see keys [0, i1). */
typedef struct {
    int i0, rows, nk;
    const float *q, *k, *v; /* first row of this head's q block / kv head's k, v */
    size_t ldq, ldk;        /* row strides: H*D for q/out, Hkv*D for k/v */
} cpu_att_blk;

static cpu_att_blk cpu_att_block(const float *q, const float *k, const float *v, int b, int h,
                                 int qb, int T, int H, int Hkv, int D)
{
    cpu_att_blk g;
    int hk = h / (H / Hkv);
    g.i0 = qb * CPU_ATT_BQ;
    g.rows = T - g.i0 < CPU_ATT_BQ ? T - g.i0 : CPU_ATT_BQ;
    g.nk = g.i0 + g.rows;
    g.ldq = (size_t)H * D;
    g.ldk = (size_t)Hkv * D;
    g.q = q + ((size_t)b * T + g.i0) * g.ldq + (size_t)h * D;
    g.k = k + (size_t)b * T * g.ldk + (size_t)hk * D;
    g.v = v + (size_t)b * T * g.ldk + (size_t)hk * D;
    return g;
}

/* C (M x N, ldc) = alpha op(A) op(B) + beta C with explicit leading dimensions. */
static void cpu_att_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A,
                         size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* Row r of a score block (query i0 + r sees keys 0..i0+r): s_j <- e^(s_j - m) in place, zeros
 * past the diagonal; returns the sum (the 1/sum normalisation is applied to the output row,
 * D wide, instead of to the scores, nk wide). */
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

CPU_CLONES static void cpu_k_scale_row(float *o, float a, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++) o[i] *= a;
}

/* One query block: S = scale Q K^T, E = e^(S - m) causal, O = (E V) / rowsum(E),
 * lse = m + log rowsum(E) saved for the backward. */
static void cpu_att_fwd_block(float *S, float *out, float *lse, const float *q, const float *k,
                              const float *v, int b, int h, int qb, int T, int H, int Hkv, int D)
{
    cpu_att_blk g = cpu_att_block(q, k, v, b, h, qb, T, H, Hkv, D);
    float scale = 1.0f / sqrtf((float)D), sums[CPU_ATT_BQ];
    cpu_att_gemm(0, 1, g.rows, g.nk, D, scale, g.q, g.ldq, g.k, g.ldk, 0.0f, S, (size_t)g.nk);
    float *l = lse + ((size_t)b * H + h) * T + g.i0;
    for (int r = 0; r < g.rows; r++) {
        float m;
        sums[r] = cpu_k_att_exp_row(S + (size_t)r * g.nk, g.i0 + r + 1, g.nk, &m);
        l[r] = m + logf(sums[r]);
    }
    float *o = out + ((size_t)b * T + g.i0) * g.ldq + (size_t)h * D;
    cpu_att_gemm(0, 0, g.rows, D, g.nk, 1.0f, S, (size_t)g.nk, g.v, g.ldk, 0.0f, o, g.ldq);
    for (int r = 0; r < g.rows; r++) cpu_k_scale_row(o + r * g.ldq, 1.0f / sums[r], D);
}

void cpu_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int H, int Hkv, int D)
{
    cpu_state *st = cpu_st(be);
    int nq = (T + CPU_ATT_BQ - 1) / CPU_ATT_BQ;
    long items = (long)B * H * nq;
    if (cpu_scratch_reserve(st, (size_t)CPU_ATT_BQ * T) != 0) return;
    cpu_blas_enter_parallel(); /* the parallelism is ours: blocks run concurrently */
#pragma omp parallel for num_threads(st->threads) schedule(dynamic, 1)
    for (long it = 0; it < items; it++) {
        int qb = nq - 1 - (int)(it / ((long)B * H)); /* longest (last) blocks first: balance */
        int bh = (int)(it % ((long)B * H));
        cpu_att_fwd_block(st->scratch[CPU_TID()], out, lse, q, k, v, bh / H, bh % H, qb, T, H,
                          Hkv, D);
    }
}

/* P = exp(S - lse_i) on the causal part (0 beyond); dS = P (dP - delta_i), delta_i = dO_i . O_i */
CPU_CLONES static void cpu_k_att_dscore(float *P, float *dP, float l, float delta, int valid,
                                        int nk)
{
#pragma omp simd
    for (int j = 0; j < valid; j++) {
        float p = cpu_expf(P[j] - l);
        P[j] = p;
        dP[j] = p * (dP[j] - delta);
    }
    for (int j = valid; j < nk; j++) P[j] = dP[j] = 0.0f;
}

CPU_CLONES static float cpu_k_dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Pointers of the backward for one (b, h): dout/out/dq share q's layout; dk/dv point at the
 * first row this head accumulates into, ldd apart (the kv head itself, or a per-head partial). */
typedef struct {
    const float *dout, *out, *lse;
    float *dq, *dk, *dv;
    size_t ldd;
} cpu_att_grads;

/* One query block of the backward (math in cpu_att_bwd_head):
 * S = scale Q K^T, P, dP = dO V^T, dS; dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO. */
static void cpu_att_bwd_block(float *P, float *dP, const cpu_att_grads *gr, const float *q,
                              const float *k, const float *v, int b, int h, int qb, int T, int H,
                              int Hkv, int D)
{
    cpu_att_blk g = cpu_att_block(q, k, v, b, h, qb, T, H, Hkv, D);
    float scale = 1.0f / sqrtf((float)D);
    size_t off = ((size_t)b * T + g.i0) * g.ldq + (size_t)h * D;
    const float *dO = gr->dout + off, *O = gr->out + off;
    const float *l = gr->lse + ((size_t)b * H + h) * T + g.i0;
    cpu_att_gemm(0, 1, g.rows, g.nk, D, scale, g.q, g.ldq, g.k, g.ldk, 0.0f, P, (size_t)g.nk);
    cpu_att_gemm(0, 1, g.rows, g.nk, D, 1.0f, dO, g.ldq, g.v, g.ldk, 0.0f, dP, (size_t)g.nk);
    for (int r = 0; r < g.rows; r++) {
        float delta = cpu_k_dot(dO + r * g.ldq, O + r * g.ldq, D);
        cpu_k_att_dscore(P + (size_t)r * g.nk, dP + (size_t)r * g.nk, l[r], delta, g.i0 + r + 1,
                         g.nk);
    }
    cpu_att_gemm(0, 0, g.rows, D, g.nk, scale, dP, (size_t)g.nk, g.k, g.ldk, 0.0f, gr->dq + off,
                 g.ldq);
    cpu_att_gemm(1, 0, g.nk, D, g.rows, scale, dP, (size_t)g.nk, g.q, g.ldq, 1.0f, gr->dk, gr->ldd);
    cpu_att_gemm(1, 0, g.nk, D, g.rows, 1.0f, P, (size_t)g.nk, dO, g.ldq, 1.0f, gr->dv, gr->ldd);
}

/* The whole backward of query head h of batch b: zero its dK/dV destination, then its query
 * blocks in order. With s_ij = scale q_i.k_j and p = softmax_j(s): ds_ij = p_ij (dp_ij - delta_i),
 * delta_i = sum_j p_ij dp_ij = dO_i . O_i (since O_i = sum_j p_ij v_j), dp_ij = dO_i . v_j. */
static void cpu_att_bwd_head(float *scr, cpu_att_grads gr, const float *q, const float *k,
                             const float *v, int b, int h, int T, int H, int Hkv, int D)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) gr.dk[t * gr.ldd + d] = gr.dv[t * gr.ldd + d] = 0.0f;
    int nq = (T + CPU_ATT_BQ - 1) / CPU_ATT_BQ;
    float *P = scr, *dP = scr + (size_t)CPU_ATT_BQ * T;
    for (int qb = 0; qb < nq; qb++) cpu_att_bwd_block(P, dP, &gr, q, k, v, b, h, qb, T, H, Hkv, D);
}

/* GQA: dk[b, t, hk] = sum over the group's heads h = hk G .. hk G + G - 1 of their partials, in
 * that order (part is (B, H, T, D) for dK, then the same for dV). */
static void cpu_att_reduce_group(float *dk, float *dv, const float *part, int B, int T, int H,
                                 int Hkv, int D, int threads)
{
    int G = H / Hkv;
    size_t half = (size_t)B * H * T * D;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < (long)B * T; r++) {
        int b = (int)(r / T), t = (int)(r % T);
        for (int hk = 0; hk < Hkv; hk++) {
            float *ok = dk + ((size_t)r * Hkv + hk) * D, *ov = dv + ((size_t)r * Hkv + hk) * D;
            for (int d = 0; d < D; d++) ok[d] = ov[d] = 0.0f;
            for (int h = hk * G; h < (hk + 1) * G; h++) {
                const float *pk = part + (((size_t)b * H + h) * T + t) * D;
                for (int d = 0; d < D; d++) ok[d] += pk[d], ov[d] += pk[half + d];
            }
        }
    }
}

/* Parallel over (b, h). With H == Hkv each head owns its dk/dv rows; with GQA each head writes a
 * private partial and the group is summed afterwards in head order: no races, same bits on
 * every run and every thread count. */
void cpu_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, int B, int T, int H, int Hkv, int D)
{
    cpu_state *st = cpu_st(be);
    int G = H / Hkv, items = B * H;
    if (cpu_scratch_reserve(st, 2 * (size_t)CPU_ATT_BQ * T) != 0) return;
    size_t half = (size_t)B * H * T * D;
    if (G > 1 && 2 * half > st->att_part_cap) {
        float *p = malloc(2 * half * sizeof(float));
        if (!p) {
            log_warn("cpu backend: out of memory for attention partials (%zu floats)", 2 * half);
            return;
        }
        free(st->att_part);
        st->att_part = p;
        st->att_part_cap = 2 * half;
    }
    cpu_blas_enter_parallel();
#pragma omp parallel for num_threads(st->threads) schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        int b = it / H, h = it % H;
        size_t ldk = (size_t)Hkv * D;
        cpu_att_grads gr = {dout, out, lse, dq, NULL, NULL, ldk};
        if (G == 1) {
            gr.dk = dk + (size_t)b * T * ldk + (size_t)h * D;
            gr.dv = dv + (size_t)b * T * ldk + (size_t)h * D;
        } else {
            gr.dk = st->att_part + ((size_t)b * H + h) * T * D;
            gr.dv = gr.dk + half;
            gr.ldd = (size_t)D;
        }
        cpu_att_bwd_head(st->scratch[CPU_TID()], gr, q, k, v, b, h, T, H, Hkv, D);
    }
    if (G > 1) cpu_att_reduce_group(dk, dv, st->att_part, B, T, H, Hkv, D, st->threads);
}

/* One head of one query over Tk keys/values with row stride ldk: s_j = q.k_j / sqrt(D),
 * out = sum_j softmax(s)_j v_j, in two passes (scores + max, then exp-weighted sum of v). */
CPU_CLONES static void cpu_att_decode_head(float *o, float *s, const float *qh, const float *kh,
                                           const float *vh, int Tk, int D, size_t ldk, float scale)
{
    float mx = -INFINITY;
    for (int j = 0; j < Tk; j++) {
        float acc = 0.0f;
        /* a vector reduction: the dot's serial FMA chain was most of a batched decode step */
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < D; d++) acc += qh[d] * kh[(size_t)j * ldk + d];
        s[j] = acc * scale;
        if (s[j] > mx) mx = s[j];
    }
    float sum = 0.0f;
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    for (int j = 0; j < Tk; j++) {
        float p = expf(s[j] - mx);
        sum += p;
#pragma omp simd
        for (int d = 0; d < D; d++) o[d] += p * vh[(size_t)j * ldk + d];
    }
    for (int d = 0; d < D; d++) o[d] /= sum;
}

/* One query per head over Tk cached keys (generation), parallel over heads; scores live in
 * per-thread scratch (Tk floats). */
void cpu_attention_decode(backend *be, float *out, const float *q, const float *k, const float *v,
                          int Tk, int H, int Hkv, int D)
{
    cpu_state *st = cpu_st(be);
    if (cpu_scratch_reserve(st, (size_t)Tk) != 0) return;
    int nt = (size_t)Tk * H * D < CPU_PAR_MIN ? 1 : st->threads;
    float scale = 1.0f / sqrtf((float)D);
    size_t ldk = (size_t)Hkv * D;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int h = 0; h < H; h++) {
        size_t hk = (size_t)(h / (H / Hkv)) * D;
        cpu_att_decode_head(out + (size_t)h * D, st->scratch[CPU_TID()], q + (size_t)h * D, k + hk,
                            v + hk, Tk, D, ldk, scale);
    }
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
    if (cpu_scratch_reserve(st, (size_t)cap) != 0) return;
    int nt = work < CPU_PAR_MIN ? 1 : st->threads, items = R * H;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        int r = it / H, h = it % H;
        size_t base = (size_t)r * cap * ldk + (size_t)(h / (H / Hkv)) * D;
        size_t qo = ((size_t)r * H + h) * D;
        cpu_att_decode_head(out + qo, st->scratch[CPU_TID()], q + qo, kc + base, vc + base, pos[r] + 1,
                            D, ldk, scale);
    }
}
