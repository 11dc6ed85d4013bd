/* test_cuda_ops.c: every op of the CUDA backend against the CPU reference (tests/backends/op_suite),
 * in three modes: fp32 with TF32 off, fp32 with TF32 on, bf16. Exits 77 ("SKIP: no CUDA device")
 * where no device is present. It must never pass with a mode silently skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "tests/backends/op_suite.h"
#include "tests/check.h"

extern const backend_entry cuda_backend_entry;
extern const backend_entry cpu_backend_entry;

/* Tolerance multipliers of the suite's fp32 defaults (1e-5 relative to the largest reference value
 * for matmul, 1e-6..2e-5 elsewhere), per mode, and why:
 * - FP32 (allow_tf32 = 0): the same IEEE fp32 math in another summation order (cuBLAS tiling,
 *   warp-tree reductions, online softmax) and with FMA contraction: a few ulp more than the CPU's
 *   own reordering, so 4. (Host emulation of the kernels: worst op 8e-7 relative.)
 * - TF32: cuBLAS rounds matmul inputs to 10 mantissa bits (unit roundoff 2^-11 = 4.9e-4 when
 *   rounded to nearest, 2^-10 when truncated). With emulated round-to-nearest TF32 the worst
 *   matmul in the suite is 4.1e-4 relative; 300 gives 3e-3, room for truncating hardware. Matmul
 *   and attention (its tensor-core kernels) change; the suite loosens only those.
 * - BF16: matmul inputs rounded to 8 mantissa bits (2^-8 = 3.9e-3), fp32 accumulate: the worst
 *   emulated matmul is 5.3e-3 relative; 2000 gives 2e-2. */

/* Which op_suite parts each mode runs. In backends/cuda the mode (be->cfg) is read only by
 * cuda_matmul.c (cuBLAS compute type; bf16 casts, registered bf16 weights), cuda_attention.cu's
 * att_pick (the TF32 WMMA or bf16 mma.sync kernels for attention forward/backward) and the
 * description strings; backend_ops.c only forwards. Every other op, attention_decode(_rows)
 * and kron_apply (a plain fp32 kernel) included, runs the same fp32 kernel on the same seeded
 * inputs in every mode, bitwise reproducibly (no atomics), and the suite's tolerance for it does
 * not depend on u_dot except to loosen it (kron_apply): rerunning it in tf32 or bf16 can only
 * repeat the fp32 run's verdict. So tf32 and bf16 run the products (matmul, attention) and the
 * mode's own checks below; "full" on the command line runs every part in every mode. An op that
 * starts reading the precision mode must join OP_SUITE_PRODUCTS (tests/backends/op_suite.c). */
typedef struct {
    const char *key, *name;
    int precision, allow_tf32;
    double u_dot;   /* unit roundoff of its matmul/attention inner products (tests/check.h) */
    unsigned parts; /* of the op suite: OP_SUITE_ALL, or the products only (above) */
} cuda_mode;

static const cuda_mode modes[] = {
    {"fp32", "fp32 (TF32 off)", BACKEND_FP32, 0, CHECK_U_FP32, OP_SUITE_ALL},
    {"tf32", "fp32 (TF32 on)", BACKEND_FP32, 1, CHECK_U_TF32, OP_SUITE_PRODUCTS},
    {"bf16", "bf16", BACKEND_BF16, 0, CHECK_U_BF16, OP_SUITE_PRODUCTS},
};

/* --- determinism: the gradient ops must give the same bits on every run (no float atomics) --- */

static float *upload(backend *be, const float *h, size_t n)
{
    float *d = backend_alloc(be, n * sizeof(float));
    if (d) backend_copy_h2d(be, d, h, n * sizeof(float));
    return d;
}

static float *upload_rand(backend *be, size_t n, unsigned seed)
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    float *d = upload(be, h, n);
    free(h);
    return d;
}

