/* backend.h: the single door to a compute device (CPU, CUDA, Metal).
 * core/ holds only opaque device pointers and opaque backend handles and calls the functions
 * below; it never dereferences either and never includes a device header (what a backend is made
 * of, its table of ops, is backends/backend_impl.h, for backends/ alone). Ops may run
 * asynchronously on the device's compute stream, in issue order; backend_sync() or an event makes
 * results visible to the host. */
#ifndef LOOM_BACKEND_H
#define LOOM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;
typedef struct backend_event backend_event;

/* What the caller asks of a backend when creating it. */
typedef struct backend_config {
    int threads;      /* CPU threads for host-side kernels; 0 = the backend decides */
    int device_index; /* which device of this kind (from the rank's local rank); ignored by cpu */
    int precision;    /* BACKEND_FP32 or BACKEND_BF16 (bf16 matmul inputs, fp32 storage) */
    int allow_tf32;   /* CUDA: TF32 tensor-core matmuls for fp32 (default on) */
} backend_config;

enum { BACKEND_FP32 = 0, BACKEND_BF16 = 1 };

/* --- what a backend is --- */

/* Its registry name ("cpu", "cuda", "metal"; "metal-shim" in the tests): a static string. */
const char *backend_name(const backend *be);
/* One line for the log, e.g. "cpu (OpenBLAS SkylakeX, 2 threads)"; owned by the backend. */
const char *backend_description(const backend *be);
/* What it computes: the asked config with precision and allow_tf32 as this backend runs them
 * (a CPU without bf16 says fp32). Owned by the backend. */
const backend_config *backend_cfg(const backend *be);
/* The FLOP/s MFU is measured against (fp32, or bf16 in bf16 mode): measured on first use where
 * the backend can (a timed sgemm on the CPU), so jobs that report no MFU never pay for it;
 * 0 = unknown. */
double backend_peak_flops(backend *be);
/* The device's memory as it reports it now: *free_bytes this process may still allocate, *total
 * its size (CUDA: cudaMemGetInfo). 0, or -1 where the backend does not say (the CPU's memory is
 * the node's RAM, which core/train/plan.c reads; Metal: not queried yet). */
int backend_memory(backend *be, size_t *free_bytes, size_t *total_bytes);
/* NULL while the backend is healthy, else the one-line cause of its failure (a CUDA error is
 * sticky: every later result is garbage). Ops return void, so the training loop asks once per
 * step. */
const char *backend_failure(backend *be);

/* The ops a backend may lack. Which ones a backend has is decided in one place (backend_has);
 * the door functions of the others say what they do on a backend without them. */
typedef enum backend_op {
    BACKEND_OP_ROPE_FREQS,            /* backend_rope_freqs */
    BACKEND_OP_ATTENTION_DECODE,      /* backend_attention_decode */
    BACKEND_OP_ROPE_ROWS,             /* backend_rope_rows */
    BACKEND_OP_ATTENTION_DECODE_ROWS, /* backend_attention_decode_rows */
    BACKEND_OP_WEIGHTS_BF16,          /* backend_weights_bf16 (a no-op without) */
    BACKEND_OP_MEASURE_PEAK,          /* backend_peak_flops can measure (else 0 unless given) */
    BACKEND_OP_TUNING_SAVE,           /* backend_tuning_save (else nothing to record) */
    BACKEND_OP_TUNING_LOAD,           /* backend_tuning_load (else never adopts) */
    BACKEND_OP_FAILURE,               /* backend_failure can report (else always NULL) */
    BACKEND_OP_NEEDLE_MIX,            /* Needle's mixing ops, all of them (kron_apply .. engram_gate) */
} backend_op;

/* 1 if be implements op, else 0. */
int backend_has(const backend *be, backend_op op);

/* --- the ops ---
 * Every pointer argument named like a tensor is a device pointer unless its comment says "host".
 * Shapes are in the argument names; all tensors are dense row-major fp32 (tokens and targets are
 * int32).
 *
 * Gradient convention (as llm.c): parameter gradients (dweight, dbias, dwte, ...) are ACCUMULATED
 * (+=), so micro-batches add up. Input gradients are OVERWRITTEN unless the op's comment says +=.
 * The norms' dweight/dbias may be NULL: the weights are frozen (LoRA) and those sums are skipped.
 *
 * Layouts: activations are (N = B*T, C). Linear weights are (out, in) as in torch.nn.Linear,
 * so y = x W^T is matmul(..., transB=1). Attention q is (B, T, H, D) and k, v are (B, T, Hkv, D),
 * exactly what the projection matmuls produce, so no transposes are needed. */

