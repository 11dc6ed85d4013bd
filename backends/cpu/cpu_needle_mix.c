/* cpu_needle_mix.c: Needle's mixing layers on the CPU (backend.h, "Needle's mixing layers";
 * docs/needle.md 2.3, 2.4, 2.6): the Kronecker-factored products, column permutations and
 * scales, row softmax, the Hadamard MLP's SiLU middle, mHC's coefficients (Sinkhorn), collapse and
 * expand, and the engram gate, each with its input gradient. fp32, rows in parallel, each row's
 * arithmetic independent of the thread count. exp and log are cpu_expf_cr / cpu_logf_cr
 * (cpu_exp.h: rounded once from double, libm's expf and logf but nearer where they differ, and
 * vectorised where libm's are scalar calls), never cpu_expf's 2-ulp approximation. The only
 * memory taken is the per-thread scratch (cpu_scratch.c), so any lanes count works. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_needle_mix.h"

/* Sinkhorn's rounds (docs/needle.md 2.3): each a row then a column normalisation. */
#define MIX_SINKHORN_STEPS 40

/* Threads for N rows of about `width` floats of work each: one below CPU_PAR_MIN. */
static int mix_threads(backend *be, size_t N, size_t width)
{
    return N < 2 || N * width < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
}

static inline float mix_sigmoid(float x) { return 1.0f / (1.0f + cpu_expf_cr(-x)); }

/* --- Kronecker-factored products --- */

/* Eight floats as one value (GCC/clang vector extension: an AVX register in the AVX2 and AVX-512
 * clones, two SSE registers in the baseline one); mix_v8u is the same at any float's alignment,
 * for loads and stores. Values only, never passed to or returned from a function (ABI). */
typedef float mix_v8 __attribute__((vector_size(32)));
typedef float mix_v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define mix_ld(p) (*(const mix_v8u *)(p))
#define mix_st(p, v) (*(mix_v8u *)(p) = (v))

/* C (m x n) = P (m x p) Q (p x n), row-major: C[k][:] = sum_i P[k][i] Q[i][:], i in order for
 * every element whichever path computes it. Blocks of four rows by 16 (then 8) columns keep their
 * sums in registers while Q's rows stream past, P's entries broadcast; the rest one row at a
 * time, then one element at a time. Always inlined: compiled inside each clone of its caller. */
static inline __attribute__((always_inline)) void mix_mm(float *restrict C,
                                                         const float *restrict P,
                                                         const float *restrict Q, int m, int p,
                                                         int n)
{
    int k = 0;
    for (; k + 4 <= m; k += 4) {
        const float *p0 = P + (size_t)k * p, *p1 = p0 + p, *p2 = p1 + p, *p3 = p2 + p;
        float *c = C + (size_t)k * n;
        int l = 0;
        for (; l + 16 <= n; l += 16) {
            mix_v8 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
            for (int i = 0; i < p; i++) {
                const float *q = Q + (size_t)i * n + l;
                const mix_v8 qa = mix_ld(q), qb = mix_ld(q + 8);
                c0 += p0[i] * qa, c1 += p0[i] * qb;
                c2 += p1[i] * qa, c3 += p1[i] * qb;
                c4 += p2[i] * qa, c5 += p2[i] * qb;
                c6 += p3[i] * qa, c7 += p3[i] * qb;
            }
            mix_st(c + l, c0), mix_st(c + l + 8, c1);
            mix_st(c + n + l, c2), mix_st(c + n + l + 8, c3);
            mix_st(c + 2 * n + l, c4), mix_st(c + 2 * n + l + 8, c5);
            mix_st(c + 3 * n + l, c6), mix_st(c + 3 * n + l + 8, c7);
        }
        for (; l + 8 <= n; l += 8) {
            mix_v8 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
            for (int i = 0; i < p; i++) {
                const mix_v8 q = mix_ld(Q + (size_t)i * n + l);
                c0 += p0[i] * q, c1 += p1[i] * q, c2 += p2[i] * q, c3 += p3[i] * q;
            }
            mix_st(c + l, c0), mix_st(c + n + l, c1);
            mix_st(c + 2 * n + l, c2), mix_st(c + 3 * n + l, c3);
        }
        for (int kk = k; kk < k + 4; kk++)
            for (int ll = l; ll < n; ll++) {
                float acc = 0.0f;
                for (int i = 0; i < p; i++) acc += P[(size_t)kk * p + i] * Q[(size_t)i * n + ll];
                C[(size_t)kk * n + ll] = acc;
            }
    }
    for (; k < m; k++) {
        const float *pk = P + (size_t)k * p;
        float *c = C + (size_t)k * n;
        int l = 0;
        for (; l + 8 <= n; l += 8) {
            mix_v8 c0 = {0};
            for (int i = 0; i < p; i++) c0 += pk[i] * mix_ld(Q + (size_t)i * n + l);
            mix_st(c + l, c0);
        }
        for (; l < n; l++) {
            float acc = 0.0f;
            for (int i = 0; i < p; i++) acc += pk[i] * Q[(size_t)i * n + l];
            c[l] = acc;
        }
    }
}

