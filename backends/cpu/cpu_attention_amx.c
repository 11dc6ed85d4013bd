/* cpu_attention_amx.c: causal grouped-query attention, forward and backward, on AMX tiles, for
 * `precision: bf16` (docs/precision.md). What a product reads (Q, K, V, dO, P, dS) is rounded to
 * bf16 (nearest even), every product sums in fp32 (TDPBF16PS), and the softmax and its statistics
 * stay fp32.
 *
 * Why: the fp32 path (cpu_attention.c) runs ~100-140 GFLOP/s in 48-row sgemm blocks; in a bf16
 * LoRA step of SmolLM2-135M's shapes it was a quarter of the step once the linear layers ran at
 * ~1000 GFLOP/s in oneDNN. oneDNN itself did not help here: a product per 128-query block cost
 * 10-35 us a call, most of it overhead, and the step did not get faster. These kernels keep a
 * block's scores in L1 between its two products and pay no call.
 *
 * An item is one kv head of one sequence, its G query heads stacked: row r = t G + g is query t
 * of head hk G + g (the order q already has). A unit of work is 16 such rows (one tile's height):
 * S = scale Q K^T on the keys the last of them sees, P = e^(S - m) rounded, O = P V.
 *
 * Tiles (16 rows x 64 bytes each, 8 of them): C 0-3 accumulate 16 x 64 fp32, A 4 holds 16 rows x
 * 32 bf16, B 6-7 hold 16 pairs of rows in VNNI order (B[k/2][n][k%2]), the layout TDPBF16PS
 * reads: C[m][n] += sum_k A[m][k] B[k][n]. K and V are packed into that order once per call:
 * Kt (for S: k = d, n = key) and Vp (for O: k = key, n = d).
 *
 * Measured (a bf16 LoRA step of SmolLM2-135M's shapes, B 8 T 256, 2 threads of an AMX Xeon,
 * PROFILE=1 bench_lora): forward 174 -> 72 ms a step, backward 317 -> 177 ms, against the fp32
 * path. Every output's bits are the same on 1 and 2 threads (a unit or an item has one writer).
 *
 * Plain causal attention only: with a sliding window (window > 0) cpu_attention.c never calls
 * these and runs its fp32 path. A window here would need a lower bound in every mask below
 * (amx_softmax_row, amx_dscore16) and key-block ranges that start past 0 in the products and the
 * dK/dV accumulators; not done, as no machine these tests run on has AMX to check it. */
#define _DEFAULT_SOURCE /* syscall(SYS_arch_prctl): the tile state's permission */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "base/log.h"

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define AMX_VEC __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* 1 when this process may use AMX's bf16 tiles: the CPU has them (cpuid 7: EDX bits 22, 24) and
 * Linux grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Once. */
static int cpu_amx_ready(void)
{
    static int state; /* 0 untried, 1 yes, -1 no */
    if (state) return state > 0;
    unsigned a, b, c, d;
    state = -1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return 0;
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw")) return 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        log_info("cpu: AMX present but the kernel refused its tile state: attention runs fp32");
        return 0;
    }
    state = 1;
    return 1;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) cpu_amx_cfg;

/* Every tile 16 rows x 64 bytes; per thread, before its first tile instruction. */
AMX_ISA static void cpu_amx_config(void)
{
    cpu_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    /* not _tile_loadconfig: GCC 12's names only the first byte as read, and the stores to the
     * rest were dropped as dead (ldtilecfg then read a config of all-zero tiles) */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

AMX_ISA static void cpu_amx_release(void) { _tile_release(); }

/* Call geometry: rows = T G per item; nk16/nk32: T rounded up to 16/32 keys. */
typedef struct {
    int B, T, H, Hkv, D, G, threads, rows, nk16, nk32;
    float scale;
} amx_geom;

/* e^x in 16 lanes: cpu_exp.h's method (Cody-Waite, the degree-7 polynomial) in intrinsics, with
 * scalef for 2^n; x < -87.3 (and -inf) gives 0. */
AMX_VEC static inline __m512 amx_exp(__m512 x)
{
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~under, y, fn);
}

/* Lanes [j, j + 16) below n. */
static inline __mmask16 amx_mask(int j, int n)
{
    return j + 16 <= n ? (__mmask16)0xFFFF : j >= n ? 0 : (__mmask16)((1u << (n - j)) - 1);
}

/* 16 floats rounded to bf16 (nearest even). */
AMX_VEC static inline __m256i amx_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

