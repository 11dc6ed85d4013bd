/* test_cpu_skinny.c: the few-rows product (cpu_skinny.c), each kernel this CPU runs (AVX-512,
 * AVX2+FMA), against a double reference within the sum bound: ragged tiles (M, N, K off the tile
 * and vector sizes), strided operands, beta 0 (C's NaN ignored) and 1, one and two threads. Its
 * promise of bits that do not depend on M or the threads: row r of a 33-row product equals the
 * same row computed alone and on another thread count, bit for bit. The backend's NT matmul at a
 * decode step's rows gives the kernel's bits (it is routed there); M past CPU_SKINNY_ROWS is
 * refused untouched. On a CPU with neither kernel, only the refusal is checked, and said. */
#include "cpu_test.h"

#include "backends/cpu/cpu_skinny.h"

static const char *isa_name(int isa) { return isa == CPU_SKINNY_AVX512 ? "avx512" : "avx2"; }

/* C = alpha A W^T + beta C in double, strides as stored. */
static void ref_nt(double *C, int ldc, const float *A, int lda, const float *W, int ldw, int M,
                   int N, int K, double alpha, double beta)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)A[(size_t)i * lda + k] * W[(size_t)j * ldw + k];
            double *c = C + (size_t)i * ldc + j;
            *c = alpha * s + (beta != 0.0 ? beta * *c : 0.0);
        }
}

/* One case: A M x K in rows of lda = K + pad, W N x K in rows of ldw = K + 2 pad, C in rows of
 * ldc = N + pad; the pads hold values the kernel must neither read into the sums nor write. */
static void check_case(int isa, int threads, int M, int N, int K, int pad, int beta)
{
    int lda = K + pad, ldw = K + 2 * pad, ldc = N + pad;
    float *A = frand((size_t)M * lda, 1), *W = frand((size_t)N * ldw, 1);
    float *C = frand((size_t)M * ldc, 1);
    double *want = todbl(C, (size_t)M * ldc);
    if (!beta) /* beta = 0 must ignore whatever C held, NaN included */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = NAN;
    ref_nt(want, ldc, A, lda, W, ldw, M, N, K, 0.7, beta);
    int done = cpu_skinny_nt_isa(isa, threads, M, N, K, 0.7f, A, lda, W, ldw, (float)beta, C, ldc);
    char name[96];
    snprintf(name, sizeof name, "%s %dx%dx%d pad %d beta %d, %d threads", isa_name(isa), M, N, K,
             pad, beta, threads);
    CHECK(done == 1, "%s: the kernel refused the shape", name);
    /* K products of U(-1,1) entries (E|ab| = 1/4, taken x2) times 0.7, plus beta*C (|C| < 1):
     * K + beta terms; alpha, beta and the final add round once each */
    check_allclose_v(name, C, want, (size_t)M * ldc,
                     check_tol_sum(K + beta, 0.35 * K + 1, 3, CHECK_U_FP32), 0);
    /* and the pad columns untouched: want holds their original values */
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            CHECK(C[(size_t)i * ldc + j] == (float)want[(size_t)i * ldc + j],
                  "%s: wrote the pad at row %d col %d", name, i, j);
    free(A), free(W), free(C), free(want);
}

static void test_shapes(int isa)
{
    static const int Ms[] = {1, 2, 3, 4, 5, 7, 13, 33, CPU_SKINNY_ROWS};
    static const int Ns[] = {1, 3, 5, 17, 130};
    static const int Ks[] = {1, 7, 8, 15, 16, 17, 100, 577};
    int cases = 0;
    for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
        for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) {
                int threads = 1 + (int)((m + n + k) % 2), pad = (int)(k % 3) * 5;
                check_case(isa, threads, Ms[m], Ns[n], Ks[k], pad, (int)((m + k) % 2));
                cases++;
            }
    /* large enough (M*N*K) that two threads split the columns */
    for (int beta = 0; beta < 2; beta++) check_case(isa, 2, 32, 1030, 576, 3, beta), cases++;
    printf("done %s: %d shapes against the sum bound\n", isa_name(isa), cases);
}

/* Row r's bits do not depend on the rows around it, the thread count or the split. */
static void test_rows_alone(int isa)
{
    const int M = 33, N = 1030, K = 577;
    float *A = frand((size_t)M * K, 1), *W = frand((size_t)N * K, 1);
    float *C = malloc((size_t)M * N * sizeof(float)), *one = malloc((size_t)N * sizeof(float));
    cpu_skinny_nt_isa(isa, 2, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N);
    static const int rows[] = {0, 3, 31, 32};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
        for (int threads = 1; threads <= 2; threads++) {
            int i = rows[r];
            const float *row = A + (size_t)i * K;
            cpu_skinny_nt_isa(isa, threads, 1, N, K, 1.0f, row, K, W, K, 0.0f, one, N);
            CHECK(memcmp(one, C + (size_t)i * N, (size_t)N * sizeof(float)) == 0,
                  "%s: row %d alone on %d threads differs from row %d of %d", isa_name(isa), i,
                  threads, i, M);
        }
    free(A), free(W), free(C), free(one);
    printf("done %s: rows alone equal rows in a batch, bit for bit\n", isa_name(isa));
}

/* The backend's matmul sends a decode step's NT product to the kernel: its bits. */
static void test_backend_routes(void)
{
    const int M = 32, N = 300, K = 200;
    backend *be = test_backend(2);
    if (!be) return;
    float *A = frand((size_t)M * K, 1), *W = frand((size_t)N * K, 1);
    float *C = malloc((size_t)M * N * sizeof(float)), *D = malloc((size_t)M * N * sizeof(float));
    backend_matmul(be, C, A, W, M, N, K, 0, 1, 1.0f, 0.0f);
    cpu_skinny_nt(2, M, N, K, 1.0f, A, K, W, K, 0.0f, D, N);
    CHECK(memcmp(C, D, (size_t)M * N * sizeof(float)) == 0,
          "backend matmul %dx%dx%d NT did not run the few-rows kernel", M, N, K);
    free(A), free(W), free(C), free(D);
    backend_destroy(be);
}

int main(void)
{
    float a[CPU_SKINNY_ROWS + 1] = {1}, w[1] = {1}, c[CPU_SKINNY_ROWS + 1] = {5};
    CHECK(cpu_skinny_nt(1, CPU_SKINNY_ROWS + 1, 1, 1, 1.0f, a, 1, w, 1, 0.0f, c, 1) == 0 &&
              c[0] == 5.0f,
          "M = %d is past CPU_SKINNY_ROWS and must be refused untouched", CPU_SKINNY_ROWS + 1);
    int top = cpu_skinny_isa();
    if (top == CPU_SKINNY_NONE) {
        printf("skip: this CPU has neither AVX-512 nor AVX2+FMA; its sgemm runs these products\n");
        return 77; /* nothing checked: ctest reports it skipped */
    }
    for (int isa = CPU_SKINNY_AVX2; isa <= top; isa++) {
        test_shapes(isa);
        test_rows_alone(isa);
    }
    if (top < CPU_SKINNY_AVX512) printf("skip avx512: not on this CPU\n");
    test_backend_routes();
    return check_exit_code("test_cpu_skinny");
}
