/* cpu_skinny.c: C = alpha A W^T + beta C for a few rows of A (M <= CPU_SKINNY_ROWS) against a
 * weight stored as its rows (W: N x K row-major, the forward of every linear layer and the head
 * while decoding).
 *
 * Why not sgemm: a library packs W into panels on every call, and at M = 32 that packing (one
 * pass over all of W for 32 rows of use) is a third of OpenBLAS's time; a decode step's products
 * ran at half the large-M rate. Here every output is a dot product of an A row and a W row, both
 * read in place:
 *     c[i][j] = sum_k A[i][k] W[j][k]
 * The kernel holds an MR x NR tile of V-wide partial sums, s[i][j][l] += A[i][k+l] * W[j][k+l]
 * for k = 0, V, 2V, ... (the last chunk masked), and reduces each across its lanes at the end.
 * One pass of the tile loads NR + MR vectors for MR*NR multiply-adds; the NR rows of W (NR*K
 * floats, L1) stay put while all M rows of A (<= 64*K floats, L2) pass them, so W is read from
 * memory once per call.
 *
 * Every output's arithmetic is the same whatever M, its tile, the thread count or the split:
 * lane l sums k = l, l+V, ... in order, then one fixed reduction: a row's products have the same
 * bits in a step of 32 rows as alone, and rows that finish early do not move the others'. A lone
 * last row of A runs by itself; two or three left over, and columns past the end, repeat the last
 * real one (computed, not stored). */
#include "backends/cpu/cpu_skinny.h"

#include <stdint.h>

#include "backends/cpu/cpu_vec.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CPU_SKINNY_X86 1
#endif

/* Products under this many multiply-adds run on one thread: waking the other costs more. */
#define CPU_SKINNY_PAR_MIN ((size_t)1 << 18)

#ifdef CPU_SKINNY_X86

/* AVX-512: 16-wide, 4 x 4 tile: 16 accumulators + 4 W vectors + 1 A vector of 32 registers;
 * 8 loads per 16 multiply-adds (the two FMA ports, not the two load ports, set the pace). */
#define MR16 4
#define NR16 4

__attribute__((target("avx512f"), always_inline)) static inline void
cpu_skinny_tile16(int mr, int K, const float *const *a, const float *const *w,
                  float out[MR16][NR16], const float *const *pf, int pfl)
{
    __m512 s[MR16][NR16];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR16; j++) s[i][j] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[NR16];
        for (int j = 0; j < NR16; j++) wv[j] = _mm512_loadu_ps(w[j] + k);
        if (k < pfl)
            for (int j = 0; j < NR16; j++) _mm_prefetch((const char *)(pf[j] + k), _MM_HINT_T0);
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_loadu_ps(a[i] + k);
            for (int j = 0; j < NR16; j++) s[i][j] = _mm512_fmadd_ps(av, wv[j], s[i][j]);
        }
    }
    if (k < K) { /* the last K % 16: masked loads read nothing past the rows (zeros in) */
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv[NR16];
        for (int j = 0; j < NR16; j++) wv[j] = _mm512_maskz_loadu_ps(m, w[j] + k);
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_maskz_loadu_ps(m, a[i] + k);
            for (int j = 0; j < NR16; j++) s[i][j] = _mm512_fmadd_ps(av, wv[j], s[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR16; j++) out[i][j] = _mm512_reduce_add_ps(s[i][j]);
}

/* The full tile, and one row alone (a lone row padded to MR would cost MR rows' multiply-adds;
 * alone it costs the four chains' latency, half of that) */
__attribute__((target("avx512f"))) static void cpu_skinny_tiles16(int mr, int K,
                                                                   const float *const *a,
                                                                   const float *const *w,
                                                                   float out[MR16][NR16],
                                                                   const float *const *pf, int pfl)
{
    if (mr == 1)
        cpu_skinny_tile16(1, K, a, w, out, pf, pfl);
    else
        cpu_skinny_tile16(MR16, K, a, w, out, pf, pfl);
}

/* AVX2 + FMA: 8-wide, 3 x 3 tile: 9 accumulators + 3 W vectors + 1 A vector of 16 registers
 * (9 chains cover the two ports' four-cycle latency). */
#define MR8 3
#define NR8 3

__attribute__((target("avx2,fma"), always_inline)) static inline void
cpu_skinny_tile8(int mr, int K, const float *const *a, const float *const *w, float out[MR8][NR8],
                 const float *const *pf, int pfl)
{
    __m256 s[MR8][NR8];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR8; j++) s[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[NR8];
        for (int j = 0; j < NR8; j++) wv[j] = _mm256_loadu_ps(w[j] + k);
        if (k < pfl && k % 16 == 0) /* a line is 16 floats, two iterations */
            for (int j = 0; j < NR8; j++) _mm_prefetch((const char *)(pf[j] + k), _MM_HINT_T0);
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_loadu_ps(a[i] + k);
            for (int j = 0; j < NR8; j++) s[i][j] = _mm256_fmadd_ps(av, wv[j], s[i][j]);
        }
    }
    if (k < K) {
        static const int32_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(K - k),
                                       _mm256_loadu_si256((const __m256i *)ramp));
        __m256 wv[NR8];
        for (int j = 0; j < NR8; j++) wv[j] = _mm256_maskload_ps(w[j] + k, m);
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_maskload_ps(a[i] + k, m);
            for (int j = 0; j < NR8; j++) s[i][j] = _mm256_fmadd_ps(av, wv[j], s[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR8; j++) out[i][j] = cpu_vec_hsum8(s[i][j]);
}

