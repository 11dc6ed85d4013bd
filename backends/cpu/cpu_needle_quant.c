/* cpu_needle_quant.c: Needle's fake quantisation on the CPU: W4 (CQ) groups of weights and A8 /
 * KV8 rows of activations, forward only, in backends/needle_quant.h's arithmetic. Built with
 * -ffp-contract=off (backends/cpu/CMakeLists.txt): a contracted fma would round differently from
 * the GPU and move a code. Groups and rows run in parallel; each writes only its own outputs. */
#include <string.h>

#include "backends/cpu/cpu_needle.h"
#include "backends/needle_quant.h"

/* Groups [g0, g1) of rows of cols values, gpr groups a row; out may be w (a group is copied
 * before its outputs are written). */
CPU_CLONES static void cpu_k_cq(float *out, const float *w, const float *cb, size_t g0, size_t g1,
                                int cols, int gpr)
{
    float v[CQ_GROUP];
    for (size_t g = g0; g < g1; g++) {
        const size_t row = g / (size_t)gpr;
        const int c0 = (int)(g % (size_t)gpr) * CQ_GROUP;
        const int len = cols - c0 < CQ_GROUP ? cols - c0 : CQ_GROUP;
        const float *wg = w + row * cols + c0;
        float *og = out + row * cols + c0;
        for (int k = 0; k < CQ_GROUP; k++) v[k] = k < len ? wg[k] : 0.0f;
        cq_group(v, cb);
        for (int k = 0; k < len; k++) og[k] = nq_ste(wg[k], v[k]);
    }
}

void cpu_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                     int cols)
{
    if (rows <= 0 || cols <= 0) return;
    float cb[CQ_CODES];
    memcpy(cb, codebook, sizeof cb); /* device memory is host memory */
    const int gpr = (cols + CQ_GROUP - 1) / CQ_GROUP;
    const size_t G = (size_t)rows * gpr;
    int nt = G * CQ_GROUP < CPU_PAR_MIN / 8 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(G, &lo, &hi);
        cpu_k_cq(out, w, cb, lo, hi, cols, gpr);
    }
}

/* Rows [r0, r1): the row's absolute maximum (exact), its scale, each element's A8 value. */
CPU_CLONES static void cpu_k_a8(float *out, const float *x, size_t r0, size_t r1, int cols)
{
    for (size_t r = r0; r < r1; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols, amax = 0.0f;
        for (int c = 0; c < cols; c++) amax = fabsf(xr[c]) > amax ? fabsf(xr[c]) : amax;
        const float s = a8_scale(amax);
        for (int c = 0; c < cols; c++) o[c] = a8_quant(xr[c], s);
    }
}

void cpu_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols)
{
    if (rows <= 0 || cols <= 0) return;
    int nt = (size_t)rows * cols < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)rows, &lo, &hi);
        cpu_k_a8(out, x, lo, hi, cols);
    }
}
