/* cuda_needle_mix.h: the CUDA backend's ops for Needle's mixing layers (cuda_needle_mix.cu), the
 * BACKEND_OP_NEEDLE_MIX group, declared for the backend's table in cuda_backend.c. Contracts are
 * in backends/backend.h ("Needle's mixing layers"); only backends/cuda includes this. */
#ifndef LOOM_CUDA_NEEDLE_MIX_H
#define LOOM_CUDA_NEEDLE_MIX_H

#include "backends/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                     int N, int a, int b, int transpose, const backend_kron_io *io);
void cuda_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                       int inverse);
void cuda_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                     int n_out);
void cuda_softmax_rows(backend *be, float *out, const float *x, int N, int n);
void cuda_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s, int N,
                                int n);
void cuda_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                           const float *d2, const float *b2, int N, int n);
void cuda_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                            const float *z1, const float *cond, const float *d2, const float *b2,
                            int N, int n);
void cuda_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                             const float *bias, int N, int lanes, int lane);
void cuda_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                              const float *alpha, const float *bias, int N, int lanes, int lane);
void cuda_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                       int lanes, int d);
void cuda_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du, const float *X,
                                const float *h, int hs, int N, int lanes, int d);
void cuda_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y, int N,
                     int lanes, int d);
void cuda_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                              const float *X, const float *h, const float *y, int N, int lanes,
                              int d);
void cuda_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                              const float *v, int N, int d);
void cuda_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                               const float *k, const float *v, int N, int d);

#ifdef __cplusplus
}
#endif

#endif