/* Runs the backward ops twice into fresh zeroed buffers; returns how many results differ. */
static int check_determinism(backend *be)
{
    enum { B = 2, T = 200, H = 4, Hkv = 2, D = 64, C = 96, V = 50 };
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nc = (size_t)B * T * C;
    float *q = upload_rand(be, nq, 1), *k = upload_rand(be, nk, 2), *v = upload_rand(be, nk, 3);
    float *dout = upload_rand(be, nq, 4), *x = upload_rand(be, nc, 5), *w = upload_rand(be, C, 6);
    float *o = backend_alloc(be, nq * 4), *lse = backend_alloc(be, (size_t)B * H * T * 4);
    float *mean = backend_alloc(be, (size_t)B * T * 4), *rstd = backend_alloc(be, (size_t)B * T * 4);
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % 13; /* heavy repeats */
    int32_t *dtok = backend_alloc(be, sizeof tok);
    backend_copy_h2d(be, dtok, tok, sizeof tok);
    backend_attention_forward(be, o, lse, q, k, v, B, T, H, Hkv, D, 0);
    float *y = backend_alloc(be, nc * 4);
    backend_layernorm_forward(be, y, mean, rstd, x, w, w, B * T, C, 1e-5f);
    backend_free(be, y);
    size_t sizes[6] = {nq, nk, nk, (size_t)V * C, (size_t)C, (size_t)C};
    float *res[2][6];
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        for (int j = 0; j < 6; j++) res[r][j] = backend_alloc(be, sizes[j] * 4);
        backend_attention_backward(be, res[r][0], res[r][1], res[r][2], dout, q, k, v, o, lse, B, T, H, Hkv, D, 0);
        backend_embedding_backward(be, res[r][3], NULL, x, dtok, B, T, C, V);
        float *dx = backend_alloc(be, nc * 4); /* inputs stay untouched between the runs */
        backend_layernorm_backward(be, dx, res[r][4], res[r][5], x, x, w, mean, rstd, B * T, C);
        backend_free(be, dx);
    }
    for (int j = 0; j < 6; j++) {
        float *a = malloc(sizes[j] * 4), *b = malloc(sizes[j] * 4);
        backend_copy_d2h(be, a, res[0][j], sizes[j] * 4);
        backend_copy_d2h(be, b, res[1][j], sizes[j] * 4);
        if (memcmp(a, b, sizes[j] * 4) != 0) {
            static const char *names[6] = {"attention dq", "attention dk", "attention dv",
                                           "embedding dwte", "layernorm dweight", "layernorm dbias"};
            fprintf(stderr, "FAIL: %s differs between two identical runs\n", names[j]);
            bad++;
        }
        free(a), free(b);
        backend_free(be, res[0][j]), backend_free(be, res[1][j]);
    }
    float *all[] = {q, k, v, dout, x, w, o, lse, mean, rstd, (float *)dtok};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) backend_free(be, all[j]);
    return bad;
}

/* Attention on tensors that start 4 bytes past an alignment boundary (as slices of a larger
 * buffer may) must give the same bits as on aligned ones: the kernels' vector loads fall back. */
static int check_unaligned(backend *be)
{
    enum { B = 1, T = 100, H = 2, D = 64 };
    const size_t n = (size_t)B * T * H * D;
    float *x = upload_rand(be, n, 7), *big = backend_alloc(be, (n + 1) * 3 * 4);
    float *o1 = backend_alloc(be, n * 4), *o2 = backend_alloc(be, (n + 1) * 4);
    float *l1 = backend_alloc(be, (size_t)B * H * T * 4), *l2 = backend_alloc(be, (size_t)B * H * T * 4);
    float *qa = big + 1, *ka = big + n + 2, *va = big + 2 * n + 3; /* all 4 bytes off */
    backend_copy_d2d(be, qa, x, n * 4);
    backend_copy_d2d(be, ka, x, n * 4);
    backend_copy_d2d(be, va, x, n * 4);
    backend_attention_forward(be, o1, l1, x, x, x, B, T, H, H, D, 0);
    backend_attention_forward(be, o2 + 1, l2, qa, ka, va, B, T, H, H, D, 0);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    backend_copy_d2h(be, a, o1, n * 4);
    backend_copy_d2h(be, b, o2 + 1, n * 4);
    int bad = memcmp(a, b, n * 4) != 0;
    if (bad) fprintf(stderr, "FAIL: attention_forward on unaligned q/k/v/out differs from aligned\n");
    free(a), free(b);
    float *all[] = {x, big, o1, o2, l1, l2};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) backend_free(be, all[j]);
    return bad;
}

