/* import.h: other projects' model files in as loom checkpoints. Reads through checkpoints/hf.h (and
 * needle.h) and writes through checkpoints/ckpt.h; never starts a backend or a session. */
#ifndef LOOM_IMPORT_H
#define LOOM_IMPORT_H

/* A Hugging Face folder `dir` -> a loom checkpoint: the folder `out`, or the one file `out` when it
 * ends in .h5 (side files beside it). 0, or -1 + loom_fail naming the file or field. */
int import_hf(const char *dir, const char *out);
/* A GGUF model file (one `loom export gguf` wrote, or llama.cpp's converter, of the families loom
 * imports; checkpoints/gguf.h) -> a loom checkpoint as import_hf makes one: the tensors and keys
 * go through a Hugging Face folder OUT.gguf-import beside out (removed after), the tokenizer files
 * rebuilt from its keys; finetune.base names the GGUF. 0, or -1 + loom_fail naming file and field. */
int import_gguf(const char *path, const char *out);
/* A Needle base checkpoint (a .safetensors file Needle's write_checkpoint wrote) -> a loom
 * checkpoint, the folder `out` or the file `out` ending in .h5, that needle_open reads as the file
 * (checkpoints/needle.h; mtp_ tensors dropped). Nothing is written unless the whole file opens as
 * a Needle base, and a failure leaves no checkpoint. 0, or -1 + loom_fail naming file and field. */
int import_needle(const char *src, const char *out);
/* The import's one-file form: the checkpoint saved in folder tmp (tmp/step_00000000.h5) moved to
 * out, tmp and its `latest` removed; on failure the file is removed too. 0, or -1 + loom_fail. */
int import_move_single(const char *tmp, const char *out);

#endif
