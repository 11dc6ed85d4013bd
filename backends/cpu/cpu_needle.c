/* cpu_needle.c: Needle's element-wise layers on the CPU: the causal depthwise conv taps along
 * time (forward, backward, one decode row) and the sigmoid gates (element-wise and scalar).
 * Rows run in parallel; parameter gradients go to per-thread partials added in thread order
 * afterwards, so results never depend on timing (no atomics). */
#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_needle.h"

/* Rows [r0, r1) of (B*T, C), row n at position t = n mod T of its sequence:
 * o[c] = w[0,c] x[n,c], then o[c] += w[j,c] x[n - j*dil, c] for j = 1.. while j*dil <= t. */
CPU_CLONES static void cpu_k_taps_fwd(float *out, const float *inp, const float *w, size_t r0,
                                      size_t r1, int T, int C, int K, int dil)
{
    for (size_t n = r0; n < r1; n++) {
        const int t = (int)(n % (size_t)T);
        const float *x = inp + n * C;
        float *o = out + n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] * x[c];
        for (int j = 1; j < K && j * dil <= t; j++) {
            const float *xj = x - (size_t)j * dil * C, *wj = w + (size_t)j * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += wj[c] * xj[c];
        }
    }
}

void cpu_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                           int T, int C, int K, int dil)
{
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0) return;
    size_t N = (size_t)B * T;
    int nt = N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(N, &lo, &hi);
        cpu_k_taps_fwd(out, inp, w, lo, hi, T, C, K, dil);
    }
}

/* dx[n,c] = w[0,c] dout[n,c] + sum_{j >= 1, t + j*dil < T} w[j,c] dout[n + j*dil, c] */
CPU_CLONES static void cpu_k_taps_dx(float *dinp, const float *dout, const float *w, size_t r0,
                                     size_t r1, int T, int C, int K, int dil)
{
    for (size_t n = r0; n < r1; n++) {
        const int t = (int)(n % (size_t)T);
        const float *d = dout + n * C;
        float *dx = dinp + n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] = w[c] * d[c];
        for (int j = 1; j < K && t + j * dil < T; j++) {
            const float *dj = d + (size_t)j * dil * C, *wj = w + (size_t)j * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += wj[c] * dj[c];
        }
    }
}

/* part[j*C + c] += dout[n,c] x[n - j*dil, c] over rows [r0, r1) with t >= j*dil */
CPU_CLONES static void cpu_k_taps_dw(float *part, const float *dout, const float *inp, size_t r0,
                                     size_t r1, int T, int C, int K, int dil)
{
    for (size_t n = r0; n < r1; n++) {
        const int t = (int)(n % (size_t)T);
        const float *d = dout + n * C;
        for (int j = 0; j < K && j * dil <= t; j++) {
            const float *xj = inp + (n - (size_t)j * dil) * C;
            float *pj = part + (size_t)j * C;
#pragma omp simd
            for (int c = 0; c < C; c++) pj[c] += d[c] * xj[c];
        }
    }
}

/* dst[i] += sum over threads t (in order) of part[t][i], for i in [i0, i1) */
CPU_CLONES static void cpu_k_taps_reduce(float *dst, float *const *part, int nparts, size_t i0,
                                         size_t i1)
{
    for (size_t i = i0; i < i1; i++) {
        float s = 0.0f;
        for (int t = 0; t < nparts; t++) s += part[t][i];
        dst[i] += s;
    }
}

void cpu_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int B, int T, int C, int K, int dil)
{
    if (B <= 0 || T <= 0 || C <= 0 || K <= 0) return;
    cpu_state *st = cpu_st(be);
    size_t N = (size_t)B * T, kc = (size_t)K * C;
    int nt = N * C < CPU_PAR_MIN ? 1 : st->threads;
    if (dw && cpu_scratch_reserve(st, kc) != 0) return;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(N, &lo, &hi);
        if (dinp) cpu_k_taps_dx(dinp, dout, w, lo, hi, T, C, K, dil);
        if (dw) { /* NULL: frozen taps */
            float *part = st->scratch[CPU_TID()];
            for (size_t i = 0; i < kc; i++) part[i] = 0.0f;
            cpu_k_taps_dw(part, dout, inp, lo, hi, T, C, K, dil);
#pragma omp barrier
            cpu_split(kc, &lo, &hi);
            cpu_k_taps_reduce(dw, st->scratch, CPU_NT(), lo, hi);
        }
    }
}

