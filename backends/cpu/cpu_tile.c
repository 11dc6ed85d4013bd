/* cpu_tile.c: the register-tiled product of small matrices for loom's own parallel regions
 * (cpu_tile.h). Attention's blocks (48 score rows x up to T keys, head size 64) went through
 * OpenBLAS one call per product: at those sizes its packing, its separate pass zeroing C for
 * beta = 0 and its short inner loops left the kernel itself 55% of the time, and attention ran at
 * 35-45% of a core's sgemm rate. Here nothing is packed: a tile of C stays in registers while
 * k runs, B's panel (16 to 64 columns) is read from L1 or L2, and A's values are broadcast from
 * memory through its two strides, so Aᵀ costs nothing. */
#include "backends/cpu/cpu_tile.h"

#include "backends/cpu/cpu_skinny.h" /* cpu_skinny_isa and the ISA names */

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

/* A product runs column panel by column panel, each through the widest tile that fits it. */
typedef void (*cpu_tile_panel_fn)(int M, int nc, int K, float alpha, const float *A, size_t ars,
                                  size_t acs, const float *B, size_t ldb, int acc, float *C,
                                  size_t ldc);

/* AVX2 + FMA: 6 rows x 2 ymm (12 of the 16 registers). The masks are the first n lanes set. */
#define TK_TARGET "avx2,fma"
#define TK_V __m256
#define TK_W 8
#define TK_MASK_T __m256i
#define TK_MASK(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define TK_ZERO() _mm256_setzero_ps()
#define TK_SET1(x) _mm256_set1_ps(x)
#define TK_LOAD(p) _mm256_loadu_ps(p)
#define TK_LOADM(p, m) _mm256_maskload_ps(p, m)
#define TK_STORE(p, v) _mm256_storeu_ps(p, v)
#define TK_STOREM(p, m, v) _mm256_maskstore_ps(p, m, v)
#define TK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define TK_MUL(a, b) _mm256_mul_ps(a, b)
#define TK_ADD(a, b) _mm256_add_ps(a, b)
#define TK_NAME cpu_tile8_16
#define TK_ROWS 6
#define TK_COLS 16
#include "backends/cpu/cpu_tile_kernel.h"
#undef TK_NAME
#undef TK_ROWS
#undef TK_COLS
#undef TK_TARGET
#undef TK_V
#undef TK_W
#undef TK_MASK_T
#undef TK_MASK
#undef TK_ZERO
#undef TK_SET1
#undef TK_LOAD
#undef TK_LOADM
#undef TK_STORE
#undef TK_STOREM
#undef TK_FMA
#undef TK_MUL
#undef TK_ADD

/* AVX-512 (32 registers): 16 to 64 columns, 1 to 4 zmm a row, with as many rows as keep the
 * accumulators at 24 or fewer (12 x 16, 12 x 32, 8 x 48, 6 x 64). The wider the tile, the fewer
 * loads a multiply-add: 12 x 16 broadcasts one A value per multiply-add (13 loads for 12), which
 * bound it where the core retires two loads and two zmm multiply-adds a cycle; 6 x 64 takes 10
 * loads for 24. Attention's products are 48 (the score rows) or 64 (the head size) wide. */
