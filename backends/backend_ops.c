/* backend_ops.c: the door's functions: what a backend is (name, description, config, peak,
 * health), backend_has (the one place that decides which optional ops a backend has) and one
 * forward per op into the backend's table. Nothing here may cost more than the call: no lookups,
 * no environment reads, no checks beyond an optional op's NULL entry (and a NULL handle given to
 * backend_destroy). */
#include "backends/backend_impl.h"

const char *backend_name(const backend *be) { return be->ops->name; }
const char *backend_description(const backend *be) { return be->description; }
const backend_config *backend_cfg(const backend *be) { return &be->cfg; }

double backend_peak_flops(backend *be)
{
    if (be->peak_flops <= 0 && be->ops->measure_peak) be->peak_flops = be->ops->measure_peak(be);
    return be->peak_flops;
}

const char *backend_failure(backend *be) { return be->ops->failure ? be->ops->failure(be) : NULL; }

int backend_memory(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    return be->ops->memory ? be->ops->memory(be, free_bytes, total_bytes) : -1;
}

int backend_has(const backend *be, backend_op op)
{
    const backend_ops *o = be->ops;
    switch (op) {
    case BACKEND_OP_ROPE_FREQS: return o->rope_freqs != NULL;
    case BACKEND_OP_ATTENTION_DECODE: return o->attention_decode != NULL;
    case BACKEND_OP_ROPE_ROWS: return o->rope_rows != NULL;
    case BACKEND_OP_ATTENTION_DECODE_ROWS: return o->attention_decode_rows != NULL;
    case BACKEND_OP_WEIGHTS_BF16: return o->weights_bf16 != NULL;
    case BACKEND_OP_MEASURE_PEAK: return o->measure_peak != NULL;
    case BACKEND_OP_TUNING_SAVE: return o->tuning_save != NULL;
    case BACKEND_OP_TUNING_LOAD: return o->tuning_load != NULL;
    case BACKEND_OP_FAILURE: return o->failure != NULL;
    case BACKEND_OP_NEEDLE_MIX: /* a group: every entry or none */
        return o->kron_apply && o->permute_cols && o->scale_cols && o->softmax_rows &&
               o->softmax_rows_backward && o->hada_mid_forward && o->hada_mid_backward &&
               o->mhc_coeffs_forward && o->mhc_coeffs_backward && o->mhc_collapse &&
               o->mhc_collapse_backward && o->mhc_expand && o->mhc_expand_backward &&
               o->engram_gate_forward && o->engram_gate_backward;
    }
    return 0;
}

/* --- the ops: backend_X(be, ...) is be->ops->X(be, ...) --- */

