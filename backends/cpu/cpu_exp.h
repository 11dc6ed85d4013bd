/* cpu_exp.h: a branch-free expf that the compiler vectorises inside `omp simd` loops.
 * libm's expf is a scalar call that blocks vectorisation (libmvec needs -ffast-math); this one is
 * plain arithmetic. It must never be used where exact libm results are required (tests' refs). */
#ifndef LOOM_CPU_EXP_H
#define LOOM_CPU_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2] (ln2 split in a
 * high part exact in float and a low correction, Cody-Waite), exp(r) by the Cephes degree-7
 * polynomial 1 + r + r^2 P(r). 2^n is built in the exponent bits. Measured max error over
 * [-87, 88]: 2 ulp (tests/backends/cpu/test_cpu_xent.c checks it). x < -87.3 gives 0;
 * NaN propagates; x is clamped at 88 (inputs here are <= 0 for softmax or bounded for tanh). */
static inline float cpu_expf(float x)
{
    const float hi = 88.0f, lo = -87.3f;
    int under = x < lo;
    x = x > hi ? hi : x;
    x = x < lo ? lo : x;
    /* round to nearest via the 1.5*2^23 shifter: exact while |x/ln2| < 2^22 */
    float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    union {
        int32_t i;
        float f;
    } s;
    /* 2^fn built in the exponent field; shifted as unsigned (fn + 127 is negative, and discarded,
     * on the underflow path) */
    s.i = (int32_t)((uint32_t)((int32_t)fn + 127) << 23);
    y = y * s.f;
    return under ? 0.0f : y;
}

/* expf correctly rounded but within 1e-13 of a halfway point: exp evaluated in double and rounded
 * once to float. Over every float it differs from glibc's expf (0.502 ulp) in 170648 of 4.28e9
 * inputs, and in all but one of those is the nearer to the true value (checked against expl):
 * the libm expf of the mixing ops (Needle's float model), but branch-free, so `omp simd` loops
 * vectorise it (4 doubles an AVX2 register). Method: x = n ln2 + r, n = nearest(x / ln2) by the
 * 1.5*2^52 shifter (exact: |x / ln2| < 2^51), r by Cody-Waite in double (ln2 split so n*hi is
 * exact; |r| <= ln2/2), e^r by its Taylor series to r^11 (remainder < 2.3e-13 relative), 2^n
 * built in the exponent bits from the shifter's low bits. x is clamped to [-104, 89], beyond
 * which exp rounds to 0 and +inf in float anyway; NaN propagates. */
static inline float cpu_expf_cr(float xf)
{
    double x = xf;
    x = x > 89.0 ? 89.0 : x;
    x = x < -104.0 ? -104.0 : x;
    const double shifter = 6755399441055744.0; /* 1.5 * 2^52 */
    const double k = x * 1.4426950408889634 + shifter, n = k - shifter;
    const double r = (x - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
    double p = 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* k's low 12 bits are n (two's complement): 2^n's exponent field is n + 1023, in [873, 1152] */
    uint64_t kb, sb;
    memcpy(&kb, &k, sizeof kb);
    sb = (kb + 1023) << 52;
    double sc;
    memcpy(&sc, &sb, sizeof sc);
    return (float)(p * sc);
}

/* logf the same way: in double, rounded once (x = m 2^e, m in [sqrt(1/2), sqrt(2)), log m =
 * 2 atanh(s) = 2 (s + s^3/3 + ... + s^17/17), s = (m - 1)/(m + 1), |s| <= 0.1716: remainder
 * < 3e-14 relative). Over every positive float it differs from glibc's logf in 416909 of 2.1e9,
 * the nearer in all but 3. Branch-free for `omp simd`: e is read from the exponent bits through
 * the 2^52 shifter (no int64 -> double conversion, which AVX2 lacks); x <= 0, +inf and NaN give
 * libm's answers (-inf at 0, NaN below, +inf, NaN) by selects at the end. */
static inline float cpu_logf_cr(float xf)
{
    const double x = xf; /* a float: normal as a double, subnormals too */
    uint64_t b, eb;
    memcpy(&b, &x, sizeof b);
    eb = ((b >> 52) & 0x7ff) | 0x4330000000000000ULL; /* 2^52 + biased exponent */
    b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    double m, e;
    memcpy(&m, &b, sizeof m);
    memcpy(&e, &eb, sizeof e);
    e -= 4503599627371519.0; /* 2^52 + 1023 */
    const int big = m > 1.4142135623730951;
    m = big ? m * 0.5 : m;
    e = big ? e + 1.0 : e;
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double q = 1.0 / 17;
    q = q * s2 + 1.0 / 15;
    q = q * s2 + 1.0 / 13;
    q = q * s2 + 1.0 / 11;
    q = q * s2 + 1.0 / 9;
    q = q * s2 + 1.0 / 7;
    q = q * s2 + 1.0 / 5;
    q = q * s2 + 1.0 / 3;
    q = q * s2 + 1.0;
    double y = e * 0.6931471805599453 + 2.0 * s * q;
    y = x > 0.0 ? y : (x == 0.0 ? -(double)INFINITY : (double)NAN);
    y = x == (double)INFINITY ? x : y;
    return (float)y;
}

#endif
