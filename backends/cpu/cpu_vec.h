/* cpu_vec.h: small x86 vector helpers shared by loom's hand-written CPU kernels (the few-rows
 * product, decode attention). Internal to backends/cpu; each helper carries its own target
 * attribute, so a file compiled for baseline x86-64 can call it from its AVX2 functions. */
#ifndef LOOM_CPU_VEC_H
#define LOOM_CPU_VEC_H

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

/* The sum of an AVX register's 8 lanes in one fixed order: (l + l+4), then pairs, then the last
 * two, so a result's bits never depend on the caller. */
__attribute__((target("avx2,fma"))) static inline float cpu_vec_hsum8(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
#endif

#endif
