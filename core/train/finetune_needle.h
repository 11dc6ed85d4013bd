/* finetune_needle.h: `loom finetune` from a Needle base checkpoint (finetune_needle.c): what
 * finetune_run hands over when finetune.base names a Needle .safetensors. */
#ifndef LOOM_FINETUNE_NEEDLE_H
#define LOOM_FINETUNE_NEEDLE_H

#include <stddef.h>

#include "core/config/config.h"
#include "core/train/train.h"
#include "parallel/comm.h"

/* The checkpoint's name of target t's (needle_lora_path) adapter A (is_b 0) or B: the flax path
 * past "block/", '/' as '.', "kernel" dropped: "self_attn.q_proj.A". */
void finetune_needle_name(int t, int is_b, char *buf, size_t cap);

/* The fine-tune (see finetune_needle.c). 0, or -1 + loom_fail. */
int finetune_needle_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report);

#endif