__attribute__((target("avx2,fma"))) static void cpu_skinny_tiles8(int mr, int K,
                                                                  const float *const *a,
                                                                  const float *const *w,
                                                                  float out[MR8][NR8],
                                                                  const float *const *pf, int pfl)
{
    if (mr == 1)
        cpu_skinny_tile8(1, K, a, w, out, pf, pfl);
    else
        cpu_skinny_tile8(MR8, K, a, w, out, pf, pfl);
}

#define MR_MAX 4
#define NR_MAX 4

/* Columns [j0, j1) of C, every row: one tile of NR columns at a time, all row tiles under it. */
static void cpu_skinny_cols(int isa, int j0, int j1, int M, int K, float alpha, const float *A,
                            int lda, const float *W, int ldw, float beta, float *C, int ldc)
{
    int mr = isa == CPU_SKINNY_AVX512 ? MR16 : MR8, nr = isa == CPU_SKINNY_AVX512 ? NR16 : NR8;
    const float *a[MR_MAX], *w[NR_MAX], *pf[NR_MAX], *pfi[NR_MAX];
    float out[MR_MAX][NR_MAX];
    /* W comes from memory once per call: the next tile's rows are prefetched while this one
     * computes, a slice of K per row tile (measured, 200 distinct 1536 x 576 weights at M = 32,
     * 2 threads: 7.5 -> 8.9 GB/s, 120 -> 142 GFLOP/s; OpenBLAS 104) */
    int tiles = (M + mr - 1) / mr, slice = ((K + tiles - 1) / tiles + 15) / 16 * 16;
    for (int j = j0; j < j1; j += nr) {
        int nj = j1 - j < nr ? j1 - j : nr;
        for (int q = 0; q < nr; q++) w[q] = W + (size_t)(j + (q < nj ? q : nj - 1)) * ldw;
        int jn = j + nr < j1 ? j + nr : j; /* the last tile prefetches nothing */
        for (int q = 0; q < nr; q++) pf[q] = W + (size_t)(jn + q < j1 ? jn + q : jn) * ldw;
        for (int i = 0; i < M; i += mr) {
            int ni = M - i < mr ? M - i : mr, t = i / mr;
            int pfl = jn == j ? 0 : K - t * slice < slice ? K - t * slice : slice;
            for (int q = 0; q < nr; q++) pfi[q] = pf[q] + (size_t)t * slice;
            for (int p = 0; p < mr; p++) a[p] = A + (size_t)(i + (p < ni ? p : ni - 1)) * lda;
            int rows = ni == 1 ? 1 : mr; /* 2 or 3 left: padded, repeating the last */
            if (isa == CPU_SKINNY_AVX512)
                cpu_skinny_tiles16(rows, K, a, w, (float(*)[NR16])out, pfi, pfl);
            else
                cpu_skinny_tiles8(rows, K, a, w, (float(*)[NR8])out, pfi, pfl);
            for (int p = 0; p < ni; p++) {
                float *c = C + (size_t)(i + p) * ldc + j;
                const float *o = (const float *)out + p * nr;
                for (int q = 0; q < nj; q++)
                    c[q] = beta == 0.0f ? alpha * o[q] : alpha * o[q] + beta * c[q];
            }
        }
    }
}

int cpu_skinny_isa(void)
{
    static int isa = -1;
    if (isa < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f"))
            isa = CPU_SKINNY_AVX512;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            isa = CPU_SKINNY_AVX2;
        else
            isa = CPU_SKINNY_NONE;
    }
    return isa;
}

int cpu_skinny_nt_isa(int isa, int threads, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *W, int ldw, float beta, float *C, int ldc)
{
    if (isa == CPU_SKINNY_NONE || isa > cpu_skinny_isa() || M < 1 || M > CPU_SKINNY_ROWS ||
        N < 1 || K < 1)
        return 0;
    if ((size_t)M * N * K < CPU_SKINNY_PAR_MIN) threads = 1;
    int nr = isa == CPU_SKINNY_AVX512 ? NR16 : NR8;
    int tiles = (N + nr - 1) / nr;
    if (threads > tiles) threads = tiles;
    if (threads <= 1) {
        cpu_skinny_cols(isa, 0, N, M, K, alpha, A, lda, W, ldw, beta, C, ldc);
        return 1;
    }
    /* each thread a contiguous run of column tiles, so its W rows stream in order */
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        int j0 = (int)((long)tiles * t / threads) * nr;
        int j1 = (int)((long)tiles * (t + 1) / threads) * nr;
        if (j1 > N) j1 = N;
        cpu_skinny_cols(isa, j0, j1, M, K, alpha, A, lda, W, ldw, beta, C, ldc);
    }
    return 1;
}

#else /* not x86-64: the caller's sgemm runs these products */

int cpu_skinny_isa(void) { return CPU_SKINNY_NONE; }

int cpu_skinny_nt_isa(int isa, int threads, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *W, int ldw, float beta, float *C, int ldc)
{
    (void)isa, (void)threads, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)W, (void)ldw, (void)beta, (void)C, (void)ldc;
    return 0;
}

#endif

int cpu_skinny_nt(int threads, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *W, int ldw, float beta, float *C, int ldc)
{
    return cpu_skinny_nt_isa(cpu_skinny_isa(), threads, M, N, K, alpha, A, lda, W, ldw, beta, C,
                             ldc);
}
