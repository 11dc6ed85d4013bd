/* tokenizer_spm.h: the state of a SentencePiece tokenizer (a `.model` file), shared by its reader
 * (tokenizer_spm_load.c), its normaliser (tokenizer_spm_norm.c) and its encoder/decoder
 * (tokenizer_spm.c). Private to those files: nothing else in core/text may include it. */
#ifndef LOOM_TOKENIZER_SPM_H
#define LOOM_TOKENIZER_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "core/text/tokenizer_internal.h"

/* ModelProto.SentencePiece.Type */
enum { SPM_NORMAL = 1, SPM_UNKNOWN, SPM_CONTROL, SPM_USER_DEFINED, SPM_UNUSED, SPM_BYTE };

#define SPM_MAX_PIECES (1 << 21) /* more pieces than this is no vocabulary: refused */
#define SPM_MAX_PIECE 8000       /* the library's kMaxPieceSize: a piece is shorter */

/* A NormalizerSpec with its precompiled charsmap decoded (a darts-clone double array over the
 * input bytes whose values are offsets of NUL-terminated replacements in pool). */
typedef struct spm_norm {
    uint32_t *units;       /* owned, host order; NULL without a charsmap (text passes as is) */
    size_t n_units;
    char *pool;            /* owned */
    size_t pool_n;
    int add_dummy_prefix, remove_extra_ws, escape_ws; /* proto defaults: all 1 */
    int ws_suffix;         /* TrainerSpec.treat_whitespace_as_suffix (normalizer only) */
} spm_norm;

/* Piece text -> id, open addressing (ids, -1 empty). */
typedef struct spm_map {
    int32_t *slot;
    size_t mask;
} spm_map;

typedef struct spm_model {
    int n;                 /* pieces, ids 0 .. n-1 */
    char *arena;           /* every piece's bytes, each followed by a NUL */
    uint32_t *off, *len;
    float *score;
    uint8_t *type;         /* SPM_* */
    spm_map normal;        /* NORMAL, USER_DEFINED, UNUSED pieces (what BPE merges into) */
    spm_map reserved;      /* CONTROL, UNKNOWN, BYTE pieces (looked up first by text) */
    int32_t unk;
    int32_t bos, eos, pad; /* the trainer spec's bos/eos/pad pieces when CONTROL, else -1 */
    int byte_fallback;
    int32_t byte_id[256];  /* byte_fallback: the id of <0xNN> */
    int any_unused;        /* UNUSED pieces exist: merges are resegmented */
    int cut_before_ws;     /* no NORMAL piece holds U+2581 past its start: no merge spans the
                              point before a U+2581 (so BPE runs on each word apart) */
    int cut_after_ws;      /* no NORMAL piece holds U+2581 before its end (whitespace as suffix) */
    char *unk_surface;     /* what decode writes for <unk> (TrainerSpec.unk_surface) */
    int32_t *user;         /* USER_DEFINED ids sorted by first byte, then longest first */
    int n_user;
    int user_start[257];   /* user[user_start[b] .. user_start[b+1]) begin with byte b */
    spm_norm norm, denorm; /* denorm.units NULL: no denormaliser */
    /* self_test_data samples, checked once the tokenizer can encode (then freed) */
    char **test_in, **test_want;
    int n_tests;
} spm_model;

/* Read a serialised ModelProto of len bytes into m (zeroed first). -1 + loom_fail naming path
 * and what is wrong (not a SentencePiece model, truncated, a model type other than BPE, an
 * absurd piece count, a duplicate piece, a missing <unk> or byte piece...); m is freed then. */
int spm_load(spm_model *m, const char *path, const unsigned char *data, size_t len);
void spm_free(spm_model *m);

/* The id of a piece's text as the library's PieceToId: reserved pieces first, then the others,
 * else unk. spm_map_get gives -1 when the text is not in that map. */
int32_t spm_map_get(const spm_model *m, const spm_map *map, const char *s, size_t n);
int32_t spm_piece_id(const spm_model *m, const char *s, size_t n);

/* The longest user-defined symbol at s (n bytes left), 0 when none begins there. */
size_t spm_match_user(const spm_model *m, const char *s, size_t n);

/* A growable byte buffer. */
typedef struct spm_buf {
    char *s;
    size_t n, cap;
} spm_buf;
int spm_buf_add(spm_buf *b, const char *s, size_t n);

/* Normalise n bytes of text as the library's Normalizer::Normalize into out (cleared first):
 * user-defined symbols (when m is given) pass untouched, the charsmap rewrites the rest, spaces
 * are collapsed and escaped to U+2581, the dummy prefix added unless no_prefix. -1 on OOM. */
int spm_normalize(const spm_norm *nm, const spm_model *m, const char *text, size_t n, int no_prefix,
                  spm_buf *out);

#endif
