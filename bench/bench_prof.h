/* bench_prof.h: PROFILE=1 for the benchmarks (bench_lora, bench_generate): every op timed
 * through a copy of the backend's op table whose entries wrap the real ones; matmuls by shape
 * (M N K tA tB, += when beta != 0) with the library its race picked (CPU). On a device backend
 * each timed op waits for the queue before and after (the real table's sync), so the figures are
 * the ops' own times without overlap. Benchmarks only, one backend per process, host thread only;
 * static functions, so each benchmark has its own table. The one place outside backends/ that
 * looks inside a backend (backend_impl.h): a profiler has to swap its table. */
#ifndef LOOM_BENCH_PROF_H
#define LOOM_BENCH_PROF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend_impl.h"
#include "backends/cpu/cpu_gemm.h"
#include "bench/bench_clock.h"


static backend_ops real, prof;
static int prof_threads; /* the backend's, for the library each matmul shape's race picked */
#define PROF_MAX 128
typedef struct { char what[48]; double s, flops; long calls; } prof_entry;
static prof_entry prof_row[PROF_MAX];
static int prof_n;

/* Now, once the backend's queued work is done (a no-op wait on the CPU). */
static double prof_now(backend *be)
{
    if (real.sync) real.sync(be);
    return bench_now();
}

static void prof_add(const char *what, double s, double flops)
{
    int i = 0;
    while (i < prof_n && strcmp(prof_row[i].what, what)) i++;
    if (i == prof_n) {
        if (prof_n == PROF_MAX) /* full: the last row takes every op not yet seen, named so */
            i = PROF_MAX - 1, snprintf(prof_row[i].what, sizeof prof_row[0].what, "%s", "(other ops: table full)");
        else snprintf(prof_row[prof_n++].what, sizeof prof_row[0].what, "%s", what);
    }
    prof_row[i].s += s, prof_row[i].flops += flops, prof_row[i].calls++;
}

static void p_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                     int tA, int tB, float alpha, float beta)
{
    char w[48];
    double t0 = prof_now(be);
    real.matmul(be, C, A, B, M, N, K, tA, tB, alpha, beta);
    double dt = prof_now(be) - t0;
    int lib = cpu_gemm_shape_lib(prof_threads, tA, tB, M, N, K, beta != 0.0f);
    snprintf(w, sizeof w, "matmul %dx%dx%d %c%c%s %s", M, N, K, tA ? 'T' : 'N', tB ? 'T' : 'N',
             beta != 0.0f ? " +=" : "", lib >= 0 ? cpu_gemm_lib_name(lib) : "");
    prof_add(w, dt, 2.0 * M * N * (double)K);
}
static void p_att_f(backend *be, float *o, float *l, const float *q, const float *k, const float *v, int B, int T, int H, int Hkv, int D, int W)
{ double t0 = prof_now(be); real.attention_forward(be, o, l, q, k, v, B, T, H, Hkv, D, W); prof_add("attention_forward", prof_now(be) - t0, 2.0 * B * H * (double)T * T * D); }
static void p_att_b(backend *be, float *dq, float *dk, float *dv, const float *d, const float *q, const float *k, const float *v, const float *o, const float *l, int B, int T, int H, int Hkv, int D, int W)
{ double t0 = prof_now(be); real.attention_backward(be, dq, dk, dv, d, q, k, v, o, l, B, T, H, Hkv, D, W); prof_add("attention_backward", prof_now(be) - t0, 5.0 * B * H * (double)T * T * D); }
static void p_rms_f(backend *be, float *o, float *r, const float *x, const float *w, int N, int C, float eps)
{ double t0 = prof_now(be); real.rmsnorm_forward(be, o, r, x, w, N, C, eps); prof_add("rmsnorm_forward", prof_now(be) - t0, 0); }
static void p_rms_b(backend *be, float *dx, float *dw, const float *dy, const float *x, const float *w, const float *r, int N, int C)
{ double t0 = prof_now(be); real.rmsnorm_backward(be, dx, dw, dy, x, w, r, N, C); prof_add("rmsnorm_backward", prof_now(be) - t0, 0); }
static void p_sw_f(backend *be, float *o, const float *g, const float *u, size_t n)
{ double t0 = prof_now(be); real.swiglu_forward(be, o, g, u, n); prof_add("swiglu_forward", prof_now(be) - t0, 0); }
static void p_sw_b(backend *be, float *dg, float *du, const float *d, const float *g, const float *u, size_t n)
{ double t0 = prof_now(be); real.swiglu_backward(be, dg, du, d, g, u, n); prof_add("swiglu_backward", prof_now(be) - t0, 0); }
static void p_rope(backend *be, float *x, int B, int T, int H, int D, float th, int inv)
{ double t0 = prof_now(be); real.rope(be, x, B, T, H, D, th, inv); prof_add("rope", prof_now(be) - t0, 0); }
static void p_fill(backend *be, float *x, float v, size_t n)
{ double t0 = prof_now(be); real.fill(be, x, v, n); prof_add("fill", prof_now(be) - t0, 0); }
static void p_copy(backend *be, void *d, const void *s, size_t n)
{ double t0 = prof_now(be); real.copy_d2d(be, d, s, n); prof_add("copy_d2d", prof_now(be) - t0, 0); }
static void p_xent(backend *be, float *lg, float *ls, const int32_t *t, int N, int V, int Vr, float g)
{ double t0 = prof_now(be); real.softmax_xent(be, lg, ls, t, N, V, Vr, g); prof_add("softmax_xent", prof_now(be) - t0, 0); }
static void p_emb_f(backend *be, float *o, const int32_t *t, const float *w, const float *p, int B, int T, int C)
{ double t0 = prof_now(be); real.embedding_forward(be, o, t, w, p, B, T, C); prof_add("embedding_forward (gathers)", prof_now(be) - t0, 0); }
static void p_emb_b(backend *be, float *dw, float *dp, const float *d, const int32_t *t, int B, int T, int C, int V)
{ double t0 = prof_now(be); real.embedding_backward(be, dw, dp, d, t, B, T, C, V); prof_add("embedding_backward (scatters)", prof_now(be) - t0, 0); }

