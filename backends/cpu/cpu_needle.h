/* cpu_needle.h: the CPU backend's ops for Needle's layers (cpu_needle*.c), declared for the
 * backend's table in cpu_backend.c. Contracts are in backends/backend.h; only backends/cpu
 * includes this. */
#ifndef LOOM_CPU_NEEDLE_H
#define LOOM_CPU_NEEDLE_H

#include "backends/cpu/cpu_internal.h"

/* cpu_needle.c */
void cpu_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                           int T, int C, int K, int dil);
void cpu_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int B, int T, int C, int K,
                            int dil);
void cpu_conv_taps_decode(backend *be, float *out, float *state, const float *x, const float *w,
                          int R, int C, int K, int dil);
void cpu_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g, size_t n);
void cpu_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                               const float *x, const float *g, size_t n);
void cpu_scalar_gate_forward(backend *be, float *out, const float *x, const float *s, size_t n);
void cpu_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                              const float *x, const float *s, size_t n);

/* cpu_needle_quant.c */
void cpu_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                     int cols);
void cpu_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols);

#endif
