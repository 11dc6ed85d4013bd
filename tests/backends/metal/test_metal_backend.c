/* test_metal_backend.c (Apple only): the real Metal backend against the CPU backend on the whole
 * op suite, plus events and queued-work ordering through the vtable. Exits 77 (SKIP) on a Mac
 * without a usable Metal device. Never run on Linux (the shim test covers the kernels there). */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "tests/backends/op_suite.h"
#include "tests/check.h"

extern const backend_entry cpu_backend_entry;
extern const backend_entry metal_backend_entry;

/* Queue fill -> scale -> record an event; after event_sync the host must see the result. */
static int check_events(backend *be)
{
    const size_t n = 1 << 20;
    float *x = backend_alloc(be, n * sizeof(float)), host[4];
    backend_event *ev = backend_event_create(be);
    if (!x || !ev) return 1;
    backend_fill(be, x, 3.0f, n);
    backend_scale(be, x, 0.5f, n);
    backend_event_record(be, ev);
    backend_event_sync(be, ev);
    backend_copy_d2h(be, host, x + n - 4, sizeof host);
    int bad = host[3] != 1.5f;
    if (bad) printf("FAIL events: x[n-1] = %g after fill 3, scale 0.5 (want 1.5)\n", host[3]);
    double ss = backend_sumsq(be, x, n);
    if (ss != 2.25 * (double)n) {
        printf("FAIL sumsq = %.17g, want %.17g\n", ss, 2.25 * (double)n);
        bad = 1;
    }
    backend_event_destroy(be, ev);
    backend_free(be, x);
    return bad;
}

int main(void)
{
    log_set_quiet(1);
    const char *why = "";
    if (!metal_backend_entry.available(&why)) {
        printf("SKIP: no Metal device: %s\n", why);
        return 77;
    }
    backend_config cfg = {0};
    backend *mtl = metal_backend_entry.create(&cfg);
    backend *cpu = cpu_backend_entry.create(&cfg);
    if (!mtl || !cpu) {
        printf("FAIL: cannot create backends: %s\n", loom_error());
        return 1;
    }
    printf("%s\n", backend_description(mtl));
    int bad = check_events(mtl);
    bad += op_suite_run(mtl, cpu, CHECK_U_FP32, 1);
    backend_destroy(mtl);
    backend_destroy(cpu);
    printf("metal_backend: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