/* dst[i] = bf16(src[i]) for i < n (n a multiple of 16 or not). */
AMX_VEC static void amx_round(uint16_t *dst, const float *src, int n)
{
    for (int j = 0; j < n; j += 16) {
        __mmask16 k = amx_mask(j, n);
        _mm256_mask_storeu_epi16(dst + j, k, amx_bf16(_mm512_maskz_loadu_ps(k, src + j)));
    }
}

/* Where row r of item (b, hk) lives: its offset in a q-layout array ((B, T, H, D): query t of
 * head hk G + g, r = t G + g), and its index in lse ((B, H, T)). */
static inline size_t amx_row(const amx_geom *g, int b, int hk, int r)
{
    return (((size_t)b * g->T + r / g->G) * g->H + (size_t)hk * g->G + r % g->G) * g->D;
}

static inline size_t amx_lse(const amx_geom *g, int b, int hk, int r)
{
    return ((size_t)b * g->H + (size_t)hk * g->G + r % g->G) * g->T + r / g->G;
}

/* dst's rows r0 .. r0 + nr - 1 of item (b, hk) (q layout) <- a_i times row i of O (nr x D):
 * a_i = rs[i], or a where rs is NULL. */
AMX_VEC static void amx_put_rows(float *dst, const amx_geom *g, int b, int hk, int r0, int nr,
                                 const float *O, const float *rs, float a)
{
    for (int i = 0; i < nr; i++) {
        float *row = dst + amx_row(g, b, hk, r0 + i);
        __m512 av = _mm512_set1_ps(rs ? rs[i] : a);
        for (int d = 0; d < g->D; d += 16)
            _mm512_storeu_ps(row + d, _mm512_mul_ps(av, _mm512_loadu_ps(O + (size_t)i * g->D + d)));
    }
}

/* Packing: every operand a tile reads is rounded to bf16 and laid out once per call.
 * Rows (Q, dO): the item's rows r = t G + g, D each, then zero rows up to rpad (a unit may read
 * past the item's last row). Kt (for S = Q K^T, and V for dP = dO V^T): per 16 keys and 32 d, a
 * B tile of 16 pairs of d x 16 keys. Vp (for O = P V, and K for dQ = dS K): per 32 keys and 16 d,
 * a B tile of 16 pairs of keys x 16 d. Keys past T are zero. Transposed rows (Q^T, dO^T, for
 * dK^T = Q^T dS and dV^T = dO^T P): D rows of rpad. */

/* dst (rpad x D) <- the item's rows of src (q layout: (B, T, H, D), its head hk G at offset). */
AMX_VEC static void amx_pack_rows(uint16_t *dst, const float *src, const amx_geom *g, int b,
                                  int hk, int rpad)
{
    int T = g->T, D = g->D, run = g->G * D;
    for (int t = 0; t < T; t++)
        amx_round(dst + (size_t)t * run, src + ((size_t)b * T + t) * g->H * D + (size_t)hk * run,
                  run);
    memset(dst + (size_t)T * run, 0, (size_t)(rpad - g->rows) * D * sizeof(uint16_t));
}

/* Two rows of 16 bf16 as 16 VNNI pairs (row a low, b high): a tile row of a B operand. */
AMX_VEC static inline __m512i amx_pair(__m256i a, __m256i b)
{
    return _mm512_or_si512(_mm512_cvtepu16_epi32(a),
                           _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

/* r[i][j] <- r[j][i] for a 16 x 16 matrix of 32-bit elements (4 rounds of interleaves). */
AMX_VEC static void amx_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);
    }
}

/* dst (D x rpad) <- the item's rows of src transposed: dst[d][r] = src row r, column d (zero past
 * the item's rows). Per 32 rows and 16 d: the rows paired (row 2p low, 2p + 1 high: a 16 x 16
 * matrix [pair][d] of 32-bit units), transposed to [d][pair], which is dst's 32 rows of d. */
AMX_VEC static void amx_pack_rows_t(uint16_t *dst, const float *src, const amx_geom *g, int b,
                                    int hk, int rpad)
{
    int D = g->D;
    for (int r0 = 0; r0 < rpad; r0 += 32)
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512i m[16];
            for (int p = 0; p < 16; p++) {
                __m256i h[2];
                for (int e = 0; e < 2; e++) {
                    int r = r0 + 2 * p + e;
                    h[e] = r < g->rows ? amx_bf16(_mm512_loadu_ps(src + amx_row(g, b, hk, r) + d0))
                                       : _mm256_setzero_si256();
                }
                m[p] = amx_pair(h[0], h[1]);
            }
            amx_transpose16(m);
            for (int j = 0; j < 16; j++)
                _mm512_storeu_si512((void *)(dst + (size_t)(d0 + j) * rpad + r0), m[j]);
        }
}

