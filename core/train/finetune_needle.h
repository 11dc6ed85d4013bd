/* finetune_needle.h: `loom finetune` from a Needle base checkpoint (finetune_needle.c): what
 * finetune_run hands over when finetune.base names a Needle .safetensors. */
#ifndef LOOM_FINETUNE_NEEDLE_H
#define LOOM_FINETUNE_NEEDLE_H

#include <stddef.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/needle.h"
#include "core/config/config.h"
#include "core/train/train.h"
#include "parallel/comm.h"

/* The adapters' table in a Needle fine-tune's checkpoint, for config c at rank r: A [L, in, r] then
 * B [L, r, out] of each target (needle_lora_path's order), named by the flax path past "block/"
 * with '.' for '/' and "kernel" dropped ("self_attn.q_proj.A"; the names go into names). Returns
 * the floats of all of them. */
size_t finetune_needle_table(const needle_config *c, int rank, ckpt_tensor *table, char names[][128]);

/* Tokens a held-out example may generate past its prompt in the fine-tune's evaluation. */
#define FINETUNE_NEEDLE_EVAL_NEW 96

/* The tokens per row a fine-tune of Needle base cfg->finetune.base sizes its passes for: the
 * longest row its batches run at (sft_pass_len: its data's longest rendering as Needle renders it,
 * rounded as data.bucket rounds it, at most data.max_len and the base's max_seq_len; the data and
 * tokenizer are read, the base's config only); and cfg->eval.batch clipped to the rows its held-out
 * evaluation decodes together, as the fine-tune runs it. 0, or -1 + loom_fail. */
int finetune_needle_seq_len(job_config *cfg, int *T);

/* The fine-tune (see finetune_needle.c). 0, or -1 + loom_fail. */
int finetune_needle_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report);

#endif