/* z' of row zr (backend_kron_io's in part) into Zi: the gather, the scale, the zero pad. */
static inline __attribute__((always_inline)) void mix_kron_in(float *restrict Zi,
                                                              const float *restrict zr,
                                                              const backend_kron_io *io, int ab)
{
    const int32_t *ip = io->in_perm;
    const float *is = io->in_scale;
    if (ip && is)
        for (int j = 0; j < ab; j++) Zi[j] = zr[ip[j]] * is[j];
    else if (ip)
        for (int j = 0; j < ab; j++) Zi[j] = zr[ip[j]];
    else {
#pragma omp simd
        for (int j = 0; j < io->n_in; j++) Zi[j] = zr[j] * is[j];
        for (int j = io->n_in; j < ab; j++) Zi[j] = 0.0f;
    }
}

/* out's row from the product's row P (backend_kron_io's out part): the gather, the scale, the
 * truncation. */
static inline __attribute__((always_inline)) void mix_kron_out(float *restrict o,
                                                               const float *restrict P,
                                                               const backend_kron_io *io)
{
    const int32_t *op = io->out_perm;
    const float *os = io->out_scale;
    const int n = io->n_out;
    if (op && os)
        for (int m = 0; m < n; m++) o[m] = P[op[m]] * os[m];
    else if (op)
        for (int m = 0; m < n; m++) o[m] = P[op[m]];
    else if (os) {
#pragma omp simd
        for (int m = 0; m < n; m++) o[m] = P[m] * os[m];
    } else
        memcpy(o, P, (size_t)n * sizeof(float));
}

/* Rows [r0, r1): out[r] = L Z R (Z = z[r] as a x b) as T = L Z, then T R, with io's gathers and
 * scales on the row going in (into Zi) and coming out (from P): each row's a b floats stay in
 * L1 between the product and its permutation, where separate ops passed the whole (N, a b)
 * through memory twice more each. T, Zi, P: a x b scratch each. */
CPU_CLONES static void mix_k_kron(float *out, const float *z, const float *L, const float *R,
                                  float *T, float *Zi, float *P, size_t r0, size_t r1, int a,
                                  int b, const backend_kron_io *io)
{
    const int ab = a * b;
    const int n_in = io ? io->n_in : ab, n_out = io ? io->n_out : ab;
    const int in_io = io && (io->in_perm || io->in_scale);
    const int out_io = io && (io->out_perm || io->out_scale || n_out < ab);
    for (size_t r = r0; r < r1; r++) {
        const float *zr = z + r * (size_t)n_in;
        if (in_io) mix_kron_in(Zi, zr, io, ab), zr = Zi;
        mix_mm(T, L, zr, a, a, b);
        mix_mm(out_io ? P : out + r * (size_t)n_out, T, R, a, b, b);
        if (out_io) mix_kron_out(out + r * (size_t)n_out, P, io);
    }
}

/* transpose 0: out = A^T Z Bm (L = A^T, R = Bm); 1: out = A Z Bm^T (L = A, R = Bm^T). Each
 * thread lays L and R out row-major in its own scratch, then runs its rows. */
void cpu_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                    int N, int a, int b, int transpose, const backend_kron_io *io)
{
    if (N <= 0 || a <= 0 || b <= 0) return;
    cpu_state *st = cpu_st(be);
    const size_t aa = (size_t)a * a, bb = (size_t)b * b, ab = (size_t)a * b;
    if (cpu_scratch_reserve(st, aa + bb + 3 * ab) != 0) return;
    /* 2 (a + b) flops per element: worth threads from a few rows on */
    int nt = mix_threads(be, (size_t)N, ab * (size_t)(a + b) / 8);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *L = st->scratch[CPU_TID()], *R = L + aa, *T = R + bb, *Zi = T + ab, *P = Zi + ab;
        for (size_t i = 0; i < (size_t)a; i++)
            for (size_t k = 0; k < (size_t)a; k++)
                L[i * a + k] = transpose ? A[i * a + k] : A[k * a + i];
        for (size_t j = 0; j < (size_t)b; j++)
            for (size_t l = 0; l < (size_t)b; l++)
                R[j * b + l] = transpose ? Bm[l * b + j] : Bm[j * b + l];
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_kron(out, z, L, R, T, Zi, P, lo, hi, a, b, io);
    }
}

/* --- column permutations and scales --- */