/* C = x W^T on the device, back on the host. */
static void matmul_host(backend *be, float *host, float *C, const float *x, const float *W, int M, int N, int K)
{
    backend_matmul(be, C, x, W, M, N, K, 0, 1, 1.0f, 0.0f);
    backend_copy_d2h(be, host, C, (size_t)M * N * 4);
}

/* bf16 mode: a matmul reading registered weights gives the same bits as one casting them per
 * call (the same rounding), and reads the copy made at registration, not the fp32 weights as
 * they are now (so the cast really happens once); dropping it goes back to casting per call. */
static int check_bf16_weights(backend *be)
{
    enum { M = 32, N = 48, K = 64 };
    float *x = upload_rand(be, (size_t)M * K, 11), *W = upload_rand(be, (size_t)2 * N * K, 12);
    float *W2 = upload_rand(be, (size_t)N * K, 13), *C = backend_alloc(be, (size_t)M * N * 4);
    float *want = malloc(M * N * 4), *want2 = malloc(M * N * 4), *got = malloc(M * N * 4);
    float *second = W + (size_t)N * K; /* the second half of the registered buffer */
    int bad = 0;
    matmul_host(be, want, C, x, second, M, N, K);
    matmul_host(be, want2, C, x, W2, M, N, K);
    backend_weights_bf16(be, W, (size_t)2 * N * K);
    matmul_host(be, got, C, x, second, M, N, K);
    if (memcmp(got, want, M * N * 4)) bad++, fprintf(stderr, "FAIL: bf16 weights: registered copy differs from the per-call cast\n");
    backend_copy_d2d(be, second, W2, (size_t)N * K * 4); /* changed behind the registration */
    matmul_host(be, got, C, x, second, M, N, K);
    if (memcmp(got, want, M * N * 4)) bad++, fprintf(stderr, "FAIL: bf16 weights: the matmul recast the weights instead of reading the copy\n");
    backend_weights_bf16(be, W, (size_t)2 * N * K); /* re-registered: the new values */
    matmul_host(be, got, C, x, second, M, N, K);
    if (memcmp(got, want2, M * N * 4)) bad++, fprintf(stderr, "FAIL: bf16 weights: re-registering did not refresh the copy\n");
    backend_copy_d2d(be, second, W2 + 1, (size_t)(N * K - 1) * 4);
    backend_weights_bf16(be, W, 0); /* dropped: per-call casts of the current values again */
    matmul_host(be, got, C, x, second, M, N, K);
    if (!memcmp(got, want2, M * N * 4)) bad++, fprintf(stderr, "FAIL: bf16 weights: a dropped copy is still read\n");
    free(want), free(want2), free(got);
    float *all[] = {x, W, W2, C};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) backend_free(be, all[j]);
    if (!bad) printf("bf16 weights: registered copy read, refreshed only on registration, dropped\n");
    return bad;
}

/* bf16 mode's attention (cuda_attention_bf16.cu) rounds q, k, v and dO to bf16 where it stages
 * them, and p and ds where they enter the second products; everything else is fp32. Given inputs
 * that are bf16 already, only the second rounding is left, so against attention in double on the
 * same inputs each output's error is bounded by u = 2^-8 times the sum of its terms' magnitudes
 * (computed here with the reference), far under op_suite's any-input bound:
 *   out_id = sum_j p_ij v_jd:       u sum_j p_ij |v_jd|
 *   dv_jd  = sum_i p_ij dO_id:      u sum_i p_ij |dO_id|
 *   dq_id  = c sum_j ds_ij k_jd:    u c sum_j (|ds_ij| + p_ij e_i) |k_jd|
 *   dk_jd  = c sum_i ds_ij q_id:    u c sum_i (|ds_ij| + p_ij e_i) |q_id|
 * with c = 1/sqrt(D), ds_ij = p_ij (dO_i . v_j - delta_i), and u e_i = u sum_d |dO_id| (out_id's
 * bound) the bound on delta_i = dO_i . out_i's error. Each bound gets 25% and 1e-4 relative for
 * the fp32 parts (scores, exp2, the sums' order). lse sees fp32 only. Shapes: GQA (two query heads
 * a kv head) with a ragged last tile at D 64, two batch rows at D 32 (under the first kernel
 * width) and D 128 (the second). */
