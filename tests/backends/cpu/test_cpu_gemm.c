/* test_cpu_gemm.c: every sgemm library the CPU backend can pick (OpenBLAS; oneDNN and BLIS when
 * installed) against a double reference in all transposition cases, within the sgemm bound, and
 * LOOM_GEMM honoured (a probe child reports its choice). An absent library is reported, not failed. */
#include "cpu_test.h"

#include <unistd.h>

#include "backends/cpu/cpu_gemm.h"

/* C = 0.7 op(A) op(B) + beta C through `lib` directly (be == NULL) or the backend's matmul
 * (lib < 0: not forced, each shape raced on its first call), one transposition/beta case. */
static void check_case(int lib, backend *be, int M, int N, int K, int tA, int tB, int beta)
{
    float *A = frand((size_t)M * K, 1), *B = frand((size_t)K * N, 1), *C0 = frand((size_t)M * N, 1);
    double *want = malloc((size_t)M * N * sizeof(double));
    float *C = fcopy(C0, (size_t)M * N);
    if (!beta) /* beta = 0 must ignore whatever C held, NaN included */
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = NAN;
    for (size_t i = 0; i < (size_t)M * N; i++) want[i] = C0[i];
    ref_matmul(want, A, B, M, N, K, tA, tB, 0.7, beta, 0);
    if (be)
        backend_matmul(be, C, A, B, M, N, K, tA, tB, 0.7f, (float)beta);
    else
        cpu_gemm_lib(lib, tA, tB, M, N, K, 0.7f, A, tA ? M : K, B, tB ? K : N, (float)beta, C, N);
    char name[96];
    snprintf(name, sizeof name, "%s%s %dx%dx%d tA=%d tB=%d beta=%d",
             lib < 0 ? "raced" : cpu_gemm_lib_name(lib), be ? " (backend)" : "", M, N, K, tA, tB,
             beta);
    /* K products of U(-1,1) entries (E|ab| = 1/4, taken x2) times 0.7, plus beta*C (|C| < 1);
     * alpha, beta and the final add round once each */
    check_allclose_v(name, C, want, (size_t)M * N, check_tol_sum(K, 0.35 * K + 1, 3, CHECK_U_FP32),
                     0);
    free(A), free(B), free(C0), free(C), free(want);
}

/* All 8 cases (both transpositions, beta 0 and 1). */
static void check_lib(int lib, backend *be, int M, int N, int K)
{
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (int beta = 0; beta < 2; beta++) check_case(lib, be, M, N, K, tA, tB, beta);
}

/* The library a child process with LOOM_GEMM=`value` picks for a large matmul. */
static int probe(const char *value, char *out, size_t len)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "LOOM_GEMM=%s /proc/%d/exe --probe 2>/dev/null", value,
             (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(out, (int)len, p)) {
        if (p) pclose(p);
        return -1;
    }
    out[strcspn(out, "\n")] = 0;
    return pclose(p) == 0 ? 0 : -1;
}

static void test_forced(void)
{
    for (int lib = 0; lib < CPU_GEMM_COUNT; lib++) {
        char got[64] = "";
        const char *name = cpu_gemm_lib_name(lib);
        int rc = probe(name, got, sizeof got);
        const char *want = cpu_gemm_available(lib) ? name : "openblas"; /* absent: the fallback */
        CHECK(rc == 0 && strcmp(got, want) == 0, "LOOM_GEMM=%s gives %s (got '%s')", name, want,
              got);
        printf("LOOM_GEMM=%s: the child's large matmuls run on %s\n", name, got);
    }
    char got[64] = "";
    int rc = probe("auto", got, sizeof got);
    CHECK(rc == 0 && cpu_gemm_lib_from_name(got) >= 0 &&
              cpu_gemm_available(cpu_gemm_lib_from_name(got)),
          "LOOM_GEMM=auto races to an installed library (got '%s')", got);
}

/* Not forced: each of the 8 cases is a new shape key (transpositions, beta), raced on its first
 * call on the call's own operands. The result must still be one product: beta = 0 ignores the NaN
 * in C, and beta = 1 adds C once, not once per racing library. With two libraries installed each
 * shape must have a recorded winner (the race ran); with one, there is nothing to race. */