/* gather out[r][m] = x[r][perm[m]], or (inverse) scatter out[r][perm[m]] = x[r][m] */
void cpu_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                      int inverse)
{
    if (N <= 0 || n <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        for (size_t r = lo; r < hi; r++) {
            const float *xr = x + r * n;
            float *o = out + r * n;
            if (inverse)
                for (int m = 0; m < n; m++) o[perm[m]] = xr[m];
            else
                for (int m = 0; m < n; m++) o[m] = xr[perm[m]];
        }
    }
}

/* out[r][c] = x[r][c] d[c] for c < min(n_in, n_out), then zeros up to n_out */
CPU_CLONES static void mix_k_scale_cols(float *out, const float *x, const float *d, size_t r0,
                                        size_t r1, int n_in, int n_out)
{
    const int m = n_in < n_out ? n_in : n_out;
    for (size_t r = r0; r < r1; r++) {
        const float *xr = x + r * n_in;
        float *o = out + r * n_out;
#pragma omp simd
        for (int c = 0; c < m; c++) o[c] = xr[c] * d[c];
        for (int c = m; c < n_out; c++) o[c] = 0.0f;
    }
}

void cpu_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                    int n_out)
{
    if (N <= 0 || n_out <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n_out);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_scale_cols(out, x, d, lo, hi, n_in, n_out);
    }
}

/* --- row softmax --- */

/* o = exp(x - max) / sum exp(x - max) over n values at stride 1; o may be x */
static void mix_softmax(float *o, const float *x, int n)
{
    float mx = x[0], sum = 0.0f;
    for (int c = 1; c < n; c++) mx = x[c] > mx ? x[c] : mx;
#pragma omp simd
    for (int c = 0; c < n; c++) o[c] = cpu_expf_cr(x[c] - mx);
    for (int c = 0; c < n; c++) sum += o[c];
    for (int c = 0; c < n; c++) o[c] = o[c] / sum;
}

void cpu_softmax_rows(backend *be, float *out, const float *x, int N, int n)
{
    if (N <= 0 || n <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n * 8);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        for (size_t r = lo; r < hi; r++) mix_softmax(out + r * n, x + r * n, n);
    }
}

/* dx = s (dout - <s, dout>); the dot first, so dx may be dout */
CPU_CLONES static void mix_k_softmax_bwd(float *dx, const float *dout, const float *s, size_t r0,
                                         size_t r1, int n)
{
    for (size_t r = r0; r < r1; r++) {
        const float *sr = s + r * n, *g = dout + r * n;
        float *o = dx + r * n, dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < n; c++) dot += sr[c] * g[c];
#pragma omp simd
        for (int c = 0; c < n; c++) o[c] = sr[c] * (g[c] - dot);
    }
}

void cpu_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s, int N,
                               int n)
{
    if (N <= 0 || n <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_softmax_bwd(dx, dout, s, lo, hi, n);
    }
}

/* --- the Hadamard MLP's middle --- */

/* u = (d2 cond) z1 + b2, out = u sigmoid(u); out may be z1 (each element read, then written) */
CPU_CLONES static void mix_k_hada_fwd(float *out, const float *z1, const float *cond,
                                      const float *d2, const float *b2, size_t r0, size_t r1,
                                      int n)
{
    for (size_t r = r0; r < r1; r++) {
        const float *zr = z1 + r * n, *cr = cond + r * n;
        float *o = out + r * n;
#pragma omp simd
        for (int c = 0; c < n; c++) {
            const float u = (d2[c] * cr[c]) * zr[c] + b2[c];
            o[c] = u * mix_sigmoid(u);
        }
    }
}

void cpu_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                          const float *d2, const float *b2, int N, int n)
{
    if (N <= 0 || n <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n * 4);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_hada_fwd(out, z1, cond, d2, b2, lo, hi, n);
    }
}

/* du = dout sigmoid(u) (1 + u (1 - sigmoid(u))), dz1 = (d2 cond) du, dcond = d2 (z1 du) */
CPU_CLONES static void mix_k_hada_bwd(float *dz1, float *dcond, const float *dout,
                                      const float *z1, const float *cond, const float *d2,
                                      const float *b2, size_t r0, size_t r1, int n)
{
    for (size_t r = r0; r < r1; r++) {
        const size_t o = r * n;
#pragma omp simd
        for (int c = 0; c < n; c++) {
            const float dc = d2[c] * cond[o + c];
            const float u = dc * z1[o + c] + b2[c], s = mix_sigmoid(u);
            const float du = dout[o + c] * (s * (1.0f + u * (1.0f - s)));
            dz1[o + c] = dc * du;
            dcond[o + c] = d2[c] * (z1[o + c] * du);
        }
    }
}

void cpu_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                           const float *z1, const float *cond, const float *d2, const float *b2,
                           int N, int n)
{
    if (N <= 0 || n <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)n * 4);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_hada_bwd(dz1, dcond, dout, z1, cond, d2, b2, lo, hi, n);
    }
}