typedef struct {
    int B, T, H, Hkv, D;
} att_shape;

static float *bf16_rand(size_t n, unsigned seed, float scale)
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = check_bf16_round(scale * (2.0f * (float)(seed >> 8) / 16777216.0f - 1.0f));
    }
    return h;
}

/* Magnitude sums -> tolerances, in place: (1.25 u + 1e-4) mag + 1e-6. */
static void u_bound(double *mag, size_t n)
{
    for (size_t i = 0; i < n; i++) mag[i] = (1.25 / 256.0 + 1e-4) * mag[i] + 1e-6;
}

/* Count the elements of got outside want +- tol. */
static int bound_check(const char *what, const att_shape *a, const float *got, const double *want,
                       const double *tol_e, size_t n)
{
    size_t bad = 0, worst = 0;
    double wr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double tol = tol_e[i], err = fabs(got[i] - want[i]);
        if (!(err <= tol)) bad++;
        if (err / tol > wr || !(err <= tol)) wr = err / tol, worst = i;
    }
    printf("%s bf16 attention B%d T%d H%d Hkv%d D%d %s: %zu of %zu outside u-bound; worst [%zu] got %.7g want %.7g (%.2f of its bound)\n",
           bad ? "FAIL" : "ok  ", a->B, a->T, a->H, a->Hkv, a->D, what, bad, n, worst, got[worst],
           want[worst], wr);
    return bad != 0;
}

static int check_bf16_attention_one(backend *be, const att_shape *a)
{
    const int B = a->B, T = a->T, H = a->H, Hkv = a->Hkv, D = a->D, G = H / Hkv;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
    const double c = 1.0 / sqrt((double)D);
    float *q = bf16_rand(nq, 1, 1.5f), *k = bf16_rand(nk, 2, 1.5f), *v = bf16_rand(nk, 3, 1.0f);
    float *dO = bf16_rand(nq, 4, 1.0f);
    double *out = calloc(nq, 8), *mout = calloc(nq, 8), *lse = calloc(nl, 8), *mlse = calloc(nl, 8);
    double *dq = calloc(nq, 8), *mdq = calloc(nq, 8), *dk = calloc(nk, 8), *mdk = calloc(nk, 8);
    double *dv = calloc(nk, 8), *mdv = calloc(nk, 8), *p = malloc((size_t)T * 8), *ds = malloc((size_t)T * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int hk = h / G;
            for (int i = 0; i < T; i++) {
                const float *qi = q + (((size_t)b * T + i) * H + h) * D, *oi = dO + (((size_t)b * T + i) * H + h) * D;
                double mx = -INFINITY, sum = 0.0, big = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = k + (((size_t)b * T + j) * Hkv + hk) * D;
                    double s = 0.0, sa = 0.0;
                    for (int d = 0; d < D; d++) s += (double)qi[d] * kj[d], sa += fabs((double)qi[d] * kj[d]);
                    p[j] = s * c, big = fmax(big, sa * c), mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) p[j] = exp(p[j] - mx), sum += p[j];
                const size_t li = ((size_t)b * H + h) * T + i, qo = (((size_t)b * T + i) * H + h) * D;
                lse[li] = mx + log(sum);
                /* fp32 only: the scores' D-term sums of exact products, then exp2 / log2 */
                mlse[li] = (CHECK_LAMBDA * sqrt((double)D) * big + 8 * (1 + fabs(lse[li]))) * CHECK_U_FP32 + 1e-6;
                double delta = 0.0, e = 0.0;
                for (int j = 0; j <= i; j++) p[j] /= sum;
                for (int d = 0; d < D; d++) {
                    double o = 0.0, m = 0.0;
                    for (int j = 0; j <= i; j++) {
                        const double vj = v[(((size_t)b * T + j) * Hkv + hk) * D + d];
                        o += p[j] * vj, m += p[j] * fabs(vj);
                    }
                    out[qo + d] = o, mout[qo + d] = m;
                    delta += oi[d] * o, e += fabs((double)oi[d]) * m;
                }
                for (int j = 0; j <= i; j++) {
                    const size_t ko = (((size_t)b * T + j) * Hkv + hk) * D;
                    double dp = 0.0;
                    for (int d = 0; d < D; d++) dp += (double)oi[d] * v[ko + d];
                    ds[j] = p[j] * (dp - delta);
                    const double w = fabs(ds[j]) + p[j] * e;
                    for (int d = 0; d < D; d++) {
                        dq[qo + d] += c * ds[j] * k[ko + d], mdq[qo + d] += c * w * fabs((double)k[ko + d]);
                        dk[ko + d] += c * ds[j] * qi[d], mdk[ko + d] += c * w * fabs((double)qi[d]);
                        dv[ko + d] += p[j] * oi[d], mdv[ko + d] += p[j] * fabs((double)oi[d]);
                    }
                }
            }
        }
    float *gq = upload(be, q, nq), *gk = upload(be, k, nk), *gv = upload(be, v, nk), *gdo = upload(be, dO, nq);
    float *go = backend_alloc(be, nq * 4), *gl = backend_alloc(be, nl * 4);
    float *gdq = backend_alloc(be, nq * 4), *gdk = backend_alloc(be, nk * 4), *gdv = backend_alloc(be, nk * 4);
    backend_attention_forward(be, go, gl, gq, gk, gv, B, T, H, Hkv, D, 0);
    backend_attention_backward(be, gdq, gdk, gdv, gdo, gq, gk, gv, go, gl, B, T, H, Hkv, D, 0);
    float *h = malloc(nq * 4);
    int bad = 0;
    u_bound(mout, nq), u_bound(mdq, nq), u_bound(mdk, nk), u_bound(mdv, nk);
    backend_copy_d2h(be, h, go, nq * 4);
    bad += bound_check("out", a, h, out, mout, nq);
    backend_copy_d2h(be, h, gl, nl * 4);
    bad += bound_check("lse", a, h, lse, mlse, nl);
    backend_copy_d2h(be, h, gdq, nq * 4);
    bad += bound_check("dq", a, h, dq, mdq, nq);
    backend_copy_d2h(be, h, gdk, nk * 4);
    bad += bound_check("dk", a, h, dk, mdk, nk);
    backend_copy_d2h(be, h, gdv, nk * 4);
    bad += bound_check("dv", a, h, dv, mdv, nk);
    float *dev[] = {gq, gk, gv, gdo, go, gl, gdq, gdk, gdv};
    for (size_t j = 0; j < sizeof dev / sizeof dev[0]; j++) backend_free(be, dev[j]);
    free(h), free(q), free(k), free(v), free(dO), free(out), free(mout), free(lse), free(mlse);
    free(dq), free(mdq), free(dk), free(mdk), free(dv), free(mdv), free(p), free(ds);
    return bad;
}

