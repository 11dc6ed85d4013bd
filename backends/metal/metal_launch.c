/* metal_launch.c: what every Metal op file launches through: kernel names, one launch over an
 * abstract device (metal_device_ops), the shared scratch buffer and the column-sum plan. Called by
 * metal_ops.c and metal_ops_nn.c; calls neither (so the op files never call each other).
 * Must never touch an Apple API. */
#include <stdint.h>
#include <stdlib.h>

#include "backends/metal/metal_internal.h"
#include "base/error.h"
#include "base/log.h"

#define METAL_NAME_(id, fn) #fn,
static const char *const metal_kernel_names[MK_COUNT] = {METAL_KERNEL_LIST(METAL_NAME_)};
#undef METAL_NAME_

const char *metal_kernel_name(int k)
{
    return k >= 0 && k < MK_COUNT ? metal_kernel_names[k] : "?";
}

void metal_launch(metal_ctx *c, int k, size_t grid, void *const *bufs, int nbufs, const void *params,
                  size_t params_bytes)
{
    enum { MAXB = 16 };
    void *b[MAXB];
    if (grid == 0) return;
    if (grid > UINT32_MAX || nbufs > MAXB) {
        log_warn("metal: %s over %zu threads exceeds 32-bit thread ids; skipped", metal_kernel_name(k), grid);
        loom_fail("metal: %s grid of %zu threads is too large", metal_kernel_name(k), grid);
        return;
    }
    for (int i = 0; i < nbufs; i++) b[i] = bufs[i] ? bufs[i] : (void *)c->dummy;
    c->dev->launch(c->ds, k, grid, b, nbufs, params, params_bytes);
}

float *metal_scratch(metal_ctx *c, size_t n)
{
    if (n <= c->scratch_cap) return c->scratch;
    size_t cap = n + n / 4;
    /* Queued work may still read the old scratch: the device keeps a freed buffer alive until the
     * work using it has finished (Metal command buffers retain what they bind). */
    if (c->scratch) c->dev->free(c->ds, c->scratch);
    c->scratch = c->dev->alloc(c->ds, cap * sizeof(float));
    c->scratch_cap = c->scratch ? cap : 0;
    if (!c->scratch) log_warn("metal: cannot allocate %zu bytes of scratch: %s", cap * sizeof(float), loom_error());
    return c->scratch;
}

void metal_colsum_plan(int N, int C, unsigned *nchunks, unsigned *chunk_rows)
{
    unsigned want = C >= 65536 ? 1u : 65536u / (unsigned)C;
    unsigned most = ((unsigned)N + 31u) / 32u;
    unsigned n = want < most ? want : most;
    if (n < 1) n = 1;
    unsigned rows = ((unsigned)N + n - 1) / n;
    if (rows < 1) rows = 1;
    *chunk_rows = rows;
    *nchunks = ((unsigned)N + rows - 1) / rows;
}