/* --- mHC: coefficients --- */

/* Rows a block: Sinkhorn runs on MIX_RB rows at once, each matrix entry an array of MIX_RB values
 * (one a row), so every exp and log is a loop over the block's rows, vectorised (16 rows fill an
 * AVX-512 clone's float vectors, two of an AVX2 one's: 1.4-1.5x the coefficients' speed of 8 rows
 * on Zen 4, bench_needle_ops) where one row's 16 entries in 4 lines would not be. Each row gets
 * the row-at-a-time arithmetic (the same operations in the same order), so its bits do not depend
 * on its block or lane, nor on the thread split. */
#define MIX_RB 16

/* Entry (i, j) of line i in a block's matrix (axis 0: lines are rows, 1: columns) */
#define MIX_AT(Z, L, axis, i, j) \
    ((Z) + ((axis) ? (size_t)(j) * (L) + (i) : (size_t)(i) * (L) + (j)) * MIX_RB)

/* Line i of block Z: m = its max, e[j] = exp(Z(i, j) - m), per row. e: L x MIX_RB. */
static inline void mix_line_exps(float *e, float *m, const float *Z, int L, int axis, int i)
{
    const float *z0 = MIX_AT(Z, L, axis, i, 0);
    for (int r = 0; r < MIX_RB; r++) m[r] = z0[r];
    for (int j = 1; j < L; j++) {
        const float *zj = MIX_AT(Z, L, axis, i, j);
        for (int r = 0; r < MIX_RB; r++) m[r] = zj[r] > m[r] ? zj[r] : m[r];
    }
    for (int j = 0; j < L; j++) {
        const float *zj = MIX_AT(Z, L, axis, i, j);
        float *ej = e + (size_t)j * MIX_RB;
#pragma omp simd
        for (int r = 0; r < MIX_RB; r++) ej[r] = cpu_expf_cr(zj[r] - m[r]);
    }
}

/* One Sinkhorn step on block Z in place: every line's logsumexp (max + log(sum exp(z - max)),
 * the sum in line order) subtracted from it. w: (L + 2) MIX_RB floats of scratch. */
static inline void mix_sinkhorn_step(float *Z, int L, int axis, float *w)
{
    float *e = w, *m = e + (size_t)L * MIX_RB, *lse = m + MIX_RB;
    for (int i = 0; i < L; i++) {
        mix_line_exps(e, m, Z, L, axis, i);
        for (int r = 0; r < MIX_RB; r++) lse[r] = 0.0f;
        for (int j = 0; j < L; j++)
            for (int r = 0; r < MIX_RB; r++) lse[r] += e[(size_t)j * MIX_RB + r];
#pragma omp simd
        for (int r = 0; r < MIX_RB; r++) lse[r] = m[r] + cpu_logf_cr(lse[r]);
        for (int j = 0; j < L; j++) {
            float *zj = MIX_AT(Z, L, axis, i, j);
            for (int r = 0; r < MIX_RB; r++) zj[r] -= lse[r];
        }
    }
}

/* The backward of one step, dZ in place: step input `in` gives, along the step's lines,
 * din = dout - softmax(in) sum(dout). w: (L + 3) MIX_RB floats of scratch. */
static inline void mix_sinkhorn_step_backward(float *dZ, const float *in, int L, int axis, float *w)
{
    float *e = w, *m = e + (size_t)L * MIX_RB, *sum = m + MIX_RB, *gs = sum + MIX_RB;
    for (int i = 0; i < L; i++) {
        mix_line_exps(e, m, in, L, axis, i);
        for (int r = 0; r < MIX_RB; r++) sum[r] = 0.0f, gs[r] = 0.0f;
        for (int j = 0; j < L; j++) {
            const float *g = MIX_AT(dZ, L, axis, i, j);
            for (int r = 0; r < MIX_RB; r++) sum[r] += e[(size_t)j * MIX_RB + r], gs[r] += g[r];
        }
        for (int j = 0; j < L; j++) {
            float *g = MIX_AT(dZ, L, axis, i, j);
            for (int r = 0; r < MIX_RB; r++) g[r] -= (e[(size_t)j * MIX_RB + r] / sum[r]) * gs[r];
        }
    }
}

/* The pre and post gates' arguments (k < L: pre; L <= k < 2L: post):
 * pre: (alpha0 z + b) + (8 [k == lane] - 4);  post: (alpha1 z + b) - 4 [k != lane] */
static inline float mix_gate_arg(const float *z, const float *alpha, const float *bias, int k,
                                 int L, int lane)
{
    if (k < L) return (alpha[0] * z[k] + bias[k]) + (k == lane ? 4.0f : -4.0f);
    return (alpha[1] * z[k] + bias[k]) - (k - L != lane ? 4.0f : 0.0f);
}

