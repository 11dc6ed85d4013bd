/* data.h: pretraining data: token files (format in docs/token-format.md), memory-mapped, or
 * text files named *.txt (encoded on load by the model's tokenizer, at most TOKDATA_TEXT_MAX bytes), and
 * deterministic batch sampling: the sample with global index g is a function of (seed, g) only,
 * so any world size sees the same global batch at every step. */
#ifndef LOOM_DATA_H
#define LOOM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/text/tokenizer.h"

#define TOKFILE_MAGIC "LOOMTOK1"   /* 8 bytes */
#define TOKFILE_VERSION 2          /* 1 (24-byte header, byte tokenizer only) is still read */
#define TOKFILE_HEADER_BYTES 32    /* magic[8], u32 version, u32 token_bytes, u64 count,
                                      u64 tokenizer hash (all little-endian) */
#define TOKDATA_TEXT_MAX (256ull << 20) /* a text file is held whole (4 bytes a token): cap it */

/* A token file is mapped read-only (payload points into the map, `width` bytes per id, little
 * endian); a text file is tokenized into `tokens` (owned). Read ids with token_data_at. */
typedef struct token_data {
    int32_t *tokens;              /* text: host, n entries; NULL for a token file */
    const unsigned char *payload; /* token file: the ids, inside the map */
    void *map;                    /* token file: the whole file, map_len bytes */
    size_t map_len, n;
    int width;                    /* bytes per id in payload: 2 or 4 */
} token_data;

static inline int32_t token_data_at(const token_data *d, size_t i)
{
    if (d->tokens) return d->tokens[i];
    const unsigned char *p = d->payload + i * (size_t)d->width;
    return d->width == 2 ? (int32_t)(p[0] | p[1] << 8)
                         : (int32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Load `path` as the job says by its name: a *.txt file is text, encoded with tok; anything else
 * must be a token file (its magic, version, width and count must parse) made by tok (its hash).
 * Every id must be < vocab. A path that is empty is "data.train: not set"; a non-regular file (a
 * FIFO, /dev/zero) is refused. -1 + loom_fail naming the file and the problem (truncated, bad
 * header, another tokenizer, id out of range). */
int token_data_load(token_data *d, const char *path, tokenizer *tok, int vocab);
/* Load `path` as text whatever its name (`loom tokenize`). */
int token_data_load_text(token_data *d, const char *path, tokenizer *tok, int vocab);
void token_data_free(token_data *d);

/* Write a token file with 2- or 4-byte tokens (width 2 requires every id < 65536), recording
 * the hash of the tokenizer that made them (tokenizer_hash). */
int tokfile_write(const char *path, const int32_t *tokens, size_t n, int width, uint64_t tok_hash);

/* Sample global index g: T input tokens and the T next-token targets, from a window whose start is
 * drawn from (seed, g). Needs d->n > T. */
void token_data_sample(const token_data *d, uint64_t seed, uint64_t g, int T, int32_t *tokens,
                       int32_t *targets);

#endif