/* Kt layout of kv head hk's keys (k layout: (B, T, Hkv, D)): per 16 keys and 32 d, each key's
 * 16 d pairs (a 16 x 16 matrix [key][pair] of 32-bit units) transposed to [pair][key]. */
AMX_VEC static void amx_pack_kt(uint16_t *dst, const float *src, const amx_geom *g, int b, int hk)
{
    int D = g->D, dq = D / 32;
    size_t ldk = (size_t)g->Hkv * D;
    const float *k0 = src + (size_t)b * g->T * ldk + (size_t)hk * D;
    for (int n0 = 0; n0 < g->nk16; n0 += 16)
        for (int h = 0; h < dq; h++) {
            __m512i m[16];
            for (int n = 0; n < 16; n++) {
                const float *row = k0 + (size_t)(n0 + n) * ldk + h * 32;
                m[n] = n0 + n < g->T ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16),
                                                                     _mm512_loadu_ps(row))
                                     : _mm512_setzero_si512();
            }
            amx_transpose16(m);
            uint16_t *tile = dst + ((size_t)(n0 / 16) * dq + h) * 512;
            for (int p = 0; p < 16; p++) _mm512_storeu_si512((void *)(tile + p * 32), m[p]);
        }
}

/* Vp layout of kv head hk's keys: a tile row is keys (2r, 2r + 1) of a 32-key block, 16 d. */
AMX_VEC static void amx_pack_vp(uint16_t *dst, const float *src, const amx_geom *g, int b, int hk)
{
    int D = g->D, dv = D / 16;
    size_t ldk = (size_t)g->Hkv * D;
    const float *v0 = src + (size_t)b * g->T * ldk + (size_t)hk * D;
    for (int n = 0; n < g->nk32; n += 2) {
        __mmask16 a = n < g->T ? 0xFFFF : 0, c = n + 1 < g->T ? 0xFFFF : 0;
        const float *ra = v0 + (size_t)(n < g->T ? n : 0) * ldk;
        const float *rc = v0 + (size_t)(n + 1 < g->T ? n + 1 : 0) * ldk;
        uint16_t *row = dst + (size_t)(n / 32) * dv * 512 + ((n % 32) / 2) * 32;
        for (int d = 0; d < D; d += 16)
            _mm512_storeu_si512((void *)(row + (size_t)(d / 16) * 512),
                                amx_pair(amx_bf16(_mm512_maskz_loadu_ps(a, ra + d)),
                                         amx_bf16(_mm512_maskz_loadu_ps(c, rc + d))));
    }
}