/* Block Z (L^2 x MIX_RB) = alpha2 z_res + b_res of rows b0 .. b0 + nb - 1 (K floats apart); the
 * block's missing rows (nb < MIX_RB) repeat its last, computed and never written. */
static inline void mix_block_load(float *Z, const float *z, const float *alpha, const float *bias,
                                  size_t b0, int nb, int L)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L;
    for (size_t q = 0; q < LL; q++)
        for (int r = 0; r < MIX_RB; r++) {
            const size_t row = b0 + (size_t)(r < nb ? r : nb - 1);
            Z[q * MIX_RB + r] = alpha[2] * z[row * K + 2 * L + q] + bias[2 * L + q];
        }
}

/* Rows [r0, r1): h_pre = sigmoid(.), h_post = 2 sigmoid(.), H = exp(Sinkhorn(alpha2 z_res +
 * b_res)), MIX_RB rows at a time. w: (L^2 + L + 2) MIX_RB floats of scratch. */
CPU_CLONES static void mix_k_coeffs(float *h, const float *z, const float *alpha,
                                    const float *bias, float *w, size_t r0, size_t r1, int L,
                                    int lane)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L;
    float *Z = w, *sw = Z + LL * MIX_RB;
    for (size_t b0 = r0; b0 < r1; b0 += MIX_RB) {
        const int nb = r1 - b0 < MIX_RB ? (int)(r1 - b0) : MIX_RB;
        for (int r = 0; r < nb; r++) {
            const float *zr = z + (b0 + r) * K;
            float *hr = h + (b0 + r) * K;
            for (int k = 0; k < 2 * L; k++) {
                const float s = mix_sigmoid(mix_gate_arg(zr, alpha, bias, k, L, lane));
                hr[k] = k < L ? s : 2.0f * s;
            }
        }
        mix_block_load(Z, z, alpha, bias, b0, nb, L);
        for (int t = 0; t < MIX_SINKHORN_STEPS; t++) mix_sinkhorn_step(Z, L, t % 2, sw);
        for (size_t q = 0; q < LL; q++) {
#pragma omp simd
            for (int r = 0; r < MIX_RB; r++) sw[r] = cpu_expf_cr(Z[q * MIX_RB + r]);
            for (int r = 0; r < nb; r++) h[(b0 + r) * K + 2 * L + q] = sw[r];
        }
    }
}

void cpu_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                            const float *bias, int N, int lanes, int lane)
{
    if (N <= 0 || lanes <= 0) return;
    cpu_state *st = cpu_st(be);
    const size_t L = (size_t)lanes;
    if (cpu_scratch_reserve(st, (L * L + L + 2) * MIX_RB) != 0) return;
    /* ~ 40 L^2 exps per row */
    int nt = mix_threads(be, (size_t)N, 40 * 8 * L * L);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_coeffs(h, z, alpha, bias, st->scratch[CPU_TID()], lo, hi, lanes, lane);
    }
}

/* Rows [r0, r1)'s dz from dh: the gates' sigmoid' (times 2 for post) times alpha; the Sinkhorn
 * part from dZ_final = dH H, back through the recomputed steps (their inputs traced), times
 * alpha2; MIX_RB rows at a time. w: ((40 + 2) L^2 + L + 3) MIX_RB floats of scratch. */
CPU_CLONES static void mix_k_coeffs_bwd(float *dz, const float *dh, const float *z,
                                        const float *alpha, const float *bias, float *w,
                                        size_t r0, size_t r1, int L, int lane)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L, LL = (size_t)L * L, blk = LL * MIX_RB;
    float *trace = w, *Z = trace + MIX_SINKHORN_STEPS * blk, *dZ = Z + blk, *sw = dZ + blk;
    for (size_t b0 = r0; b0 < r1; b0 += MIX_RB) {
        const int nb = r1 - b0 < MIX_RB ? (int)(r1 - b0) : MIX_RB;
        for (int r = 0; r < nb; r++) {
            const float *zr = z + (b0 + r) * K, *dhr = dh + (b0 + r) * K;
            float *dzr = dz + (b0 + r) * K;
            for (int k = 0; k < 2 * L; k++) {
                const float s = mix_sigmoid(mix_gate_arg(zr, alpha, bias, k, L, lane));
                const float dv = k < L ? dhr[k] * (s * (1.0f - s)) : dhr[k] * (2.0f * (s * (1.0f - s)));
                dzr[k] = alpha[k < L ? 0 : 1] * dv;
            }
        }
        mix_block_load(Z, z, alpha, bias, b0, nb, L);
        for (int t = 0; t < MIX_SINKHORN_STEPS; t++) {
            memcpy(trace + (size_t)t * blk, Z, blk * sizeof(float));
            mix_sinkhorn_step(Z, L, t % 2, sw);
        }
        for (size_t q = 0; q < LL; q++) {
            float *dq = dZ + q * MIX_RB;
            for (int r = 0; r < MIX_RB; r++) dq[r] = dh[(b0 + (size_t)(r < nb ? r : nb - 1)) * K + 2 * L + q];
#pragma omp simd
            for (int r = 0; r < MIX_RB; r++) dq[r] = dq[r] * cpu_expf_cr(Z[q * MIX_RB + r]);
        }
        for (int t = MIX_SINKHORN_STEPS - 1; t >= 0; t--)
            mix_sinkhorn_step_backward(dZ, trace + (size_t)t * blk, L, t % 2, sw);
        for (size_t q = 0; q < LL; q++)
            for (int r = 0; r < nb; r++) dz[(b0 + r) * K + 2 * L + q] = alpha[2] * dZ[q * MIX_RB + r];
    }
}

