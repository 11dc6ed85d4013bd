/* needle_tables.h: Needle's fixed tables that its checkpoints do not store, computed in C exactly
 * as Needle's Python computes them (docs/needle.md sections 1-3, 9): numpy's legacy
 * RandomState (MT19937) and its permutation, the Hadamard-MLP permutations, the CQ W4 codebook
 * (a Lloyd-Max fit to legacy Gaussian samples) and the engram n-gram hash. Private to
 * core/model/ (the needle family calls it); host code only, no model, no backend, no files.
 *
 * Exactness, checked against tests/fixtures/needle/model_ref.* by test_needle_tables:
 *  - permutations and engram indices: integer arithmetic, bitwise equal by construction;
 *  - the Lloyd-Max centres (f64) and the codebook (f32): bitwise equal. The f64 arithmetic is
 *    numpy's, in numpy's order (legacy polar Box-Muller, searchsorted's side='left' buckets,
 *    np.mean as numpy's pairwise summation over each bucket divided by its count). The one
 *    libm call is log() in the Box-Muller step, as numpy's; both use the C library's log, so a
 *    libm whose log rounds differently from the one Needle ran on could move a sample by an ulp
 *    (the test would say so). */
#ifndef LOOM_NEEDLE_TABLES_H
#define LOOM_NEEDLE_TABLES_H

#include <stdint.h>

/* numpy's legacy RandomState: MT19937 state plus the cached second Gaussian of the polar method. */
typedef struct needle_mt {
    uint32_t key[624];
    int pos;
    int has_gauss;
    double gauss;
} needle_mt;

/* RandomState(seed) for an int seed: MT19937 init_genrand (numpy's mt19937_seed). */
void needle_mt_seed(needle_mt *mt, uint32_t seed);
/* The next 32-bit output (tempered). */
uint32_t needle_mt_u32(needle_mt *mt);
/* random_sample(): 53 bits from two outputs, (a >> 5) * 2^26 + (b >> 6), over 2^53. */
double needle_mt_double(needle_mt *mt);
/* randn() one value: legacy_gauss, the polar Box-Muller method; the pair's second value is kept
 * for the next call. */
double needle_mt_gauss(needle_mt *mt);
/* A uniform integer in [0, max]: numpy's random_interval, 32-bit outputs masked to the smallest
 * all-ones mask >= max and redrawn while > max (max < 2^32). */
uint32_t needle_mt_interval(needle_mt *mt, uint32_t max);

/* RandomState(seed).permutation(n) into out[0 .. n): arange(n), then the legacy shuffle
 * (Fisher-Yates from the top: for i = n-1 .. 1, j = interval(i), swap out[i], out[j]). */
void needle_permutation(uint32_t seed, int n, int32_t *out);

/* The Hadamard MLP's two permutations of [0, n) (architecture.py _hada_perms): p1 from seed 11,
 * p2 from 13; with split (ladder_widths set; n even) each half on its own:
 * concat(perm_s(n/2), n/2 + perm_{s+977}(n/2)). p1, p2: n entries each, caller-owned. */
void needle_hada_perms(int n, int split, int32_t *p1, int32_t *p2);

/* quantize.py _lloyd_max_gaussian(bits): 2^bits centres (f64, ascending) of a 200-iteration
 * Lloyd-Max fit to sort(RandomState(0).randn(400000)), started from the quantiles
 * x[(k + 0.5) / levels * 400000]. bits 1 is the closed form +-sqrt(2/pi). bits in [1, 8];
 * centres has 2^bits entries. Takes ~0.5 s and 3.2 MB; -1 + loom_fail on a bad bits or no
 * memory. The caller keeps the result (Needle caches it too). */
int needle_lloyd_max(int bits, double *centres);

/* quantize.py _cq_codebook_np(bits, group): f32(centre / sqrt(group)) for each Lloyd-Max centre
 * (W4: bits 4, group 128). codebook has 2^bits entries. -1 + loom_fail as above. */
int needle_cq_codebook(int bits, int group, float *codebook);

/* architecture.py engram_indices over one token row t[0 .. T): for order index o (orders[o] = m)
 * and head h, seed = 0x9E3779B9 * (o * stride + h + 1) mod 2^32 (stride = seed_heads, or heads
 * when 0), acc = seed; for j < m: acc = (acc ^ u[i - j]) * 0x01000193 (u = t as uint32, 0 before
 * the row); acc ^= acc >> 15; idx[i * norders * heads + o * heads + h] = acc % slots.
 * idx: T * norders * heads entries, caller-owned. */
void needle_engram_indices(const int32_t *t, int T, const int *orders, int norders, int heads,
                           int seed_heads, uint32_t slots, int32_t *idx);

#endif