/* S (16 x ld fp32) = Q rows (16 x D) K^T on keys [0, 16 nb): 4 key blocks at a time in C 0-3. */
AMX_ISA static void amx_scores(float *S, int ld, const uint16_t *Q, const uint16_t *Kt, int nb,
                               int D)
{
    int dq = D / 32;
    for (int kb = 0; kb < nb; kb += 4) {
        int n = nb - kb < 4 ? nb - kb : 4;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int h = 0; h < dq; h++) {
            const uint16_t *kt = Kt + ((size_t)kb * dq + h) * 512;
            _tile_loadd(4, Q + h * 32, D * 2);
            _tile_loadd(6, kt, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (n > 1) {
                _tile_loadd(7, kt + (size_t)dq * 512, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (n > 2) {
                _tile_loadd(6, kt + (size_t)2 * dq * 512, 64);
                _tile_dpbf16ps(2, 4, 6);
            }
            if (n > 3) {
                _tile_loadd(7, kt + (size_t)3 * dq * 512, 64);
                _tile_dpbf16ps(3, 4, 7);
            }
        }
        float *s = S + kb * 16;
        _tile_stored(0, s, ld * 4);
        if (n > 1) _tile_stored(1, s + 16, ld * 4);
        if (n > 2) _tile_stored(2, s + 32, ld * 4);
        if (n > 3) _tile_stored(3, s + 48, ld * 4);
    }
}

/* O (16 x D fp32) = P (16 x 32 nb bf16, ld apart) V, 64 columns at a time in C 0-3. */
AMX_ISA static void amx_mix(float *O, const uint16_t *P, int ld, const uint16_t *Vp, int nb, int D)
{
    int dv = D / 16;
    for (int c = 0; c < D; c += 64) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int kb = 0; kb < nb; kb++) {
            const uint16_t *vp = Vp + ((size_t)kb * dv + c / 16) * 512;
            _tile_loadd(4, P + kb * 32, ld * 2);
            _tile_loadd(6, vp, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, vp + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(6, vp + 1024, 64);
            _tile_dpbf16ps(2, 4, 6);
            _tile_loadd(7, vp + 1536, 64);
            _tile_dpbf16ps(3, 4, 7);
        }
        _tile_stored(0, O + c, D * 4);
        _tile_stored(1, O + c + 16, D * 4);
        _tile_stored(2, O + c + 32, D * 4);
        _tile_stored(3, O + c + 48, D * 4);
    }
}

/* Score row of a query that sees `valid` keys, n32 wide in P: s_j <- scale s_j,
 * p_j = bf16(e^(s_j - m)) for j < valid, 0 up to n32; returns rowsum(e), *m_out = m. */
AMX_VEC static float amx_softmax_row(const float *s, uint16_t *p, int valid, int n32, float scale,
                                     float *m_out)
{
    __m512 mv = _mm512_set1_ps(-INFINITY), sc = _mm512_set1_ps(scale);
    for (int j = 0; j < valid; j += 16) {
        __mmask16 k = amx_mask(j, valid);
        mv = _mm512_mask_max_ps(mv, k, mv, _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(k, s + j)));
    }
    float m = _mm512_reduce_max_ps(mv);
    __m512 mm = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
    for (int j = 0; j < n32; j += 16) {
        __mmask16 k = amx_mask(j, valid);
        __m512 x = _mm512_fmsub_ps(sc, _mm512_maskz_loadu_ps(k, s + j), mm);
        __m512 e = _mm512_maskz_mov_ps(k, amx_exp(x));
        sum = _mm512_add_ps(sum, e);
        _mm256_storeu_si256((__m256i *)(p + j), (__m256i)_mm512_cvtneps_pbh(e));
    }
    *m_out = m;
    return _mm512_reduce_add_ps(sum);
}

/* An item's packed operands: per item, `per` elements from `base`, in this order. */
typedef struct {
    uint16_t *base;
    size_t per, q, kt, vp, dO, vt, kp, qT, dOT; /* offsets within an item (bwd: all) */
} amx_ops;

static const uint16_t *amx_op(const amx_ops *o, size_t item, size_t off)
{
    return o->base + item * o->per + off;
}

/* Forward of rows [r0, r0 + 16) of an item; scr: S (16 x nk16 fp32), O (16 x D fp32),
 * P (16 x nk32 bf16). */
AMX_ISA static void amx_fwd_unit(const amx_geom *g, const amx_ops *o, int b, int hk, int r0,
                                 float *out, float *lse, float *scr)
{
    int D = g->D, G = g->G, nr = g->rows - r0 < 16 ? g->rows - r0 : 16;
    int last = (r0 + nr - 1) / G + 1; /* keys the unit's last query sees */
    int nb16 = (last + 15) / 16, nb32 = (last + 31) / 32;
    size_t item = (size_t)b * g->Hkv + hk;
    float *S = scr, *O = S + 16 * g->nk16;
    uint16_t *P = (uint16_t *)(O + 16 * D);
    amx_scores(S, g->nk16, amx_op(o, item, o->q) + (size_t)r0 * D, amx_op(o, item, o->kt), nb16, D);
    float rs[16];
    for (int i = 0; i < 16; i++) {
        if (i >= nr) { /* a row past the item's: P zero, so its O row is 0 and unused */
            memset(P + i * g->nk32, 0, (size_t)nb32 * 32 * sizeof(uint16_t));
            continue;
        }
        float m, sum = amx_softmax_row(S + i * g->nk16, P + i * g->nk32, (r0 + i) / G + 1,
                                       nb32 * 32, g->scale, &m);
        lse[amx_lse(g, b, hk, r0 + i)] = m + logf(sum);
        rs[i] = 1.0f / sum;
    }
    amx_mix(O, P, g->nk32, amx_op(o, item, o->vp), nb32, D);
    amx_put_rows(out, g, b, hk, r0, nr, O, rs, 1.0f);
}

