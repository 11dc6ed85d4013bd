/* rng.h: counter-based random numbers (splitmix64 of seed and counter), so any rank can draw the
 * n-th number of a stream without drawing the ones before it: init, sampling and dropout-free
 * data order are then the same for every world size and backend. */
#ifndef LOOM_RNG_H
#define LOOM_RNG_H

#include <stdint.h>

/* A 64-bit hash of (seed, counter): splitmix64 finaliser over seed ^ golden * counter. */
static inline uint64_t rng_u64(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits (exact in float). */
static inline float rng_uniform(uint64_t seed, uint64_t counter)
{
    return (float)(rng_u64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal (Box-Muller on two counters 2i, 2i+1). */
float rng_normal(uint64_t seed, uint64_t counter);

#endif
