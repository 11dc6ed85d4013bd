/* cpu_norm.c: LayerNorm and RMSNorm over the last dim, forward and backward.
 * Rows run in parallel; weight/bias gradients go to per-thread partials that are added in thread
 * order afterwards, so results never depend on timing (atomics must never be used here). */
#include <math.h>

#include "backends/cpu/cpu_internal.h"

/* mean = sum x / C; var = sum (x - mean)^2 / C; rstd = 1/sqrt(var + eps);
 * out = (x - mean) rstd w + b */
CPU_CLONES static void cpu_k_ln_fwd(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, size_t r0, size_t r1, int C,
                                    float eps)
{
    for (size_t n = r0; n < r1; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float s = 0.0f, v = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float rs = 1.0f / sqrtf(v / C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * rs * w[c] + b[c];
        mean[n] = m;
        rstd[n] = rs;
    }
}

void cpu_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps)
{
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        cpu_k_ln_fwd(out, mean, rstd, inp, weight, bias, lo, hi, C, eps);
    }
}

/* With xh = (x - mean) rstd and g = dout w:
 * dx += rstd (g - mean(g) - xh mean(g xh)),  dw += dout xh,  db += dout */
CPU_CLONES static void cpu_k_ln_bwd(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, size_t r0, size_t r1, int C)
{
    for (size_t n = r0; n < r1; n++) {
        const float *x = inp + n * C, *d = dout + n * C;
        float *dx = dinp + n * C;
        float m = mean[n], rs = rstd[n], sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
        for (int c = 0; c < C; c++) {
            float g = d[c] * w[c];
            sg += g;
            sgx += g * (x[c] - m) * rs;
        }
        sg /= C;
        sgx /= C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * rs;
            db[c] += d[c];
            dw[c] += d[c] * xh;
            dx[c] += rs * (d[c] * w[c] - sg - xh * sgx);
        }
    }
}

/* dst[c] += sum over t of part[t][c] for c in [c0, c1), t in order. */
CPU_CLONES static void cpu_k_reduce(float *dst, float *const *part, int nparts, size_t off,
                                    size_t c0, size_t c1)
{
    for (size_t c = c0; c < c1; c++) {
        float s = 0.0f;
        for (int t = 0; t < nparts; t++) s += part[t][off + c];
        dst[c] += s;
    }
}

CPU_CLONES static void cpu_k_zero(float *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

void cpu_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int N, int C)
{
    cpu_state *st = cpu_st(be);
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : st->threads;
    if (cpu_scratch_reserve(st, 2 * (size_t)C) != 0) return;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *part = st->scratch[CPU_TID()];
        size_t lo, hi;
        cpu_k_zero(part, 2 * (size_t)C);
        cpu_split((size_t)N, &lo, &hi);
        cpu_k_ln_bwd(dinp, part, part + C, dout, inp, weight, mean, rstd, lo, hi, C);
#pragma omp barrier
        cpu_split((size_t)C, &lo, &hi);
        if (dweight) cpu_k_reduce(dweight, st->scratch, CPU_NT(), 0, lo, hi); /* NULL: frozen */
        if (dbias) cpu_k_reduce(dbias, st->scratch, CPU_NT(), (size_t)C, lo, hi);
    }
}

/* rstd = 1/sqrt(mean(x^2) + eps); out = x rstd w */
CPU_CLONES static void cpu_k_rms_fwd(float *out, float *rstd, const float *inp, const float *w,
                                     size_t r0, size_t r1, int C, float eps)
{
    for (size_t n = r0; n < r1; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c] * x[c];
        float rs = 1.0f / sqrtf(s / C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * rs * w[c];
        rstd[n] = rs;
    }
}

void cpu_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps)
{
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split((size_t)N, &lo, &hi);
        cpu_k_rms_fwd(out, rstd, inp, weight, lo, hi, C, eps);
    }
}

/* With xh = x rstd and g = dout w: dx += rstd (g - xh mean(g xh)),  dw += dout xh */
CPU_CLONES static void cpu_k_rms_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, const float *rstd, size_t r0, size_t r1, int C)
{
    for (size_t n = r0; n < r1; n++) {
        const float *x = inp + n * C, *d = dout + n * C;
        float *dx = dinp + n * C;
        float rs = rstd[n], sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
        for (int c = 0; c < C; c++) sgx += d[c] * w[c] * x[c] * rs;
        sgx /= C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xh = x[c] * rs;
            dw[c] += d[c] * xh;
            dx[c] += rs * (d[c] * w[c] - xh * sgx);
        }
    }
}

void cpu_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C)
{
    cpu_state *st = cpu_st(be);
    int nt = (size_t)N * C < CPU_PAR_MIN ? 1 : st->threads;
    if (cpu_scratch_reserve(st, (size_t)C) != 0) return;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *part = st->scratch[CPU_TID()];
        size_t lo, hi;
        cpu_k_zero(part, (size_t)C);
        cpu_split((size_t)N, &lo, &hi);
        cpu_k_rms_bwd(dinp, part, dout, inp, weight, rstd, lo, hi, C);
#pragma omp barrier
        cpu_split((size_t)C, &lo, &hi);
        if (dweight) cpu_k_reduce(dweight, st->scratch, CPU_NT(), 0, lo, hi); /* NULL: frozen */
    }
}
