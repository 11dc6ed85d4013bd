/* metal_params.h: the parameter blocks the host passes to each Metal kernel (setBytes at the index
 * after the kernel's buffers), shared verbatim by C (metal_ops*.c) and the .metal sources.
 * Only 32-bit int/float fields, so the layout is identical in C and MSL; never add pointers. */
#ifndef LOOM_METAL_PARAMS_H
#define LOOM_METAL_PARAMS_H

/* Attention: head dims per thread (a thread owns a D-chunk of one output row) and keys per block. */
#define METAL_ATT_DC 64     /* forward and dq: one accumulator of this many floats per thread */
#define METAL_ATT_DC_KV 32  /* dk/dv: two accumulators per thread */
#define METAL_ATT_BK 16     /* keys scored per online-softmax block in the forward */

/* mHC's Sinkhorn (docs/needle.md 2.3): 20 rounds of a row then a column normalisation. */
#define METAL_MIX_SINK_STEPS 40u

/* Elementwise ops on n items with up to two scalars. */
typedef struct metal_p_vec {
    unsigned int n;
    float a, b;
} metal_p_vec;

/* Sum of squares: `parts` threads, thread g visits i = g, g+parts, ... < n. */
typedef struct metal_p_sumsq {
    unsigned int n, parts;
} metal_p_sumsq;

/* Row-wise ops on (N, C): `lanes` partial reductions per row (lane j visits c = j, j+lanes, ...);
 * column sums over `nchunks` chunks of `chunk_rows` rows; `width` values per partial; flag =
 * optional tensor present; eps for norms; scale for the row_final kernel. */
typedef struct metal_p_rows {
    unsigned int N, C, lanes, chunk_rows, nchunks, width, flag;
    float eps, scale;
} metal_p_rows;

/* Embedding: tokens (B, T), tables (V, C) and (T, C); buckets: dwte threads per channel. */
typedef struct metal_p_embed {
    unsigned int B, T, C, V, has_wpe, buckets;
} metal_p_embed;

/* Rotary positions on x (B, T, H, D) with the (T, D/2) cos/sin table built by the host. */
typedef struct metal_p_rope {
    unsigned int B, T, H, D, inverse;
} metal_p_rope;

/* Attention on q (B, T, H, D), k/v (B, T, Hkv, D); nchunk = D-chunks per row; scale 1/sqrt(D);
 * window: query t sees keys t - window < s <= t (0: every s <= t). */
typedef struct metal_p_attn {
    unsigned int B, T, H, Hkv, D, nchunk;
    float scale;
    unsigned int window;
} metal_p_attn;

/* Batched generation: R rows at their own positions pos[r]; caches (R, cap, Hkv, D); rope_rows
 * uses H as the heads of x. scale 1/sqrt(D); nchunk D-chunks per row. */
typedef struct metal_p_decode {
    unsigned int R, cap, H, Hkv, D, nchunk;
    float scale;
} metal_p_decode;

/* Softmax cross-entropy on logits (N, V) of which the first V_real columns are real. */
typedef struct metal_p_xent {
    unsigned int N, V, V_real, lanes, has_losses;
    float grad_scale;
} metal_p_xent;

/* AdamW; bc1 = 1 - beta1^t and bc2 = 1 - beta2^t are computed by the host in double. */
typedef struct metal_p_adamw {
    unsigned int n;
    float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale;
} metal_p_adamw;

/* Needle's conv taps on N = B*T rows of C (sequences of T rows), K taps dil rows apart; the tap
 * gradient sums rows in nchunks chunks of chunk_rows. Decoding: N = R rows, one per sequence. */
typedef struct metal_p_taps {
    unsigned int N, T, C, K, dil, chunk_rows, nchunks;
} metal_p_taps;

/* Needle's fake quantisation of (rows, cols): W4 in gpr groups of 128 a row; A8 per row. */
typedef struct metal_p_quant {
    unsigned int rows, cols, gpr;
} metal_p_quant;

/* Needle's mixing layers on N rows: rows of n values (n_out after scale_cols' change of width);
 * kron blocks a x b; mHC's L lanes of d, the layer's lane and h's row stride hs; flag: kron's
 * transpose or the permutation's inverse. */
typedef struct metal_p_mix {
    unsigned int N, n, n_out, a, b, L, lane, hs, d, flag;
} metal_p_mix;

#endif