/* --- lifetime and memory --- */
/* Destroy a backend (NULL is fine) and everything it allocated. */
void backend_destroy(backend *be);
void *backend_alloc(backend *be, size_t bytes);           /* zero-filled; NULL + loom_fail on OOM */
void backend_free(backend *be, void *ptr);
/* Queued in order; host_src may be reused when it returns, and the host does not wait for
 * queued work (cuda stages small copies through pinned memory). */
void backend_copy_h2d(backend *be, void *dst, const void *host_src, size_t bytes);
void backend_copy_d2h(backend *be, void *host_dst, const void *src, size_t bytes); /* synchronous */
void backend_copy_d2d(backend *be, void *dst, const void *src, size_t bytes);
void backend_fill(backend *be, float *x, float value, size_t n);
void backend_sync(backend *be);                            /* wait for all queued work */

/* --- events: "this later work waits for that earlier work", without naming streams --- */
backend_event *backend_event_create(backend *be);
void backend_event_destroy(backend *be, backend_event *ev);
/* Marks the compute stream's position, and the communication stream (native_stream 1) waits
 * for it: a collective enqueued there afterwards reads what the earlier kernels wrote (dp
 * records one before each bucket's all-reduce), with no host wait. */
void backend_event_record(backend *be, backend_event *ev);
void backend_event_sync(backend *be, backend_event *ev);   /* host waits until it is reached */
/* The native stream handle the communication layer may enqueue on (cudaStream_t for cuda),
 * NULL where work is synchronous (cpu). which: 0 = compute, 1 = communication. */
void *backend_native_stream(backend *be, int which);

/* --- dense algebra --- */
/* C[M,N] = alpha * op(A) op(B) + beta * C, op(A) is (M,K), op(B) is (K,N).
 * A is (M,K) or, transA, (K,M); B is (K,N) or, transB, (N,K). Leading dims are the row lengths. */
void backend_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                    int transA, int transB, float alpha, float beta);
void backend_add(backend *be, float *out, const float *a, const float *b, size_t n); /* out = a + b */
void backend_axpy(backend *be, float *y, float alpha, const float *x, size_t n); /* y += alpha x */
void backend_scale(backend *be, float *x, float alpha, size_t n);                /* x *= alpha */
/* Host-returned sum of squares of x[0..n) in double precision (NaN/Inf propagate). Syncs. */
double backend_sumsq(backend *be, const float *x, size_t n);

/* --- bias of a linear layer --- */
/* out[n,c] += bias[c] */
void backend_bias_add(backend *be, float *out, const float *bias, int N, int C);
/* dbias += sum_n dout */
void backend_bias_backward(backend *be, float *dbias, const float *dout, int N, int C);

/* --- embeddings: out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:] when wpe != NULL) --- */
void backend_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int B, int T, int C);
/* dwte[tok] += dout, dwpe[t] += sum_b dout (wpe may be NULL). Deterministic (no atomics race). */
void backend_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int B, int T, int C, int V);

/* --- normalisation over the last dim C of inp (N, C) --- */
/* LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps); saves mean, rstd (N). */
void backend_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C, float eps);
/* dinp += ..., dweight += ..., dbias += ... */
void backend_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int N, int C);
/* RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N).
 * Needle's zero-centred RMSNorm ((1 + scale) x / sqrt(mean(x^2) + eps)) is this op with w = 1 + scale
 * (built on the device: fill 1, axpy scale); its dweight is dscale (dw/dscale = 1) and its dinp is
 * ZCNorm's input gradient. rmsunit is w = 1. (tests/backends/cpu/test_cpu_needle.c checks both
 * against the ZC formula.) */
void backend_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                             const float *weight, int N, int C, float eps);
/* dinp += ..., dweight += ... */
void backend_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                              const float *inp, const float *weight, const float *rstd, int N,
                              int C);

