/* gguf.h: GGUF files (llama.cpp's format, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
 * out of loom tensors. The writer streams: metadata and tensor infos first, then each tensor's data
 * pushed in pieces, converted on the way (f32, f16, bf16, q8_0 bit for bit as ggml's own), so
 * memory never holds the model. The file appears only whole: it is written to a temporary name in
 * the same folder, synced and renamed; any failure removes it. */
#ifndef LOOM_GGUF_H
#define LOOM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoints/hf.h"

/* ggml's type ids (ggml.h's enum ggml_type) for the types loom writes. */
typedef enum gguf_type { GGUF_F32 = 0, GGUF_F16 = 1, GGUF_Q8_0 = 8, GGUF_BF16 = 30 } gguf_type;

/* "f32", "f16", "bf16", "q8_0" -> the type; -1 for any other name. */
int gguf_type_parse(const char *name);
const char *gguf_type_name(gguf_type t);
/* Bytes of n elements of type t (q8_0: n a multiple of 32, 34 bytes a block). */
size_t gguf_type_size(gguf_type t, uint64_t n);

/* The number formats, as ggml-impl.h's ggml_compute_fp32_to_fp16 / _to_bf16 (round to nearest
 * even; a NaN stays a quiet NaN) and ggml-quants.c's quantize_row_q8_0_ref (per block of 32:
 * d = amax / 127 stored as fp16, q = roundf(x / d) through id = d ? 1 / d : 0). */
uint16_t gguf_fp32_to_fp16(float f);
float gguf_fp16_to_fp32(uint16_t h);
uint16_t gguf_fp32_to_bf16(float f);
/* One q8_0 block: 32 floats -> 34 bytes (d as little-endian fp16, then 32 int8). */
void gguf_quantize_q8_0(const float *x, uint8_t *out);

/* A GGUF file being written. Order of calls: gguf_kv_* and gguf_tensor_add in any order (the file
 * keeps it), then gguf_data_begin, then each tensor's values through gguf_put in the order added
 * (element counts must match), then gguf_commit. gguf_abort (or a failed commit) removes the
 * temporary file; either frees w. Each call returns 0, or -1 + loom_fail naming the file. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_create(const char *path, uint32_t alignment);
int gguf_kv_str(gguf_writer *w, const char *key, const char *val);
int gguf_kv_u32(gguf_writer *w, const char *key, uint32_t val);
int gguf_kv_f32(gguf_writer *w, const char *key, float val);
int gguf_kv_bool(gguf_writer *w, const char *key, int val);
/* Arrays: strings, int32 or float32 values. */
int gguf_kv_strs(gguf_writer *w, const char *key, const char *const *vals, size_t n);
int gguf_kv_i32s(gguf_writer *w, const char *key, const int32_t *vals, size_t n);
int gguf_kv_f32s(gguf_writer *w, const char *key, const float *vals, size_t n);
/* ne[0] is the fastest-varying dim (a row); ggml's order, the reverse of numpy's shape. */
int gguf_tensor_add(gguf_writer *w, const char *name, int ndim, const int64_t *ne, gguf_type type);
int gguf_data_begin(gguf_writer *w);
/* The next n values of the current tensor (moves to the next tensor when this one is full). */
int gguf_put(gguf_writer *w, const float *x, size_t n);
int gguf_commit(gguf_writer *w);
void gguf_abort(gguf_writer *w);

/* Write the model as llama.cpp's convert_hf_to_gguf.py would (docs/gguf.md): tensors under
 * llama.cpp's names and layouts (norms, biases and position embeddings f32, the rest `type`; a
 * q8_0 tensor whose rows are not a multiple of 32 falls back to f16 as the converter's does), the
 * architecture's metadata from loom's model config JSON, the tokenizer and chat template from
 * src_dir's tokenizer.model or tokenizer.json / tokenizer_config.json (+ config.json's token ids). get and pieces as
 * hf_export_pieces takes them (pieces may be NULL); what names the model's file in messages. 0, or -1 + loom_fail naming the file and field;
 * no file at out_path then. */
int gguf_export(const char *out_path, const char *model_json, const char *what, hf_get_fn get, hf_pieces_fn pieces,
                void *ctx, gguf_type type, const char *src_dir);

