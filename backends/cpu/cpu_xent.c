/* cpu_xent.c: fused softmax + cross-entropy over (N, V) logits, dlogits written in place.
 * Each row is read three times while it sits in L2 (max, exp+sum, scale), exp is cpu_expf.
 * Columns >= V_real must never be exponentiated (gradient 0); targets < 0 are masked rows. */
#include <math.h>

#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_internal.h"

/* For a row x with target y: m = max x, s = sum e^(x - m), loss = log s + m - x_y,
 * dx_j = g (e^(x_j - m) / s - [j == y]) for j < V_real, 0 beyond. A masked row (y < 0, or y
 * outside the real vocab) has loss 0 and gradient 0. */
CPU_CLONES static void cpu_k_xent_rows(float *logits, float *losses, const int32_t *targets,
                                       size_t r0, size_t r1, int V, int Vr, float g)
{
    for (size_t n = r0; n < r1; n++) {
        float *x = logits + n * (size_t)V;
        int y = targets[n];
        int first_zero = Vr;
        if (y < 0 || y >= Vr) {
            losses[n] = 0.0f;
            first_zero = 0;
        } else {
            float m = -INFINITY, s = 0.0f;
#pragma omp simd reduction(max : m)
            for (int j = 0; j < Vr; j++) m = x[j] > m ? x[j] : m;
            float xy = x[y];
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < Vr; j++) {
                float e = cpu_expf(x[j] - m);
                x[j] = e;
                s += e;
            }
            losses[n] = logf(s) + (m - xy); /* m - xy exact: no cancellation at |x| ~ 1e3 */
            float k = g / s;
#pragma omp simd
            for (int j = 0; j < Vr; j++) x[j] *= k;
            x[y] -= g;
        }
#pragma omp simd
        for (int j = first_zero; j < V; j++) x[j] = 0.0f;
    }
}

void cpu_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets, int N,
                      int V, int V_real, float grad_scale)
{
    if (V_real > V || V_real <= 0) V_real = V;
    int nt = (size_t)N * V < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        /* rows split evenly (not in 16s: a row is already long) */
        size_t per = ((size_t)N + CPU_NT() - 1) / CPU_NT(), lo = per * CPU_TID();
        size_t hi = lo + per < (size_t)N ? lo + per : (size_t)N;
        if (lo < hi) cpu_k_xent_rows(logits, losses, targets, lo, hi, V, V_real, grad_scale);
    }
}