/* --- activations --- */
/* GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void backend_gelu_forward(backend *be, float *out, const float *inp, size_t n);
void backend_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n);
/* SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + e^-g) */
void backend_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n);
void backend_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                             const float *gate, const float *up, size_t n);

/* --- rotary positions, in place on x (B, T, H, D): adjacent pairs (x[2i], x[2i+1]) rotated by
 * angle t * theta^(-2i/D), the GPT-J / Meta-Llama "interleaved" layout (HF Llama and GPT-NeoX
 * rotate the halves (x[i], x[i + D/2]) instead; docs/model.md says how they map).
 * inverse = 1 rotates by the negative angle: that is the backward of the forward. --- */
void backend_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse);
/* The same rotation with pair i's inverse frequency read from freqs (device, D/2 floats)
 * instead of theta^(-2i/D): scaled RoPE (Llama 3's rope_scaling) computed once by the model.
 * Only where backend_has(be, BACKEND_OP_ROPE_FREQS). */
void backend_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs,
                        int inverse);

/* --- causal self-attention with grouped-query heads (H % Hkv == 0; head h reads kv head
 * h / (H/Hkv)), scale 1/sqrt(D). Computed blockwise: never a (T, T) matrix for all heads.
 * Query i sees key j iff j <= i and, when window > 0, i - j < window (sliding-window attention,
 * docs/needle.md 2.5: keys i - window < j <= i); window = 0 is unlimited (plain causal). Key
 * blocks wholly outside the window are skipped, not just masked.
 * out (B,T,H,D); lse (B,H,T) is the row log-sum-exp of the scaled scores, saved for backward. */
void backend_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                               const float *v, int B, int T, int H, int Hkv, int D, int window);
/* Overwrites dq, dk, dv (recomputes the probabilities from q, k, lse); window as the forward's. */
void backend_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                                const float *q, const float *k, const float *v, const float *out,
                                const float *lse, int B, int T, int H, int Hkv, int D, int window);

/* Generation with a KV cache: ONE query per head, the token at position Tk-1, over the Tk
 * cached keys/values of batch row 0: out (H*D) = softmax(q k^T / sqrt(D)) v per head (GQA as
 * above). k, v are (Tk, Hkv, D). Optional: only where backend_has(be,
 * BACKEND_OP_ATTENTION_DECODE); without it core falls back to attention_forward over all Tk rows,
 * which is right but costs O(Tk^2) per token. */
void backend_attention_decode(backend *be, float *out, const float *q, const float *k,
                              const float *v, int Tk, int H, int Hkv, int D);

/* --- batched generation: R sequences decoded together, each at its own position. Optional:
 * only where backend_has says BACKEND_OP_ROPE_ROWS / BACKEND_OP_ATTENTION_DECODE_ROWS. --- */
/* rope for rows at their own positions: x (R, H, D), row r rotated to position pos[r] (device
 * int32, R), with exactly the angles and pairing of rope (forward direction), or, with freqs
 * (device, D/2; NULL = theta's), of rope_freqs. */
void backend_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta,
                       const float *freqs);
/* One decode step of R sequences with per-row KV caches kc, vc (R, cap, Hkv, D): row r's new
 * key and value (knew, vnew: (R, Hkv, D)) are stored at cache position pos[r], then its query
 * q (R, H, D) attends over cache positions 0..pos[r]: out (R, H, D) = softmax(q k^T/sqrt(D)) v
 * per head (GQA as above). pos: device int32 (R), 0 <= pos[r] < cap. Rows finish
 * independently: the caller drops finished rows and passes only the live ones. */
void backend_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                                   const float *vnew, float *kc, float *vc, const int32_t *pos,
                                   int R, int cap, int H, int Hkv, int D);

/* --- fused softmax + cross-entropy, forward and backward in one pass over logits (N, V).
 * targets[n] < 0 marks a position without loss. losses[n] = -log softmax(logits[n])[target]
 * (0 where masked). logits is overwritten with dlogits = grad_scale * (softmax - onehot)
 * (0 rows where masked). Padded vocab: columns >= V_real get probability 0 (never predicted). */
void backend_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets,
                          int N, int V, int V_real, float grad_scale);

