/* test_metal_adamw_shim.c: adamw.metal, run on Linux through the metal-shim backend, against
 * adamw_update (backends/adamw_math.h), the AdamW arithmetic the CPU and CUDA backends share.
 * Metal Shading Language cannot include that header, so this check is what keeps the Metal
 * kernel the same update; it never compares with another backend (the op suite does that). */
#include <stdint.h>
#include <stdio.h>

#include "backends/adamw_math.h"
#include "backends/backend.h"
#include "base/log.h"
#include "tests/backends/metal/metal_shim_backend.h"
#include "tests/check.h"

#define N 4099

static float lcg_unit(uint32_t *x) /* [0, 1) */
{
    *x = *x * 1664525u + 1013904223u;
    return (float)(*x >> 8) / 16777216.0f;
}

/* From the same p, m, v, one step of the kernel and one of adamw_update per element, at steps
 * 1, 2, 3 and 1000 (bias corrections far from and near 1); every 17th gradient is 0.
 * m and v are the same expressions: bit-equal. The kernel divides by bc1, bc2 where adamw_update
 * multiplies by their rounded reciprocals, so m^ and v^ may differ by 3u relative, the term
 * m^ / (sqrt(v^) + eps) by 6u, and p by lr 6u |term| plus its last rounding, 2u |p|.
 * |term| <= sqrt(sum_k w_k^2 / w'_k) (Cauchy-Schwarz over the moments' weights
 * w_k = (1-b1) b1^k / bc1, w'_k = (1-b2) b2^k / bc2) < 1.2 at b1 = 0.9, b2 = 0.95: atol 8u lr.
 * A coupled decay or a missing bias correction moves p by about lr, far outside. */
static void test_adamw_matches_math(backend *shim)
{
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    static float p[N], m[N], v[N], g[N], rp[N], rm[N], rv[N];
    static double want[N];
    float *dp = backend_alloc(shim, sizeof p), *dm = backend_alloc(shim, sizeof m);
    float *dv = backend_alloc(shim, sizeof v), *dg = backend_alloc(shim, sizeof g);
    CHECK(dp && dm && dv && dg, "shim buffers allocated");
    if (!(dp && dm && dv && dg)) return;
    uint32_t x = 12345u;
    for (int i = 0; i < N; i++) p[i] = 2.0f * lcg_unit(&x) - 1.0f;
    backend_copy_h2d(shim, dp, p, sizeof p); /* m, v start at 0 (alloc zero-fills) */
    const int steps[] = {1, 2, 3, 1000};
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < N; i++) g[i] = i % 17 == 0 ? 0.0f : 6.0f * (lcg_unit(&x) - 0.5f);
        backend_copy_d2h(shim, rp, dp, sizeof rp); /* this step's start, for the reference */
        backend_copy_d2h(shim, rm, dm, sizeof rm);
        backend_copy_d2h(shim, rv, dv, sizeof rv);
        backend_copy_h2d(shim, dg, g, sizeof g);
        backend_adamw(shim, dp, dg, dm, dv, N, lr, b1, b2, eps, wd, steps[s], gs);
        backend_copy_d2h(shim, p, dp, sizeof p);
        backend_copy_d2h(shim, m, dm, sizeof m);
        backend_copy_d2h(shim, v, dv, sizeof v);
        const adamw_k k = adamw_constants(lr, b1, b2, eps, wd, steps[s], gs);
        for (int i = 0; i < N; i++) {
            adamw_update(&rp[i], &rm[i], &rv[i], g[i], k);
            want[i] = rp[i];
        }
        char what[64];
        snprintf(what, sizeof what, "adamw.metal m, step %d", steps[s]);
        check_equal_f32(what, m, rm, N);
        snprintf(what, sizeof what, "adamw.metal v, step %d", steps[s]);
        check_equal_f32(what, v, rv, N);
        snprintf(what, sizeof what, "adamw.metal param, step %d", steps[s]);
        const check_tol tol = {8 * CHECK_U_FP32 * lr, 2 * CHECK_U_FP32};
        check_allclose(what, p, want, N, tol);
    }
    backend_free(shim, dp), backend_free(shim, dm), backend_free(shim, dv), backend_free(shim, dg);
}

int main(void)
{
    log_set_quiet(1);
    backend_config cfg = {0};
    cfg.threads = 1;
    backend *shim = metal_shim_backend_create(&cfg);
    CHECK(shim != NULL, "metal-shim backend created");
    if (shim) test_adamw_matches_math(shim);
    backend_destroy(shim);
    CHECK(metal_shim_error_count() == 0, "the shim device saw %d misuses (see stderr)",
          metal_shim_error_count());
    return check_exit_code("metal_adamw_shim");
}