/* The geometry, or 0 where these kernels do not run (fp32 precision, no AMX, D not a multiple
 * of 64). */
static int amx_geom_init(backend *be, amx_geom *g, int B, int T, int H, int Hkv, int D)
{
    if (be->cfg.precision != BACKEND_BF16 || B <= 0 || T <= 0 || D % 64 || !cpu_amx_ready())
        return 0;
    *g = (amx_geom){B,      T, H, Hkv, D, H / Hkv, cpu_st(be)->threads, T * (H / Hkv),
                    (T + 15) / 16 * 16, (T + 31) / 32 * 32, 1.0f / sqrtf((float)D)};
    return 1;
}

/* Carves the items' packed operands (fwd: q, kt, vp; bwd: all) from one grow-only allocation
 * kept by the backend; 0 when out of memory. */
static int amx_ops_reserve(cpu_state *st, const amx_geom *g, amx_ops *o, int bwd)
{
    size_t rpad = (size_t)(g->rows + 31) / 32 * 32, D = (size_t)g->D;
    size_t rows = rpad * D, k16 = (size_t)g->nk16 * D, k32 = (size_t)g->nk32 * D;
    memset(o, 0, sizeof *o);
    o->kt = rows, o->vp = o->kt + k16, o->per = o->vp + k32;
    if (bwd) {
        o->dO = o->per, o->vt = o->dO + rows, o->kp = o->vt + k16, o->qT = o->kp + k32;
        o->dOT = o->qT + rows, o->per = o->dOT + rows;
    }
    size_t bytes = 2 * (size_t)g->B * g->Hkv * o->per;
    if (bytes > st->att_amx_cap) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) {
            log_warn("cpu backend: out of memory for bf16 attention (%zu bytes); fp32 instead",
                     bytes);
            return 0;
        }
        free(st->att_amx);
        st->att_amx = p;
        st->att_amx_cap = bytes;
    }
    o->base = st->att_amx;
    return 1;
}

/* Packs item it's operands (see amx_pack_rows); dout NULL: the forward's only. */
AMX_VEC static void amx_pack_item(const amx_geom *g, const amx_ops *o, int it, const float *q,
                                  const float *k, const float *v, const float *dout)
{
    int b = it / g->Hkv, hk = it % g->Hkv, rpad = (g->rows + 31) / 32 * 32;
    uint16_t *base = o->base + (size_t)it * o->per;
    amx_pack_rows(base + o->q, q, g, b, hk, rpad);
    amx_pack_kt(base + o->kt, k, g, b, hk);
    amx_pack_vp(base + o->vp, v, g, b, hk);
    if (!dout) return;
    amx_pack_rows(base + o->dO, dout, g, b, hk, rpad);
    amx_pack_kt(base + o->vt, v, g, b, hk);
    amx_pack_vp(base + o->kp, k, g, b, hk);
    amx_pack_rows_t(base + o->qT, q, g, b, hk, rpad);
    amx_pack_rows_t(base + o->dOT, dout, g, b, hk, rpad);
}

int cpu_attention_amx_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int Hkv, int D)
{
    amx_geom g;
    amx_ops o;
    cpu_state *st = cpu_st(be);
    if (!amx_geom_init(be, &g, B, T, H, Hkv, D) || !amx_ops_reserve(st, &g, &o, 0) ||
        cpu_scratch_reserve(st, (size_t)16 * g.nk16 + 16 * (size_t)D + 8 * (size_t)g.nk32) != 0)
        return 0;
    int items = B * Hkv, units = (g.rows + 15) / 16;
#pragma omp parallel num_threads(g.threads)
    {
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) amx_pack_item(&g, &o, it, q, k, v, NULL);
        cpu_amx_config();
        float *scr = st->scratch[CPU_TID()];
        /* the last units of an item see the most keys: hand them out first */
#pragma omp for schedule(dynamic, 1)
        for (long w = 0; w < (long)items * units; w++) {
            int u = units - 1 - (int)(w / items), it = (int)(w % items);
            amx_fwd_unit(&g, &o, it / Hkv, it % Hkv, u * 16, out, lse, scr);
        }
        cpu_amx_release();
    }
    return 1;
}

