/* export.h: turning a LoRA fine-tune into a plain model checkpoint: the base weights with
 * s B A folded into every adapted projection, loadable anywhere a model checkpoint is. */
#ifndef LOOM_EXPORT_H
#define LOOM_EXPORT_H

/* `loom ckpt merge BASE ADAPTER OUT`: BASE a model checkpoint (file or dir), ADAPTER a LoRA
 * fine-tune checkpoint made from it, OUT a directory that receives the merged checkpoint.
 * -1 + loom_fail naming the file on a mismatch (model config, missing /lora group). */
/* The adapters must have been trained on BASE (their recorded base digest matches BASE's
 * tensors), unless allow_other_base. */
int export_merge_lora(const char *base, const char *adapter, const char *out_dir, int allow_other_base);

#endif