/* --- AdamW, decoupled weight decay, on n contiguous elements:
 * g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p ) */
void backend_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                   float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                   float grad_scale);

/* --- Needle's layers (docs/needle.md sections 2-3); element-wise fp32 on every backend --- */

/* Causal depthwise convolution along time ("taps"), per channel, on B sequences of T rows of C:
 *   out[b,t,c] = sum_{j<K} w[j,c] inp[b, t - j*dil, c]      (a term with t - j*dil < 0 is 0)
 * w (K, C): row j weighs the row j*dil positions back (Needle's q/k/v taps: K = 3, dil = 1,
 * identity init w[0] = 1; the engram's value taps: K = 4, dil = 3). Terms are added j = 0, 1, ...
 * Each sequence starts at position 0: a ragged pass calls it per sequence (B = 1), as attention
 * (Needle also masks a tap outside a local layer's window: the caller's window must exceed
 * (K-1)*dil). out must not overlap inp. */
void backend_conv_taps_forward(backend *be, float *out, const float *inp, const float *w, int B,
                               int T, int C, int K, int dil);
/* dinp[b,t,c] = sum_{j<K, t + j*dil < T} w[j,c] dout[b, t + j*dil, c]      (overwritten);
 * dw[j,c] += sum_{b, t >= j*dil} dout[b,t,c] inp[b, t - j*dil, c]          (accumulated).
 * dinp NULL: not computed; dw NULL: frozen taps (inp is not read). dinp must not overlap dout. */
void backend_conv_taps_backward(backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int B, int T, int C, int K,
                                int dil);
/* Decoding, one new row for each of R sequences: x (R, C) the new input rows, state (R, S, C)
 * with S = (K-1)*dil each sequence's previous S input rows, oldest first (row S-1 is the row
 * before x; zeros stand for rows before the sequence's start):
 *   out[r,c] = w[0,c] x[r,c] + sum_{1<=j<K} w[j,c] state[r, S - j*dil, c]   (j in order),
 * then each state moves on one row (row 0 dropped, x[r] appended as row S-1). out may be x.
 * The same sums as the forward: after a forward over T rows the state is their last S input
 * rows (zero rows in front when T < S). K = 1: state is not touched (may be NULL). */
void backend_conv_taps_decode(backend *be, float *out, float *state, const float *x,
                              const float *w, int R, int C, int K, int dil);

/* Sigmoid gate, element-wise on n items (Needle's attention output gate o * sigmoid(h Wg)):
 *   out = x s,  s = sigmoid(g) = 1 / (1 + e^-g).  out may be x or g. */
void backend_sigmoid_gate_forward(backend *be, float *out, const float *x, const float *g,
                                  size_t n);
/* dx = dout s,  dg = dout x s (1 - s)   (both overwritten; neither may alias dout, x or g) */
void backend_sigmoid_gate_backward(backend *be, float *dx, float *dg, const float *dout,
                                   const float *x, const float *g, size_t n);
/* Scalar gate (Needle's attention branch, sigmoid(attn_gate) a): out = sigmoid(s[0]) x on n
 * items, s one device float (a parameter, never read by the host). out may be x. */
void backend_scalar_gate_forward(backend *be, float *out, const float *x, const float *s,
                                 size_t n);
/* dx = sigmoid(s) dout (overwritten; may be dout);
 * ds[0] += sigmoid(s) (1 - sigmoid(s)) sum_i dout_i x_i (accumulated, a deterministic sum;
 * NULL: a frozen gate, skipped). */
void backend_scalar_gate_backward(backend *be, float *dx, float *ds, const float *dout,
                                  const float *x, const float *s, size_t n);

/* Needle's fake quantisation (docs/needle.md section 3), forward only: its gradient is the
 * straight-through identity (the caller passes the gradient of out on as that of the input).
 * The arithmetic is backends/needle_quant.h's, in its order with no fused multiply-adds, so a
 * rounding decision (a code, an integer) only differs between backends on inputs within a few
 * ulps of a decision boundary. out may be the input. */
