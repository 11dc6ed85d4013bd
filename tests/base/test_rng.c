/* test_rng.c: base/rng.h's draws have the distributions their comments promise, checked on 2^18
 * draws against the moments of the distribution itself (bounds of 6 standard errors: a fixed seed,
 * so the test is deterministic; the margin is for a changed generator, not for chance):
 * rng_uniform in [0, 1) with mean 1/2 and variance 1/12, rng_normal with mean 0, variance 1 and the
 * normal's tail share beyond 1.96 (5%). Every init and every sampled token draws from these. */
#include <math.h>
#include <stdint.h>

#include "base/rng.h"
#include "tests/check.h"

#define N (1 << 18)

int main(void)
{
    const double se = 1.0 / sqrt((double)N); /* a standard error per unit of standard deviation */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double s = 0.0, s2 = 0.0, lo = 1.0, hi = 0.0;
        for (uint64_t i = 0; i < N; i++) {
            double u = rng_uniform(seed, i);
            s += u, s2 += u * u;
            lo = u < lo ? u : lo, hi = u > hi ? u : hi;
        }
        double mean = s / N, var = s2 / N - mean * mean;
        CHECK(lo >= 0.0 && hi < 1.0, "seed %llu: uniform outside [0, 1): %g %g", (unsigned long long)seed, lo, hi);
        /* sd of a uniform 1/sqrt(12); of its sample variance sqrt(1/80 - 1/144) se = 0.075 se */
        CHECK(fabs(mean - 0.5) < 6 * se / sqrt(12.0), "seed %llu: uniform mean %.6f", (unsigned long long)seed, mean);
        CHECK(fabs(var - 1.0 / 12) < 6 * 0.09 * se, "seed %llu: uniform variance %.6f (1/12 = %.6f)",
              (unsigned long long)seed, var, 1.0 / 12);

        double n1 = 0.0, n2 = 0.0, tail = 0.0;
        for (uint64_t i = 0; i < N; i++) {
            double z = rng_normal(seed, i);
            CHECK(isfinite(z), "seed %llu: normal %llu is %g", (unsigned long long)seed, (unsigned long long)i, z);
            n1 += z, n2 += z * z, tail += fabs(z) > 1.959963984540054;
        }
        double nm = n1 / N, nv = n2 / N - nm * nm, share = tail / N;
        /* a normal's sample variance has sd sqrt(2) se; the tail share sqrt(0.05 0.95) se */
        CHECK(fabs(nm) < 6 * se, "seed %llu: normal mean %.6f", (unsigned long long)seed, nm);
        CHECK(fabs(nv - 1.0) < 6 * sqrt(2.0) * se, "seed %llu: normal variance %.6f", (unsigned long long)seed, nv);
        CHECK(fabs(share - 0.05) < 6 * sqrt(0.05 * 0.95) * se, "seed %llu: |z| > 1.96 in %.5f of the draws (0.05)",
              (unsigned long long)seed, share);
    }
    /* a stream is a function of (seed, counter) only: the same number again, another seed another */
    CHECK(rng_normal(7, 12345) == rng_normal(7, 12345) && rng_normal(7, 12345) != rng_normal(8, 12345),
          "rng_normal is a function of (seed, counter)");
    return check_exit_code("test_rng");
}
