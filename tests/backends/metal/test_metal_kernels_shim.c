/* test_metal_kernels_shim.c: the Metal backend verified on Linux. The .metal kernels, compiled as
 * C++ through backends/metal/metal_shim.h and driven by the backend's own op layer, must match the
 * CPU backend on the whole op suite; the embedded kernel source must be well formed for Metal
 * (names, argument indices, address spaces, bounds checks); the pointer map must be exact.
 * Nothing here touches Metal itself: what only a Mac can run is listed in docs/metal.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/metal/metal_kernels.h"
#include "backends/metal/metal_ptrmap.h"
#include "base/log.h"
#include "tests/backends/metal/metal_shim_backend.h"
#include "tests/backends/op_suite.h"
#include "tests/check.h"

extern const backend_entry cpu_backend_entry;


static void test_ptrmap(void)
{
    metal_ptrmap m = {0};
    static char a[100], b[50], c[10];
    CHECK(metal_ptrmap_insert(&m, b, sizeof b, (void *)"b") == 0, "insert b");
    CHECK(metal_ptrmap_insert(&m, a, sizeof a, (void *)"a") == 0, "insert a");
    CHECK(metal_ptrmap_insert(&m, c, sizeof c, (void *)"c") == 0, "insert c");
    CHECK(metal_ptrmap_insert(&m, a + 10, 5, (void *)"x") != 0, "overlapping insert refused");
    size_t off = 99;
    CHECK(metal_ptrmap_find(&m, a, &off) == (void *)"a" && off == 0, "find a base");
    CHECK(metal_ptrmap_find(&m, a + 99, &off) == (void *)"a" && off == 99, "find a last byte");
    CHECK(metal_ptrmap_find(&m, b + 17, &off) == (void *)"b" && off == 17, "find inside b");
    CHECK(metal_ptrmap_find(&m, c + 10, &off) != (void *)"c", "one past c is not c");
    CHECK(metal_ptrmap_remove(&m, b + 1) == NULL, "remove needs the base");
    CHECK(metal_ptrmap_remove(&m, b) == (void *)"b", "remove b");
    CHECK(metal_ptrmap_find(&m, b + 17, &off) == NULL, "b gone");
    CHECK(metal_ptrmap_find(&m, c + 3, &off) == (void *)"c" && off == 3, "c still found");
    CHECK(m.n == 2, "two ranges left (%zu)", m.n);
    metal_ptrmap_clear(&m);
}

/* The text of kernel `name`'s parameter list and body within the embedded source, or 0. */
static int kernel_text(const char *src, const char *name, const char **params, const char **body,
                       const char **end)
{
    char pat[96];
    snprintf(pat, sizeof pat, "kernel void %s(", name);
    const char *p = strstr(src, pat);
    if (!p || strstr(p + 1, pat)) return 0; /* missing or defined twice */
    *params = p + strlen(pat);
    *body = strchr(*params, '{');
    if (!*body) return 0;
    int depth = 0;
    for (const char *q = *body; *q; q++) {
        if (*q == '{') depth++;
        if (*q == '}' && --depth == 0) {
            *end = q;
            return 1;
        }
    }
    return 0;
}

/* One kernel's signature as Metal needs it: parameters bound at LOOM_BUFFER(0), (1), ... in
 * order, every pointer/reference parameter in the device or constant address space, the last
 * parameter the thread id, and a bounds check on gid (threadgroups may overhang the grid). */
static void lint_kernel(const char *src, const char *name)
{
    const char *params, *body, *end;
    if (!kernel_text(src, name, &params, &body, &end)) {
        CHECK(0, "kernel %s missing, defined twice or unbalanced in the embedded source", name);
        return;
    }
    int index = 0;
    const char *q = params;
    while (q < body) {
        const char *comma = strchr(q, ',');
        const char *stop = comma && comma < body ? comma : strchr(q, ')');
        char param[200];
        size_t len = (size_t)(stop - q) < sizeof param - 1 ? (size_t)(stop - q) : sizeof param - 1;
        memcpy(param, q, len);
        param[len] = 0;
        const char *t = param;
        while (*t == ' ' || *t == '\n') t++;
        if (strstr(t, "LOOM_GID")) {
            CHECK(strncmp(t, "uint gid", 8) == 0, "%s: thread id parameter is '%s'", name, t);
            break;
        }
        char want[32];
        snprintf(want, sizeof want, "LOOM_BUFFER(%d)", index++);
        CHECK(strstr(t, want) != NULL, "%s: parameter '%s' should be bound at %s", name, t, want);
        if (strchr(t, '*') || strchr(t, '&'))
            CHECK(strncmp(t, "device ", 7) == 0 || strncmp(t, "constant ", 9) == 0,
                  "%s: parameter '%s' has no device/constant address space", name, t);
        q = stop + 1;
    }
    const char *guard = strstr(body, "if (gid >= ");
    CHECK(guard && guard < end, "%s: no bounds check on gid", name);
}

