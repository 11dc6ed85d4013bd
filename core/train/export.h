/* export.h: a loom checkpoint out to other forms: a LoRA fine-tune merged into a plain model
 * checkpoint (the base weights with s B A folded into every adapted projection, loadable anywhere
 * a model checkpoint is), a Hugging Face model folder, a PEFT adapter folder. */
#ifndef LOOM_EXPORT_H
#define LOOM_EXPORT_H

#include "checkpoints/gguf.h"
#include "checkpoints/hf.h"

/* `loom ckpt merge BASE ADAPTER OUT`: BASE a model checkpoint (file or dir), ADAPTER a LoRA
 * fine-tune checkpoint made from it, OUT a directory that receives the merged checkpoint.
 * -1 + loom_fail naming the file on a mismatch (model config, missing /lora group). */
/* The adapters must have been trained on BASE (their recorded base digest matches BASE's
 * tensors), unless allow_other_base. */
int export_merge_lora(const char *base, const char *adapter, const char *out_dir, int allow_other_base);

/* What `loom export hf|peft CKPT OUT_DIR` writes. */
typedef struct export_options {
    const char *ckpt;    /* the loom checkpoint, file or directory */
    const char *out_dir; /* created when missing */
    int peft;            /* 1: a PEFT adapter (LoRA checkpoints only); 0: a Hugging Face folder */
    int merge;           /* HF folder of a LoRA checkpoint: adapters folded into the base (required) */
    st_dtype dtype;      /* HF folder: the tensors' dtype */
    double shard_mb;     /* HF folder: the largest shard, in MB (> 0) */
    int gguf;            /* 1: out_dir is a GGUF file (llama.cpp's format) of type gguf_type */
    gguf_type gguf_type;
    int gguf_adapter;    /* with gguf: a LoRA checkpoint's adapters as a GGUF LoRA adapter, not merged */
} export_options;

/* A loom checkpoint -> a Hugging Face folder or a PEFT adapter. The tensors are the checkpoint's
 * logical fp32 ones (a LoRA checkpoint's base comes from its finetune.base: a loom checkpoint or
 * an HF folder); the name and layout mapping is checkpoints/hf.h's. A whole-model checkpoint is
 * streamed (no whole model in memory). The tokenizer files and the source config.json come from
 * beside the checkpoint (an import) or from finetune.base. 0, or -1 + loom_fail. */
int export_hf(const export_options *o);
/* With o->gguf: the same model (a LoRA checkpoint merged) as one GGUF file (checkpoints/gguf.h),
 * the tokenizer from where export_hf finds the tokenizer files; with o->gguf_adapter, a LoRA
 * checkpoint's adapters alone as a GGUF LoRA adapter for the base's GGUF. */

/* `loom export needle CKPT OUT.safetensors [--merge] [--allow-other-base]`: the LoRA adapters of a
 * Needle fine-tune's checkpoint (finetune.base a Needle base) as Needle's write_adapter writes them
 * (finetune.py:497-506: metadata scale, base = finetune.base as the job named it, rank, seed =
 * train.seed), which Needle's read_adapter and `needle build --lora` take; with merge, the base
 * itself with the adapters folded into its five kernels (W + s A B in float32, stored in the
 * kernel's dtype), every other tensor and the metadata as the base has them, which Needle's
 * read_checkpoint and `needle run` load (the base must be the one trained on, unless
 * allow_other_base). A Needle base `loom import` made (no adapters; merge or not): that base's
 * file again, every tensor and metadata string bitwise in the file's order. 0, or -1 + loom_fail. */
int export_needle(const char *ckpt, const char *out, int merge, int allow_other_base);

#endif