static int test_raced(backend *be)
{
    const char *env = getenv("LOOM_GEMM");
    if (env && env[0] && strcmp(env, "auto") != 0) {
        printf("skip the per-shape race: LOOM_GEMM=%s forces a library\n", env);
        return 0;
    }
    int M = 520, N = 384, K = 344, libs = 0;
    for (int lib = 0; lib < CPU_GEMM_COUNT; lib++) libs += cpu_gemm_available(lib);
    check_lib(-1, be, M, N, K);
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (int acc = 0; acc < 2; acc++) {
                int won = cpu_gemm_shape_lib(2, tA, tB, M, N, K, acc);
                CHECK(libs < 2 || (won >= 0 && cpu_gemm_available(won)),
                      "%d libraries: shape tA=%d tB=%d beta=%d raced (winner %d)", libs, tA, tB,
                      acc, won);
                if (won >= 0 && tA == 0 && tB == 0)
                    printf("raced %dx%dx%d NN beta=%d: %s\n", M, N, K, acc,
                           cpu_gemm_lib_name(won));
            }
    /* M*N*K over 2^30 and M over 1024: the race times only C's first 1024 rows (op(A)'s first
     * rows or, when transposed, columns, at the call's leading dimensions); the call still
     * computes all 1030. The two cases that read A transposed and add into C. */
    if (libs >= 2) {
        check_case(-1, be, 1030, 1040, 1040, 1, 0, 1);
        check_case(-1, be, 1030, 1040, 1040, 1, 1, 0);
    }
    return 1;
}

/* A family is a product without its token count (M, or K when A is transposed), which changes
 * from batch to batch in a fine-tune, but with its log2 class: a new M in the same class is not
 * raced again; one in another class is. Run after test_raced (whose 520x384x344 families exist). */
static void test_families(backend *be)
{
    int n0 = cpu_gemm_shapes_raced();
    check_case(-1, be, 700, 384, 344, 0, 0, 0); /* M 520 -> 700: class 9 both */
    CHECK(cpu_gemm_shapes_raced() == n0, "M 520 -> 700 raced a new family (%d -> %d)", n0,
          cpu_gemm_shapes_raced());
    check_case(-1, be, 1100, 384, 344, 0, 0, 0); /* class 10 */
    CHECK(cpu_gemm_shapes_raced() == n0 + 1, "M 1100 (class 10) was not raced as a new family");
    check_case(-1, be, 1500, 384, 344, 0, 0, 0);
    CHECK(cpu_gemm_shapes_raced() == n0 + 1, "M 1100 -> 1500 raced a new family");
    check_case(-1, be, 520, 384, 300, 1, 0, 1); /* transposed A: K is the token count */
    CHECK(cpu_gemm_shapes_raced() == n0 + 1, "tA=1 K 344 -> 300 raced a new family");
    CHECK(cpu_gemm_shape_lib(2, 0, 0, 999, 384, 344, 0) ==
              cpu_gemm_shape_lib(2, 0, 0, 520, 384, 344, 0),
          "M 999 and 520 map to different families");
    CHECK(cpu_gemm_shape_lib(2, 0, 0, 520, 385, 344, 0) < 0, "N 385 found a family never raced");
}

/* The choices as checkpoint text: saved, they freeze (an unseen family runs on the chosen library
 * and is not raced); loaded, they replace the table; a text that is unreadable or names a library
 * that is not installed is refused and leaves the table as it was. */
