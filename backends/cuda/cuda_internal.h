/* cuda_internal.h: state and op declarations shared by the files of the CUDA backend (.c and .cu).
 * Only backends/cuda includes it; nothing outside the folder may depend on it. It must never hold
 * per-step allocations: scratch only grows (first call of a shape) and is reused in stream order. */
#ifndef LOOM_CUDA_INTERNAL_H
#define LOOM_CUDA_INTERNAL_H

/* System and CUDA headers first, outside the extern "C" block below (they carry C++ parts). */
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backends/backend_impl.h"
#include "backends/bf16_slots.h"
#include "base/error.h"
#include "base/log.h"

/* Threads per block of the simple kernels (elementwise, row-per-warp). */
#define CUDA_BLOCK 256

/* bf16 copies of registered fp32 weights (backend weights_bf16), slots of bf16_slots.h whose
 * copies are device memory (__nv_bfloat16 bits). */
#define CUDA_WEIGHT_SLOTS 8

/* Pinned staging for small host-to-device copies (a micro-batch's tokens and targets): a ring
 * of slots, each reused once the device has run the copy that last read it. */
#define CUDA_STAGE_SLOTS 8
#define CUDA_STAGE_BYTES ((size_t)1 << 20)

typedef struct cuda_impl {
    int device;
    cudaStream_t compute, comm; /* ops run on compute; the comm layer enqueues on comm */
    cublasHandle_t blas;
    void *blas_ws;              /* cuBLAS workspace, fixed at create (no cuBLAS-internal mallocs) */
    size_t blas_ws_bytes;
    void *scratch;              /* per-op temporary space, grown on demand, used in stream order */
    size_t scratch_bytes;
    int sm_count;
    size_t smem_optin;          /* max dynamic shared memory one block may opt in to */
    bf16_slot weights[CUDA_WEIGHT_SLOTS]; /* bf16 mode: registered weight copies */
    void *stage;                /* pinned host, CUDA_STAGE_SLOTS x CUDA_STAGE_BYTES */
    cudaEvent_t stage_done[CUDA_STAGE_SLOTS]; /* recorded after the copy out of each slot */
    int stage_next;
    cudaError_t error;          /* first CUDA/cuBLAS failure (sticky), cudaSuccess while healthy */
    char why[256];              /* its one-line description, for backend_failure */
} cuda_impl;

static inline cuda_impl *cuda_im(backend *be) { return (cuda_impl *)be->impl; }

/* Record a failed CUDA call. Ops return void, so the first failure is kept (sticky) and logged;
 * every later op becomes a no-op, copy_d2h fills NaN and sumsq returns NaN, so the host sees a
 * non-finite loss instead of silently wrong numbers. Returns 0 for cudaSuccess, else -1. */
int cuda_check(backend *be, cudaError_t err, const char *what);

/* cudaGetLastError() after a kernel launch, through cuda_check. */
int cuda_check_launch(backend *be, const char *what);

/* 1 when an earlier failure made the backend unusable (ops skip their work). */
static inline int cuda_broken(backend *be) { return cuda_im(be)->error != cudaSuccess; }

/* At least `bytes` of device scratch, 256-byte aligned; NULL (and sticky error) on OOM. Valid
 * until the next call; safe across ops because every op runs in order on the compute stream (and
 * growing frees the old buffer with cudaFree, which waits for the device). */
void *cuda_scratch(backend *be, size_t bytes);

/* Blocks for a grid-stride loop over n items: enough to fill the device, never more than needed. */
unsigned cuda_grid_for(backend *be, size_t n);

/* --- cuda_elementwise.cu --- */
cudaError_t cuda_probe_kernels(void); /* cudaFuncGetAttributes on a kernel: fails without sm code */
void cuda_fill(backend *be, float *x, float value, size_t n);
void cuda_add(backend *be, float *out, const float *a, const float *b, size_t n);
void cuda_axpy(backend *be, float *y, float alpha, const float *x, size_t n);
void cuda_scale(backend *be, float *x, float alpha, size_t n);
double cuda_sumsq(backend *be, const float *x, size_t n);
void cuda_bias_add(backend *be, float *out, const float *bias, int N, int C);
void cuda_bias_backward(backend *be, float *dbias, const float *dout, int N, int C);
void cuda_gelu_forward(backend *be, float *out, const float *inp, size_t n);
void cuda_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n);
void cuda_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n);
void cuda_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, size_t n);
void cuda_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse);
void cuda_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta, const float *freqs);
void cuda_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs, int inverse);
/* dst[i] = bf16(src[i]) (round to nearest even), for the bf16 matmul path. dst is __nv_bfloat16*. */
int cuda_cast_bf16(backend *be, void *dst, const float *src, size_t n);

/* --- cuda_matmul.c --- */
void cuda_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                 int transA, int transB, float alpha, float beta);
void cuda_weights_bf16(backend *be, const float *w, size_t n);
void cuda_weights_free(backend *be); /* at destroy */

/* --- cuda_norm.cu --- */
void cuda_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int N, int C, float eps);
void cuda_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C);
void cuda_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps);
void cuda_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N, int C);

/* --- cuda_attention.cu --- */
void cuda_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int Hkv, int D, int window);
void cuda_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                             const float *q, const float *k, const float *v, const float *out,
                             const float *lse, int B, int T, int H, int Hkv, int D, int window);
void cuda_attention_decode(backend *be, float *out, const float *q, const float *k, const float *v,
                           int Tk, int H, int Hkv, int D);
void cuda_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                                const float *vnew, float *kc, float *vc, const int32_t *pos, int R,
                                int cap, int H, int Hkv, int D);
/* One line for the log: which attention implementation runs and why. */
const char *cuda_attention_choice(backend *be);

/* cuda_attention_tc.cu, cuda_attention_bf16.cu: the tensor-core paths behind
 * cuda_attention_forward/backward (their interface is backends/cuda/cuda_attention.cuh). */

/* --- cuda_xent.cu --- */
void cuda_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets, int N,
                       int V, int V_real, float grad_scale);

/* --- cuda_adamw.cu --- */
void cuda_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                float grad_scale);

/* --- cuda_embedding.cu --- */
void cuda_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int B, int T, int C);
void cuda_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                             const int32_t *tokens, int B, int T, int C, int V);

#ifdef __cplusplus
}
#endif

#endif
