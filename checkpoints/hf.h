/* hf.h: a Hugging Face model folder (config.json + safetensors) as another checkpoint format.
 * Import maps each supported architecture's config and tensor names/layouts onto loom's model
 * config (the checkpoint's model-config JSON) and loom's tensor names; export maps them back.
 * One place per family (hf_gpt2.c, hf_llama.c); core/ never sees an HF name. Must never hold
 * more than one tensor of the folder in memory at a time. */
#ifndef LOOM_HF_H
#define LOOM_HF_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoints/safetensors.h"

/* 1 when `path` is a folder holding config.json (how finetune.base tells an HF folder). */
int hf_is_folder(const char *path);

/* One loom tensor an HF folder provides, in loom's layout. */
typedef struct hf_loom_tensor {
    char name[64];          /* "h.3.attn.q.weight" */
    int ndim;
    int64_t shape[2];
    size_t numel;
} hf_loom_tensor;

typedef struct hf_model hf_model;

/* Open `dir`: config.json -> loom's model config, the weights (single file or index + shards),
 * and every HF tensor checked: each mapped to a loom tensor with the shape config.json implies,
 * none missing, none unused. NULL + loom_fail naming the folder/file and tensor. */
hf_model *hf_open(const char *dir);
void hf_close(hf_model *h);
/* loom's model config as the JSON a checkpoint stores (model_config fields). Borrowed. */
const char *hf_model_json(const hf_model *h);
/* The architecture name ("LlamaForCausalLM"). Borrowed. */
const char *hf_arch_name(const hf_model *h);
/* The loom tensors the folder provides (every tensor of loom's table, in its order). */
const hf_loom_tensor *hf_tensors(const hf_model *h, int *n);
/* loom tensor `name` in loom's layout, converted to fp32, into out[0 .. numel). */
int hf_read(hf_model *h, const char *name, float *out, size_t numel);
/* Elements [e0, e0 + n) of that tensor (numel in all) into out, for a reader going front to back
 * in pieces: a tensor in HF's layout is converted piece by piece from the mapped file; one whose
 * layout changes is converted whole at its first piece (e0 = 0) and kept until the next. */
int hf_read_range(hf_model *h, const char *name, size_t numel, size_t e0, size_t n, float *out);

/* loom tensor `name`'s fp32 contents in loom's layout (host), NULL if absent. hf_export is done
 * with each pointer before its next call (so a getter may read every tensor into one buffer);
 * hf_export_peft is not. */
typedef const float *(*hf_get_fn)(void *ctx, const char *loom_name);

/* Write an HF folder into out_dir (created by the caller) from loom's model config JSON and
 * tensors: config.json (the source folder's, when src_dir has one, with loom's fields written
 * over it; else built from the architecture's defaults), model.safetensors (sharded above
 * max_shard_bytes, with an index), and the tokenizer files src_dir holds. src_dir may be NULL. */
int hf_export(const char *out_dir, const char *model_json, hf_get_fn get, void *ctx,
              st_dtype dtype, const char *src_dir, uint64_t max_shard_bytes);

/* Loom tensor `name` pushed in order through put(pctx, x, n), all its values; -1 + loom_fail
 * (or put's -1) aborts. */
typedef int (*hf_pieces_fn)(void *ctx, const char *loom_name, int (*put)(void *pctx, const float *x, size_t n),
                            void *pctx);
/* hf_export reading the tensors whose layout does not change in pieces (pieces may be NULL: then
 * hf_export): memory holds no whole tensor but those few that change layout (get asks for them). */
int hf_export_pieces(const char *out_dir, const char *model_json, hf_get_fn get, hf_pieces_fn pieces, void *ctx,
                     st_dtype dtype, const char *src_dir, uint64_t max_shard_bytes);

/* A PEFT LoRA adapter folder: adapter_config.json (r, lora_alpha, target_modules) and
 * adapter_model.safetensors, PEFT's names. targets: bit t = loom LoRA target t (LORA_* order:
 * q, k, v, o, fc, gate, up, proj); get() is asked for "h.<l>.<stem>.lora_A"/"lora_B". */
int hf_export_peft(const char *out_dir, const char *model_json, hf_get_fn get, void *ctx,
                   int rank, float alpha, unsigned targets, const char *base_name);

/* Copy the tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * vocab.json, merges.txt, tokenizer.model, generation_config.json, chat_template.jinja, and the
 * source config.json as hf_config.json) from src_dir into dst_dir; absent ones are skipped. */
int hf_copy_side_files(const char *src_dir, const char *dst_dir, int with_config);

#endif
