/* cpu_elementwise.c: the memory-bound vector ops: fill, copy, add, axpy, scale, sumsq, bias.
 * Each op splits its range over the OpenMP team and runs a vector kernel per share; results
 * never depend on the schedule (no reductions whose order changes between runs). */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

CPU_CLONES static void cpu_k_fill(float *x, float v, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* Zero (all bits 0, the per-step gradient reset) goes through memset: past the cache size glibc
 * streams it with non-temporal stores, no read-for-ownership: measured 1.5x faster than the
 * store loop on 124M floats (2 Zen 4 threads). -0.0f is not all zero bits: it takes the loop. */
void cpu_fill(backend *be, float *x, float value, size_t n)
{
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
    union {
        float f;
        uint32_t u;
    } bits = {value};
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        if (bits.u == 0) {
            if (hi > lo) memset(x + lo, 0, (hi - lo) * sizeof(float));
        } else {
            cpu_k_fill(x + lo, value, hi - lo);
        }
    }
}

void cpu_copy_d2d(backend *be, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0) return;
    int nt = bytes < 4 * CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(bytes, &lo, &hi);
        memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
    }
}

CPU_CLONES static void cpu_k_add(float *out, const float *a, const float *b, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_add(out + lo, a + lo, b + lo, hi - lo);
    }
}

CPU_CLONES static void cpu_k_axpy(float *y, float alpha, const float *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void cpu_axpy(backend *be, float *y, float alpha, const float *x, size_t n)
{
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_axpy(y + lo, alpha, x + lo, hi - lo);
    }
}

CPU_CLONES static void cpu_k_scale(float *x, float alpha, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

void cpu_scale(backend *be, float *x, float alpha, size_t n)
{
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_scale(x + lo, alpha, hi - lo);
    }
}

CPU_CLONES static double cpu_k_sumsq(const float *x, size_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

/* sum x^2 in double: per-thread partials over fixed shares, added in thread order, so the result
 * is the same on every run with the same thread count. */
double cpu_sumsq(backend *be, const float *x, size_t n)
{
    enum { MAXT = 256 };
    double part[MAXT] = {0};
    int nt = n < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
    if (nt > MAXT) nt = MAXT;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        part[CPU_TID()] = cpu_k_sumsq(x + lo, hi - lo);
    }
    double s = 0.0;
    for (int t = 0; t < nt; t++) s += part[t];
    return s;
}

CPU_CLONES static void cpu_k_bias_rows(float *out, const float *bias, size_t rows, int C)
{
    for (size_t n = 0; n < rows; n++) {
        float *o = out + n * (size_t)C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += bias[c];
    }
}

void cpu_bias_add(backend *be, float *out, const float *bias, int N, int C)
{
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        cpu_k_bias_rows(out + lo * (size_t)C, bias, hi - lo, C);
    }
}

/* dbias[c0..c0+w) += sum_n dout[n, c0..c0+w), w <= 256, accumulated in rows order. */
CPU_CLONES static void cpu_k_bias_cols(float *dbias, const float *dout, int N, int C, int w)
{
    float acc[256];
    for (int j = 0; j < w; j++) acc[j] = 0.0f;
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < w; j++) acc[j] += d[j];
    }
    for (int j = 0; j < w; j++) dbias[j] += acc[j];
}

/* Parallel over channel blocks (each block sums all rows itself): deterministic, no partials. */
void cpu_bias_backward(backend *be, float *dbias, const float *dout, int N, int C)
{
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
    /* a multiple of nt blocks of at most 256 columns, so every thread gets the same share */
    int per_thread = (C + nt * 256 - 1) / (nt * 256);
    int w = ((C + nt * per_thread - 1) / (nt * per_thread) + 15) / 16 * 16;
    int nblk = (C + w - 1) / w;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * w, cw = C - c0 < w ? C - c0 : w;
        cpu_k_bias_cols(dbias + c0, dout + c0, N, C, cw);
    }
}
