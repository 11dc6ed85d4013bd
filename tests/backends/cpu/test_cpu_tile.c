/* test_cpu_tile.c: the register-tiled product (cpu_tile.c), each kernel this CPU runs (AVX-512,
 * AVX2+FMA) and the sgemm it falls back to, against a double reference within the sum bound:
 * ragged tiles (M off the 6/8/12-row tiles, N off the 16- to 64-column panels), A as stored
 * (rows ars apart) and transposed (columns acs apart), acc 0 (C's NaN ignored) and 1, pad
 * columns never written. Its promise that an element's bits depend only on its A row, B column and K: any sub-block of a
 * product, computed alone from the same operands, equals the block in the whole, bit for bit. */
#include "cpu_test.h"

#include "backends/cpu/cpu_skinny.h"
#include "backends/cpu/cpu_tile.h"

static const char *isa_name(int isa)
{
    return isa == CPU_SKINNY_AVX512 ? "avx512" : isa == CPU_SKINNY_AVX2 ? "avx2" : "sgemm";
}

/* One case: A M x K stored row-major (ars = K + pad, acs = 1) or as its transpose (K x M rows of
 * M + pad: ars = 1, acs = M + pad); B K x N in rows of ldb = N + 2 pad; C in rows of N + pad. */
static void check_case(int isa, int M, int N, int K, int trans, int pad, int acc)
{
    size_t ars = trans ? 1 : (size_t)K + pad, acs = trans ? (size_t)M + pad : 1;
    size_t na = trans ? (size_t)K * acs : (size_t)M * ars, ldb = (size_t)N + 2 * pad;
    size_t ldc = (size_t)N + pad;
    float *A = frand(na ? na : 1, 1), *B = frand((size_t)K * ldb + 1, 1);
    float *C = frand((size_t)M * ldc, 1);
    double *want = todbl(C, (size_t)M * ldc);
    if (!acc) /* acc = 0 must ignore whatever C held, NaN included */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = NAN;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)A[i * ars + k * acs] * B[(size_t)k * ldb + j];
            double *c = want + (size_t)i * ldc + j;
            *c = 0.7 * s + (acc ? *c : 0.0);
        }
    cpu_tile_gemm_isa(isa, M, N, K, 0.7f, A, ars, acs, B, ldb, acc, C, ldc);
    char name[96];
    snprintf(name, sizeof name, "%s %dx%dx%d %s pad %d acc %d", isa_name(isa), M, N, K,
             trans ? "A transposed" : "A as stored", pad, acc);
    /* K products of U(-1,1) entries (E|ab| = 1/4, taken x2) times 0.7, plus C (|C| < 1) when
     * acc: K + acc terms; alpha and the final add round once each */
    check_allclose_v(name, C, want, (size_t)M * ldc, tol32(K + acc, 0.35 * K + 1, 3), 0);
    for (int i = 0; i < M; i++)
        for (int j = N; j < (int)ldc; j++)
            CHECK(C[(size_t)i * ldc + j] == (float)want[(size_t)i * ldc + j],
                  "%s: wrote the pad at row %d col %d", name, i, j);
    free(A), free(B), free(C), free(want);
}

static void test_shapes(int isa)
{
    static const int Ms[] = {1, 5, 6, 7, 12, 13, 48, 61};
    static const int Ns[] = {1, 8, 15, 16, 17, 48, 64, 70};
    static const int Ks[] = {0, 1, 9, 64, 257};
    int cases = 0;
    for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
        for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) {
                int trans = (int)((m + n + k) % 2), pad = (int)(n % 3) * 3;
                check_case(isa, Ms[m], Ns[n], Ks[k], trans, pad, (int)((m + k) % 2));
                cases++;
            }
    printf("done %s: %d shapes against the sum bound\n", isa_name(isa), cases);
}

/* Rows [i0, i0 + m) x columns [j0, j0 + n) of a 61 x 70 x 257 product, computed alone (so they
 * fall at other places in the tiles), equal the same block of the whole. */
static void test_blocks_alone(int isa)
{
    const int M = 61, N = 70, K = 257;
    float *A = frand((size_t)K * M, 1), *B = frand((size_t)K * N, 1);
    float *C = malloc((size_t)M * N * sizeof(float)), *D = malloc((size_t)M * N * sizeof(float));
    cpu_tile_gemm_isa(isa, M, N, K, 0.5f, A, 1, M, B, N, 0, C, N); /* A transposed */
    static const int blocks[][4] = {{0, 1, 0, 70}, {5, 7, 3, 16}, {13, 48, 17, 53}, {60, 1, 69, 1}};
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
        int i0 = blocks[b][0], m = blocks[b][1], j0 = blocks[b][2], n = blocks[b][3];
        cpu_tile_gemm_isa(isa, m, n, K, 0.5f, A + i0, 1, M, B + j0, N, 0, D, N);
        for (int i = 0; i < m; i++)
            CHECK(memcmp(D + (size_t)i * N, C + (size_t)(i0 + i) * N + j0, n * sizeof(float)) == 0,
                  "%s: rows %d+%d x cols %d+%d alone differ from the whole product (row %d)",
                  isa_name(isa), i0, m, j0, n, i0 + i);
    }
    free(A), free(B), free(C), free(D);
    printf("done %s: blocks alone equal the whole product, bit for bit\n", isa_name(isa));
}

int main(void)
{
    test_shapes(CPU_SKINNY_NONE); /* the sgemm fallback, both layouts of A */
    int top = cpu_skinny_isa();
    for (int isa = CPU_SKINNY_AVX2; isa <= top; isa++) {
        test_shapes(isa);
        test_blocks_alone(isa);
    }
    if (top < CPU_SKINNY_AVX2) printf("skip avx2, avx512: not on this CPU (sgemm runs these)\n");
    else if (top < CPU_SKINNY_AVX512) printf("skip avx512: not on this CPU\n");
    return check_exit_code("test_cpu_tile");
}