static void p_att_rows(backend *be, float *o, const float *q, const float *k, const float *v, float *kc, float *vc, const int32_t *pos, int R, int cap, int H, int Hkv, int D)
{ double t0 = prof_now(be); real.attention_decode_rows(be, o, q, k, v, kc, vc, pos, R, cap, H, Hkv, D); prof_add("attention_decode_rows", prof_now(be) - t0, 0); }
static void p_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float th, const float *f)
{ double t0 = prof_now(be); real.rope_rows(be, x, pos, R, H, D, th, f); prof_add("rope_rows", prof_now(be) - t0, 0); }
static void p_add(backend *be, float *o, const float *a, const float *b, size_t n)
{ double t0 = prof_now(be); real.add(be, o, a, b, n); prof_add("add", prof_now(be) - t0, 0); }
static void p_axpy(backend *be, float *y, float al, const float *x, size_t n)
{ double t0 = prof_now(be); real.axpy(be, y, al, x, n); prof_add("axpy", prof_now(be) - t0, 0); }
static void p_bias_f(backend *be, float *o, const float *b, int N, int C)
{ double t0 = prof_now(be); real.bias_add(be, o, b, N, C); prof_add("bias_add", prof_now(be) - t0, 0); }
static void p_bias_b(backend *be, float *db, const float *d, int N, int C)
{ double t0 = prof_now(be); real.bias_backward(be, db, d, N, C); prof_add("bias_backward", prof_now(be) - t0, 0); }
static void p_ln_f(backend *be, float *o, float *mu, float *rs, const float *x, const float *w, const float *b, int N, int C, float eps)
{ double t0 = prof_now(be); real.layernorm_forward(be, o, mu, rs, x, w, b, N, C, eps); prof_add("layernorm_forward", prof_now(be) - t0, 0); }
static void p_ln_b(backend *be, float *dx, float *dw, float *db, const float *d, const float *x, const float *w, const float *mu, const float *rs, int N, int C)
{ double t0 = prof_now(be); real.layernorm_backward(be, dx, dw, db, d, x, w, mu, rs, N, C); prof_add("layernorm_backward", prof_now(be) - t0, 0); }
static void p_gelu_f(backend *be, float *o, const float *x, size_t n)
{ double t0 = prof_now(be); real.gelu_forward(be, o, x, n); prof_add("gelu_forward", prof_now(be) - t0, 0); }
static void p_gelu_b(backend *be, float *dx, const float *x, const float *d, size_t n)
{ double t0 = prof_now(be); real.gelu_backward(be, dx, x, d, n); prof_add("gelu_backward", prof_now(be) - t0, 0); }
static void p_adamw(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps, float wd, int t, float gs)
{ double t0 = prof_now(be); real.adamw(be, p, g, m, v, n, lr, b1, b2, eps, wd, t, gs); prof_add("adamw", prof_now(be) - t0, 0); }
static void p_wbf16(backend *be, const float *w, size_t n)
{ double t0 = prof_now(be); real.weights_bf16(be, w, n); prof_add("weights_bf16", prof_now(be) - t0, 0); }