void backend_destroy(backend *be) { if (be) be->ops->destroy(be); }
void *backend_alloc(backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }
void backend_free(backend *be, void *ptr) { be->ops->free(be, ptr); }
void backend_copy_h2d(backend *be, void *dst, const void *host_src, size_t bytes)
{
    be->ops->copy_h2d(be, dst, host_src, bytes);
}
void backend_copy_d2h(backend *be, void *host_dst, const void *src, size_t bytes)
{
    be->ops->copy_d2h(be, host_dst, src, bytes);
}
void backend_copy_d2d(backend *be, void *dst, const void *src, size_t bytes)
{
    be->ops->copy_d2d(be, dst, src, bytes);
}
void backend_fill(backend *be, float *x, float value, size_t n) { be->ops->fill(be, x, value, n); }
void backend_sync(backend *be) { be->ops->sync(be); }
backend_event *backend_event_create(backend *be) { return be->ops->event_create(be); }
void backend_event_destroy(backend *be, backend_event *ev) { be->ops->event_destroy(be, ev); }
void backend_event_record(backend *be, backend_event *ev) { be->ops->event_record(be, ev); }
void backend_event_sync(backend *be, backend_event *ev) { be->ops->event_sync(be, ev); }
void *backend_native_stream(backend *be, int which) { return be->ops->native_stream(be, which); }
void backend_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                    int transA, int transB, float alpha, float beta)
{
    be->ops->matmul(be, C, A, B, M, N, K, transA, transB, alpha, beta);
}
void backend_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    be->ops->add(be, out, a, b, n);
}
void backend_axpy(backend *be, float *y, float alpha, const float *x, size_t n)
{
    be->ops->axpy(be, y, alpha, x, n);
}
void backend_scale(backend *be, float *x, float alpha, size_t n)
{
    be->ops->scale(be, x, alpha, n);
}
double backend_sumsq(backend *be, const float *x, size_t n) { return be->ops->sumsq(be, x, n); }
void backend_bias_add(backend *be, float *out, const float *bias, int N, int C)
{
    be->ops->bias_add(be, out, bias, N, C);
}
void backend_bias_backward(backend *be, float *dbias, const float *dout, int N, int C)
{
    be->ops->bias_backward(be, dbias, dout, N, C);
}
void backend_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int B, int T, int C)
{
    be->ops->embedding_forward(be, out, tokens, wte, wpe, B, T, C);
}
void backend_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int B, int T, int C, int V)
{
    be->ops->embedding_backward(be, dwte, dwpe, dout, tokens, B, T, C, V);
}
void backend_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C, float eps)
{
    be->ops->layernorm_forward(be, out, mean, rstd, inp, weight, bias, N, C, eps);
}
void backend_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int N, int C)
{
    be->ops->layernorm_backward(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void backend_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                             const float *weight, int N, int C, float eps)
{
    be->ops->rmsnorm_forward(be, out, rstd, inp, weight, N, C, eps);
}
void backend_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                              const float *inp, const float *weight, const float *rstd, int N,
                              int C)
{
    be->ops->rmsnorm_backward(be, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void backend_gelu_forward(backend *be, float *out, const float *inp, size_t n)
{
    be->ops->gelu_forward(be, out, inp, n);
}
void backend_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    be->ops->gelu_backward(be, dinp, inp, dout, n);
}
void backend_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n)
{
    be->ops->swiglu_forward(be, out, gate, up, n);
}
void backend_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                             const float *gate, const float *up, size_t n)
{
    be->ops->swiglu_backward(be, dgate, dup, dout, gate, up, n);
}
void backend_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse)
{
    be->ops->rope(be, x, B, T, H, D, theta, inverse);
}
void backend_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs,
                        int inverse)
{
    be->ops->rope_freqs(be, x, B, T, H, D, freqs, inverse);
}
void backend_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                               const float *v, int B, int T, int H, int Hkv, int D, int window)
{
    be->ops->attention_forward(be, out, lse, q, k, v, B, T, H, Hkv, D, window);
}
void backend_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                                const float *q, const float *k, const float *v, const float *out,
                                const float *lse, int B, int T, int H, int Hkv, int D, int window)
{
    be->ops->attention_backward(be, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, window);
}
void backend_attention_decode(backend *be, float *out, const float *q, const float *k,
                              const float *v, int Tk, int H, int Hkv, int D)
{
    be->ops->attention_decode(be, out, q, k, v, Tk, H, Hkv, D);
}
void backend_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta,
                       const float *freqs)
{
    be->ops->rope_rows(be, x, pos, R, H, D, theta, freqs);
}
void backend_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                                   const float *vnew, float *kc, float *vc, const int32_t *pos,
                                   int R, int cap, int H, int Hkv, int D)
{
    be->ops->attention_decode_rows(be, out, q, knew, vnew, kc, vc, pos, R, cap, H, Hkv, D);
}
void backend_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets,
                          int N, int V, int V_real, float grad_scale)
{
    be->ops->softmax_xent(be, logits, losses, targets, N, V, V_real, grad_scale);
}
void backend_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                   float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                   float grad_scale)
{
    be->ops->adamw(be, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}
void backend_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                               int T, int C, int K, int dil)
{
    be->ops->conv_taps_forward(be, out, inp, w, B, T, C, K, dil);
}
void backend_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int B, int T, int C, int K,
                                int dil)
{
    be->ops->conv_taps_backward(be, dinp, dw, dout, inp, w, B, T, C, K, dil);
}
void backend_conv_taps_decode(backend *be, float *out, float *state, const float *x,
                              const float *w, int R, int C, int K, int dil)
{
    be->ops->conv_taps_decode(be, out, state, x, w, R, C, K, dil);
}
void backend_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g,
                                  size_t n)
{
    be->ops->sigmoid_gate_forward(be, out, x, g, n);
}
void backend_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                                   const float *x, const float *g, size_t n)
{
    be->ops->sigmoid_gate_backward(be, dx, dg, dout, x, g, n);
}
void backend_scalar_gate_forward(backend *be, float *out, const float *x, const float *s,
                                 size_t n)
{
    be->ops->scalar_gate_forward(be, out, x, s, n);
}
void backend_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                                  const float *x, const float *s, size_t n)
{
    be->ops->scalar_gate_backward(be, dx, ds, dout, x, s, n);
}
void backend_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                         int cols)
{
    be->ops->cq_w4_quant(be, out, w, codebook, rows, cols);
}
void backend_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols)
{
    be->ops->fake_quant_a8(be, out, x, rows, cols);
}
void backend_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                        int N, int a, int b, int transpose, const backend_kron_io *io)
{
    be->ops->kron_apply(be, out, z, A, Bm, N, a, b, transpose, io);
}
void backend_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N,
                          int n, int inverse)
{
    be->ops->permute_cols(be, out, x, perm, N, n, inverse);
}
void backend_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                        int n_out)
{
    be->ops->scale_cols(be, out, x, d, N, n_in, n_out);
}
void backend_softmax_rows(backend *be, float *out, const float *x, int N, int n)
{
    be->ops->softmax_rows(be, out, x, N, n);
}
void backend_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s,
                                   int N, int n)
{
    be->ops->softmax_rows_backward(be, dx, dout, s, N, n);
}
void backend_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                              const float *d2, const float *b2, int N, int n)
{
    be->ops->hada_mid_forward(be, out, z1, cond, d2, b2, N, n);
}
void backend_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                               const float *z1, const float *cond, const float *d2,
                               const float *b2, int N, int n)
{
    be->ops->hada_mid_backward(be, dz1, dcond, dout, z1, cond, d2, b2, N, n);
}
void backend_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                                const float *bias, int N, int lanes, int lane)
{
    be->ops->mhc_coeffs_forward(be, h, z, alpha, bias, N, lanes, lane);
}
void backend_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                                 const float *alpha, const float *bias, int N, int lanes,
                                 int lane)
{
    be->ops->mhc_coeffs_backward(be, dz, dh, z, alpha, bias, N, lanes, lane);
}
void backend_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                          int lanes, int d)
{
    be->ops->mhc_collapse(be, u, X, h, hs, N, lanes, d);
}
void backend_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du,
                                   const float *X, const float *h, int hs, int N, int lanes,
                                   int d)
{
    be->ops->mhc_collapse_backward(be, dX, dh, du, X, h, hs, N, lanes, d);
}
void backend_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y,
                        int N, int lanes, int d)
{
    be->ops->mhc_expand(be, Xo, X, h, y, N, lanes, d);
}
void backend_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                                 const float *X, const float *h, const float *y, int N, int lanes,
                                 int d)
{
    be->ops->mhc_expand_backward(be, dX, dh, dy, g, X, h, y, N, lanes, d);
}
void backend_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                                 const float *v, int N, int d)
{
    be->ops->engram_gate_forward(be, out, u, k, v, N, d);
}
void backend_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                                  const float *k, const float *v, int N, int d)
{
    be->ops->engram_gate_backward(be, du, dout, u, k, v, N, d);
}
void backend_weights_bf16(backend *be, const float *w, size_t n)
{
    if (be->ops->weights_bf16) be->ops->weights_bf16(be, w, n);
}
int backend_tuning_save(backend *be, char *buf, size_t len)
{
    return be->ops->tuning_save ? be->ops->tuning_save(be, buf, len) : -1;
}
int backend_tuning_load(backend *be, const char *line)
{
    return be->ops->tuning_load ? be->ops->tuning_load(be, line) : 1;
}
