/* ckpt_crc.c: CRC32C (reflected polynomial 0x82F63B78, init/xorout 0xFFFFFFFF) over bytes.
 * Hardware path: SSE4.2 crc32q on three interleaved streams, recombined with "shift by N zero
 * bytes" tables (after Mark Adler's crc32c.c); software path: slicing-by-8. Never allocates. */
#include "checkpoints/ckpt_crc.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CKPT_CRC_X86 1
#include <immintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u /* Castagnoli, bit-reversed */
#define CRC_LONG 8192           /* bytes per stream in the long interleaved loop (power of 2) */
#define CRC_SHORT 256           /* bytes per stream in the short loop (power of 2) */

static uint32_t crc_table[8][256];   /* slicing-by-8 tables */
static uint32_t crc_long[4][256];    /* operator: append CRC_LONG zero bytes */
static uint32_t crc_short[4][256];   /* operator: append CRC_SHORT zero bytes */
static int crc_have_hw, crc_have_clmul;
#ifdef CKPT_CRC_X86
static uint64_t fold_2048[2], fold_512[2], fold_128[2]; /* carry-less fold constants, see below */
static void crc_fold_init(void);
#endif
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* GF(2) 32x32 matrix (one column per bit) times vector. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++) sq[n] = gf2_times(mat, mat[n]);
}

/* Matrix that maps crc -> crc of (message || len zero bytes), len a power of two. Start from the
 * operator for one zero bit (shift right, xor POLY when the low bit falls out) and square it:
 * 1 bit -> 2 -> 4 -> 8 bits = 1 byte, then keep squaring while halving len. */
static void crc_zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32];
    odd[0] = CRC32C_POLY;
    for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* 2 zero bits */
    gf2_square(odd, even); /* 4 zero bits */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof odd);
}

/* Byte-wise lookup tables for the zeros operator so a shift costs four loads. */
static void crc_zeros_tables(uint32_t zeros[4][256], size_t len)
{
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++) zeros[k][n] = gf2_times(op, n << (8 * k));
}

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xff];
    crc_zeros_tables(crc_long, CRC_LONG);
    crc_zeros_tables(crc_short, CRC_SHORT);
#ifdef CKPT_CRC_X86
    __builtin_cpu_init();
    crc_have_hw = !!__builtin_cpu_supports("sse4.2");
    crc_have_clmul = crc_have_hw && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                     __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
    crc_fold_init();
#endif
}

/* Little-endian 64-bit load whatever the host order. */
static inline uint64_t load_le64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
#else
    uint64_t w = 0;
    for (int k = 7; k >= 0; k--) w = (w << 8) | p[k];
    return w;
#endif
}

uint32_t ckpt_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    for (; len && ((uintptr_t)p & 7); len--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t w = load_le64(p) ^ c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
            crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
            crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
            crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
    }
    for (; len; len--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#ifdef CKPT_CRC_X86
static inline uint32_t crc_shift(const uint32_t zeros[4][256], uint32_t c)
{
    return zeros[0][c & 0xff] ^ zeros[1][(c >> 8) & 0xff] ^ zeros[2][(c >> 16) & 0xff] ^
           zeros[3][c >> 24];
}

/* crc32q has 3-cycle latency and 1-cycle throughput, so three independent streams over
 * consecutive blocks A|B|C run 3x faster; then crc(A|B|C) = shift(shift(crcA) ^ crcB) ^ crcC,
 * where shift appends one block of zero bytes (CRC is linear over GF(2)). */
__attribute__((target("sse4.2"))) static uint64_t crc_hw_blocks(uint64_t c0, const unsigned char **pp,
                                                                size_t *plen, size_t blk,
                                                                const uint32_t zeros[4][256])
{
    const unsigned char *p = *pp;
    size_t len = *plen;
    while (len >= 3 * blk) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + blk;
        do {
            c0 = _mm_crc32_u64(c0, load_le64(p));
            c1 = _mm_crc32_u64(c1, load_le64(p + blk));
            c2 = _mm_crc32_u64(c2, load_le64(p + 2 * blk));
            p += 8;
        } while (p < end);
        c0 = crc_shift(zeros, (uint32_t)c0) ^ c1;
        c0 = crc_shift(zeros, (uint32_t)c0) ^ c2;
        p += 2 * blk;
        len -= 3 * blk;
    }
    *pp = p;
    *plen = len;
    return c0;
}

/* --- Carry-less multiply folding (AVX-512 VPCLMULQDQ), ~2-3x the crc32 instruction ---
 * Reflected bit order: stream bit i of a 128-bit block is register bit i and has degree 127-i
 * in the block. A block A followed by D more message bits contributes A(x) * x^D; with A = H x^64
 * + L (H = low qword = first 64 bits), A x^D == H (x^(64+D) mod P) + L (x^D mod P) (mod P), a
 * value under 96 bits that can be XORed into the block D bits later. A carry-less product of
 * two bit-reflected 64-bit operands comes out reflected in 127 bits, i.e. multiplied by one
 * extra x in our 128-bit frame: hence the constants x^(64+D-1) and x^(D-1). When one block is
 * left, the CRC state equals the raw CRC of those 16 bytes from state 0 (the initial state was
 * XORed into the first 32 bits), which two crc32q instructions compute. */
static uint32_t xpow_mod(unsigned n) /* x^n mod P, normal bit order (bit k <-> x^k) */
{
    uint32_t r = 1;
    while (n--) r = (r & 0x80000000u) ? (r << 1) ^ 0x1EDC6F41u : r << 1;
    return r;
}

