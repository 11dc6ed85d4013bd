/* metal_ops_needle_mix.c: Needle's mixing layers on the Metal backend (backend.h, "Needle's
 * mixing layers": kron_apply .. engram_gate_backward) as launches of needle_mix.metal, with the
 * Kronecker product's right factor on MPS and the scratch their row reductions need, filling the
 * whole BACKEND_OP_NEEDLE_MIX group of the op table. Must never compute on tensors here: the
 * host only plans grids and row chunks. */
#include <stdint.h>

#include "backends/metal/metal_internal.h"

#define MB(p) ((void *)(uintptr_t)(p)) /* a kernel argument from a (possibly const) pointer */

/* Per-row scratch (kron_apply's L Z, Sinkhorn's trace) is taken for chunks of rows of at most
 * this many floats (16 MB) in all, so its size does not grow with the batch. */
#define METAL_MIX_SCRATCH ((size_t)1 << 22)

/* Rows per chunk when each row needs per_row floats of scratch: at least 1. */
static size_t metal_mix_chunk_rows(int N, size_t per_row)
{
    size_t rows = METAL_MIX_SCRATCH / (per_row ? per_row : 1);
    if (rows < 1) rows = 1;
    return rows < (size_t)N ? rows : (size_t)N;
}

/* --- Kronecker-factored products --- */

static void metal_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                               int inverse);
static void metal_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                             int n_out);

/* out[r] = L Z[r] R in row chunks: T = L Z by loom_mix_kron_left into scratch, then T, as
 * (rows a, b), times R on MPS: R = Bm (transpose 0) or Bm^T (transpose 1). io's gathers and
 * scales (backend_kron_io) are the permute and scale launches around it, through the chunk's
 * scratch rows Zi (the row going in) and P (the product coming out): the same kernels, so the
 * same bits as the separate ops (a fused kernel would save the GPU two passes; not written). */
static void metal_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                             int N, int a, int b, int transpose, const backend_kron_io *io)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || a <= 0 || b <= 0) return;
    const int iab = a * b;
    const size_t ab = (size_t)iab, parts = io ? 3 : 1, rows = metal_mix_chunk_rows(N, parts * ab);
    const size_t n_in = io ? (size_t)io->n_in : ab, n_out = io ? (size_t)io->n_out : ab;
    const int in_io = io && (io->in_perm || io->in_scale), out_io = io && (io->out_perm || io->out_scale);
    float *T = metal_scratch(c, rows * parts * ab), *Zi = T + rows * ab, *P = Zi + rows * ab;
    if (!T) return;
    for (size_t r0 = 0; r0 < (size_t)N; r0 += rows) {
        const size_t m = (size_t)N - r0 < rows ? (size_t)N - r0 : rows;
        const int im = (int)m;
        const float *zc = z + r0 * n_in;
        if (in_io && io->in_perm) {
            metal_permute_cols(be, Zi, zc, io->in_perm, im, iab, 0);
            if (io->in_scale) metal_scale_cols(be, Zi, Zi, io->in_scale, im, iab, iab);
            zc = Zi;
        } else if (in_io) {
            metal_scale_cols(be, Zi, zc, io->in_scale, im, (int)n_in, iab);
            zc = Zi;
        }
        metal_p_mix p = {.N = (unsigned)m, .a = (unsigned)a, .b = (unsigned)b, .flag = transpose != 0};
        metal_launch(c, MK_MIX_KRON_LEFT, m * ab, (void *[]){T, MB(zc), MB(A)}, 3, &p, sizeof p);
        const int ma = (int)(m * (size_t)a);
        float *oc = out + r0 * n_out;
        metal_mm mm = {
            .left = T, .right = Bm, .result = out_io ? P : oc,
            .left_rows = ma, .left_cols = b, .right_rows = b, .right_cols = b,
            .result_rows = ma, .result_cols = b,
            .trans_left = 0, .trans_right = transpose != 0,
            .M = ma, .N = b, .K = b, .alpha = 1.0, .beta = 0.0,
        };
        c->dev->matmul(c->ds, &mm);
        if (!out_io) continue;
        const float *pc = P;
        if (io->out_perm) { /* gathered into out itself when no scale follows, else through Zi */
            float *g = io->out_scale ? Zi : oc;
            metal_permute_cols(be, g, P, io->out_perm, im, iab, 0);
            pc = g;
        }
        if (io->out_scale) metal_scale_cols(be, oc, pc, io->out_scale, im, iab, (int)n_out);
    }
}

