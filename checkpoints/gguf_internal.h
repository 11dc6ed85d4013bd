/* gguf_internal.h: what gguf_export.c asks of gguf_vocab.c. Nothing outside checkpoints/gguf*.c
 * includes it. */
#ifndef LOOM_GGUF_INTERNAL_H
#define LOOM_GGUF_INTERNAL_H

#include "checkpoints/gguf.h"
#include "checkpoints/hf_internal.h"

/* The tokenizer keys llama.cpp's converter writes for a BPE tokenizer.json (tokenizer.ggml.model
 * "gpt2", the pre-tokenizer's name, tokens padded to vocab with [PADi], token types, merges,
 * special token ids, add_*_token flags, the chat template), read from src_dir's tokenizer.json,
 * tokenizer_config.json and config.json (or hf_config.json). llama_family: the Llama converter's
 * add_space_prefix key comes first. -1 + loom_fail naming the file and field. */
int gguf_vocab_write(gguf_writer *w, const char *src_dir, int vocab, int llama_family);

/* (gguf_vocab_hf.c) the tokenizer keys of f back as tokenizer.json + tokenizer_config.json in dir
 * (gguf_model_write_tokenizer). */
int gguf_vocab_to_hf(const gguf_file *f, const char *dir);

/* (gguf_export.c) llama.cpp's architecture for loom's options: GGUF_ARCH_*, or -1 + loom_fail
 * naming `what` and the fields; its name ("gpt2", "llama", "qwen2", "qwen3"). */
enum { GGUF_ARCH_GPT2, GGUF_ARCH_LLAMA, GGUF_ARCH_QWEN2, GGUF_ARCH_QWEN3 };
int gguf_arch_of(const hf_dims *d, const char *what);
const char *gguf_arch_name(int arch);
/* One GGUF tensor of a model: its loom parts stacked along rows (GPT-2's fused qkv), each maybe
 * re-laid; the list of a model in the converter's order (gguf_export.c). */
typedef struct gg_tensor {
    char name[64];
    char order[128];        /* the HF name: the converter writes in the safetensors' (sorted) order */
    int ndim;
    int64_t ne[2];          /* ggml order: ne[0] the row length */
    int nparts;
    char part[3][64];
    int neox;               /* loom's adjacent RoPE pairs back to HF's halves (llama.cpp's NEOX archs) */
    int head_dim;
    int rope_freqs;         /* llama3 scaling: the factors, computed (no loom tensor) */
} gg_tensor;

typedef struct gg_list {
    gg_tensor *t;
    int n, cap;
} gg_list;

/* The GGUF tensors of a model of dims d and architecture arch, sorted; the caller frees l->t. */
int gguf_tensor_list(const hf_dims *d, int arch, gg_list *l);

/* rows of x (loom's RoPE pair order, heads of D rows) -> out in HF's rotate-half order, which the
 * NEOX architectures (qwen2, qwen3) keep */
void gguf_rows_to_neox(const float *x, float *out, size_t rows, size_t cols, size_t D);

#endif
