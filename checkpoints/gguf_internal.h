/* gguf_internal.h: what gguf_export.c asks of gguf_vocab.c. Nothing outside checkpoints/gguf*.c
 * includes it. */
#ifndef LOOM_GGUF_INTERNAL_H
#define LOOM_GGUF_INTERNAL_H

#include "checkpoints/gguf.h"
#include "checkpoints/hf_internal.h"

struct cJSON;

/* The tokenizer keys llama.cpp's converter writes for the model's architecture arch (GGUF_ARCH_*),
 * read from src_dir's tokenizer.model, tokenizer.json, tokenizer_config.json and config.json (or
 * hf_config.json): tokenizer.ggml.model "llama" (tokens, scores, types) from a tokenizer.model (not
 * for gpt2) or, for llama, a byte-fallback tokenizer.json with a Sequence decoder; else "gpt2"
 * (the pre-tokenizer's name, tokens padded to vocab with [PADi], token types, merges); then the
 * special token ids, add_*_token flags, the chat template. For llama the converter's
 * add_space_prefix key comes first. -1 + loom_fail naming the file and field. */
int gguf_vocab_write(gguf_writer *w, const char *src_dir, int vocab, int arch);

/* llama.cpp's token types (gguf-py TokenType; SentencePiece's piece types are the same numbers),
 * as tokenizer.ggml.token_type stores them. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* (gguf_vocab_spm.c) the whole file, NUL-terminated, malloc'd (*len its size); NULL when absent or unreadable */
char *gguf_slurp(const char *path, size_t *len);
/* the converter's TextModel.does_token_look_special */
int gguf_looks_special(const char *t);

/* (gguf_vocab_spm.c) a "llama" token list: n tokens (owned), scores, types (llama.cpp's TokenType) */
typedef struct gguf_spm_vocab {
    int n;
    char **tok;
    float *score;
    int32_t *type;
} gguf_spm_vocab;

int gguf_spm_init(gguf_spm_vocab *v, int n, const char *path);
void gguf_spm_free(gguf_spm_vocab *v);
/* _create_vocab_sentencepiece: dir/tokenizer.model's pieces in nvocab ids, dir/added_tokens.json and
 * tc's added_tokens_decoder over them */
int gguf_spm_from_model(gguf_spm_vocab *v, const char *dir, const struct cJSON *tc, int nvocab);
/* gguf-py's LlamaHfVocab: a byte-fallback BPE tokenizer.json tj, tc its tokenizer_config (or NULL);
 * path names tj in messages */
int gguf_spm_from_hf(gguf_spm_vocab *v, const struct cJSON *tj, const struct cJSON *tc, const char *path);
/* a SentencePiece BPE tokenizer.model of these n pieces at path (gguf_vocab_hf.c's import) */
int gguf_spm_write_model(const char *path, const char *const *tok, const float *score, const int32_t *type, int n,
                         int byte_fallback, int add_dummy_prefix);

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

/* llama3 RoPE scaling's per-frequency factors (rope_freqs.weight, head dim / 2 of them) as the
 * converter computes them in float32 from d's factor / low / high / original context */
void gguf_rope_freqs(const hf_dims *d, float *out);

/* (gguf_import.c) the way back: llama3 scaling in d (d's rope_theta and head dim given) that gives
 * the half = head dim / 2 factors fr bit for bit. rope_freqs.weight keeps the factors only, and
 * scaling factor / low / high together changes none, so low and high are taken as Llama 3's 1 and
 * 4, the factor as the largest one (else Llama 3.x's 8 or 32, ...), the original context from a
 * smoothed frequency (else between the bounds the others set, 8192 when it can be). 0, or -1 when
 * none does (d's rope fields are then undefined). */
int gguf_llama3_params(hf_dims *d, const float *fr, int half);

/* The GGUF tensors of a model of dims d and architecture arch, sorted; the caller frees l->t. */
int gguf_tensor_list(const hf_dims *d, int arch, gg_list *l);

/* rows of x (loom's RoPE pair order, heads of D rows) -> out in HF's rotate-half order, which the
 * NEOX architectures (qwen2, qwen3) keep */
void gguf_rows_to_neox(const float *x, float *out, size_t rows, size_t cols, size_t D);

#endif
