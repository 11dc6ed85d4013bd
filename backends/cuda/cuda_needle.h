/* cuda_needle.h: the CUDA backend's ops for Needle's layers (cuda_needle.cu), declared for the
 * backend's table in cuda_backend.c. Contracts are in backends/backend.h; only backends/cuda
 * includes this. */
#ifndef LOOM_CUDA_NEEDLE_H
#define LOOM_CUDA_NEEDLE_H

#include "backends/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                            int T, int C, int K, int dil);
void cuda_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, int B, int T, int C, int K,
                             int dil);
void cuda_conv_taps_decode(backend *be, float *out, float *state, const float *x,
                           const float *w, int R, int C, int K, int dil);
void cuda_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g, size_t n);
void cuda_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                                const float *x, const float *g, size_t n);
void cuda_scalar_gate_forward(backend *be, float *out, const float *x, const float *s, size_t n);
void cuda_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                               const float *x, const float *s, size_t n);
void cuda_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                      int cols);
void cuda_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols);

#ifdef __cplusplus
}
#endif

#endif