static int check_bf16_attention(backend *be)
{
    /* small: the emulator runs every mma.sync as two warp barriers (this check takes ~20 s there) */
    static const att_shape shapes[] = {{1, 130, 2, 1, 64}, {2, 70, 2, 1, 32}, {1, 77, 2, 1, 128}};
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bad += check_bf16_attention_one(be, &shapes[i]);
    return bad;
}

/* Uploads through the pinned staging ring: more copies than slots from one host buffer that is
 * overwritten right after each call, small and large (direct) ones; each lands intact. */
static int check_uploads(backend *be)
{
    enum { COPIES = 21, SMALL = 3000 };
    const size_t big = ((size_t)1 << 20) / 4 + 7; /* floats: just over one staging slot */
    float *h = malloc(big * 4), *back = malloc(big * 4), *d[COPIES];
    int bad = 0;
    for (int c = 0; c < COPIES; c++) {
        size_t n = c % 5 == 4 ? big : SMALL;
        d[c] = backend_alloc(be, n * 4);
        for (size_t i = 0; i < n; i++) h[i] = (float)(c * 100000 + (int)(i % 99991));
        backend_copy_h2d(be, d[c], h, n * 4);
        memset(h, 0xff, n * 4); /* the caller may reuse its buffer at once */
    }
    for (int c = 0; c < COPIES; c++) {
        size_t n = c % 5 == 4 ? big : SMALL;
        backend_copy_d2h(be, back, d[c], n * 4);
        for (size_t i = 0; i < n; i++)
            if (back[i] != (float)(c * 100000 + (int)(i % 99991))) {
                fprintf(stderr, "FAIL: upload %d (%zu floats): element %zu = %g\n", c, n, i, back[i]);
                bad++;
                break;
            }
        backend_free(be, d[c]);
    }
    free(h), free(back);
    return bad;
}