/* --- column permutations and scales --- */

static void metal_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                               int inverse)
{
    if (N <= 0 || n <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)n, .flag = inverse != 0};
    metal_launch(metal_c(be), MK_MIX_PERMUTE, (size_t)N * n, (void *[]){out, MB(x), MB(perm)}, 3, &p, sizeof p);
}

static void metal_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                             int n_out)
{
    if (N <= 0 || n_out <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)(n_in > 0 ? n_in : 0), .n_out = (unsigned)n_out};
    metal_launch(metal_c(be), MK_MIX_SCALE_COLS, (size_t)N * n_out, (void *[]){out, MB(x), MB(d)}, 3, &p,
                 sizeof p);
}

/* --- row softmax: each row's (max, sum) or dot in scratch, then one thread per element --- */

static void metal_softmax_rows(backend *be, float *out, const float *x, int N, int n)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || n <= 0) return;
    float *st = metal_scratch(c, 2 * (size_t)N);
    if (!st) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)n};
    metal_launch(c, MK_MIX_SOFTMAX_STATS, (size_t)N, (void *[]){st, MB(x)}, 2, &p, sizeof p);
    metal_launch(c, MK_MIX_SOFTMAX, (size_t)N * n, (void *[]){out, MB(x), st}, 3, &p, sizeof p);
}

static void metal_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s, int N,
                                        int n)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || n <= 0) return;
    float *dot = metal_scratch(c, (size_t)N);
    if (!dot) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)n};
    metal_launch(c, MK_MIX_SOFTMAX_DOT, (size_t)N, (void *[]){dot, MB(dout), MB(s)}, 3, &p, sizeof p);
    metal_launch(c, MK_MIX_SOFTMAX_BACKWARD, (size_t)N * n, (void *[]){dx, MB(dout), MB(s), dot}, 4, &p,
                 sizeof p);
}

/* --- the Hadamard MLP's middle: element-wise --- */

static void metal_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                                   const float *d2, const float *b2, int N, int n)
{
    if (N <= 0 || n <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)n};
    metal_launch(metal_c(be), MK_MIX_HADA_FORWARD, (size_t)N * n,
                 (void *[]){out, MB(z1), MB(cond), MB(d2), MB(b2)}, 5, &p, sizeof p);
}

static void metal_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                                    const float *z1, const float *cond, const float *d2, const float *b2,
                                    int N, int n)
{
    if (N <= 0 || n <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .n = (unsigned)n};
    metal_launch(metal_c(be), MK_MIX_HADA_BACKWARD, (size_t)N * n,
                 (void *[]){dz1, dcond, MB(dout), MB(z1), MB(cond), MB(d2), MB(b2)}, 7, &p, sizeof p);
}

/* --- mHC coefficients: one thread per row --- */

static void metal_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                                     const float *bias, int N, int lanes, int lane)
{
    if (N <= 0 || lanes <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .L = (unsigned)lanes, .lane = (unsigned)lane};
    metal_launch(metal_c(be), MK_MIX_COEFFS_FORWARD, (size_t)N, (void *[]){h, MB(z), MB(alpha), MB(bias)}, 4,
                 &p, sizeof p);
}

/* Each row keeps Sinkhorn's 40 step inputs (40 L^2 floats) in scratch: rows in chunks. */
static void metal_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                                      const float *alpha, const float *bias, int N, int lanes, int lane)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || lanes <= 0) return;
    const size_t L = (size_t)lanes, K = 2 * L + L * L, per = METAL_MIX_SINK_STEPS * L * L;
    const size_t rows = metal_mix_chunk_rows(N, per);
    float *trace = metal_scratch(c, rows * per);
    if (!trace) return;
    for (size_t r0 = 0; r0 < (size_t)N; r0 += rows) {
        const size_t m = (size_t)N - r0 < rows ? (size_t)N - r0 : rows;
        metal_p_mix p = {.N = (unsigned)m, .L = (unsigned)lanes, .lane = (unsigned)lane};
        metal_launch(c, MK_MIX_COEFFS_BACKWARD, m,
                     (void *[]){dz + r0 * K, trace, MB(dh + r0 * K), MB(z + r0 * K), MB(alpha), MB(bias)}, 6,
                     &p, sizeof p);
    }
}

/* --- mHC collapse and expand --- */

static void metal_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                               int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .L = (unsigned)lanes, .hs = (unsigned)hs, .d = (unsigned)d};
    metal_launch(metal_c(be), MK_MIX_COLLAPSE, (size_t)N * d, (void *[]){u, MB(X), MB(h)}, 3, &p, sizeof p);
}

