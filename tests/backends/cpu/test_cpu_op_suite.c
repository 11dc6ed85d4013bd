/* test_cpu_op_suite.c: runs the cross-backend op suite with the CPU backend on both sides, so
 * the suite itself is exercised on every machine; two identical CPU backends must agree exactly. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/backend_impl.h" /* swaps an op of the table: a look inside the backend */
#include "backends/cpu/cpu_blas.h"
#include "base/error.h"
#include "base/log.h"
#include "tests/backends/op_suite.h"
#include "tests/check.h"

extern const backend_entry cpu_backend_entry;

static const backend_ops *g_real;

/* A deliberately wrong GELU (off by 1e-4 relative) the suite must catch. */
static void bad_gelu(backend *be, float *out, const float *inp, size_t n)
{
    g_real->gelu_forward(be, out, inp, n);
    g_real->scale(be, out, 1.0001f, n);
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    log_set_quiet(1);
    setenv("LOOM_CPU_PEAK_GFLOPS", "100", 0);
    backend_config cfg = {2, 0, BACKEND_FP32, 0};
    backend *a = cpu_backend_entry.create(&cfg), *b = cpu_backend_entry.create(&cfg);
    if (!a || !b) {
        printf("FAIL: cpu backend create: %s\n", loom_error());
        return 1;
    }
    /* u_dot 0: two identical CPU backends must agree bit for bit */
    int failed = op_suite_run(a, b, 0.0, 1);
    /* and the suite must be able to fail: a wrong op on the tested side is reported */
    backend_ops broken = *a->ops;
    g_real = a->ops;
    broken.gelu_forward = bad_gelu;
    a->ops = &broken;
    int caught = op_suite_run(a, b, CHECK_U_FP32, 0);
    a->ops = g_real;
    printf("%s op_suite reports a wrong gelu_forward (%d failing)\n", caught == 1 ? "ok  " : "FAIL",
           caught);
    failed += caught != 1;
    backend_destroy(a);
    backend_destroy(b);
    return failed ? 1 : 0;
}
