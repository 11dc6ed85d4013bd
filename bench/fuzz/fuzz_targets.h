/* fuzz_targets.h: the inputs loom reads from users and disks, as fuzz entry points: each takes
 * arbitrary bytes, must return without crashing, leaking or reading out of bounds, and never
 * writes anywhere but its own scratch file. Shared by the libFuzzer binaries (fuzz_main.c) and
 * the regression replayer (tests/reliability/fuzz_replay.c). */
#ifndef LOOM_FUZZ_TARGETS_H
#define LOOM_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* Job config text (config_load_string); bytes after the first NUL are one --set override. */
int fuzz_config(const uint8_t *data, size_t n);
/* A fine-tuning JSONL file (sft_data_load: line splitting, chat_example_parse, rendering). The
 * first byte picks data.skip_bad_lines, the prompt-only parse flag, the validation split and
 * (bit 3) Needle's reading and format on the committed Needle tokenizer
 * (tests/fixtures/needle/needle.model) instead of loom's on the byte tokenizer; each line is also
 * parsed and rendered on its own through chat.h. */
int fuzz_jsonl(const uint8_t *data, size_t n);
/* A checkpoint file: ckpt_open (the whole-file seal first: a mutated file almost never gets past
 * it, which is the protection; HDF5 then never sees it), ckpt_read_state, ckpt_read_group over a
 * fixed small table (the one fuzz_ckpt_seed writes), and `loom ckpt info`'s ckpt_inspect (each
 * tensor's report read through). */
int fuzz_ckpt(const uint8_t *data, size_t n);
/* Write a small valid (sealed) checkpoint with that table to `path` (the fuzzer's seed). 0 on
 * success. */
int fuzz_ckpt_seed(const char *path);

/* A .safetensors file: st_open's header checks, then every tensor (up to 4096 elements)
 * converted to fp32. */
int fuzz_safetensors(const uint8_t *data, size_t n);
/* Write a small valid model.safetensors (bf16, 3 tensors) into folder `dir`. 0 on success. */
int fuzz_safetensors_seed(const char *dir);
/* A Needle .safetensors file after one selector byte: even, a base checkpoint (needle_open's
 * format, config and shape checks, then every tensor up to 4096 elements to fp32); odd, a LoRA
 * adapter (needle_adapter_open). */
int fuzz_needle(const uint8_t *data, size_t n);

/* A GGUF file: gguf_open's header, key and tensor-info checks, the keys an import reads (of each
 * kind), every tensor up to 4096 elements to fp32, then gguf_model_open's mapping onto loom's
 * families. */
int fuzz_gguf(const uint8_t *data, size_t n);
/* Write a small valid GGUF (keys of each kind, a q8_0, f16, bf16 and f32 tensor) to `path`. */
int fuzz_gguf_seed(const char *path);

/* A tokenizer.json file: tokenizer_open, then a fixed text (words, whitespace runs, accents, CJK,
 * an emoji, a bad UTF-8 sequence, chat markers) encoded and decoded (ids in the vocabulary, the
 * output within its buffer), and a prompt rendered when the file's markers pick a chat format. */
int fuzz_tokenizer(const uint8_t *data, size_t n);
/* A SentencePiece .model file: tokenizer_open (the protobuf reader and the model's checks), then
 * the same fixed text encoded and decoded, and a prompt rendered (Needle's row and chat forms
 * when the file's markers pick the needle format). */
int fuzz_spm(const uint8_t *data, size_t n);
/* Text through the committed reference tokenizers (tests/fixtures/tokenizers, Needle's
 * SentencePiece model) and the demo's:
 * the first byte picks one, the rest is encoded (any bytes must encode), decoded (byte-level BPE without a
 * normalizer must give valid UTF-8 back exactly), and read as a model's generation: its tool
 * calls extracted in that model's chat format and graded, and the text itself parsed as calls. */
int fuzz_text_encode(const uint8_t *data, size_t n);

/* An HF model folder around one fuzzed file: the first byte picks a committed fixture
 * (tests/fixtures/hf, sharded ones too) and whether the rest is its config.json, its
 * tokenizer_config.json or its model.safetensors.index.json; the fixture's other files are linked. hf_open and every tensor read; the folder's tokenizer, its
 * chat format picked from the chat template, and an example rendered. */
int fuzz_hf_folder(const uint8_t *data, size_t n);

/* Look a target up by name ("config", "jsonl", "ckpt", "safetensors", "tokenizer", "spm",
 * "text", "hf"); NULL if unknown. */
typedef int (*fuzz_target_fn)(const uint8_t *data, size_t n);
fuzz_target_fn fuzz_target_by_name(const char *name);

#endif
