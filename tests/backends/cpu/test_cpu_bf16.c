/* test_cpu_bf16.c: `precision: bf16` on the CPU backend. Where it can run (AVX512_BF16 and
 * oneDNN 2.x), the backend's matmul in all 8 cases (both transpositions, beta 0 and 1) must match a
 * double reference of the bf16-rounded operands within the fp32 sum bound: each product of two
 * bf16 numbers is exact in fp32, so only the fp32 sums round. A product computed from the fp32
 * operands misses that bound by far, so the check fails if the rounding was skipped. Decode-sized
 * NT products (M <= CPU_SKINNY_ROWS) and products with a dimension under CPU_BF16_MIN_DIM stay fp32
 * and are checked against the unrounded reference.
 * Where bf16 cannot run, the backend must say fp32 (backend_cfg), and the reason is printed. */
#include "cpu_test.h"

#include "backends/cpu/cpu_bf16.h"
#include "backends/cpu/cpu_skinny.h"

/* C = 0.7 op(A) op(B) + beta C through the backend; round: the reference rounds to bf16. */
static void check_case(backend *be, int M, int N, int K, int tA, int tB, int beta, int round)
{
    float *A = frand((size_t)M * K, 1), *B = frand((size_t)K * N, 1), *C0 = frand((size_t)M * N, 1);
    double *want = todbl(C0, (size_t)M * N);
    float *C = fcopy(C0, (size_t)M * N);
    if (!beta)
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = NAN;
    ref_matmul(want, A, B, M, N, K, tA, tB, 0.7, beta, round);
    backend_matmul(be, C, A, B, M, N, K, tA, tB, 0.7f, (float)beta);
    char name[96];
    snprintf(name, sizeof name, "%s %dx%dx%d tA=%d tB=%d beta=%d", round ? "bf16" : "fp32", M, N,
             K, tA, tB, beta);
    /* K products of U(-1,1) entries (E|ab| = 1/4, taken x2) times 0.7, plus beta*C (|C| < 1):
     * K + beta terms, each exact (bf16 x bf16 fits fp32); alpha, beta, the add round once each */
    check_allclose_v(name, C, want, (size_t)M * N,
                     check_tol_sum(K + beta, 0.35 * K + 1, 3, CHECK_U_FP32), 0);
    free(A), free(B), free(C0), free(C), free(want);
}

/* A weight registered with weights_bf16: its products read the kept copy at every M (decode
 * steps too), each within the bf16 bound of the rounded reference; a row's bits do not depend on
 * M (so batched decoding is one-at-a-time decoding); the copy gives the bits of rounding per call
 * (M >= 64, where both run bf16); a dropped copy sends few-row products back to fp32. */
static void check_kept(backend *be)
{
    enum { N = 300, K = 77, MM = 64 };
    float *W = frand((size_t)N * K, 1), *X = frand((size_t)130 * K, 1);
    float *C = frand((size_t)130 * N, 1), *C2 = frand((size_t)130 * N, 1);
    double *want = malloc((size_t)130 * N * sizeof(double));
    backend_weights_bf16(be, W, (size_t)N * K);
    backend_matmul(be, C, X, W, MM, N, K, 0, 1, 0.7f, 0.0f);
    ref_matmul(want, X, W, MM, N, K, 0, 1, 0.7, 0.0, 1);
    check_allclose_v("kept copy: 64-row NT product in bf16", C, want, (size_t)MM * N,
                     check_tol_sum(K, 0.35 * K, 3, CHECK_U_FP32), 1);
    static const int Ms[] = {1, 2, 3, 7, 16, 17, 32, 33, 63};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++) {
        backend_matmul(be, C2, X, W, Ms[i], N, K, 0, 1, 0.7f, 0.0f);
        char name[64];
        snprintf(name, sizeof name, "kept copy: rows of a %d-row product", Ms[i]);
        check_equal_f32(name, C2, C, (size_t)Ms[i] * N);
    }
    float *G = frand((size_t)130 * K, 1); /* NN against the kept copy (a backward's dX = dY W) */
    backend_matmul(be, C, X, W, 130, N, K, 0, 1, 0.7f, 0.0f);
    backend_matmul(be, G, C, W, 130, K, N, 0, 0, 1.0f, 0.0f);
    backend_weights_bf16(be, W, 0);
    backend_matmul(be, C2, X, W, 130, N, K, 0, 1, 0.7f, 0.0f);
    check_equal_f32("kept copy == rounding per call (130 rows)", C, C2, (size_t)130 * N);
    float *G2 = frand((size_t)130 * K, 1);
    backend_matmul(be, G2, C2, W, 130, K, N, 0, 0, 1.0f, 0.0f);
    check_equal_f32("kept copy == rounding per call (NN)", G, G2, (size_t)130 * K);
    if (cpu_skinny_isa() != CPU_SKINNY_NONE) check_case(be, 32, N, K, 0, 1, 0, 0); /* dropped */
    free(W), free(X), free(C), free(C2), free(want), free(G), free(G2);
    printf("done kept: bf16 at every M against a kept copy, the same bits as rounding per call\n");
}

