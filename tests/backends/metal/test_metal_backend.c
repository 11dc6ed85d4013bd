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
    float *x = be->ops->alloc(be, n * sizeof(float)), host[4];
    backend_event *ev = be->ops->event_create(be);
    if (!x || !ev) return 1;
    be->ops->fill(be, x, 3.0f, n);
    be->ops->scale(be, x, 0.5f, n);
    be->ops->event_record(be, ev);
    be->ops->event_sync(be, ev);
    be->ops->copy_d2h(be, host, x + n - 4, sizeof host);
    int bad = host[3] != 1.5f;
    if (bad) printf("FAIL events: x[n-1] = %g after fill 3, scale 0.5 (want 1.5)\n", host[3]);
    double ss = be->ops->sumsq(be, x, n);
    if (ss != 2.25 * (double)n) {
        printf("FAIL sumsq = %.17g, want %.17g\n", ss, 2.25 * (double)n);
        bad = 1;
    }
    be->ops->event_destroy(be, ev);
    be->ops->free(be, x);
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
    printf("%s\n", mtl->description);
    int bad = check_events(mtl);
    bad += op_suite_run(mtl, cpu, CHECK_U_FP32, 1);
    backend_destroy(mtl);
    backend_destroy(cpu);
    printf("metal_backend: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
