/* test_cpu_registry.c: the registry offers cpu, backend_select picks it by name, by LOOM_BACKEND
 * and by auto-detection, rejects an unknown name with a message naming it; the created backend
 * describes itself and measures a peak FLOP/s (or takes LOOM_CPU_PEAK_GFLOPS). */
#include <unistd.h>

#include "cpu_test.h"

#include "backends/cpu/cpu_bf16.h"

static void expect(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    log_set_quiet(1);
    unsetenv("LOOM_BACKEND");
    unsetenv("LOOM_CPU_PEAK_GFLOPS");
    int n = 0, has_cpu = 0;
    const backend_entry *e = backend_registry(&n);
    for (int i = 0; i < n; i++) has_cpu |= strcmp(e[i].name, "cpu") == 0;
    expect(has_cpu, "registry lists cpu");

    backend_config cfg = {0, 0, BACKEND_FP32, 1};
    char why[256] = "";
    backend *be = backend_select("cpu", &cfg, why, sizeof why);
    expect(be && strcmp(backend_name(be), "cpu") == 0 && strstr(why, "--backend"),
           "select --backend cpu");
    if (be) {
        printf("     %s, peak %.1f GFLOP/s, why: %s\n", backend_description(be),
               backend_peak_flops(be) / 1e9, why);
        expect(strncmp(backend_description(be), "cpu (", 5) == 0 &&
                   strstr(backend_description(be), "thread"),
               "description names the BLAS kernel and threads");
        expect(backend_peak_flops(be) > 1e9, "calibrated peak above 1 GFLOP/s");
        expect(backend_cfg(be)->threads == (int)sysconf(_SC_NPROCESSORS_ONLN),
               "threads 0 = online CPUs");
    }
    backend_destroy(be);

    /* asked for bf16 and TF32, the CPU backend's cfg says what runs: never TF32; bf16 only where
     * cpu_bf16.c can run it */
    backend_config low = cfg;
    low.precision = BACKEND_BF16;
    low.allow_tf32 = 1;
    be = backend_select("cpu", &low, why, sizeof why);
    int bf16 = cpu_bf16_ready(NULL, 0);
    expect(be && backend_cfg(be)->precision == (bf16 ? BACKEND_BF16 : BACKEND_FP32) &&
               !backend_cfg(be)->allow_tf32,
           bf16 ? "precision bf16 asked: the cpu backend's cfg says bf16, no TF32"
                : "precision bf16 asked: the cpu backend's cfg says fp32 (bf16 cannot run here)");
    backend_destroy(be);

    be = backend_select("no-such-backend", &cfg, why, sizeof why);
    expect(!be && strstr(loom_error(), "no-such-backend") && strstr(loom_error(), "cpu"),
           "unknown name rejected, message names it and the choices");
    printf("     message: %s\n", loom_error());

    setenv("LOOM_BACKEND", "cpu", 1);
    setenv("LOOM_CPU_PEAK_GFLOPS", "123.5", 1);
    cfg.threads = 1;
    be = backend_select(NULL, &cfg, why, sizeof why);
    expect(be && strstr(why, "LOOM_BACKEND") && fabs(backend_peak_flops(be) - 123.5e9) < 1.0 &&
               strstr(backend_description(be), "1 thread)"),
           "LOOM_BACKEND=cpu, LOOM_CPU_PEAK_GFLOPS override, 1 thread");
    backend_destroy(be);

    unsetenv("LOOM_BACKEND");
    be = backend_select("", &cfg, why, sizeof why);
    expect(be != NULL, "auto-detection finds a backend");
    if (be) printf("     auto picked %s (%s)\n", backend_name(be), why);
    backend_destroy(be);
    return test_finish("test_cpu_registry");
}