/* backend_memory: the device's size and what is free, which a 64 MiB allocation lowers by at least
 * its size and its free gives back (no other allocation runs between the reads here). */
static int check_memory(backend *be)
{
    size_t free0 = 0, total = 0, free1 = 0, t1 = 0, free2 = 0, t2 = 0;
    const size_t big = (size_t)64 << 20;
    if (backend_memory(be, &free0, &total) != 0 || total == 0 || free0 > total) {
        fprintf(stderr, "FAIL: backend_memory: %s (free %zu of %zu)\n", loom_error(), free0, total);
        return 1;
    }
    void *p = backend_alloc(be, big);
    int rc = backend_memory(be, &free1, &t1);
    backend_free(be, p);
    rc |= backend_memory(be, &free2, &t2);
    if (!p || rc || t1 != total || t2 != total || free1 + big > free0 || free2 < free1 + big) {
        fprintf(stderr, "FAIL: backend_memory around a 64 MiB allocation: free %zu -> %zu -> %zu of %zu\n", free0, free1,
                free2, total);
        return 1;
    }
    printf("ok   backend_memory: %zu of %zu bytes free; a 64 MiB allocation takes %zu\n", free0, total, free0 - free1);
    return 0;
}

/* usage: test_cuda_ops [fp32|tf32|bf16]... [full] (default: all three modes; full: the whole op
 * suite in every mode, not only the parts the mode can change) */
int main(int argc, char **argv)
{
    backend_prepare_process(argv); /* the CPU reference on this CPU's BLAS kernel, not a generic one */
    const char *why = "";
    if (!cuda_backend_entry.available(&why)) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    backend_config cpu_cfg = {.threads = 0, .device_index = 0, .precision = BACKEND_FP32, .allow_tf32 = 0};
    backend *cpu = cpu_backend_entry.create(&cpu_cfg);
    if (!cpu) {
        fprintf(stderr, "FAIL: cpu backend: %s\n", loom_error());
        return 1;
    }
    int failed_modes = 0, ran = 0, full = 0, named = 0;
    for (int a = 1; a < argc; a++) {
        full |= strcmp(argv[a], "full") == 0;
        named |= strcmp(argv[a], "full") != 0;
    }
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        int wanted = !named;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], modes[i].key) == 0;
        if (!wanted) continue;
        ran++;
        backend_config cfg = {.threads = 0, .device_index = 0, .precision = modes[i].precision,
                              .allow_tf32 = modes[i].allow_tf32};
        backend *gpu = cuda_backend_entry.create(&cfg);
        if (!gpu) {
            fprintf(stderr, "FAIL: cuda backend (%s): %s\n", modes[i].name, loom_error());
            failed_modes++;
            continue;
        }
        printf("== %s: %s, inner products at u = %g\n", modes[i].name, backend_description(gpu),
               modes[i].u_dot);
        int bad = op_suite_run_parts(gpu, cpu, modes[i].u_dot, 1, full ? OP_SUITE_ALL : modes[i].parts);
        if (modes[i].precision == BACKEND_FP32 && !modes[i].allow_tf32) bad += check_determinism(gpu);
        bad += check_unaligned(gpu);
        bad += check_uploads(gpu);
        bad += check_memory(gpu);
        if (modes[i].precision == BACKEND_BF16) bad += check_bf16_weights(gpu) + check_bf16_attention(gpu);
        if (bad) {
            fprintf(stderr, "FAIL: %s: %d check(s) failed\n", modes[i].name, bad);
            failed_modes++;
        }
        backend_destroy(gpu);
    }
    backend_destroy(cpu);
    if (ran == 0) {
        fprintf(stderr, "FAIL: no mode matches the arguments (known: fp32 tf32 bf16, and full)\n");
        return 1;
    }
    if (failed_modes) return 1;
    printf("PASS: cuda ops match the CPU reference in %d mode%s\n", ran, ran == 1 ? "" : "s");
    return 0;
}