static uint64_t bitrev64(uint64_t v)
{
    uint64_t r = 0;
    for (int i = 0; i < 64; i++, v >>= 1) r = (r << 1) | (v & 1);
    return r;
}

static void fold_consts(uint64_t k[2], unsigned dbits)
{
    k[0] = bitrev64(xpow_mod(64 + dbits - 1)); /* multiplies the low qword (H) */
    k[1] = bitrev64(xpow_mod(dbits - 1));      /* multiplies the high qword (L) */
}

static void crc_fold_init(void)
{
    fold_consts(fold_2048, 2048);
    fold_consts(fold_512, 512);
    fold_consts(fold_128, 128);
}

#define CLMUL_TARGET __attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))

CLMUL_TARGET static inline __m128i fold16(__m128i a, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

CLMUL_TARGET static inline __m512i fold64(__m512i a, __m512i k, __m512i next)
{
    /* 0x96 = a ^ b ^ c */
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11), next, 0x96);
}

/* Raw CRC state after `state` and len (>= 256) bytes at p; consumes a multiple of 16 bytes and
 * returns how many in *used. Four 64-byte accumulators = 16 independent 128-bit lanes. */
CLMUL_TARGET static uint64_t crc_clmul(uint32_t state, const unsigned char *p, size_t len, size_t *used)
{
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_2048[1], (long long)fold_2048[0]));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_512[1], (long long)fold_512[0]));
    const __m128i k128 = _mm_set_epi64x((long long)fold_128[1], (long long)fold_128[0]);
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)state), 0));
    __m512i z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
    size_t off = 256;
    for (; off + 256 <= len; off += 256) {
        z0 = fold64(z0, k2048, _mm512_loadu_si512(p + off));
        z1 = fold64(z1, k2048, _mm512_loadu_si512(p + off + 64));
        z2 = fold64(z2, k2048, _mm512_loadu_si512(p + off + 128));
        z3 = fold64(z3, k2048, _mm512_loadu_si512(p + off + 192));
    }
    z1 = fold64(z0, k512, z1); /* 4 accumulators -> 1, each 64 bytes ahead of the previous */
    z2 = fold64(z1, k512, z2);
    z3 = fold64(z2, k512, z3);
    __m128i x = _mm512_extracti32x4_epi32(z3, 0); /* 4 lanes -> 1, each 16 bytes ahead */
    x = _mm_xor_si128(fold16(x, k128), _mm512_extracti32x4_epi32(z3, 1));
    x = _mm_xor_si128(fold16(x, k128), _mm512_extracti32x4_epi32(z3, 2));
    x = _mm_xor_si128(fold16(x, k128), _mm512_extracti32x4_epi32(z3, 3));
    for (; off + 16 <= len; off += 16) x = _mm_xor_si128(fold16(x, k128), _mm_loadu_si128((const __m128i *)(p + off)));
    *used = off;
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    return _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    if (crc_have_clmul && len >= 256) {
        size_t used;
        c = crc_clmul((uint32_t)c, p, len, &used);
        p += used;
        len -= used;
    }
    for (; len && ((uintptr_t)p & 7); len--) c = _mm_crc32_u8((uint32_t)c, *p++);
    c = crc_hw_blocks(c, &p, &len, CRC_LONG, crc_long);
    c = crc_hw_blocks(c, &p, &len, CRC_SHORT, crc_short);
    for (; len >= 8; len -= 8, p += 8) c = _mm_crc32_u64(c, load_le64(p));
    for (; len; len--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

int ckpt_crc32c_hw(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_have_hw + crc_have_clmul;
}

uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
#ifdef CKPT_CRC_X86
    if (crc_have_hw) return crc_hw(crc, buf, len);
#endif
    return ckpt_crc32c_sw(crc, buf, len);
}

/* a(x) * b(x) mod P in the reflected representation (bit 31 is x^0), as zlib's multmodp. */
static uint32_t crc_multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

uint32_t ckpt_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    /* crc(A||B) = crc1 * x^(8 len2) mod P, xor crc2 (the pre/post conditioning cancels out).
     * x^(2^k) mod P is found by squaring, one power per bit of 8 len2: 64 tiny steps at most. */
    uint32_t xn = 1u << 30, p = 1u << 31; /* x^1, and the running product x^0 */
    for (uint64_t n = len2, k = 0; n; k++) {
        if (k >= 3) { /* bits 0..2 of 8 len2 are zero */
            if (n & 1) p = crc_multmodp(xn, p);
            n >>= 1;
        }
        xn = crc_multmodp(xn, xn);
    }
    return crc_multmodp(p, crc1) ^ crc2;
}

uint32_t ckpt_crc32c_f32(uint32_t crc, const float *x, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return ckpt_crc32c(crc, x, n * sizeof(float));
#else
    /* Big-endian host: checksum the little-endian image, a block at a time on the stack. */
    unsigned char blk[4096];
    while (n) {
        size_t m = n < sizeof blk / 4 ? n : sizeof blk / 4;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            blk[4 * i] = (unsigned char)u;
            blk[4 * i + 1] = (unsigned char)(u >> 8);
            blk[4 * i + 2] = (unsigned char)(u >> 16);
            blk[4 * i + 3] = (unsigned char)(u >> 24);
        }
        crc = ckpt_crc32c(crc, blk, m * 4);
        x += m;
        n -= m;
    }
    return crc;
#endif
}