/* W4 (CQ): each row of w (rows, cols) in groups of 128 along the row (the last one zero-padded;
 * Needle's groups in loom's (out, in) layout, or along an embedding row); per group g:
 *   rho = g H   (H: Sylvester Hadamard of order 128 / sqrt(128), entries +-f32(1/sqrt(128)))
 *   nu = sqrt(sum rho^2),  u = rho / max(nu, 1e-12),  c_i = the code of codebook (16 ascending
 *   device floats) nearest u_i (a tie takes the lower),  nu16 = nu rounded to fp16 (nearest even)
 *   what = (codebook[c] nu16) H  (padding dropped),  out = w + (what - w)   (in f32, as Needle) */
void backend_cq_w4_quant(backend *be, float *out, const float *w, const float *codebook, int rows,
                         int cols);
/* A8 / KV8 of activations: per row of x (rows, cols), s = max_i |x_i| / 127 (1 when the row is
 * 0), q_i = clip(rint(x_i / s), -128, 127) s (rint: half to even; a true division),
 * out_i = x_i + (q_i - x_i). A8: rows are tokens (cols d, or n_l d for the mHC input); the query's
 * A8 and KV8: rows are head vectors (cols the head dim). */
void backend_fake_quant_a8(backend *be, float *out, const float *x, int rows, int cols);

/* --- Needle's mixing layers (docs/needle.md sections 2.2-2.6): the Monarch-Hadamard MLP, the mHC
 * residual lanes and the engram gate, each forward with its input gradient (the needle family
 * trains LoRA adapters: these parts are frozen, so no weight gradients). Optional as one group:
 * backend_has(be, BACKEND_OP_NEEDLE_MIX); a backend without it cannot run the needle family.
 * fp32, row-major, N rows; sigmoid(z) = 1 / (1 + e^-z). --- */

/* Kronecker-factored matrix on each row (Needle's _kron_apply "ij,ik,jl->kl"): Z = z[r] viewed as
 * a x b (row-major), A (a, a), Bm (b, b):
 *   transpose = 0:  out[r] = A^T Z Bm      out[k][l] = sum_i sum_j A[i][k] Z[i][j] Bm[j][l]
 *   transpose = 1:  out[r] = A Z Bm^T      (the input gradient of the former)
 * out must not overlap z. io: the column gathers and scales around the product (NULL: none), so
 * the MLP's permutations and diagonals ride on the product's row instead of passes of their own:
 *   z'[r][j]  = x[r][in_perm[j]] in_scale[j]   for j < n_in;  0 for n_in <= j < a b
 *   out[r][m] = P[r][out_perm[m]] out_scale[m]  for m < n_out   (P = the product of z')
 * each part optional (a NULL perm: the identity; a NULL scale: no multiply). The rows of z have
 * n_in floats, those of out n_out, both in [1, a b]; n_in < a b needs in_scale and no in_perm (a
 * gather needs every column), n_out < a b needs out_scale. The same bits as the separate
 * permute_cols and scale_cols around a plain product. */
typedef struct backend_kron_io {
    const int32_t *in_perm;   /* device int32 (a b), a permutation, or NULL */
    const float *in_scale;    /* device (n_in), or NULL */
    int n_in;                 /* z's row width: a b, or less with in_scale and no in_perm (zero pad) */
    const int32_t *out_perm;  /* device int32 (a b), a permutation, or NULL */
    const float *out_scale;   /* device (n_out), or NULL */
    int n_out;                /* out's row width: a b, or less with out_scale (a truncation) */
} backend_kron_io;
void backend_kron_apply(backend *be, float *out, const float *z, const float *A, const float *Bm,
                        int N, int a, int b, int transpose, const backend_kron_io *io);
/* A column permutation of N rows of n: inverse = 0 gathers out[r][m] = x[r][perm[m]]; inverse = 1
 * scatters out[r][perm[m]] = x[r][m] (the gather's backward). perm: device int32 (n), a
 * permutation of [0, n). out must not overlap x. */
void backend_permute_cols(backend *be, float *out, const float *x, const int32_t *perm, int N,
                          int n, int inverse);
/* Column scale with a change of width: out (N, n_out), x (N, n_in), d min(n_in, n_out) floats:
 *   out[r][c] = x[r][c] d[c]  for c < min(n_in, n_out);   0 for n_in <= c < n_out
 * (a zero pad when n_out > n_in, a truncation when n_out < n_in); its own adjoint with the widths
 * swapped. out may be x only when n_in == n_out. */
