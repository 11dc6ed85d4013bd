/* cpu_peak.c: the fp32 FMA peak of this machine's threads, the MFU reference (a model's FLOPs per
 * second cannot exceed it, where an sgemm rate, measured at one size and load, can be beaten).
 *
 * Each thread runs CPU_PEAK_ACC independent chains acc_k = acc_k * m + a of 16-float vectors (one
 * zmm in the AVX-512 clone, two ymm in the AVX2 one), enough chains to fill every FMA pipe through
 * its latency (2 pipes x 4-5 cycles on current x86 cores); each link is 2 x 16 FLOPs. The best of
 * several timed trials, all threads at once, is the peak. */

#include "backends/cpu/cpu_internal.h"

#define CPU_PEAK_ACC 12
#define CPU_PEAK_ITERS 20000

typedef float cpu_peak_v16 __attribute__((vector_size(64)));

/* CPU_PEAK_ITERS links of each chain; the returned sum keeps the work observable (and without
 * -ffast-math no link can be reassociated away). */
CPU_CLONES static float cpu_peak_chains(float seed)
{
    cpu_peak_v16 acc[CPU_PEAK_ACC], m, a;
    for (int l = 0; l < 16; l++) m[l] = 0.999999f, a[l] = seed * 1e-7f;
    for (int k = 0; k < CPU_PEAK_ACC; k++)
        for (int l = 0; l < 16; l++) acc[k][l] = seed + (float)(k + l);
    for (int it = 0; it < CPU_PEAK_ITERS; it++) {
        for (int k = 0; k < CPU_PEAK_ACC; k++) acc[k] = acc[k] * m + a;
    }
    float s = 0.0f;
    for (int k = 0; k < CPU_PEAK_ACC; k++)
        for (int l = 0; l < 16; l++) s += acc[k][l];
    return s;
}

double cpu_fma_peak(int threads)
{
    const double flops = (double)threads * CPU_PEAK_ITERS * CPU_PEAK_ACC * 16 * 2;
    double best = 0.0, start = cpu_now();
    volatile float sink = 0.0f;
    for (int trial = 0; trial < 8 || (cpu_now() - start < 0.05 && trial < 200); trial++) {
        float sum = 0.0f;
        double t0 = cpu_now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        sum += cpu_peak_chains(1.0f + (float)CPU_TID());
        double rate = flops / (cpu_now() - t0);
        if (rate > best) best = rate;
        sink = sum;
    }
    (void)sink;
    return best;
}