/* ---- backward ----
 * Per item, in units of 32 rows (the K depth of a tile, for the products over rows): with
 * s = scale q.k, p = e^(s - lse), dp = dO.v, delta = dO.O, ds = p (dp - delta):
 * dQ = scale dS K (rows of the unit: written once), dV^T += dO^T P and dK^T += Q^T dS (D x keys
 * fp32 accumulators of the item, in memory: C tiles loaded, added to, stored), scaled and
 * transposed into dk, dv at the item's end. P and dS go to tiles in VNNI order over row pairs
 * (Pv: per 16 keys, 16 pairs of rows x 16 keys x 2); dS also row-major for dQ. */

/* p and ds of one score row's 16 keys at j (valid: keys the query sees). */
AMX_VEC static inline void amx_dscore16(const float *s, const float *dp, int j, int valid,
                                        __m512 sc, __m512 l, __m512 delta, __m256i *p16,
                                        __m256i *ds16)
{
    __mmask16 k = amx_mask(j, valid);
    __m512 x = _mm512_fmsub_ps(sc, _mm512_maskz_loadu_ps(k, s + j), l);
    __m512 p = _mm512_maskz_mov_ps(k, amx_exp(x));
    __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + j), delta));
    *p16 = (__m256i)_mm512_cvtneps_pbh(p);
    *ds16 = (__m256i)_mm512_cvtneps_pbh(ds);
}

/* Row chunks (32 rows each) whose P and dS a thread keeps at once: the products over rows then
 * keep their C tiles across a whole group (loaded and stored once per group, not per chunk).
 * Bytes per chunk: 2 operands x nk16 x 32 x 2; a group holds at most 4 MB, all of T = 256's. */
#define AMX_GROUP_BYTES ((size_t)4 << 20)

static int amx_group_chunks(const amx_geom *g)
{
    size_t per = (size_t)4 * g->nk16 * 32, n = AMX_GROUP_BYTES / per;
    int chunks = (g->rows + 31) / 32;
    return n < 1 ? 1 : n > (size_t)chunks ? chunks : (int)n;
}

/* The backward's per-thread buffers. */
typedef struct {
    float *S, *dP, *dQ, *dKt, *dVt; /* 32 x nk16, 32 x nk16, 16 x D, D x nk16, D x nk16 */
    uint16_t *dS;                   /* 32 x nk32 row-major */
    uint16_t *Pv, *dSv;             /* a group's chunks, nk16 32 each (VNNI pairs of rows) */
} amx_bwd_scr;

static size_t amx_bwd_scratch_floats(const amx_geom *g)
{
    return (size_t)64 * g->nk16 + 16 * (size_t)g->D + 2 * (size_t)g->D * g->nk16 +
           16 * (size_t)g->nk32 + (size_t)amx_group_chunks(g) * 32 * g->nk16;
}

static amx_bwd_scr amx_bwd_scr_carve(float *f, const amx_geom *g)
{
    amx_bwd_scr s;
    s.S = f, s.dP = s.S + 32 * g->nk16, s.dQ = s.dP + 32 * g->nk16;
    s.dKt = s.dQ + 16 * g->D, s.dVt = s.dKt + (size_t)g->D * g->nk16;
    s.dS = (uint16_t *)(s.dVt + (size_t)g->D * g->nk16);
    s.Pv = s.dS + 32 * g->nk32, s.dSv = s.Pv + (size_t)amx_group_chunks(g) * 32 * g->nk16;
    return s;
}

/* The fp32 inputs and outputs of the backward. */
typedef struct {
    const float *dout, *out, *lse;
    float *dq, *dk, *dv;
} amx_bwd_io;

/* Rows [r0, r0 + 32) of an item: p, ds for keys [0, nb16 16) into x->dS (and zeros to nb32 32),
 * Pv and dSv (this chunk's slots), from the scores in x->S and x->dP. */
