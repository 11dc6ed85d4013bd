/* metal_kernels.h: the list of Metal kernels (id and MSL function name) shared by the Objective-C
 * host (one pipeline per entry), the Linux shim (one C++ runner per entry) and metal_ops*.c.
 * Adding a kernel is one line here plus its function in a .metal file; never reorder by hand. */
#ifndef LOOM_METAL_KERNELS_H
#define LOOM_METAL_KERNELS_H

#define METAL_KERNEL_LIST(X)                                                                       \
    X(FILL, loom_fill)                                                                             \
    X(ADD, loom_add)                                                                               \
    X(AXPY, loom_axpy)                                                                             \
    X(SCALE, loom_scale)                                                                           \
    X(SUMSQ_PARTIAL, loom_sumsq_partial)                                                           \
    X(BIAS_ADD, loom_bias_add)                                                                     \
    X(COLSUM_PARTIAL, loom_colsum_partial)                                                         \
    X(COLSUM_FINAL, loom_colsum_final)                                                             \
    X(ROW_FINAL, loom_row_final)                                                                   \
    X(EMBED_FORWARD, loom_embedding_forward)                                                       \
    X(EMBED_BACKWARD_WTE, loom_embedding_backward_wte)                                             \
    X(EMBED_BACKWARD_WPE, loom_embedding_backward_wpe)                                             \
    X(LN_PARTIAL, loom_ln_partial)                                                                 \
    X(LN_STATS, loom_ln_stats)                                                                     \
    X(LN_FORWARD, loom_layernorm_forward)                                                          \
    X(LN_BWD_PARTIAL, loom_ln_bwd_partial)                                                         \
    X(LN_BWD_DINP, loom_ln_bwd_dinp)                                                               \
    X(LN_BWD_WPARTIAL, loom_ln_bwd_wpartial)                                                       \
    X(RMS_PARTIAL, loom_rms_partial)                                                               \
    X(RMS_STATS, loom_rms_stats)                                                                   \
    X(RMS_FORWARD, loom_rmsnorm_forward)                                                           \
    X(RMS_BWD_PARTIAL, loom_rms_bwd_partial)                                                       \
    X(RMS_BWD_DINP, loom_rms_bwd_dinp)                                                             \
    X(RMS_BWD_WPARTIAL, loom_rms_bwd_wpartial)                                                     \
    X(GELU_FORWARD, loom_gelu_forward)                                                             \
    X(GELU_BACKWARD, loom_gelu_backward)                                                           \
    X(SWIGLU_FORWARD, loom_swiglu_forward)                                                         \
    X(SWIGLU_BACKWARD, loom_swiglu_backward)                                                       \
    X(ROPE, loom_rope)                                                                             \
    X(ROPE_ROWS, loom_rope_rows)                                                                   \
    X(KV_STORE, loom_kv_store)                                                                     \
    X(ATTN_DECODE_ROWS, loom_attention_decode_rows)                                                \
    X(ATTN_FORWARD, loom_attention_forward)                                                        \
    X(ATTN_DELTA, loom_attention_delta)                                                            \
    X(ATTN_DQ, loom_attention_backward_dq)                                                         \
    X(ATTN_DKV, loom_attention_backward_dkv)                                                       \
    X(XENT_PARTIAL, loom_xent_partial)                                                             \
    X(XENT_ROW, loom_xent_row)                                                                     \
    X(XENT_GRAD, loom_xent_grad)                                                                   \
    X(ADAMW, loom_adamw)                                                                           \
    X(TAPS_FORWARD, loom_taps_forward)                                                             \
    X(TAPS_DINP, loom_taps_backward_dinp)                                                          \
    X(TAPS_WPARTIAL, loom_taps_wpartial)                                                           \
    X(TAPS_DECODE, loom_taps_decode)                                                               \
    X(GATE_FORWARD, loom_gate_forward)                                                             \
    X(GATE_BACKWARD, loom_gate_backward)                                                           \
    X(SCALAR_GATE_FORWARD, loom_scalar_gate_forward)                                               \
    X(SCALAR_GATE_PARTIAL, loom_scalar_gate_partial)                                               \
    X(SCALAR_GATE_DS, loom_scalar_gate_ds)                                                         \
    X(SCALAR_GATE_DX, loom_scalar_gate_dx)                                                         \
    X(CQ_W4, loom_cq_w4)                                                                           \
    X(A8_ROWSCALE, loom_a8_rowscale)                                                               \
    X(A8_QUANT, loom_a8_quant)                                                                     \
    X(MIX_KRON_LEFT, loom_mix_kron_left)                                                           \
    X(MIX_PERMUTE, loom_mix_permute_cols)                                                          \
    X(MIX_SCALE_COLS, loom_mix_scale_cols)                                                         \
    X(MIX_SOFTMAX_STATS, loom_mix_softmax_stats)                                                   \
    X(MIX_SOFTMAX, loom_mix_softmax_rows)                                                          \
    X(MIX_SOFTMAX_DOT, loom_mix_softmax_dot)                                                       \
    X(MIX_SOFTMAX_BACKWARD, loom_mix_softmax_backward)                                             \
    X(MIX_HADA_FORWARD, loom_mix_hada_forward)                                                     \
    X(MIX_HADA_BACKWARD, loom_mix_hada_backward)                                                   \
    X(MIX_COEFFS_FORWARD, loom_mix_coeffs_forward)                                                 \
    X(MIX_COEFFS_BACKWARD, loom_mix_coeffs_backward)                                               \
    X(MIX_COLLAPSE, loom_mix_collapse)                                                             \
    X(MIX_COLLAPSE_DX, loom_mix_collapse_dx)                                                       \
    X(MIX_COLLAPSE_DH, loom_mix_collapse_dh)                                                       \
    X(MIX_EXPAND, loom_mix_expand)                                                                 \
    X(MIX_EXPAND_DX, loom_mix_expand_dx)                                                           \
    X(MIX_EXPAND_DH, loom_mix_expand_dh)                                                           \
    X(MIX_ENGRAM_GATE, loom_mix_engram_gate)                                                       \
    X(MIX_ENGRAM_FORWARD, loom_mix_engram_forward)                                                 \
    X(MIX_ENGRAM_COEF, loom_mix_engram_coef)                                                       \
    X(MIX_ENGRAM_BACKWARD, loom_mix_engram_backward)

#define METAL_KERNEL_ENUM_(id, fn) MK_##id,
enum metal_kernel { METAL_KERNEL_LIST(METAL_KERNEL_ENUM_) MK_COUNT };
#undef METAL_KERNEL_ENUM_

/* The MSL function name of kernel k (for newFunctionWithName: and error messages). */
const char *metal_kernel_name(int k);

/* The concatenated kernel source (metal_shim.h + metal_params.h + every .metal file), generated
 * by backends/metal/metal_embed.cmake; NUL-terminated. */
extern const char loom_metal_source[];

#endif