void backend_scale_cols(backend *be, float *out, const float *x, const float *d, int N, int n_in,
                        int n_out);
/* Softmax along each row of n: out = exp(x - max) / sum exp(x - max). out may be x. */
void backend_softmax_rows(backend *be, float *out, const float *x, int N, int n);
/* Its backward from the output s: dx = s (dout - <s, dout>) per row. dx may be dout. */
void backend_softmax_rows_backward(backend *be, float *dx, const float *dout, const float *s,
                                   int N, int n);
/* The Hadamard MLP's middle on rows of n (d2, b2: n floats):
 *   u = (d2[c] cond[r][c]) z1[r][c] + b2[c];   out = u sigmoid(u)   (SiLU)
 * out may be z1. */
void backend_hada_mid_forward(backend *be, float *out, const float *z1, const float *cond,
                              const float *d2, const float *b2, int N, int n);
/* du = dout silu'(u), silu'(u) = sigmoid(u) (1 + u (1 - sigmoid(u)));
 * dz1 = d2 cond du;  dcond = d2 z1 du  (both overwritten; neither may alias an input). */
void backend_hada_mid_backward(backend *be, float *dz1, float *dcond, const float *dout,
                               const float *z1, const float *cond, const float *d2,
                               const float *b2, int N, int n);

/* mHC, with `lanes` residual lanes of d each (X rows: lanes * d) and K = 2 lanes + lanes^2
 * coefficient columns per row, in this order: pre (lanes), post (lanes), res (lanes x lanes,
 * row-major: column 2 lanes + i lanes + j is H[i][j]).
 * Coefficients from z (N, K) = xhat Phi^T, with alpha (3 device floats: pre, post, res), bias
 * (K device floats, the same columns) and the layer's lane (l mod lanes):
 *   h_pre[k]  = sigmoid(alpha[0] z_pre[k] + bias_pre[k] + (8 [k == lane] - 4))
 *   h_post[k] = 2 sigmoid(alpha[1] z_post[k] + bias_post[k] - 4 [k != lane])
 *   H         = Sinkhorn(alpha[2] z_res + bias_res): 20 rounds of (every row minus its
 *               logsumexp, then every column minus its logsumexp), in the log domain, then exp
 * into h (N, K), the same columns. */
void backend_mhc_coeffs_forward(backend *be, float *h, const float *z, const float *alpha,
                                const float *bias, int N, int lanes, int lane);
/* dz (N, K, overwritten) from dh (N, K), the Sinkhorn recomputed from z: each step
 * out = in - lse(in) has din = dout - softmax(in) sum(dout) along its axis, taken in reverse. */
void backend_mhc_coeffs_backward(backend *be, float *dz, const float *dh, const float *z,
                                 const float *alpha, const float *bias, int N, int lanes,
                                 int lane);
/* u (N, d) = sum_k h[r][k] X[r][k], X (N, lanes, d), the k in order; h's rows have stride hs
 * (K for the coefficients: the pre columns come first; 0: the one row h for every r, which with
 * h = 1/lanes is the final lane mean). */
void backend_mhc_collapse(backend *be, float *u, const float *X, const float *h, int hs, int N,
                          int lanes, int d);
/* dX[r][k] += h[r][k] du[r] (accumulated); dh[r][k] = <du[r], X[r][k]> (overwritten, the first
 * lanes columns of rows of stride hs; NULL: not computed). */
void backend_mhc_collapse_backward(backend *be, float *dX, float *dh, const float *du,
                                   const float *X, const float *h, int hs, int N, int lanes,
                                   int d);
/* Xo[r][i] = sum_j H[i][j] X[r][j] + h_post[i] y[r] (j in order, then the post term), with h
 * (N, K) the coefficients. Xo must not overlap X or y. */
void backend_mhc_expand(backend *be, float *Xo, const float *X, const float *h, const float *y,
                        int N, int lanes, int d);
/* With g = dL/dXo: dX[r][j] = sum_i H[i][j] g[r][i] (overwritten); dy[r] = sum_i h_post[i] g[r][i]
 * (overwritten); dh's post columns <g[r][i], y[r]> and res columns <g[r][i], X[r][j]>
 * (overwritten; the pre columns untouched). */