static void prof_install(backend *be)
{
    real = prof = *be->ops;
    prof.matmul = p_matmul; prof.attention_forward = p_att_f; prof.attention_backward = p_att_b;
    prof.rmsnorm_forward = p_rms_f; prof.rmsnorm_backward = p_rms_b; prof.swiglu_forward = p_sw_f;
    prof.swiglu_backward = p_sw_b; prof.rope = p_rope; prof.fill = p_fill; prof.copy_d2d = p_copy;
    prof.softmax_xent = p_xent; prof.embedding_forward = p_emb_f; prof.embedding_backward = p_emb_b;
    if (real.attention_decode_rows) prof.attention_decode_rows = p_att_rows;
    if (real.rope_rows) prof.rope_rows = p_rope_rows;
    prof.add = p_add; prof.axpy = p_axpy; prof.bias_add = p_bias_f; prof.bias_backward = p_bias_b;
    prof.layernorm_forward = p_ln_f; prof.layernorm_backward = p_ln_b; prof.gelu_forward = p_gelu_f;
    prof.gelu_backward = p_gelu_b; prof.adamw = p_adamw;
    if (real.weights_bf16) prof.weights_bf16 = p_wbf16;
    be->ops = &prof;
}

/* Needle's layers and mixing ops (bench_needle): one wrapper each, timed under the op's name. */
#define PROF_WRAP(op, params, args) \
    static void p_##op params { double t0 = prof_now(be); real.op args; prof_add(#op, prof_now(be) - t0, 0); }
PROF_WRAP(conv_taps_forward, (backend *be, float *o, const float *x, const float *w, int B, int T, int C, int K, int dil), (be, o, x, w, B, T, C, K, dil))
PROF_WRAP(conv_taps_backward, (backend *be, float *dx, float *dw, const float *d, const float *x, const float *w, int B, int T, int C, int K, int dil), (be, dx, dw, d, x, w, B, T, C, K, dil))
PROF_WRAP(sigmoid_gate_forward, (backend *be, float *o, const float *x, const float *g, size_t n), (be, o, x, g, n))
PROF_WRAP(sigmoid_gate_backward, (backend *be, float *dx, float *dg, const float *d, const float *x, const float *g, size_t n), (be, dx, dg, d, x, g, n))
PROF_WRAP(scalar_gate_forward, (backend *be, float *o, const float *x, const float *sc, size_t n), (be, o, x, sc, n))
PROF_WRAP(scalar_gate_backward, (backend *be, float *dx, float *ds, const float *d, const float *x, const float *sc, size_t n), (be, dx, ds, d, x, sc, n))
PROF_WRAP(cq_w4_quant, (backend *be, float *o, const float *w, const float *cb, int r, int c), (be, o, w, cb, r, c))
PROF_WRAP(fake_quant_a8, (backend *be, float *o, const float *x, int r, int c), (be, o, x, r, c))
PROF_WRAP(kron_apply, (backend *be, float *o, const float *z, const float *A, const float *Bm, int N, int a, int b, int t, const backend_kron_io *io), (be, o, z, A, Bm, N, a, b, t, io))
PROF_WRAP(permute_cols, (backend *be, float *o, const float *x, const int32_t *p, int N, int n, int inv), (be, o, x, p, N, n, inv))
PROF_WRAP(scale_cols, (backend *be, float *o, const float *x, const float *d, int N, int ni, int no), (be, o, x, d, N, ni, no))
PROF_WRAP(softmax_rows, (backend *be, float *o, const float *x, int N, int n), (be, o, x, N, n))
PROF_WRAP(softmax_rows_backward, (backend *be, float *dx, const float *d, const float *sm, int N, int n), (be, dx, d, sm, N, n))
PROF_WRAP(hada_mid_forward, (backend *be, float *o, const float *z1, const float *c, const float *d2, const float *b2, int N, int n), (be, o, z1, c, d2, b2, N, n))
PROF_WRAP(hada_mid_backward, (backend *be, float *dz1, float *dc, const float *d, const float *z1, const float *c, const float *d2, const float *b2, int N, int n), (be, dz1, dc, d, z1, c, d2, b2, N, n))
PROF_WRAP(mhc_coeffs_forward, (backend *be, float *h, const float *z, const float *al, const float *bi, int N, int L, int l), (be, h, z, al, bi, N, L, l))
PROF_WRAP(mhc_coeffs_backward, (backend *be, float *dz, const float *dh, const float *z, const float *al, const float *bi, int N, int L, int l), (be, dz, dh, z, al, bi, N, L, l))
PROF_WRAP(mhc_collapse, (backend *be, float *u, const float *X, const float *h, int hs, int N, int L, int d), (be, u, X, h, hs, N, L, d))
PROF_WRAP(mhc_collapse_backward, (backend *be, float *dX, float *dh, const float *du, const float *X, const float *h, int hs, int N, int L, int d), (be, dX, dh, du, X, h, hs, N, L, d))
PROF_WRAP(mhc_expand, (backend *be, float *Xo, const float *X, const float *h, const float *y, int N, int L, int d), (be, Xo, X, h, y, N, L, d))
PROF_WRAP(mhc_expand_backward, (backend *be, float *dX, float *dh, float *dy, const float *g, const float *X, const float *h, const float *y, int N, int L, int d), (be, dX, dh, dy, g, X, h, y, N, L, d))
PROF_WRAP(engram_gate_forward, (backend *be, float *o, const float *u, const float *k, const float *v, int N, int d), (be, o, u, k, v, N, d))
PROF_WRAP(engram_gate_backward, (backend *be, float *du, const float *d, const float *u, const float *k, const float *v, int N, int dd), (be, du, d, u, k, v, N, dd))
#undef PROF_WRAP