int main(void)
{
    backend_config cfg = {2, 0, BACKEND_BF16, 0};
    log_set_quiet(1);
    setenv("LOOM_CPU_PEAK_GFLOPS", "100", 0);
    backend *be = cpu_backend_entry.create(&cfg);
    CHECK(be != NULL, "cpu backend: %s", be ? "" : loom_error());
    if (!be) return check_exit_code("test_cpu_bf16");
    char why[160] = "";
    int ready = cpu_bf16_ready(why, sizeof why);
    CHECK(backend_cfg(be)->precision == (ready ? BACKEND_BF16 : BACKEND_FP32),
          "be->cfg.precision must say what runs (%s)", ready ? "bf16" : "fp32");
    if (!ready) {
        printf("skip: bf16 cannot run here (%s); the backend says fp32\n", why);
        backend_destroy(be);
        int rc = check_exit_code("test_cpu_bf16");
        return rc ? rc : 77; /* the fallback checked, bf16 itself not: ctest reports it skipped */
    }
    static const int shapes[][3] = {{70, 65, 66}, {130, 70, 90}, {65, 300, 77}, {520, 384, 344}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int tA = 0; tA < 2; tA++)
            for (int tB = 0; tB < 2; tB++)
                for (int beta = 0; beta < 2; beta++)
                    check_case(be, shapes[s][0], shapes[s][1], shapes[s][2], tA, tB, beta, 1);
    printf("done bf16: %zu shapes x 8 cases against the bf16-rounded reference\n",
           sizeof shapes / sizeof *shapes);
    /* more new shapes than the primitive table keeps (a fine-tune's changing token counts):
     * a new shape, and the first one met (given up for room), still multiply in bf16 */
    int kept = cpu_bf16_shapes_kept();
    float *A = frand(700 * 64, 1), *B = frand(64 * 64, 1), *C = frand(700 * 64, 1);
    for (int M = 64; M < 700; M++) backend_matmul(be, C, A, B, M, 64, 64, 0, 0, 1.0f, 0.0f);
    free(A), free(B), free(C);
    CHECK(cpu_bf16_shapes_kept() > kept && cpu_bf16_shapes_kept() < kept + 636,
          "636 new shapes: %d primitives kept, %d before (none given up?)",
          cpu_bf16_shapes_kept(), kept);
    check_case(be, 701, 64, 64, 0, 0, 0, 1);
    check_case(be, shapes[0][0], shapes[0][1], shapes[0][2], 0, 0, 0, 1);
    printf("done bf16: past %d kept primitives, new and given-up shapes still run in bf16\n",
           cpu_bf16_shapes_kept());
    /* a rank-16 factor's products (a dimension under CPU_BF16_MIN_DIM) stay fp32 */
    for (int beta = 0; beta < 2; beta++) {
        check_case(be, 130, CPU_BF16_MIN_DIM - 1, 90, 0, 0, beta, 0);
        check_case(be, 130, 90, 16, 1, 0, beta, 0);
    }
    printf("done fp32: products with a dimension under %d stay fp32\n", CPU_BF16_MIN_DIM);
    /* a decode step's NT product stays on the fp32 few-rows kernel, where the CPU has it */
    if (cpu_skinny_isa() != CPU_SKINNY_NONE) {
        for (int beta = 0; beta < 2; beta++) check_case(be, 32, 300, 77, 0, 1, beta, 0);
        printf("done fp32: a %d-row NT product stays fp32\n", 32);
    }
    check_kept(be);
    backend_destroy(be);
    return check_exit_code("test_cpu_bf16");
}
