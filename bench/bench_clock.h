/* bench_clock.h: the benchmarks' clock, monotonic wall seconds. */
#ifndef LOOM_BENCH_CLOCK_H
#define LOOM_BENCH_CLOCK_H

#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#endif