/* One row per sequence: the forward's sum over the state rows, then the state moves on. */
void cpu_conv_taps_decode(backend *be, float *out, float *state, const float *x, const float *w,
                          int R, int C, int K, int dil)
{
    (void)be;
    if (R <= 0 || C <= 0 || K <= 0) return;
    const size_t S = (size_t)(K - 1) * dil;
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * C;
        float *o = out + (size_t)r * C, *s = S ? state + (size_t)r * S * C : NULL;
        for (int c = 0; c < C; c++) {
            float y = w[c] * xr[c];
            for (int j = 1; j < K; j++) y += w[(size_t)j * C + c] * s[(S - (size_t)j * dil) * C + c];
            if (S) {
                for (size_t i = 0; i + 1 < S; i++) s[i * C + c] = s[(i + 1) * C + c];
                s[(S - 1) * C + c] = xr[c];
            }
            o[c] = y;
        }
    }
}

/* --- sigmoid gates --- */

static inline float cpu_sigmoid(float g) { return 1.0f / (1.0f + cpu_expf(-g)); }

/* out = x s, s = sigmoid(g) */
CPU_CLONES static void cpu_k_gate_fwd(float *out, const float *x, const float *g, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = x[i] * cpu_sigmoid(g[i]);
}

/* dx = dout s, dg = dout x s (1 - s) */
CPU_CLONES static void cpu_k_gate_bwd(float *dx, float *dg, const float *dout, const float *x,
                                      const float *g, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float s = cpu_sigmoid(g[i]), d = dout[i];
        dx[i] = d * s;
        dg[i] = d * x[i] * s * (1.0f - s);
    }
}

void cpu_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_gate_fwd(out + lo, x + lo, g + lo, hi - lo);
    }
}

void cpu_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                               const float *x, const float *g, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_gate_bwd(dx + lo, dg + lo, dout + lo, x + lo, g + lo, hi - lo);
    }
}

/* out = a x (a = sigmoid(s), computed once) */
CPU_CLONES static void cpu_k_scale_by(float *out, const float *x, float a, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a * x[i];
}

void cpu_scalar_gate_forward(backend *be, float *out, const float *x, const float *s, size_t n)
{
    const float a = cpu_sigmoid(s[0]);
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_scale_by(out + lo, x + lo, a, hi - lo);
    }
}

/* sum_i dout_i x_i (a vector reduction), then dx = a dout: each element read before written, so
 * dx may be dout */
CPU_CLONES static float cpu_k_gate_dot(float *dx, const float *dout, const float *x, float a,
                                       size_t n, int want_dot)
{
    float acc = 0.0f;
    if (want_dot) {
#pragma omp simd reduction(+ : acc)
        for (size_t i = 0; i < n; i++) acc += dout[i] * x[i];
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) dx[i] = a * dout[i];
    return acc;
}

void cpu_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                              const float *x, const float *s, size_t n)
{
    cpu_state *st = cpu_st(be);
    const float a = cpu_sigmoid(s[0]);
    int nt = n < CPU_PAR_MIN / 4 ? 1 : st->threads;
    if (ds && cpu_scratch_reserve(st, 1) != 0) return;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        float part = cpu_k_gate_dot(dx + lo, dout + lo, x + lo, a, hi - lo, ds != NULL);
        if (ds) st->scratch[CPU_TID()][0] = part;
#pragma omp barrier
#pragma omp master
        if (ds) { /* the threads' partials in thread order; NULL: a frozen gate */
            float sum = 0.0f;
            for (int t = 0; t < CPU_NT(); t++) sum += st->scratch[t][0];
            ds[0] += a * (1.0f - a) * sum;
        }
    }
}
