/* test_cpu_blas_kernel.c: cpu_blas_ensure_fast_kernel really switches OpenBLAS to the fast kernel.
 * Runs itself as a probe (which calls it first thing and prints the kernel) with a slow kernel
 * forced: with LOOM_NO_REEXEC the slow one stays, without it the re-exec must bring the fast one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_blas.h"

static int g_fail;

/* Run "/proc/self/exe --probe" under the given environment prefix; its kernel name in `core`. */
static int probe(const char *env, char *core, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE -u LOOM_NO_REEXEC -u LOOM_CPU_REEXECED %s "
             "/proc/%d/exe --probe",
             env, (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(core, (int)len, p)) {
        if (p) pclose(p);
        return -1;
    }
    core[strcspn(core, "\n")] = 0;
    return pclose(p) == 0 ? 0 : -1;
}

static void expect(int ok, const char *what, const char *core)
{
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, core);
    g_fail += !ok;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--probe") == 0) {
        cpu_blas_ensure_fast_kernel(argv);
        printf("%s\n", cpu_blas_corename());
        return 0;
    }
    /* the ranking itself: generic < AVX2 < AVX-512 kernels, case-insensitive */
    int rank_ok = !cpu_blas_kernel_ok("Prescott", "SkylakeX") &&
                  !cpu_blas_kernel_ok("Haswell", "SkylakeX") &&
                  cpu_blas_kernel_ok("COOPERLAKE", "SkylakeX") &&
                  cpu_blas_kernel_ok("Zen", "Haswell") && !cpu_blas_kernel_ok("Core2", "Haswell") &&
                  cpu_blas_kernel_ok("Prescott", NULL);
    expect(rank_ok, "kernel ranking", "Prescott < Haswell = Zen < SkylakeX = Cooperlake");
    const char *want = cpu_blas_wanted_kernel();
    if (!want) {
        printf("SKIP: this CPU has neither AVX2 nor AVX-512, the generic kernel is right\n");
        return 77;
    }
    char plain[64] = "", slow[64] = "", fixed[64] = "";
    int rc = probe("", plain, sizeof plain);
    expect(rc == 0 && cpu_blas_kernel_ok(plain, want), "default start runs a fast kernel", plain);
    rc = probe("OPENBLAS_CORETYPE=Prescott LOOM_NO_REEXEC=1", slow, sizeof slow);
    if (rc == 0 && strcmp(slow, plain) == 0 && !g_fail) {
        printf("SKIP: this OpenBLAS ignores OPENBLAS_CORETYPE (not a DYNAMIC_ARCH build)\n");
        return 77;
    }
    expect(rc == 0 && !cpu_blas_kernel_ok(slow, want),
           "forced Prescott + LOOM_NO_REEXEC stays slow", slow);
    rc = probe("OPENBLAS_CORETYPE=Prescott LOOM_CPU_REEXEC_TEST=1", fixed, sizeof fixed);
    expect(rc == 0 && cpu_blas_kernel_ok(fixed, want) && strcmp(fixed, slow) != 0,
           "slow kernel re-executed into the fast one", fixed);
    rc = probe("OPENBLAS_CORETYPE=Prescott", fixed, sizeof fixed);
    expect(rc == 0 && strcmp(fixed, slow) == 0, "a user's OPENBLAS_CORETYPE is honoured", fixed);
    printf("test_cpu_blas_kernel: %s (wanted %s)\n", g_fail ? "FAILED" : "passed", want);
    return g_fail ? 1 : 0;
}
