/* cpu_rope.c: rotary position embedding in place on x (B, T, H, D), interleaved pairs.
 * Angles come from a (T, D/2) cos/sin table computed in double (t * theta^(-2i/D) loses ~1e-4 rad
 * in float at t ~ 1000) and cached for (T, D, theta): it must never recompute sin/cos per call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "base/log.h"

/* (x0, x1) <- (x0 cos a - x1 sgn sin a, x0 sgn sin a + x1 cos a); sgn = -1 rotates back. */
CPU_CLONES static void cpu_k_rope_rows(float *x, const float *tab, size_t r0, size_t r1, int T,
                                       int H, int D, float sgn)
{
    int half = D / 2;
    for (size_t r = r0; r < r1; r++) { /* r indexes (b, t) */
        const float *cs = tab + (r % (size_t)T) * (size_t)D;
        for (int h = 0; h < H; h++) {
            float *v = x + (r * H + h) * (size_t)D;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1], c = cs[i], s = sgn * cs[half + i];
                v[2 * i] = a * c - b * s;
                v[2 * i + 1] = a * s + b * c;
            }
        }
    }
}

/* The cached table for (T, D, theta) or (T, D, freqs), rebuilt for a longer T or another D,
 * theta or frequency set. NULL on OOM. */
static const float *cpu_rope_table(cpu_state *st, int T, int D, float theta, const float *freqs)
{
    int half = D / 2;
    /* rows depend only on t, so a table built for a longer T serves every shorter one */
    int same = freqs ? st->rope_key && memcmp(st->rope_key, freqs, (size_t)half * sizeof(float)) == 0
                     : !st->rope_key && st->rope_theta == theta;
    if (st->rope_tab && st->rope_T >= T && st->rope_D == D && same) return st->rope_tab;
    size_t need = (size_t)T * D;
    if (need > st->rope_cap) {
        float *p = malloc(need * sizeof(float));
        if (!p) {
            log_warn("cpu backend: out of memory for the rope table (%d x %d)", T, D);
            return NULL;
        }
        free(st->rope_tab);
        st->rope_tab = p;
        st->rope_cap = need;
    }
    free(st->rope_key);
    st->rope_key = NULL;
    if (freqs) {
        st->rope_key = malloc((size_t)half * sizeof(float));
        if (!st->rope_key) {
            st->rope_D = 0; /* the table is being rebuilt: never match it as it is */
            log_warn("cpu backend: out of memory for the rope key");
            return NULL;
        }
        memcpy(st->rope_key, freqs, (size_t)half * sizeof(float));
    }
    for (int i = 0; i < half; i++) {
        double freq = freqs ? (double)freqs[i] : pow((double)theta, -2.0 * i / D);
        for (int t = 0; t < T; t++) {
            st->rope_tab[(size_t)t * D + i] = (float)cos(t * freq);
            st->rope_tab[(size_t)t * D + half + i] = (float)sin(t * freq);
        }
    }
    st->rope_T = T;
    st->rope_D = D;
    st->rope_theta = theta;
    return st->rope_tab;
}

static void cpu_rope_apply(cpu_state *st, float *x, const float *tab, int B, int T, int H, int D,
                           int inverse)
{
    size_t rows = (size_t)B * T;
    int nt = rows * H * D < CPU_PAR_MIN ? 1 : st->threads;
    float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(rows, &lo, &hi);
        cpu_k_rope_rows(x, tab, lo, hi, T, H, D, sgn);
    }
}

/* Rows at their own positions (batched generation): row r of x (R, H, D) takes table row pos[r],
 * so each element gets exactly the bits cpu_rope (cpu_rope_freqs with freqs) gives it there. */
void cpu_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta, const float *freqs)
{
    cpu_state *st = cpu_st(be);
    int top = 0;
    for (int r = 0; r < R; r++)
        if (pos[r] > top) top = pos[r];
    const float *tab = cpu_rope_table(st, top + 1, D, theta, freqs);
    if (!tab) return;
    /* the same kernel (and so the same contraction into FMAs) as rope's rows, one row a call */
    for (int r = 0; r < R; r++)
        cpu_k_rope_rows(x + (size_t)r * H * D, tab + (size_t)pos[r] * D, 0, 1, 1, H, D, 1.0f);
}

void cpu_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse)
{
    cpu_state *st = cpu_st(be);
    const float *tab = cpu_rope_table(st, T, D, theta, NULL);
    if (tab) cpu_rope_apply(st, x, tab, B, T, H, D, inverse);
}

void cpu_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs, int inverse)
{
    cpu_state *st = cpu_st(be);
    const float *tab = cpu_rope_table(st, T, D, 0.0f, freqs);
    if (tab) cpu_rope_apply(st, x, tab, B, T, H, D, inverse);
}