void cpu_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                             const float *alpha, const float *bias, int N, int lanes, int lane)
{
    if (N <= 0 || lanes <= 0) return;
    cpu_state *st = cpu_st(be);
    const size_t L = (size_t)lanes;
    if (cpu_scratch_reserve(st, ((MIX_SINKHORN_STEPS + 2) * L * L + L + 3) * MIX_RB) != 0) return;
    int nt = mix_threads(be, (size_t)N, 80 * 8 * L * L);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_coeffs_bwd(dz, dh, z, alpha, bias, st->scratch[CPU_TID()], lo, hi, lanes, lane);
    }
}

/* --- mHC: collapse and expand --- */

/* u[r] = sum_k h[r hs + k] X[r][k], k in order */
CPU_CLONES static void mix_k_collapse(float *u, const float *X, const float *h, int hs, size_t r0,
                                      size_t r1, int L, int d)
{
    for (size_t r = r0; r < r1; r++) {
        const float *hr = h + r * hs, *x = X + r * L * d;
        float *o = u + r * d;
        const float h0 = hr[0];
#pragma omp simd
        for (int c = 0; c < d; c++) o[c] = h0 * x[c];
        for (int k = 1; k < L; k++) {
            const float hk = hr[k], *xk = x + (size_t)k * d;
#pragma omp simd
            for (int c = 0; c < d; c++) o[c] += hk * xk[c];
        }
    }
}

void cpu_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                      int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)lanes * d);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_collapse(u, X, h, hs, lo, hi, lanes, d);
    }
}

/* dX[r][k] += h[r hs + k] du[r]; dh[r hs + k] = <du[r], X[r][k]> (dh NULL: not computed) */
CPU_CLONES static void mix_k_collapse_bwd(float *dX, float *dh, const float *du, const float *X,
                                          const float *h, int hs, size_t r0, size_t r1, int L,
                                          int d)
{
    for (size_t r = r0; r < r1; r++) {
        const float *g = du + r * d, *hr = h + r * hs;
        for (int k = 0; k < L; k++) {
            const size_t o = (r * L + k) * d;
            const float hk = hr[k];
            float *dx = dX + o;
#pragma omp simd
            for (int c = 0; c < d; c++) dx[c] += hk * g[c];
            if (dh) {
                const float *x = X + o;
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int c = 0; c < d; c++) acc += g[c] * x[c];
                dh[r * hs + k] = acc;
            }
        }
    }
}

/* hs = 0 (one h shared by every row) takes no dh: it would be every row's sum, a fixed mean's
 * gradient nobody needs, and every row would write the same place. */
void cpu_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du, const float *X,
                               const float *h, int hs, int N, int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    if (hs == 0) dh = NULL;
    int nt = mix_threads(be, (size_t)N, (size_t)lanes * d * 2);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_collapse_bwd(dX, dh, du, X, h, hs, lo, hi, lanes, d);
    }
}

/* The expand's lanes kept in registers: up to MIX_XL lanes take the register path (Needle's 4). */
#define MIX_XL 8

/* Xo[r][i] = sum_j H[i][j] X[r][j] (j in order) + h_post[i] y[r], eight columns at a time with
 * every lane's X and y in registers and each output written once (one pass per output lane over
 * the row, as it was, read the row's outputs back L + 1 times: 0.56 of the copy rate, now near
 * it, bench_needle_ops); the same operations in the same order as the one-column rest, so the
 * bits do not depend on the path. Always inlined, so a constant L unrolls. */