AMX_VEC static void amx_bwd_scores(const amx_geom *g, const amx_bwd_io *io, int b, int hk, int r0,
                                   int nb16, int nb32, amx_bwd_scr *x, uint16_t *Pv, uint16_t *dSv)
{
    __m512 sc = _mm512_set1_ps(g->scale);
    for (int i = 0; i < 32; i += 2) { /* a row pair: one VNNI tile row per 16 keys */
        float l[2] = {0, 0}, delta[2] = {0, 0};
        int valid[2] = {0, 0};
        for (int e = 0; e < 2; e++) {
            int r = r0 + i + e;
            if (r >= g->rows) continue; /* a row past the item's: p = ds = 0 */
            const float *o = io->out + amx_row(g, b, hk, r), *dO = io->dout + amx_row(g, b, hk, r);
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < g->D; d += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(o + d), _mm512_loadu_ps(dO + d), acc);
            delta[e] = _mm512_reduce_add_ps(acc);
            l[e] = io->lse[amx_lse(g, b, hk, r)];
            valid[e] = r / g->G + 1;
        }
        for (int j = 0; j < nb32 * 32; j += 16) {
            __m256i p[2], ds[2];
            for (int e = 0; e < 2; e++)
                amx_dscore16(x->S + (size_t)(i + e) * g->nk16, x->dP + (size_t)(i + e) * g->nk16,
                             j, valid[e], sc, _mm512_set1_ps(l[e]), _mm512_set1_ps(delta[e]),
                             &p[e], &ds[e]);
            _mm256_storeu_si256((__m256i *)(x->dS + (size_t)i * g->nk32 + j), ds[0]);
            _mm256_storeu_si256((__m256i *)(x->dS + (size_t)(i + 1) * g->nk32 + j), ds[1]);
            if (j >= nb16 * 16) continue;
            size_t v = (size_t)(j / 16) * 512 + (size_t)(i / 2) * 32;
            _mm512_storeu_si512((void *)(Pv + v), amx_pair(p[0], p[1]));
            _mm512_storeu_si512((void *)(dSv + v), amx_pair(ds[0], ds[1]));
        }
    }
}

/* acc (D x ld fp32) += At (D x rows, lda: a transposed operand) times the group's chunks
 * [c0, c1) of Bv (per chunk: nk16 blocks of 16 row pairs x 16 keys), keys in 4-block quads so
 * four C tiles stay loaded while every chunk adds to them; a chunk adds only to the key blocks
 * it sees (nb16[c] of them: its P and dS are zero past them, and not written). */
AMX_ISA static void amx_accumulate(float *acc, int ld, const uint16_t *At, int lda,
                                   const uint16_t *Bv, const int *nb16, int c0, int c1, int D)
{
    size_t slot = (size_t)ld * 32;
    for (int d = 0; d < D; d += 16)
        for (int kb = 0; kb < nb16[c1 - 1]; kb += 4) {
            int n = nb16[c1 - 1] - kb < 4 ? nb16[c1 - 1] - kb : 4;
            float *c = acc + (size_t)d * ld + kb * 16;
            _tile_loadd(0, c, ld * 4);
            if (n > 1) _tile_loadd(1, c + 16, ld * 4);
            if (n > 2) _tile_loadd(2, c + 32, ld * 4);
            if (n > 3) _tile_loadd(3, c + 48, ld * 4);
            for (int ch = c0; ch < c1; ch++) {
                int m = nb16[ch] - kb;
                if (m <= 0) continue;
                const uint16_t *bv = Bv + (size_t)(ch - c0) * slot + (size_t)kb * 512;
                _tile_loadd(4, At + (size_t)d * lda + ch * 32, lda * 2);
                _tile_loadd(6, bv, 64);
                _tile_dpbf16ps(0, 4, 6);
                if (m > 1 && n > 1) {
                    _tile_loadd(7, bv + 512, 64);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (m > 2 && n > 2) {
                    _tile_loadd(6, bv + 1024, 64);
                    _tile_dpbf16ps(2, 4, 6);
                }
                if (m > 3 && n > 3) {
                    _tile_loadd(7, bv + 1536, 64);
                    _tile_dpbf16ps(3, 4, 7);
                }
            }
            _tile_stored(0, c, ld * 4);
            if (n > 1) _tile_stored(1, c + 16, ld * 4);
            if (n > 2) _tile_stored(2, c + 32, ld * 4);
            if (n > 3) _tile_stored(3, c + 48, ld * 4);
        }
}

/* dst rows t < T (ld apart, D each) <- a * acc^T (acc: D x lda, lda a multiple of 16), 16 x 16
 * blocks transposed in registers. */
AMX_VEC static void amx_put_t(float *dst, size_t ld, const float *acc, int lda, int T, int D,
                              float a)
{
    __m512 av = _mm512_set1_ps(a);
    for (int t0 = 0; t0 < T; t0 += 16)
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512i m[16];
            for (int i = 0; i < 16; i++)
                m[i] = _mm512_loadu_si512((const void *)(acc + (size_t)(d0 + i) * lda + t0));
            amx_transpose16(m);
            for (int j = 0; j < 16 && t0 + j < T; j++)
                _mm512_storeu_ps(dst + (t0 + j) * ld + d0, _mm512_mul_ps(av, (__m512)m[j]));
        }
}

