/* cpu_exp.h: a branch-free expf that the compiler vectorises inside `omp simd` loops.
 * libm's expf is a scalar call that blocks vectorisation (libmvec needs -ffast-math); this one is
 * plain arithmetic. It must never be used where exact libm results are required (tests' refs). */
#ifndef LOOM_CPU_EXP_H
#define LOOM_CPU_EXP_H

#include <stdint.h>

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

#endif
