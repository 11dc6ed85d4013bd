/* data.h: pretraining data: token files (format in docs/token-format.md) or plain text files
 * (tokenized on load by the model's tokenizer), held in host memory, and deterministic batch sampling: the sample
 * with global index g is a function of (seed, g) only, so any world size sees the same global
 * batch at every step. */
#ifndef LOOM_DATA_H
#define LOOM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer.h"

#define TOKFILE_MAGIC "LOOMTOK1"   /* 8 bytes */
#define TOKFILE_VERSION 2          /* 1 (24-byte header, byte tokenizer only) is still read */
#define TOKFILE_HEADER_BYTES 32    /* magic[8], u32 version, u32 token_bytes, u64 count,
                                      u64 tokenizer hash (all little-endian) */

typedef struct token_data {
    int32_t *tokens; /* host, n entries */
    size_t n;
} token_data;

/* Load `path`: a token file (by its magic), which must have been made by tok (its hash), or else
 * a text file, encoded with tok. Every id must be < vocab. -1 + loom_fail naming the file and the
 * problem (truncated, bad header, another tokenizer, id out of range). */
int token_data_load(token_data *d, const char *path, tokenizer *tok, int vocab);
void token_data_free(token_data *d);

/* Write a token file with 2- or 4-byte tokens (width 2 requires every id < 65536), recording
 * the hash of the tokenizer that made them (tokenizer_hash). */
int tokfile_write(const char *path, const int32_t *tokens, size_t n, int width, uint64_t tok_hash);

/* Sample global index g: T input tokens and the T next-token targets, from a window whose start is
 * drawn from (seed, g). Needs d->n > T. */
void token_data_sample(const token_data *d, uint64_t seed, uint64_t g, int T, int32_t *tokens,
                       int32_t *targets);

#endif
