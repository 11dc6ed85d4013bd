/* metal_ops_needle.c: Needle's layers on the Metal backend (the conv taps) as kernel launches of
 * needle.metal with their scratch, filling their entries of the op table.
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

void metal_ops_needle_fill(backend_ops *o)
{
    o->conv_taps_forward = metal_conv_taps_forward;
    o->conv_taps_backward = metal_conv_taps_backward;
    o->conv_taps_decode = metal_conv_taps_decode;
}
