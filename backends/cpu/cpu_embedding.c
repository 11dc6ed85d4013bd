/* cpu_embedding.c: token (+ learned position) embedding lookup and its backward.
 * The backward scatters into dwte rows picked by tokens; it parallelises over channel slices
 * (each thread owns columns, walks all tokens in order), never over tokens: no races on repeats. */
#include "backends/cpu/cpu_internal.h"

/* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] */
CPU_CLONES static void cpu_k_emb_fwd(float *out, const int32_t *tokens, const float *wte,
                                     const float *wpe, size_t r0, size_t r1, int T, int C)
{
    for (size_t n = r0; n < r1; n++) {
        float *o = out + n * C;
        const float *e = wte + (size_t)(tokens[n] < 0 ? 0 : tokens[n]) * C;
        if (wpe) {
            const float *p = wpe + (n % (size_t)T) * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c];
        }
    }
}

void cpu_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                           const float *wpe, int B, int T, int C)
{
    size_t N = (size_t)B * T;
    int nt = N * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(N, &lo, &hi);
        cpu_k_emb_fwd(out, tokens, wte, wpe, lo, hi, T, C);
    }
}

/* Columns [c0, c0+w): dwte[tok[n], c] += dout[n, c] in token order; dwpe[t, c] += sum_b dout. */
CPU_CLONES static void cpu_k_emb_bwd(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T, int C, int V, int c0,
                                     int w)
{
    size_t N = (size_t)B * T;
    for (size_t n = 0; n < N; n++) {
        int tok = tokens[n];
        if (tok < 0 || tok >= V) continue;
        float *g = dwte + (size_t)tok * C + c0;
        const float *d = dout + n * C + c0;
#pragma omp simd
        for (int c = 0; c < w; c++) g[c] += d[c];
    }
    if (!dwpe) return;
    for (int t = 0; t < T; t++) {
        float *g = dwpe + (size_t)t * C + c0;
        for (int b = 0; b < B; b++) {
            const float *d = dout + ((size_t)b * T + t) * C + c0;
#pragma omp simd
            for (int c = 0; c < w; c++) g[c] += d[c];
        }
    }
}

void cpu_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int B, int T, int C, int V)
{
    int nt = (size_t)B * T * C < CPU_PAR_MIN ? 1 : cpu_st(be)->threads;
    int w = ((C + nt - 1) / nt + 15) / 16 * 16;
    int nblk = (C + w - 1) / w;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * w;
        cpu_k_emb_bwd(dwte, dwpe, dout, tokens, B, T, C, V, c0, C - c0 < w ? C - c0 : w);
    }
}
