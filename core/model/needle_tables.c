/* needle_tables.c: Needle's fixed tables (see needle_tables.h): numpy's legacy MT19937
 * RandomState as numpy 2.x's C code draws it (numpy/random/src/mt19937, legacy gauss, bounded
 * integers), the permutations, the Lloyd-Max codebook with numpy's f64 order, the engram hash.
 * Must never allocate more than the 400,000 samples, print, or know about models or files. */
#include "needle_tables.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

enum { MT_N = 624, MT_M = 397 };
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu

void needle_mt_seed(needle_mt *mt, uint32_t seed)
{
    for (int pos = 0; pos < MT_N; pos++) {
        mt->key[pos] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)pos + 1u;
    }
    mt->pos = MT_N;
    mt->has_gauss = 0;
    mt->gauss = 0.0;
}

/* mt19937_gen: the next 624 words of the recurrence. */
static void mt_refill(needle_mt *mt)
{
    uint32_t *k = mt->key, y;
    int i;
    for (i = 0; i < MT_N - MT_M; i++) {
        y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    }
    for (; i < MT_N - 1; i++) {
        y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + (MT_M - MT_N)] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    }
    y = (k[MT_N - 1] & MT_UPPER) | (k[0] & MT_LOWER);
    k[MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    mt->pos = 0;
}

uint32_t needle_mt_u32(needle_mt *mt)
{
    if (mt->pos == MT_N) mt_refill(mt);
    uint32_t y = mt->key[mt->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double needle_mt_double(needle_mt *mt)
{
    int32_t a = (int32_t)(needle_mt_u32(mt) >> 5), b = (int32_t)(needle_mt_u32(mt) >> 6);
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* legacy_gauss: x1, x2 uniform in (-1, 1) until 0 < r2 < 1, f = sqrt(-2 log(r2) / r2); returns
 * f x2 and keeps f x1. (c11 without extensions: no fused multiply-add contraction.) */
double needle_mt_gauss(needle_mt *mt)
{
    if (mt->has_gauss) {
        double keep = mt->gauss;
        mt->has_gauss = 0;
        mt->gauss = 0.0;
        return keep;
    }
    double x1, x2, r2;
    do {
        x1 = 2.0 * needle_mt_double(mt) - 1.0;
        x2 = 2.0 * needle_mt_double(mt) - 1.0;
        r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    double f = sqrt(-2.0 * log(r2) / r2);
    mt->gauss = f * x1;
    mt->has_gauss = 1;
    return f * x2;
}

uint32_t needle_mt_interval(needle_mt *mt, uint32_t max)
{
    if (max == 0) return 0;
    uint32_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    while ((v = needle_mt_u32(mt) & mask) > max) {
    }
    return v;
}

void needle_permutation(uint32_t seed, int n, int32_t *out)
{
    needle_mt mt;
    needle_mt_seed(&mt, seed);
    for (int i = 0; i < n; i++) out[i] = i;
    for (int i = n - 1; i >= 1; i--) {
        uint32_t j = needle_mt_interval(&mt, (uint32_t)i);
        int32_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

void needle_hada_perms(int n, int split, int32_t *p1, int32_t *p2)
{
    static const uint32_t seeds[2] = {11, 13};
    int32_t *p[2] = {p1, p2};
    for (int s = 0; s < 2; s++) {
        if (!split) {
            needle_permutation(seeds[s], n, p[s]);
            continue;
        }
        int h = n / 2;
        needle_permutation(seeds[s], h, p[s]);
        needle_permutation(seeds[s] + 977u, h, p[s] + h);
        for (int i = h; i < 2 * h; i++) p[s][i] += h;
    }
}

/* numpy's pairwise summation of a contiguous float64 run (DOUBLE_pairwise_sum: below 8 a plain
 * loop, up to 128 eight accumulators then the tail, above that two halves split at a multiple
 * of 8). np.add.reduce starts from the identity 0.0 and adds this. */
static double pairwise_sum(const double *a, long n)
{
    if (n < 8) {
        double res = 0.;
        for (long i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        long i;
        for (int j = 0; j < 8; j++) r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    long n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* First index in sorted x[0 .. n) with x[i] > v: searchsorted(bnd, x) (side 'left') puts x[i]
 * in bucket k when bnd[k-1] < x[i] <= bnd[k], so bucket k starts there for v = bnd[k-1]. */
static long first_above(const double *x, long n, double v)
{
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (x[mid] > v) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

enum { LM_SAMPLES = 400000, LM_ITERS = 200 };

int needle_lloyd_max(int bits, double *c)
{
    if (bits < 1 || bits > 8) return loom_fail("needle_lloyd_max: bits %d outside [1, 8]", bits);
    if (bits == 1) {
        double pi = 3.14159265358979323846;  /* Python's math.pi, the same double */
        c[0] = -sqrt(2.0 / pi);
        c[1] = sqrt(2.0 / pi);
        return 0;
    }
    int levels = 1 << bits;
    double *x = malloc(LM_SAMPLES * sizeof *x);
    if (!x) return loom_fail("needle_lloyd_max: out of memory for %d samples", LM_SAMPLES);
    needle_mt mt;
    needle_mt_seed(&mt, 0);
    for (long i = 0; i < LM_SAMPLES; i++) x[i] = needle_mt_gauss(&mt);
    qsort(x, LM_SAMPLES, sizeof *x, cmp_double);
    for (int k = 0; k < levels; k++) c[k] = x[(long)((k + 0.5) / levels * LM_SAMPLES)];
    long start[257];
    for (int it = 0; it < LM_ITERS; it++) {
        start[0] = 0;
        start[levels] = LM_SAMPLES;
        for (int k = 1; k < levels; k++) {
            double bnd = (c[k - 1] + c[k]) / 2.0;
            start[k] = first_above(x, LM_SAMPLES, bnd);
            if (start[k] < start[k - 1]) {  /* numpy's buckets would not be runs: never seen */
                free(x);
                return loom_fail("needle_lloyd_max: boundaries out of order at iteration %d", it);
            }
        }
        for (int k = 0; k < levels; k++) {
            long n = start[k + 1] - start[k];
            if (n > 0) c[k] = (0.0 + pairwise_sum(x + start[k], n)) / (double)n;
        }
    }
    free(x);
    qsort(c, (size_t)levels, sizeof *c, cmp_double);
    return 0;
}

int needle_cq_codebook(int bits, int group, float *codebook)
{
    double c[256];
    if (group < 1) return loom_fail("needle_cq_codebook: group %d", group);
    if (needle_lloyd_max(bits, c) != 0) return -1;
    double s = sqrt((double)group);
    for (int k = 0; k < (1 << bits); k++) codebook[k] = (float)(c[k] / s);
    return 0;
}

void needle_engram_indices(const int32_t *t, int T, const int *orders, int norders, int heads,
                           int seed_heads, uint32_t slots, int32_t *idx)
{
    uint32_t stride = (uint32_t)(seed_heads ? seed_heads : heads);
    int tables = norders * heads;
    for (int i = 0; i < T; i++)
        for (int o = 0; o < norders; o++)
            for (int h = 0; h < heads; h++) {
                uint32_t acc = 0x9E3779B9u * ((uint32_t)o * stride + (uint32_t)h + 1u);
                for (int j = 0; j < orders[o]; j++) {
                    uint32_t u = i - j >= 0 ? (uint32_t)t[i - j] : 0u;
                    acc = (acc ^ u) * 0x01000193u;
                }
                acc ^= acc >> 15;
                idx[(long)i * tables + o * heads + h] = (int32_t)(acc % slots);
            }
}