/* src without its comments (newly allocated). */
static char *strip_comments(const char *src)
{
    char *out = malloc(strlen(src) + 1), *o = out;
    for (const char *p = src; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static void test_source(void)
{
    char *src = strip_comments(loom_metal_source);
    CHECK(strstr(src, "#include \"") == NULL, "a quoted #include survived in the embedded source");
    CHECK(strstr(src, "#include <metal_stdlib>") != NULL, "metal_stdlib is not included");
    CHECK(strstr(src, "double") == NULL, "'double' in the Metal source (MSL has no double)");
    for (int k = 0; k < MK_COUNT; k++) lint_kernel(src, metal_kernel_name(k));
    /* every kernel in the source is in the list (a kernel the host cannot find is dead code) */
    int defined = 0;
    for (const char *p = src; (p = strstr(p, "kernel void ")); p++) defined++;
    CHECK(defined == MK_COUNT, "%d kernels in the source, %d in metal_kernels.h", defined, MK_COUNT);
    /* helper functions also need address spaces on their pointer parameters */
    for (const char *p = src; (p = strstr(p, "inline float loom_")); p++) {
        const char *open = strchr(p, '('), *close = strchr(p, ')');
        for (const char *s = strchr(open, '*'); s && s < close; s = strchr(s + 1, '*')) {
            const char *start = s;
            while (start > open && start[-1] != ',' && start[-1] != '(') start--;
            while (*start == ' ') start++;
            CHECK(strncmp(start, "device ", 7) == 0 || strncmp(start, "constant ", 9) == 0 ||
                      strncmp(start, "thread ", 7) == 0,
                  "helper pointer parameter without an address space near '%.40s'", start);
        }
    }
    free(src);
}

/* n floats in [-1, 1) from a fixed LCG, into device memory of be (a new allocation). */
static float *dev_rand(backend *be, size_t n, uint32_t seed)
{
    float *h = malloc(n * sizeof(float)), *d = backend_alloc(be, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    if (d) backend_copy_h2d(be, d, h, n * sizeof(float));
    free(h);
    return d;
}

/* Device buffer d (n floats) to the host (a new array). */
static float *dev_read(backend *be, const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    backend_copy_d2h(be, h, d, n * sizeof(float));
    return h;
}

/* kron_apply and mhc_coeffs_backward take their per-row scratch for chunks of rows (16 MB:
 * 4096 rows of 32 x 32, 6553 rows of Sinkhorn's trace at 4 lanes), more rows than the op suite
 * gives them. Every row's arithmetic is its own, so a call over more rows than a chunk must
 * equal, bit for bit, two calls over pieces of at most one chunk that split it elsewhere. */
static void test_mix_chunks(backend *be)
{
    const int N = 4101, a = 32, b = 32, cut = 3000; /* chunks 4096 + 5; pieces 3000 + 1101 */
    const size_t ab = (size_t)a * b;
    float *z = dev_rand(be, (size_t)N * ab, 1), *A = dev_rand(be, ab, 2), *B = dev_rand(be, ab, 3);
    float *o1 = backend_alloc(be, (size_t)N * ab * 4), *o2 = backend_alloc(be, (size_t)N * ab * 4);
    backend_kron_apply(be, o1, z, A, B, N, a, b, 1, NULL);
    backend_kron_apply(be, o2, z, A, B, cut, a, b, 1, NULL);
    backend_kron_apply(be, o2 + cut * ab, z + cut * ab, A, B, N - cut, a, b, 1, NULL);
    float *h1 = dev_read(be, o1, (size_t)N * ab), *h2 = dev_read(be, o2, (size_t)N * ab);
    check_equal_f32("kron_apply N4101 32x32 (2 chunks) == 2 calls", h1, h2, (size_t)N * ab);
    free(h1), free(h2);
    backend_free(be, z), backend_free(be, A), backend_free(be, B), backend_free(be, o1);
    backend_free(be, o2);

    const int M = 6557, L = 4, lane = 1, mcut = 4000; /* chunks 6553 + 4; pieces 4000 + 2557 */
    const size_t K = 2 * (size_t)L + (size_t)L * L, nk = (size_t)M * K;
    float *zz = dev_rand(be, nk, 4), *dh = dev_rand(be, nk, 5), *bias = dev_rand(be, K, 6);
    float *alpha = dev_rand(be, 3, 7);
    float *d1 = backend_alloc(be, nk * 4), *d2 = backend_alloc(be, nk * 4);
    backend_mhc_coeffs_backward(be, d1, dh, zz, alpha, bias, M, L, lane);
    backend_mhc_coeffs_backward(be, d2, dh, zz, alpha, bias, mcut, L, lane);
    backend_mhc_coeffs_backward(be, d2 + mcut * K, dh + mcut * K, zz + mcut * K, alpha, bias,
                                M - mcut, L, lane);
    float *g1 = dev_read(be, d1, nk), *g2 = dev_read(be, d2, nk);
    check_equal_f32("mhc_coeffs_backward N6557 (2 chunks) == 2 calls", g1, g2, nk);
    free(g1), free(g2);
    backend_free(be, zz), backend_free(be, dh), backend_free(be, bias), backend_free(be, alpha);
    backend_free(be, d1), backend_free(be, d2);
}

int main(void)
{
    log_set_quiet(1);
    test_ptrmap();
    test_source();

    backend_config cfg = {0};
    cfg.threads = 1;
    backend *shim = metal_shim_backend_create(&cfg);
    backend *cpu = cpu_backend_entry.create(&cfg);
    CHECK(shim && cpu, "backends created (shim %p, cpu %p)", (void *)shim, (void *)cpu);
    if (shim && cpu) {
        CHECK(strcmp(backend_name(shim), "metal-shim") == 0, "shim backend name '%s'",
              backend_name(shim));
        int bad = op_suite_run(shim, cpu, CHECK_U_FP32, 1);
        CHECK(bad == 0, "op suite: %d failing checks", bad);
        test_mix_chunks(shim);
    }
    if (shim) backend_destroy(shim);
    if (cpu) backend_destroy(cpu);
    CHECK(metal_shim_error_count() == 0, "the shim device saw %d misuses (see stderr)", metal_shim_error_count());
    if (failures) {
        printf("metal_kernels_shim: %d failure%s\n", failures, failures == 1 ? "" : "s");
        return 1;
    }
    printf("metal_kernels_shim: ok\n");
    return 0;
}