void backend_mhc_expand_backward(backend *be, float *dX, float *dh, float *dy, const float *g,
                                 const float *X, const float *h, const float *y, int N, int lanes,
                                 int d);

/* Engram gate on rows of d (k, v: the site's keys and values):
 *   out = u + sigmoid(c) v,   c = <r(u), r(k)> / sqrt(d),   r(z) = z rsqrt(mean(z^2) + 1e-6)
 * out may be u. */
void backend_engram_gate_forward(backend *be, float *out, const float *u, const float *k,
                                 const float *v, int N, int d);
/* du = dout + dc (dr(u)/du)^T r(k) / sqrt(d),  dc = sigmoid'(c) <dout, v>  (overwritten; k and v
 * get no gradient: the engram is frozen and reads only the tokens). du may be dout. */
void backend_engram_gate_backward(backend *be, float *du, const float *dout, const float *u,
                                  const float *k, const float *v, int N, int d);

/* bf16 mode (a no-op in fp32 mode, and on backends without one: BACKEND_OP_WEIGHTS_BF16): keep
 * a bf16 copy of the weights w[0..n), cast now on the compute stream, that later matmuls read for
 * a B operand lying inside w instead of casting it on every call. n = 0 drops the copy of w
 * (matmuls cast per call again). Never refreshed behind the caller's back: whoever changes w
 * (optimizer step, load, ZeRO-3 gather) registers it again or drops it. */
void backend_weights_bf16(backend *be, const float *w, size_t n);

/* The run-time choices of this backend that change results bitwise (the CPU's sgemm library for
 * each product family, raced on first call), as one line of text for a checkpoint, into buf: 0,
 * or -1 when it does not fit or the backend has nothing to record (no BACKEND_OP_TUNING_SAVE).
 * From then on it makes no new such choice (an unseen product takes the default), so a run
 * resumed from the line multiplies as this one does. */
int backend_tuning_save(backend *be, char *buf, size_t len);
/* Adopt the line backend_tuning_save wrote in the run being resumed (the same rank's): 0 adopted;
 * 1 not (another machine, a library missing: said in the log; or no BACKEND_OP_TUNING_LOAD), and
 * the backend goes on choosing for itself. */
int backend_tuning_load(backend *be, const char *line);

/* --- the registry: one lookup serves auto-detection, --backend NAME and LOOM_BACKEND --- */

typedef struct backend_entry {
    const char *name;
    /* 1 if usable on this machine; else 0 and *why says why (static string). */
    int (*available)(const char **why);
    backend *(*create)(const backend_config *cfg); /* NULL + loom_fail on error */
} backend_entry;

/* The compiled-in backends, in detection priority order (cuda, metal, cpu). */
const backend_entry *backend_registry(int *count);

/* Pick a backend: `name` (from --backend) if non-NULL and non-empty, else $LOOM_BACKEND, else the
 * first available in priority order. Unknown or unavailable name -> NULL + loom_fail naming it.
 * The reason for the choice is written to why_out (may be NULL). The caller owns the backend:
 * backend_destroy. */
backend *backend_select(const char *name, const backend_config *cfg, char *why_out, size_t why_len);

/* The registry name backend_select(name, ...) creates, without creating it (the comm transport
 * is chosen before the backend exists). NULL + loom_fail when none would be; why as above. */
const char *backend_choose(const char *name, char *why, size_t why_len);

/* Where backend_choose(NULL, ...) starts, without checking or failing (`loom info` prints it):
 * $LOOM_BACKEND as given when set (*from_env = 1; it may name no usable backend), else the first
 * available backend in priority order (*from_env = 0; NULL when none is). */
const char *backend_preferred(int *from_env);

/* Process-wide set-up, first thing in main() before any thread or MPI exists. The CPU backend
 * re-executes the program once when the BLAS loaded a kernel slower than this CPU supports
 * (backends/cpu/cpu_blas.h; LOOM_NO_REEXEC=1 turns it off); otherwise returns normally. */
void backend_prepare_process(char **argv);

/* The host BLAS kernel that runs ("Zen", "SkylakeX", "Accelerate"): a static string. */
const char *backend_blas_kernel(void);

#endif
