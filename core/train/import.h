/* import.h: other projects' model files in as loom checkpoints. Reads through checkpoints/hf.h and
 * writes through checkpoints/ckpt.h; never starts a backend or a session. */
#ifndef LOOM_IMPORT_H
#define LOOM_IMPORT_H

/* A Hugging Face folder `dir` -> a loom checkpoint: the folder `out`, or the one file `out` when it
 * ends in .h5 (side files beside it). 0, or -1 + loom_fail naming the file or field. */
int import_hf(const char *dir, const char *out);

#endif