/* One item's backward (see above), its row chunks in groups. */
AMX_ISA static void amx_bwd_item(const amx_geom *g, const amx_ops *o, const amx_bwd_io *io,
                                 int it, amx_bwd_scr *x)
{
    int T = g->T, D = g->D, G = g->G, b = it / g->Hkv, hk = it % g->Hkv;
    int rpad = (g->rows + 31) / 32 * 32, ld = g->nk16, chunks = rpad / 32;
    int gc = amx_group_chunks(g), nb16[chunks];
    size_t slot = (size_t)ld * 32;
    memset(x->dKt, 0, (size_t)D * ld * sizeof(float));
    memset(x->dVt, 0, (size_t)D * ld * sizeof(float));
    const uint16_t *q = amx_op(o, it, o->q), *dO = amx_op(o, it, o->dO);
    for (int c0 = 0; c0 < chunks; c0 += gc) {
        int c1 = c0 + gc < chunks ? c0 + gc : chunks;
        for (int ch = c0; ch < c1; ch++) {
            int r0 = ch * 32, nr = g->rows - r0 < 32 ? g->rows - r0 : 32;
            int last = (r0 + nr - 1) / G + 1, nb32 = (last + 31) / 32;
            nb16[ch] = (last + 15) / 16;
            for (int hf = 0; hf < 32; hf += 16) {
                amx_scores(x->S + hf * ld, ld, q + (size_t)(r0 + hf) * D, amx_op(o, it, o->kt),
                           nb16[ch], D);
                amx_scores(x->dP + hf * ld, ld, dO + (size_t)(r0 + hf) * D, amx_op(o, it, o->vt),
                           nb16[ch], D);
            }
            amx_bwd_scores(g, io, b, hk, r0, nb16[ch], nb32, x, x->Pv + (ch - c0) * slot,
                           x->dSv + (ch - c0) * slot);
            for (int hf = 0; hf < nr; hf += 16) { /* dQ of the chunk's rows: written once */
                amx_mix(x->dQ, x->dS + (size_t)hf * g->nk32, g->nk32, amx_op(o, it, o->kp), nb32,
                        D);
                amx_put_rows(io->dq, g, b, hk, r0 + hf, nr - hf < 16 ? nr - hf : 16, x->dQ, NULL,
                             g->scale);
            }
        }
        amx_accumulate(x->dVt, ld, amx_op(o, it, o->dOT), rpad, x->Pv, nb16, c0, c1, D);
        amx_accumulate(x->dKt, ld, amx_op(o, it, o->qT), rpad, x->dSv, nb16, c0, c1, D);
    }
    size_t ldk = (size_t)g->Hkv * D, ko = (size_t)b * T * ldk + (size_t)hk * D;
    amx_put_t(io->dk + ko, ldk, x->dKt, ld, T, D, g->scale);
    amx_put_t(io->dv + ko, ldk, x->dVt, ld, T, D, 1.0f);
}

int cpu_attention_amx_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int B, int T, int H, int Hkv, int D)
{
    amx_geom g;
    amx_ops o;
    cpu_state *st = cpu_st(be);
    if (!amx_geom_init(be, &g, B, T, H, Hkv, D) || !amx_ops_reserve(st, &g, &o, 1) ||
        cpu_scratch_reserve(st, amx_bwd_scratch_floats(&g)) != 0)
        return 0;
    amx_bwd_io io = {dout, out, lse, dq, dk, dv};
    int items = B * Hkv;
#pragma omp parallel num_threads(g.threads)
    {
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) amx_pack_item(&g, &o, it, q, k, v, dout);
        cpu_amx_config();
        amx_bwd_scr x = amx_bwd_scr_carve(st->scratch[CPU_TID()], &g);
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) amx_bwd_item(&g, &o, &io, it, &x);
        cpu_amx_release();
    }
    return 1;
}

#else /* AMX is x86-64 Linux only: attention stays fp32 elsewhere */

int cpu_attention_amx_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int Hkv, int D)
{
    (void)be, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)B, (void)T, (void)H;
    (void)Hkv, (void)D;
    return 0;
}

int cpu_attention_amx_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int B, int T, int H, int Hkv, int D)
{
    (void)be, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out;
    (void)lse, (void)B, (void)T, (void)H, (void)Hkv, (void)D;
    return 0;
}

#endif
