/* metal_ops_needle.c: Needle's layers on the Metal backend (conv taps, sigmoid gates, W4 / A8
 * fake quantisation) as kernel launches of needle.metal with their scratch, filling their entries
 * of the op table.
 * Must never compute on tensors here: the host only plans grids. */
#include <stdint.h>

#include "backends/metal/metal_internal.h"

#define MB(p) ((void *)(uintptr_t)(p)) /* a kernel argument from a (possibly const) pointer */

/* --- conv taps --- */

static void metal_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                                    int T, int C, int K, int dil)
{
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0) return;
    metal_p_taps p = {(unsigned)(B * T), (unsigned)T, (unsigned)C, (unsigned)K, (unsigned)dil, 0, 0};
    metal_launch(metal_c(be), MK_TAPS_FORWARD, (size_t)B * T * C, (void *[]){out, MB(inp), MB(w)}, 3, &p,
                 sizeof p);
}

/* dinp directly; dw through chunk partials (nchunks x K*C in scratch) and loom_colsum_final. */
static void metal_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                                     const float *inp, const float *w, int B, int T, int C, int K, int dil)
{
    metal_ctx *c = metal_c(be);
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0) return;
    metal_p_taps p = {(unsigned)(B * T), (unsigned)T, (unsigned)C, (unsigned)K, (unsigned)dil, 0, 0};
    if (dinp)
        metal_launch(c, MK_TAPS_DINP, (size_t)B * T * C, (void *[]){dinp, MB(dout), MB(w)}, 3, &p, sizeof p);
    if (!dw) return; /* frozen taps */
    metal_p_rows r = {.N = p.N, .C = (unsigned)(K * C)};
    metal_colsum_plan((int)p.N, K * C, &r.nchunks, &r.chunk_rows);
    p.nchunks = r.nchunks;
    p.chunk_rows = r.chunk_rows;
    float *part = metal_scratch(c, (size_t)r.nchunks * K * C);
    if (!part) return;
    metal_launch(c, MK_TAPS_WPARTIAL, (size_t)r.nchunks * K * C, (void *[]){part, MB(dout), MB(inp)}, 3, &p,
                 sizeof p);
    metal_launch(c, MK_COLSUM_FINAL, (size_t)K * C, (void *[]){dw, part}, 2, &r, sizeof r);
}

static void metal_conv_taps_decode(backend *be, float *out, float *state, const float *x, const float *w,
                                   int R, int C, int K, int dil)
{
    if (R <= 0 || C <= 0 || K <= 0) return;
    metal_p_taps p = {(unsigned)R, 1, (unsigned)C, (unsigned)K, (unsigned)dil, 0, 0};
    metal_launch(metal_c(be), MK_TAPS_DECODE, (size_t)R * C, (void *[]){out, state, MB(x), MB(w)}, 4, &p,
                 sizeof p);
}

/* --- sigmoid gates: element-wise kernels in launches of at most METAL_CHUNK items --- */

/* Kernel k over n items: the first nvec pointers advance with the chunk, the rest (a scalar
 * parameter) stay. */
static void metal_gate_ew(backend *be, int k, void *const *ptrs, int nptrs, int nvec, size_t n)
{
    for (size_t o = 0; o < n; o += METAL_CHUNK) {
        size_t m = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
        void *bufs[8];
        for (int i = 0; i < nptrs; i++) bufs[i] = i < nvec ? (void *)((float *)ptrs[i] + o) : ptrs[i];
        metal_p_vec p = {(unsigned)m, 0.0f, 0.0f};
        metal_launch(metal_c(be), k, m, bufs, nptrs, &p, sizeof p);
    }
}

static void metal_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g, size_t n)
{
    metal_gate_ew(be, MK_GATE_FORWARD, (void *[]){out, MB(x), MB(g)}, 3, 3, n);
}

static void metal_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout, const float *x,
                                        const float *g, size_t n)
{
    metal_gate_ew(be, MK_GATE_BACKWARD, (void *[]){dx, dg, MB(dout), MB(x), MB(g)}, 5, 5, n);
}

static void metal_scalar_gate_forward(backend *be, float *out, const float *x, const float *s, size_t n)
{
    metal_gate_ew(be, MK_SCALAR_GATE_FORWARD, (void *[]){out, MB(x), MB(s)}, 3, 2, n);
}

/* ds: METAL_GATE_PARTS partial sums per chunk of the items (scratch), then one thread adds them
 * all in order; dx after it (dx may be dout). */
#define METAL_GATE_PARTS 4096u

static void metal_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout, const float *x,
                                       const float *s, size_t n)
{
    metal_ctx *c = metal_c(be);
    if (n == 0) return;
    if (ds) { /* NULL: a frozen gate */
        size_t nchunks = (n + METAL_CHUNK - 1) / METAL_CHUNK;
        float *part = metal_scratch(c, nchunks * METAL_GATE_PARTS);
        if (!part) return;
        for (size_t k = 0; k < nchunks; k++) {
            size_t o = k * METAL_CHUNK, m = n - o < METAL_CHUNK ? n - o : METAL_CHUNK;
            metal_p_sumsq p = {(unsigned)m, METAL_GATE_PARTS};
            metal_launch(c, MK_SCALAR_GATE_PARTIAL, METAL_GATE_PARTS,
                         (void *[]){part + k * METAL_GATE_PARTS, MB(dout + o), MB(x + o)}, 3, &p, sizeof p);
        }
        metal_p_sumsq q = {(unsigned)n, (unsigned)(nchunks * METAL_GATE_PARTS)};
        metal_launch(c, MK_SCALAR_GATE_DS, 1, (void *[]){ds, part, MB(s)}, 3, &q, sizeof q);
    }
    metal_gate_ew(be, MK_SCALAR_GATE_DX, (void *[]){dx, MB(dout), MB(s)}, 3, 2, n);
}

/* --- W4 / A8 fake quantisation --- */

static void metal_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows, int cols)
{
    if (rows <= 0 || cols <= 0) return;
    metal_p_quant p = {(unsigned)rows, (unsigned)cols, (unsigned)((cols + 127) / 128)};
    metal_launch(metal_c(be), MK_CQ_W4, (size_t)rows * p.gpr, (void *[]){out, MB(w), MB(codebook)}, 3, &p,
                 sizeof p);
}

/* The rows' scales in scratch, then one thread per element (out may be x: the scales are read
 * from x before any element is written). */
static void metal_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols)
{
    metal_ctx *c = metal_c(be);
    if (rows <= 0 || cols <= 0) return;
    float *scale = metal_scratch(c, (size_t)rows);
    if (!scale) return;
    metal_p_quant p = {(unsigned)rows, (unsigned)cols, 0};
    metal_launch(c, MK_A8_ROWSCALE, (size_t)rows, (void *[]){scale, MB(x)}, 2, &p, sizeof p);
    metal_launch(c, MK_A8_QUANT, (size_t)rows * cols, (void *[]){out, MB(x), scale}, 3, &p, sizeof p);
}

void metal_ops_needle_fill(backend_ops *o)
{
    o->conv_taps_forward = metal_conv_taps_forward;
    o->conv_taps_backward = metal_conv_taps_backward;
    o->conv_taps_decode = metal_conv_taps_decode;
    o->sigmoid_gate_forward = metal_sigmoid_gate_forward;
    o->sigmoid_gate_backward = metal_sigmoid_gate_backward;
    o->scalar_gate_forward = metal_scalar_gate_forward;
    o->scalar_gate_backward = metal_scalar_gate_backward;
    o->cq_w4_quant = metal_cq_w4_quant;
    o->fake_quant_a8 = metal_fake_quant_a8;
}
