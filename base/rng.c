/* rng.c: the parts of rng.h that need libm. */
#include "rng.h"

#include <math.h>

float rng_normal(uint64_t seed, uint64_t counter)
{
    /* u1 in (0, 1] so log(u1) is finite; 53-bit doubles for a smooth tail */
    double u1 = ((double)(rng_u64(seed, 2 * counter) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_u64(seed, 2 * counter + 1) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
