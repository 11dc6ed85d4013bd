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

/* The fine-tune (see finetune_needle.c). 0, or -1 + loom_fail. */
int finetune_needle_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report);

#endif
