/* cpu_needle_quant.c: Needle's fake quantisation on the CPU: W4 (CQ) groups of weights and A8 /
 * KV8 rows of activations, forward only, in backends/needle_quant.h's arithmetic. Built with
 * -ffp-contract=off (backends/cpu/CMakeLists.txt): a contracted fma would round differently from
 * the GPU and move a code. Groups and rows run in parallel; each writes only its own outputs. */
#include <string.h>

#include "backends/cpu/cpu_needle.h"
#include "backends/needle_quant.h"

/* needle_quant.h's cq_group, the same operations on the same values in the same order (so the same
 * bits: test_cpu_needle checks it), laid out for the vector units. A stage h of the transform
 * takes pairs (j, j + h); any order within a stage gives the same bits, and the stages h = 1, 2, 4
 * mix only within blocks of 8, so they run block by block in registers (a - b written as is),
 * then h = 8 .. 64 as runs of h adjacent pairs. The code search is 14 passes of compares and
 * selects over the whole group, not a count and a gather of cb[q - 1], cb[q] an element. */
static inline void cpu_cq_fwht(float *v)
{
    for (int i = 0; i < CQ_GROUP; i += 8) {
        float *b = v + i;
        const float a0 = b[0] + b[1], a1 = b[0] - b[1], a2 = b[2] + b[3], a3 = b[2] - b[3];
        const float a4 = b[4] + b[5], a5 = b[4] - b[5], a6 = b[6] + b[7], a7 = b[6] - b[7];
        const float c0 = a0 + a2, c1 = a1 + a3, c2 = a0 - a2, c3 = a1 - a3;
        const float c4 = a4 + a6, c5 = a5 + a7, c6 = a4 - a6, c7 = a5 - a7;
        b[0] = c0 + c4, b[1] = c1 + c5, b[2] = c2 + c6, b[3] = c3 + c7;
        b[4] = c0 - c4, b[5] = c1 - c5, b[6] = c2 - c6, b[7] = c3 - c7;
    }
    for (int h = 8; h < CQ_GROUP; h <<= 1)
        for (int i0 = 0; i0 < CQ_GROUP; i0 += 2 * h)
            for (int j = i0; j < i0 + h; j++) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

static inline void cpu_cq_group(float *v, const float *cb)
{
    cpu_cq_fwht(v);
    for (int k = 0; k < CQ_GROUP; k++) v[k] *= CQ_HS;
    float p[32]; /* cq_sumsq: lane l's ((r0^2 + r1^2) + r2^2) + r3^2, then the xor butterfly */
    for (int l = 0; l < 32; l++) {
        const float *q = v + 4 * l;
        p[l] = ((q[0] * q[0] + q[1] * q[1]) + q[2] * q[2]) + q[3] * q[3];
    }
    for (int off = 16; off > 0; off >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++) t[l] = p[l] + p[l ^ off];
        for (int l = 0; l < 32; l++) p[l] = t[l];
    }
    const float nu = sqrtf(p[0]);
    const float den = nu > 1e-12f ? nu : 1e-12f, nu16 = cq_round_fp16(nu);
    float u[CQ_GROUP], lo[CQ_GROUP], hi[CQ_GROUP];
    for (int k = 0; k < CQ_GROUP; k++) u[k] = v[k] / den, lo[k] = cb[0], hi[k] = cb[1];
    /* cq_code's pos = #{c : cb[c] < u} clipped to [1, 15], lo = cb[pos - 1], hi = cb[pos]: the
     * codebook ascends, so those c are a prefix and lo, hi follow the last c in [1, 14] below u
     * (none, a NaN included: pos 1) */
    for (int c = 1; c < CQ_CODES - 1; c++) {
        const float here = cb[c], next = cb[c + 1];
        for (int k = 0; k < CQ_GROUP; k++) {
            const int below = here < u[k];
            lo[k] = below ? here : lo[k];
            hi[k] = below ? next : hi[k];
        }
    }
    for (int k = 0; k < CQ_GROUP; k++) /* the nearer, the lower on a tie */
        v[k] = (fabsf(u[k] - lo[k]) <= fabsf(u[k] - hi[k]) ? lo[k] : hi[k]) * nu16;
    cpu_cq_fwht(v);
    for (int k = 0; k < CQ_GROUP; k++) v[k] *= CQ_HS;
}

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
        cpu_cq_group(v, cb);
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

/* max(|x[c]|) over c < n, from 0, a NaN never taken (the compare is false): the same value in any
 * order, so eight running maxima (one vector) and then their max, where the one-at-a-time loop
 * is a chain the compiler must not reorder (it cannot know the NaN rule makes order moot). */
static inline float cpu_absmax(const float *x, int n)
{
    float m[32] = {0};
    int c = 0;
    for (; c + 32 <= n; c += 32)
        for (int l = 0; l < 32; l++) {
            const float a = fabsf(x[c + l]);
            m[l] = a > m[l] ? a : m[l];
        }
    for (int l = 0; c + l < n; l++) m[l] = fabsf(x[c + l]) > m[l] ? fabsf(x[c + l]) : m[l];
    float amax = 0.0f;
    for (int l = 0; l < 32; l++) amax = m[l] > amax ? m[l] : amax;
    return amax;
}

/* Rows [r0, r1): the row's absolute maximum (exact), its scale, each element's A8 value. */
CPU_CLONES static void cpu_k_a8(float *out, const float *x, size_t r0, size_t r1, int cols)
{
    for (size_t r = r0; r < r1; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        const float amax = cpu_absmax(xr, cols);
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