/* hs = 0 (one h shared by every row) takes no dh, as the CPU's: every row would write it. */
static void metal_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du, const float *X,
                                        const float *h, int hs, int N, int lanes, int d)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .L = (unsigned)lanes, .hs = (unsigned)hs, .d = (unsigned)d};
    metal_launch(c, MK_MIX_COLLAPSE_DX, (size_t)N * lanes * d, (void *[]){dX, MB(du), MB(h)}, 3, &p, sizeof p);
    if (dh && hs != 0)
        metal_launch(c, MK_MIX_COLLAPSE_DH, (size_t)N * lanes, (void *[]){dh, MB(du), MB(X)}, 3, &p, sizeof p);
}

static void metal_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y, int N,
                             int lanes, int d)
{
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .L = (unsigned)lanes, .d = (unsigned)d};
    metal_launch(metal_c(be), MK_MIX_EXPAND, (size_t)N * lanes * d, (void *[]){Xo, MB(X), MB(h), MB(y)}, 4, &p,
                 sizeof p);
}

/* dX and dy in one launch ((L + 1) d threads a row), then dh's post and res columns. */
static void metal_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                                      const float *X, const float *h, const float *y, int N, int lanes, int d)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || lanes <= 0 || d <= 0) return;
    metal_p_mix p = {.N = (unsigned)N, .L = (unsigned)lanes, .d = (unsigned)d};
    metal_launch(c, MK_MIX_EXPAND_DX, (size_t)N * (lanes + 1) * d, (void *[]){dX, dy, MB(g), MB(h)}, 4, &p,
                 sizeof p);
    metal_launch(c, MK_MIX_EXPAND_DH, (size_t)N * lanes * (lanes + 1), (void *[]){dh, MB(g), MB(X), MB(y)}, 4,
                 &p, sizeof p);
}

/* --- the engram gate: each row's scalars in scratch, then one thread per element --- */

static void metal_engram_gate_forward(backend *be, float *out, const float *u, const float *k, const float *v,
                                      int N, int d)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || d <= 0) return;
    float *s = metal_scratch(c, (size_t)N);
    if (!s) return;
    metal_p_mix p = {.N = (unsigned)N, .d = (unsigned)d};
    metal_launch(c, MK_MIX_ENGRAM_GATE, (size_t)N, (void *[]){s, MB(u), MB(k)}, 3, &p, sizeof p);
    metal_launch(c, MK_MIX_ENGRAM_FORWARD, (size_t)N * d, (void *[]){out, MB(u), MB(v), s}, 4, &p, sizeof p);
}

static void metal_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                                       const float *k, const float *v, int N, int d)
{
    metal_ctx *c = metal_c(be);
    if (N <= 0 || d <= 0) return;
    float *ab = metal_scratch(c, 2 * (size_t)N);
    if (!ab) return;
    metal_p_mix p = {.N = (unsigned)N, .d = (unsigned)d};
    metal_launch(c, MK_MIX_ENGRAM_COEF, (size_t)N, (void *[]){ab, MB(dout), MB(u), MB(k), MB(v)}, 5, &p,
                 sizeof p);
    metal_launch(c, MK_MIX_ENGRAM_BACKWARD, (size_t)N * d, (void *[]){du, MB(dout), MB(u), MB(k), ab}, 5, &p,
                 sizeof p);
}

void metal_ops_needle_mix_fill(backend_ops *o)
{
    o->kron_apply = metal_kron_apply;
    o->permute_cols = metal_permute_cols;
    o->scale_cols = metal_scale_cols;
    o->softmax_rows = metal_softmax_rows;
    o->softmax_rows_backward = metal_softmax_rows_backward;
    o->hada_mid_forward = metal_hada_mid_forward;
    o->hada_mid_backward = metal_hada_mid_backward;
    o->mhc_coeffs_forward = metal_mhc_coeffs_forward;
    o->mhc_coeffs_backward = metal_mhc_coeffs_backward;
    o->mhc_collapse = metal_mhc_collapse;
    o->mhc_collapse_backward = metal_mhc_collapse_backward;
    o->mhc_expand = metal_mhc_expand;
    o->mhc_expand_backward = metal_mhc_expand_backward;
    o->engram_gate_forward = metal_engram_gate_forward;
    o->engram_gate_backward = metal_engram_gate_backward;
}