static inline void prof_install_needle(backend *be)
{
    prof_install(be);
#define PROF_SET(op) if (real.op) prof.op = p_##op
    PROF_SET(conv_taps_forward); PROF_SET(conv_taps_backward); PROF_SET(sigmoid_gate_forward);
    PROF_SET(sigmoid_gate_backward); PROF_SET(scalar_gate_forward); PROF_SET(scalar_gate_backward);
    PROF_SET(cq_w4_quant); PROF_SET(fake_quant_a8); PROF_SET(kron_apply); PROF_SET(permute_cols);
    PROF_SET(scale_cols); PROF_SET(softmax_rows); PROF_SET(softmax_rows_backward);
    PROF_SET(hada_mid_forward); PROF_SET(hada_mid_backward); PROF_SET(mhc_coeffs_forward);
    PROF_SET(mhc_coeffs_backward); PROF_SET(mhc_collapse); PROF_SET(mhc_collapse_backward);
    PROF_SET(mhc_expand); PROF_SET(mhc_expand_backward); PROF_SET(engram_gate_forward);
    PROF_SET(engram_gate_backward);
#undef PROF_SET
}

static int prof_cmp(const void *a, const void *b)
{
    double x = ((const prof_entry *)a)->s, y = ((const prof_entry *)b)->s;
    return (x < y) - (x > y);
}

/* Start over (a second phase of one run). */
static inline void prof_reset(void)
{
    memset(prof_row, 0, sizeof prof_row);
    prof_n = 0;
}

static void prof_print(int steps, double step_s)
{
    qsort(prof_row, (size_t)prof_n, sizeof prof_row[0], prof_cmp);
    double tot = 0;
    for (int i = 0; i < prof_n; i++) tot += prof_row[i].s;
    printf("profile over %d steps: %.2f s/step in ops of %.2f s/step\n", steps, tot / steps, step_s);
    for (int i = 0; i < prof_n; i++)
        printf("  %-36s %6ld calls/step %8.3f s/step %5.1f%% %7.1f GFLOP/s\n", prof_row[i].what,
               prof_row[i].calls / steps, prof_row[i].s / steps, 100 * prof_row[i].s / tot,
               prof_row[i].flops ? prof_row[i].flops / prof_row[i].s / 1e9 : 0.0);
}

#endif
