/* cpu_needle_mix.h: the CPU backend's ops for Needle's mixing layers (cpu_needle_mix.c: the
 * Kronecker products, column permutations and scales, row softmax, the Hadamard MLP's middle,
 * mHC and the engram gate), declared for the backend's table in cpu_backend.c. Contracts are in
 * backends/backend.h ("Needle's mixing layers"); only backends/cpu includes this. */
#ifndef LOOM_CPU_NEEDLE_MIX_H
#define LOOM_CPU_NEEDLE_MIX_H

#include "backends/cpu/cpu_internal.h"

void cpu_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                    int N, int a, int b, int transpose, const backend_kron_io *io);
void cpu_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N, int n,
                      int inverse);
void cpu_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                    int n_out);
void cpu_softmax_rows(backend *be, float *out, const float *x, int N, int n);
void cpu_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s, int N,
                               int n);
void cpu_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                          const float *d2, const float *b2, int N, int n);
void cpu_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                           const float *z1, const float *cond, const float *d2, const float *b2,
                           int N, int n);
void cpu_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                            const float *bias, int N, int lanes, int lane);
void cpu_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                             const float *alpha, const float *bias, int N, int lanes, int lane);
void cpu_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                      int lanes, int d);
void cpu_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du, const float *X,
                               const float *h, int hs, int N, int lanes, int d);
void cpu_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y, int N,
                    int lanes, int d);
void cpu_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                             const float *X, const float *h, const float *y, int N, int lanes,
                             int d);
void cpu_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                             const float *v, int N, int d);
void cpu_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                              const float *k, const float *v, int N, int d);

#endif
