/* cpu_activation.c: GELU (tanh form, GPT-2) and SwiGLU, forward and backward, elementwise.
 * Input gradients are overwritten (backend.h convention). An output may alias its own input
 * element for element (in-place use); it must never alias a shifted range. */
#include "backends/cpu/cpu_exp.h"
#include "backends/cpu/cpu_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

/* tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error ~1e-7 (cancellation near 0 is absolute, which
 * is what GELU needs: it adds 1 to it). Saturates correctly through cpu_expf's clamp. */
static inline float cpu_tanhf(float u)
{
    return 1.0f - 2.0f / (cpu_expf(2.0f * u) + 1.0f);
}

/* out = 0.5 x (1 + tanh(s (x + k x^3))) */
CPU_CLONES static void cpu_k_gelu_fwd(float *out, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float t = cpu_tanhf(GELU_S * (x + GELU_K * x * x * x));
        out[i] = 0.5f * x * (1.0f + t);
    }
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) s (1 + 3 k x^2) */
CPU_CLONES static void cpu_k_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float t = cpu_tanhf(GELU_S * (x + GELU_K * x * x * x));
        float g =
            0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * GELU_K * x * x);
        dinp[i] = g * dout[i];
    }
}

void cpu_gelu_forward(backend *be, float *out, const float *inp, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_gelu_fwd(out + lo, inp + lo, hi - lo);
    }
}

void cpu_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_gelu_bwd(dinp + lo, inp + lo, dout + lo, hi - lo);
    }
}

/* out = silu(g) u, silu(g) = g sigma(g), sigma(g) = 1 / (1 + e^-g) */
CPU_CLONES static void cpu_k_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + cpu_expf(-g));
        out[i] = g * sig * up[i];
    }
}

/* dgate = dout u sigma (1 + g (1 - sigma)),  dup = dout silu(g) */
CPU_CLONES static void cpu_k_swiglu_bwd(float *dgate, float *dup, const float *dout,
                                        const float *gate, const float *up, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i];
        float sig = 1.0f / (1.0f + cpu_expf(-g));
        dgate[i] = d * u * sig * (1.0f + g * (1.0f - sig));
        dup[i] = d * g * sig;
    }
}

void cpu_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_swiglu_fwd(out + lo, gate + lo, up + lo, hi - lo);
    }
}

void cpu_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                         const float *gate, const float *up, size_t n)
{
    int nt = n < CPU_PAR_MIN / 4 ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(n, &lo, &hi);
        cpu_k_swiglu_bwd(dgate + lo, dup + lo, dout + lo, gate + lo, up + lo, hi - lo);
    }
}