static inline __attribute__((always_inline)) void mix_expand_row(float *restrict o,
                                                                 const float *restrict x,
                                                                 const float *restrict H,
                                                                 const float *restrict hp,
                                                                 const float *restrict yr, int L,
                                                                 int d)
{
    int c = 0;
    if (L <= MIX_XL)
        for (; c + 8 <= d; c += 8) {
            mix_v8 xv[MIX_XL] = {0};
            for (int j = 0; j < L; j++) xv[j] = mix_ld(x + (size_t)j * d + c);
            const mix_v8 yv = mix_ld(yr + c);
            for (int i = 0; i < L; i++) {
                const float *Hi = H + (size_t)i * L;
                mix_v8 acc = Hi[0] * xv[0];
                for (int j = 1; j < L; j++) acc += Hi[j] * xv[j];
                acc += hp[i] * yv;
                mix_st(o + (size_t)i * d + c, acc);
            }
        }
    for (; c < d; c++)
        for (int i = 0; i < L; i++) {
            const float *Hi = H + (size_t)i * L;
            float acc = Hi[0] * x[c];
            for (int j = 1; j < L; j++) acc += Hi[j] * x[(size_t)j * d + c];
            acc += hp[i] * yr[c];
            o[(size_t)i * d + c] = acc;
        }
}

CPU_CLONES static void mix_k_expand(float *Xo, const float *X, const float *h, const float *y,
                                    size_t r0, size_t r1, int L, int d)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    for (size_t r = r0; r < r1; r++) {
        const float *hr = h + r * K;
        if (L == 4)
            mix_expand_row(Xo + r * 4 * d, X + r * 4 * d, hr + 8, hr + 4, y + r * d, 4, d);
        else
            mix_expand_row(Xo + r * L * d, X + r * L * d, hr + 2 * L, hr + L, y + r * d, L, d);
    }
}

void cpu_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y, int N,
                    int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)lanes * (lanes + 1) * d);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_expand(Xo, X, h, y, lo, hi, lanes, d);
    }
}

static inline float mix_dot(const float *a, const float *b, int d)
{
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int c = 0; c < d; c++) acc += a[c] * b[c];
    return acc;
}

/* v's eight lanes summed in a fixed tree: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)) */
static inline float mix_hsum(mix_v8 v)
{
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* One row of the backward: dX[j] = sum_i H[i][j] g[i], dy = sum_i h_post[i] g[i] (i in order),
 * and the L (L + 1) dot products <g[i], y>, <g[i], X[j]> of dh, all in one pass over eight
 * columns at a time (the row's g, X and y read once; the products' sums one accumulator lane per
 * column mod 8, summed by mix_hsum, then the one-column rest added in order: a fixed order on
 * every CPU, where omp simd's reduction followed the vector width). */
static inline __attribute__((always_inline)) void mix_expand_bwd_row(
    float *restrict dX, float *restrict dhr, float *restrict dyr, const float *restrict gr,
    const float *restrict x, const float *restrict hr, const float *restrict yr, int L, int d)
{
    const float *H = hr + 2 * L, *hp = hr + L;
    mix_v8 ay[MIX_XL], ax[MIX_XL * MIX_XL];
    const mix_v8 zero = {0};
    int c = 0;
    if (L <= MIX_XL) {
        for (int i = 0; i < L; i++) ay[i] = zero;
        for (int q = 0; q < L * L; q++) ax[q] = zero;
        for (; c + 8 <= d; c += 8) {
            mix_v8 gv[MIX_XL] = {0}, xv[MIX_XL] = {0};
            for (int i = 0; i < L; i++) gv[i] = mix_ld(gr + (size_t)i * d + c);
            for (int j = 0; j < L; j++) xv[j] = mix_ld(x + (size_t)j * d + c);
            const mix_v8 yv = mix_ld(yr + c);
            for (int j = 0; j < L; j++) {
                mix_v8 acc = H[j] * gv[0];
                for (int i = 1; i < L; i++) acc += H[(size_t)i * L + j] * gv[i];
                mix_st(dX + (size_t)j * d + c, acc);
            }
            mix_v8 dv = hp[0] * gv[0];
            for (int i = 1; i < L; i++) dv += hp[i] * gv[i];
            mix_st(dyr + c, dv);
            for (int i = 0; i < L; i++) {
                ay[i] += gv[i] * yv;
                for (int j = 0; j < L; j++) ax[i * L + j] += gv[i] * xv[j];
            }
        }
    }
    const int c0 = c;
    for (; c < d; c++) {
        for (int j = 0; j < L; j++) {
            float acc = H[j] * gr[c];
            for (int i = 1; i < L; i++) acc += H[(size_t)i * L + j] * gr[(size_t)i * d + c];
            dX[(size_t)j * d + c] = acc;
        }
        float dv = hp[0] * gr[c];
        for (int i = 1; i < L; i++) dv += hp[i] * gr[(size_t)i * d + c];
        dyr[c] = dv;
    }
    for (int i = 0; i < L; i++) {
        const float *gi = gr + (size_t)i * d;
        float sy = c0 ? mix_hsum(ay[i]) : 0.0f;
        for (int k = c0; k < d; k++) sy += gi[k] * yr[k];
        dhr[L + i] = sy;
        for (int j = 0; j < L; j++) {
            const float *xj = x + (size_t)j * d;
            float sx = c0 ? mix_hsum(ax[i * L + j]) : 0.0f;
            for (int k = c0; k < d; k++) sx += gi[k] * xj[k];
            dhr[2 * L + i * L + j] = sx;
        }
    }
}

/* dX[r][j] = sum_i H[i][j] g[r][i], dy[r] = sum_i h_post[i] g[r][i] (i in order);
 * dh post[i] = <g[r][i], y[r]>, res[i][j] = <g[r][i], X[r][j]> */
CPU_CLONES static void mix_k_expand_bwd(float *dX, float *dh, float *dy, const float *g,
                                        const float *X, const float *h, const float *y, size_t r0,
                                        size_t r1, int L, int d)
{
    const size_t K = 2 * (size_t)L + (size_t)L * L;
    for (size_t r = r0; r < r1; r++) {
        if (L == 4)
            mix_expand_bwd_row(dX + r * 4 * d, dh + r * K, dy + r * d, g + r * 4 * d, X + r * 4 * d,
                               h + r * K, y + r * d, 4, d);
        else
            mix_expand_bwd_row(dX + r * L * d, dh + r * K, dy + r * d, g + r * L * d, X + r * L * d,
                               h + r * K, y + r * d, L, d);
    }
}

void cpu_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                             const float *X, const float *h, const float *y, int N, int lanes,
                             int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)lanes * (2 * lanes + 2) * d);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_expand_bwd(dX, dh, dy, g, X, h, y, lo, hi, lanes, d);
    }
}

