/* mma.h (emulator): the nvcuda::wmma TF32 subset (m16n16k8) used by the CUDA backend. Every lane
 * holds the whole tile (the real element-to-lane mapping is opaque, so code may only treat
 * fragments element-wise uniformly, which this keeps honest); loads/stores check the alignment
 * and ldm rules (32-byte aligned pointer, ldm a multiple of 4 floats) and are warp-collective.
 * __float_to_tf32 rounds to nearest, ties away (cvt.rna.tf32.f32). Test-only. */
#ifndef LOOM_EMU_MMA_H
#define LOOM_EMU_MMA_H
#include <stdint.h>
#include <string.h>

#include "cuda_runtime.h"

void emu_wmma_check(const void *p, unsigned ldm, const char *what);
void emu_warp_sync(const char *what);
int emu_lane(void);
void __syncwarp(unsigned mask = 0xffffffffu);

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

static inline float __float_to_tf32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0x1000u; /* half of the 13 dropped bits: ties go away from zero (sign-magnitude) */
        u &= ~0x1fffu;
    }
    memcpy(&f, &u, 4);
    return f;
}

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;

template <class Layout>
struct fragment<matrix_a, 16, 16, 8, precision::tf32, Layout> {
    enum { num_elements = 16 * 8 };
    float x[16 * 8]; /* [m][k] */
};
template <class Layout>
struct fragment<matrix_b, 16, 16, 8, precision::tf32, Layout> {
    enum { num_elements = 8 * 16 };
    float x[8 * 16]; /* [k][n] */
};
template <>
struct fragment<accumulator, 16, 16, 8, float, void> {
    enum { num_elements = 16 * 16 };
    float x[16 * 16]; /* [m][n] */
};

template <class F>
static inline void fill_fragment(F &f, float v)
{
    for (int i = 0; i < F::num_elements; i++) f.x[i] = v;
}

/* element (i, j) of a row_major tile is p[i ldm + j], of a col_major tile p[j ldm + i] */
template <class Layout>
static inline float emu_at(const float *p, unsigned ldm, int i, int j)
{
    return __is_same(Layout, row_major) ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
}

template <class Layout>
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 8, precision::tf32, Layout> &f,
                                    const float *p, unsigned ldm)
{
    emu_wmma_check(p, ldm, "load_matrix_sync(matrix_a)");
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 8; k++) f.x[i * 8 + k] = emu_at<Layout>(p, ldm, i, k);
    emu_warp_sync("load_matrix_sync");
}

template <class Layout>
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 8, precision::tf32, Layout> &f,
                                    const float *p, unsigned ldm)
{
    emu_wmma_check(p, ldm, "load_matrix_sync(matrix_b)");
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 16; j++) f.x[k * 16 + j] = emu_at<Layout>(p, ldm, k, j);
    emu_warp_sync("load_matrix_sync");
}

/* The last product this OS thread computed: its inputs and result (see mma_sync). */
struct emu_mma_memo {
    float a[16 * 8], b[8 * 16], c[16 * 16], d[16 * 16];
    int valid;
};

template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 8, float> &d,
                            const fragment<matrix_a, 16, 16, 8, precision::tf32, LA> &a,
                            const fragment<matrix_b, 16, 16, 8, precision::tf32, LB> &b,
                            const fragment<accumulator, 16, 16, 8, float> &c)
{
    /* Each lane computes its own product from its own fragments. The lanes of a warp run one
     * after another (fibers on one thread), so the last product is kept and a lane whose inputs
     * are bitwise the same takes its result, the same function of the same bits; a lane with
     * other inputs (a fragment treated per lane) computes its own. */
    static thread_local emu_mma_memo m;
    if (!m.valid || memcmp(m.a, a.x, sizeof m.a) != 0 || memcmp(m.b, b.x, sizeof m.b) != 0 ||
        memcmp(m.c, c.x, sizeof m.c) != 0) {
        memcpy(m.a, a.x, sizeof m.a), memcpy(m.b, b.x, sizeof m.b), memcpy(m.c, c.x, sizeof m.c);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                float s = m.c[i * 16 + j];
                for (int k = 0; k < 8; k++) s += m.a[i * 8 + k] * m.b[k * 16 + j];
                m.d[i * 16 + j] = s;
            }
        m.valid = 1;
    }
    memcpy(d.x, m.d, sizeof m.d);
    emu_warp_sync("mma_sync");
}

/* Lane 0 writes (every lane holds the same tile), between two warp barriers. */
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 8, float> &f,
                                     unsigned ldm, layout_t layout)
{
    emu_wmma_check(p, ldm, "store_matrix_sync");
    emu_warp_sync("store_matrix_sync");
    if (emu_lane() == 0)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                size_t at = layout == mem_row_major ? (size_t)i * ldm + j : (size_t)j * ldm + i;
                p[at] = f.x[i * 16 + j];
            }
    emu_warp_sync("store_matrix_sync");
}
} // namespace wmma
} // namespace nvcuda
#endif