static void test_choices_text(backend *be)
{
    char buf[16384], why[200];
    int n = cpu_gemm_shapes_raced();
    CHECK(cpu_gemm_choices_save(2, buf, sizeof buf) == 0, "choices_save failed");
    CHECK(strncmp(buf, "chosen=", 7) == 0 && strstr(buf, " shapes="), "choices text: %.80s", buf);
    CHECK(cpu_gemm_choices_save(2, buf, 20) == -1, "choices_save into 20 bytes did not say -1");
    CHECK(cpu_gemm_choices_save(2, buf, sizeof buf) == 0, "choices_save failed the second time");
    check_case(-1, be, 520, 200, 344, 0, 0, 0); /* a family not seen before the save */
    CHECK(cpu_gemm_shapes_raced() == n && cpu_gemm_shape_lib(2, 0, 0, 520, 200, 344, 0) < 0,
          "a new family was raced after the choices were saved");
    CHECK(cpu_gemm_choices_load(buf, 2, why, sizeof why) == 0, "own text refused: %s", why);
    CHECK(cpu_gemm_shapes_raced() == n, "reloaded %d families, saved %d",
          cpu_gemm_shapes_raced(), n);
    const char *bad[] = {"", "chosen=openblas", "chosen=tpu rival=none forced=0 shapes=",
                         "chosen=openblas rival=none forced=0 shapes=384,344,9,0,0,0,2=tpu",
                         "chosen=openblas rival=none forced=0 shapes=384,344,9,0,0,0=openblas",
                         "chosen=openblas rival=none forced=0 shapes=384,344,99,0,0,0,2=openblas"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        CHECK(cpu_gemm_choices_load(bad[i], 2, why, sizeof why) == -1 && why[0],
              "malformed text '%s' accepted", bad[i]);
    }
    for (int lib = 0; lib < CPU_GEMM_COUNT; lib++) {
        if (cpu_gemm_available(lib)) continue;
        char text[160];
        snprintf(text, sizeof text,
                 "chosen=openblas rival=none forced=0 shapes=384,344,9,0,0,0,2=%s",
                 cpu_gemm_lib_name(lib));
        CHECK(cpu_gemm_choices_load(text, 2, why, sizeof why) == -1 && strstr(why, "not installed"),
              "a text using %s, not installed, was accepted (%s)", cpu_gemm_lib_name(lib), why);
    }
    CHECK(cpu_gemm_shapes_raced() == n, "a refused text changed the table");
    /* a loaded choice is the one used: the 520x384x344 NN family given the other library */
    int was = cpu_gemm_shape_lib(2, 0, 0, 520, 384, 344, 0), other = -1;
    for (int lib = 0; lib < CPU_GEMM_COUNT && other < 0; lib++)
        if (lib != was && cpu_gemm_available(lib)) other = lib;
    char text[200];
    snprintf(text, sizeof text, "chosen=openblas rival=%s forced=0 shapes=384,344,9,0,0,0,2=%s",
             cpu_gemm_lib_name(other), cpu_gemm_lib_name(other));
    CHECK(cpu_gemm_choices_load(text, 2, why, sizeof why) == 0, "'%s' refused: %s", text, why);
    CHECK(cpu_gemm_shapes_raced() == 1 && cpu_gemm_shape_lib(2, 0, 0, 600, 384, 344, 0) == other,
          "loaded choice not adopted: %d families, 600x384x344 on %d, want %d",
          cpu_gemm_shapes_raced(), cpu_gemm_shape_lib(2, 0, 0, 600, 384, 344, 0), other);
    check_case(-1, be, 600, 384, 344, 0, 0, 0); /* runs on it, and right */
}

int main(int argc, char **argv)
{
    cpu_blas_ensure_fast_kernel(argv);
    int probe_run = argc > 1 && strcmp(argv[1], "--probe") == 0;
    log_set_quiet(!probe_run); /* a probe logs its choice (to stderr) */
    backend_config cfg = {2, 0, BACKEND_FP32, 0};
    backend *be = cpu_backend_entry.create(&cfg);
    CHECK(be != NULL, "cpu backend: %s", be ? "" : loom_error());
    if (!be) return 1;
    if (probe_run) {
        printf("%s\n", cpu_gemm_lib_name(cpu_gemm_choose(2)));
        fflush(stdout); /* before a leak report at exit could end the process unflushed */
        backend_destroy(be);
        return 0;
    }
    int libs = 0;
    for (int lib = 0; lib < CPU_GEMM_COUNT; lib++) libs += cpu_gemm_available(lib);
    if (test_raced(be) && libs >= 2) {
        test_families(be);
        test_choices_text(be);
    } else {
        printf("skip the family and checkpoint-text checks: %s\n",
               libs < 2 ? "one sgemm library installed" : "LOOM_GEMM forces a library");
    }
    for (int lib = 0; lib < CPU_GEMM_COUNT; lib++) {
        if (!cpu_gemm_available(lib)) {
            printf("skip %s: not installed (or a sanitizer build, which loads neither)\n", cpu_gemm_lib_name(lib));
            continue;
        }
        check_lib(lib, NULL, 37, 53, 29);
        check_lib(lib, NULL, 130, 70, 90);
        check_lib(lib, NULL, 1, 300, 77);
        /* through the backend with the choice forced: large enough (M*N*K >= CPU_GEMM_BIG) that
         * the backend hands it to the forced library */
        CHECK(cpu_gemm_force(lib) == 0, "force %s", cpu_gemm_lib_name(lib));
        check_lib(lib, be, 520, 384, 344);
        printf("done %s: 4 shapes x 8 cases against the sgemm bound\n", cpu_gemm_lib_name(lib));
    }
    test_forced();
    backend_destroy(be);
    return check_exit_code("test_cpu_gemm");
}