/* A LoRA fine-tune's adapters as a GGUF LoRA adapter, as llama.cpp's convert_lora_to_gguf.py
 * writes one from the PEFT adapter of the same values (docs/gguf.md): for each adapted weight
 * "<name>.lora_a" (A, ne [in, r]) and "<name>.lora_b" (B, ne [r, out]; q/k rows in the base GGUF's
 * order), adapter.lora.alpha = alpha, which `llama-cli -m BASE.gguf --lora OUT.gguf` applies as
 * alpha / r. get() is asked for "h.<l>.<stem>.lora_A"/"lora_B" (loom's layout); targets: bit t =
 * LoRA target t (LORA_* order: q, k, v, o, fc, gate, up, down). Llama-family models only (GPT-2's
 * fused attn_qkv is refused). 0, or -1 + loom_fail; no file at out_path then. */
int gguf_export_adapter(const char *out_path, const char *model_json, const char *what, hf_get_fn get, void *ctx,
                        int rank, float alpha, unsigned targets, gguf_type type);

/* A GGUF file read (mapped, not loaded): every length, count, type and offset checked against
 * the file, so a truncated or lying file fails here with one line naming the file and the field. */
typedef struct gguf_file gguf_file;

gguf_file *gguf_open(const char *path);
void gguf_close(gguf_file *g);
const char *gguf_path(const gguf_file *g);
/* A key of that type: 0 and *out; 1 when absent; -1 + loom_fail when of another type. */
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out);
int gguf_get_f32(const gguf_file *g, const char *key, float *out);
int gguf_get_bool(const gguf_file *g, const char *key, int *out);
/* Strings are malloc'd (the caller frees); an array of strings too, each and the array. */
int gguf_get_str(const gguf_file *g, const char *key, const char **out);
/* Arrays: strings as above; int32 / float32 values borrowed from the mapping (read them with memcpy). */
int gguf_get_strs(const gguf_file *g, const char *key, const char ***out, size_t *n);
int gguf_get_i32s(const gguf_file *g, const char *key, const void **out, size_t *n);
int gguf_get_f32s(const gguf_file *g, const char *key, const void **out, size_t *n);
/* The tensors in file order: their count and the name of the i-th (borrowed). */
size_t gguf_n_tensors(const gguf_file *g);
const char *gguf_tensor_name(const gguf_file *g, size_t i);
/* Tensor `name`: 0 with its dims and type; 1 when absent. */
int gguf_tensor_info(const gguf_file *g, const char *name, int *ndim, int64_t ne[4], gguf_type *type);
/* Its n values as fp32 (f16, bf16, q8_0 expanded exactly); n must be its element count. */
int gguf_tensor_read(const gguf_file *g, const char *name, float *out, size_t n);

/* A GGUF model (one `loom export gguf` wrote, or llama.cpp's converter from a model of these
 * families) as loom's model: the architecture keys -> loom's model config JSON (borrowed), every
 * tensor checked against the list that config implies (name, shape; none missing, none extra),
 * and each loom tensor by its loom name through gguf_model_get (an hf_get_fn: valid until the next
 * call). llama3 RoPE scaling comes back from rope_freqs.weight's factors (Llama 3's low 1 and high
 * 4, the factor and original context that give the same factors bit for bit; else refused).
 * NULL / -1 + loom_fail naming the file and the key or tensor. */
typedef struct gguf_model gguf_model;

gguf_model *gguf_model_open(const char *path);
void gguf_model_close(gguf_model *m);
const char *gguf_model_json(const gguf_model *m);
const float *gguf_model_get(void *m, const char *loom_name);
/* The tokenizer as Hugging Face files in dir: tokenizer.json (byte-level BPE: vocab, merges, added
 * tokens, the pre-tokenizer of tokenizer.ggml.pre; or, for a "llama" vocabulary from a
 * tokenizer.json, a byte-fallback BPE with merges rebuilt), or tokenizer.model (a "llama"
 * vocabulary with real scores; with the Llama converter's tokenizer.json of it beside when the file's
 * add_sep_token came from one), and tokenizer_config.json (special tokens, add_*_token, chat
 * template), which `loom export gguf` reads back to the same keys. */
int gguf_model_write_tokenizer(const gguf_model *m, const char *dir);

#endif
