/* backend_impl.h: what a backend is made of, behind the door of backend.h: its table of ops (one
 * entry per door function, same name and arguments; the contracts are in backend.h) and the
 * handle's fields. Only backends/ includes it (and tests/backends or bench/bench_prof.h where they
 * look inside a backend); everyone else calls the functions of backend.h. */
#ifndef LOOM_BACKEND_IMPL_H
#define LOOM_BACKEND_IMPL_H

#include "backends/backend.h"

/* The vtable a backend fills. backend_X(be, ...) calls ops->X(be, ...); see backend_X in
 * backend.h for what each computes. Entries marked optional may be NULL: backend_has() is the one
 * place that reads which are. */
typedef struct backend_ops {
    const char *name;

    /* --- lifetime and memory --- */
    void (*destroy)(backend *be);
    void *(*alloc)(backend *be, size_t bytes);
    void (*free)(backend *be, void *ptr);
    void (*copy_h2d)(backend *be, void *dst, const void *host_src, size_t bytes);
    void (*copy_d2h)(backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy_d2d)(backend *be, void *dst, const void *src, size_t bytes);
    void (*fill)(backend *be, float *x, float value, size_t n);
    void (*sync)(backend *be);

    /* --- events --- */
    backend_event *(*event_create)(backend *be);
    void (*event_destroy)(backend *be, backend_event *ev);
    void (*event_record)(backend *be, backend_event *ev);
    void (*event_sync)(backend *be, backend_event *ev);
    void *(*native_stream)(backend *be, int which);

    /* --- dense algebra --- */
    void (*matmul)(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                   int transA, int transB, float alpha, float beta);
    void (*add)(backend *be, float *out, const float *a, const float *b, size_t n);
    void (*axpy)(backend *be, float *y, float alpha, const float *x, size_t n);
    void (*scale)(backend *be, float *x, float alpha, size_t n);
    double (*sumsq)(backend *be, const float *x, size_t n);

    /* --- bias, embeddings, norms, activations --- */
    void (*bias_add)(backend *be, float *out, const float *bias, int N, int C);
    void (*bias_backward)(backend *be, float *dbias, const float *dout, int N, int C);
    void (*embedding_forward)(backend *be, float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int B, int T, int C);
    void (*embedding_backward)(backend *be, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, int V);
    void (*layernorm_forward)(backend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
    void (*layernorm_backward)(backend *be, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
    void (*rmsnorm_forward)(backend *be, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(backend *be, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N, int C);
    void (*gelu_forward)(backend *be, float *out, const float *inp, size_t n);
    void (*gelu_backward)(backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    void (*swiglu_forward)(backend *be, float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_backward)(backend *be, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n);

    /* --- rotary positions and attention --- */
    void (*rope)(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse);
    void (*rope_freqs)(backend *be, float *x, int B, int T, int H, int D, const float *freqs,
                       int inverse); /* optional */
    void (*attention_forward)(backend *be, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int Hkv, int D, int window);
    void (*attention_backward)(backend *be, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int B, int T, int H, int Hkv, int D, int window);
    void (*attention_decode)(backend *be, float *out, const float *q, const float *k, const float *v,
                             int Tk, int H, int Hkv, int D); /* optional */
    void (*rope_rows)(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta,
                      const float *freqs); /* optional */
    void (*attention_decode_rows)(backend *be, float *out, const float *q, const float *knew,
                                  const float *vnew, float *kc, float *vc, const int32_t *pos,
                                  int R, int cap, int H, int Hkv, int D); /* optional */

    /* --- loss and optimizer --- */
    void (*softmax_xent)(backend *be, float *logits, float *losses, const int32_t *targets,
                         int N, int V, int V_real, float grad_scale);
    void (*adamw)(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                  float grad_scale);

    /* --- Needle's layers --- */
    void (*conv_taps_forward)(backend *be, float *out, const float *inp, const float *w, int B,
                              int T, int C, int K, int dil);
    void (*conv_taps_backward)(backend *be, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, int B, int T, int C, int K,
                               int dil);
    void (*conv_taps_decode)(backend *be, float *out, float *state, const float *x,
                             const float *w, int R, int C, int K, int dil);
    void (*sigmoid_gate_forward)(backend *be, float *out, const float *x, const float *g,
                                 size_t n);
    void (*sigmoid_gate_backward)(backend *be, float *dx, float *dg, const float *dout,
                                  const float *x, const float *g, size_t n);
    void (*scalar_gate_forward)(backend *be, float *out, const float *x, const float *s,
                                size_t n);
    void (*scalar_gate_backward)(backend *be, float *dx, float *ds, const float *dout,
                                 const float *x, const float *s, size_t n);
    void (*cq_w4_quant)(backend *be, float *out, const float *w, const float *codebook, int rows,
                        int cols);
    void (*fake_quant_a8)(backend *be, float *out, const float *x, int rows, int cols);

    /* --- Needle's mixing layers: optional as a group (BACKEND_OP_NEEDLE_MIX: all or none) --- */
    void (*kron_apply)(backend *be, float *out, const float *z, const float *A, const float *Bm,
                       int N, int a, int b, int transpose, const backend_kron_io *io);
    void (*permute_cols)(backend *be, float *out, const float *x, const int32_t *perm, int N,
                         int n, int inverse);
    void (*scale_cols)(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                       int n_out);
    void (*softmax_rows)(backend *be, float *out, const float *x, int N, int n);
    void (*softmax_rows_backward)(backend *be, float *dx, const float *dout, const float *s,
                                  int N, int n);
    void (*hada_mid_forward)(backend *be, float *out, const float *z1, const float *cond,
                             const float *d2, const float *b2, int N, int n);
    void (*hada_mid_backward)(backend *be, float *dz1, float *dcond, const float *dout,
                              const float *z1, const float *cond, const float *d2,
                              const float *b2, int N, int n);
    void (*mhc_coeffs_forward)(backend *be, float *h, const float *z, const float *alpha,
                               const float *bias, int N, int lanes, int lane);
    void (*mhc_coeffs_backward)(backend *be, float *dz, const float *dh, const float *z,
                                const float *alpha, const float *bias, int N, int lanes,
                                int lane);
    void (*mhc_collapse)(backend *be, float *u, const float *X, const float *h, int hs, int N,
                         int lanes, int d);
    void (*mhc_collapse_backward)(backend *be, float *dX, float *dh, const float *du,
                                  const float *X, const float *h, int hs, int N, int lanes,
                                  int d);
    void (*mhc_expand)(backend *be, float *Xo, const float *X, const float *h, const float *y,
                       int N, int lanes, int d);
    void (*mhc_expand_backward)(backend *be, float *dX, float *dh, float *dy, const float *g,
                                const float *X, const float *h, const float *y, int N, int lanes,
                                int d);
    void (*engram_gate_forward)(backend *be, float *out, const float *u, const float *k,
                                const float *v, int N, int d);
    void (*engram_gate_backward)(backend *be, float *du, const float *dout, const float *u,
                                 const float *k, const float *v, int N, int d);

    /* --- optional extras --- */
    void (*weights_bf16)(backend *be, const float *w, size_t n); /* optional: NULL = no-op */
    /* Optional: the FLOP/s MFU is quoted against (a timed sgemm on the CPU), called once, on
     * demand, by backend_peak_flops. */
    double (*measure_peak)(backend *be);
    int (*tuning_save)(backend *be, char *buf, size_t len);  /* optional: NULL = nothing to record */
    int (*tuning_load)(backend *be, const char *line);       /* optional: NULL = never adopts */
    const char *(*failure)(backend *be);                     /* optional: NULL = always healthy */
    int (*memory)(backend *be, size_t *free_bytes, size_t *total_bytes); /* optional: NULL = not known */
} backend_ops;

/* The handle a backend's create() returns (calloc'd by it, freed by its destroy). */
struct backend {
    const backend_ops *ops;
    backend_config cfg;    /* what it computes (backend_cfg) */
    char description[160]; /* e.g. "cpu (OpenBLAS SkylakeX, 2 threads)" */
    double peak_flops;     /* fp32 (or bf16) FLOP/s for MFU; 0 = unknown or not yet measured */
    void *impl;            /* the backend's own state */
};

#endif