/* --- the engram gate --- */

/* rsqrt(mean(z^2) + 1e-6) of d values */
static inline float mix_rms_inv(const float *z, int d)
{
    return 1.0f / sqrtf(mix_dot(z, z, d) / (float)d + 1e-6f);
}

/* c = <u su, k sk> / sqrt(d) (su, sk: the rms scales; the products as rmsunit forms them) */
static inline float mix_gate_c(const float *u, const float *k, float su, float sk, int d)
{
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int c = 0; c < d; c++) acc += (u[c] * su) * (k[c] * sk);
    return acc / sqrtf((float)d);
}

/* out = u + sigmoid(c) v; the scalars first, so out may be u */
CPU_CLONES static void mix_k_engram_fwd(float *out, const float *u, const float *k,
                                        const float *v, size_t r0, size_t r1, int d)
{
    for (size_t r = r0; r < r1; r++) {
        const float *ur = u + r * d, *kr = k + r * d, *vr = v + r * d;
        const float su = mix_rms_inv(ur, d), sk = mix_rms_inv(kr, d);
        const float s = mix_sigmoid(mix_gate_c(ur, kr, su, sk, d));
        float *o = out + r * d;
#pragma omp simd
        for (int c = 0; c < d; c++) o[c] = ur[c] + s * vr[c];
    }
}

void cpu_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                             const float *v, int N, int d)
{
    if (N <= 0 || d <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)d * 4);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_engram_fwd(out, u, k, v, lo, hi, d);
    }
}

/* dc = s (1 - s) <dout, v>; with w = dc / sqrt(d) the gradient reaching r(u) is w r(k), and
 * r(u) = u su's backward gives du = dout + w su r(k) - u (w su^3 <u, r(k)> / d), r(k) = k sk.
 * The scalars first, so du may be dout. */
CPU_CLONES static void mix_k_engram_bwd(float *du, const float *dout, const float *u,
                                        const float *k, const float *v, size_t r0, size_t r1,
                                        int d)
{
    for (size_t r = r0; r < r1; r++) {
        const float *ur = u + r * d, *kr = k + r * d, *vr = v + r * d, *g = dout + r * d;
        const float su = mix_rms_inv(ur, d), sk = mix_rms_inv(kr, d);
        const float s = mix_sigmoid(mix_gate_c(ur, kr, su, sk, d));
        const float w = (s * (1.0f - s)) * mix_dot(g, vr, d) / sqrtf((float)d);
        float uk = 0.0f;
#pragma omp simd reduction(+ : uk)
        for (int c = 0; c < d; c++) uk += ur[c] * (kr[c] * sk);
        const float a = w * su * sk, b = w * su * su * su * uk / (float)d;
        float *o = du + r * d;
#pragma omp simd
        for (int c = 0; c < d; c++) o[c] = g[c] + a * kr[c] - b * ur[c];
    }
}

void cpu_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                              const float *k, const float *v, int N, int d)
{
    if (N <= 0 || d <= 0) return;
    int nt = mix_threads(be, (size_t)N, (size_t)d * 6);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        mix_k_engram_bwd(du, dout, u, k, v, lo, hi, d);
    }
}