#define TK_TARGET "avx512f"
#define TK_V __m512
#define TK_W 16
#define TK_MASK_T __mmask16
#define TK_MASK(n) ((__mmask16)((1u << (n)) - 1u))
#define TK_ZERO() _mm512_setzero_ps()
#define TK_SET1(x) _mm512_set1_ps(x)
#define TK_LOAD(p) _mm512_loadu_ps(p)
#define TK_LOADM(p, m) _mm512_maskz_loadu_ps(m, p)
#define TK_STORE(p, v) _mm512_storeu_ps(p, v)
#define TK_STOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define TK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define TK_MUL(a, b) _mm512_mul_ps(a, b)
#define TK_ADD(a, b) _mm512_add_ps(a, b)
#define TK_NAME cpu_tile16_16
#define TK_ROWS 12
#define TK_COLS 16
#include "backends/cpu/cpu_tile_kernel.h"
#undef TK_NAME
#undef TK_ROWS
#undef TK_COLS
#define TK_NAME cpu_tile16_32
#define TK_ROWS 12
#define TK_COLS 32
#include "backends/cpu/cpu_tile_kernel.h"
#undef TK_NAME
#undef TK_ROWS
#undef TK_COLS
#define TK_NAME cpu_tile16_48
#define TK_ROWS 8
#define TK_COLS 48
#include "backends/cpu/cpu_tile_kernel.h"
#undef TK_NAME
#undef TK_ROWS
#undef TK_COLS
#define TK_NAME cpu_tile16_64
#define TK_ROWS 6
#define TK_COLS 64
#include "backends/cpu/cpu_tile_kernel.h"
#define CPU_TILE_KERNELS 1

/* The panels of one product: widths[w] (ascending, multiples of 16) run by panel[w]. Each panel
 * is the widest while the columns left fill it, then the narrowest that holds the rest. */
static void cpu_tile_panels(const cpu_tile_panel_fn *panel, const int *widths, int nw, int M,
                            int N, int K, float alpha, const float *A, size_t ars, size_t acs,
                            const float *B, size_t ldb, int acc, float *C, size_t ldc)
{
    for (int j = 0; j < N;) {
        int left = N - j, w = 0;
        if (left >= widths[nw - 1]) w = nw - 1;
        else
            while (widths[w] < left) w++;
        int nc = left < widths[w] ? left : widths[w];
        panel[w](M, nc, K, alpha, A, ars, acs, B + j, ldb, acc, C + j, ldc);
        j += nc;
    }
}
#endif

/* Neither kernel: sgemm, with A as stored (rows ars apart) or transposed (columns acs apart). */
static void cpu_tile_sgemm(int M, int N, int K, float alpha, const float *A, size_t ars,
                           size_t acs, const float *B, size_t ldb, int acc, float *C, size_t ldc)
{
    int tA = acs != 1;
    size_t lda = tA ? acs : ars;
    if (lda < (size_t)(tA ? M : K)) lda = (size_t)(tA ? M : K); /* one row or column: unused */
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, CblasNoTrans, M, N, K, alpha, A,
                (int)lda, B, (int)ldb, acc ? 1.0f : 0.0f, C, (int)ldc);
}

void cpu_tile_gemm_isa(int isa, int M, int N, int K, float alpha, const float *A, size_t ars,
                       size_t acs, const float *B, size_t ldb, int acc, float *C, size_t ldc)
{
    if (M < 1 || N < 1) return;
    if (isa > cpu_skinny_isa()) isa = cpu_skinny_isa();
#ifdef CPU_TILE_KERNELS
    if (isa == CPU_SKINNY_AVX512) {
        static const cpu_tile_panel_fn panel[] = {cpu_tile16_16, cpu_tile16_32, cpu_tile16_48,
                                                  cpu_tile16_64};
        static const int widths[] = {16, 32, 48, 64};
        cpu_tile_panels(panel, widths, 4, M, N, K, alpha, A, ars, acs, B, ldb, acc, C, ldc);
        return;
    }
    if (isa == CPU_SKINNY_AVX2) {
        static const cpu_tile_panel_fn panel[] = {cpu_tile8_16};
        static const int widths[] = {16};
        cpu_tile_panels(panel, widths, 1, M, N, K, alpha, A, ars, acs, B, ldb, acc, C, ldc);
        return;
    }
#endif
    cpu_tile_sgemm(M, N, K, alpha, A, ars, acs, B, ldb, acc, C, ldc);
}

void cpu_tile_gemm(int M, int N, int K, float alpha, const float *A, size_t ars, size_t acs,
                   const float *B, size_t ldb, int acc, float *C, size_t ldc)
{
    cpu_tile_gemm_isa(cpu_skinny_isa(), M, N, K, alpha, A, ars, acs, B, ldb, acc, C, ldc);
}
