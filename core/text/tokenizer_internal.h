/* tokenizer_internal.h: what the tokenizer implementations share behind tokenizer.h: the vtable,
 * a growable id buffer and UTF-8 repair. Only core/text/tokenizer*.c include it; it must never leak
 * into the public interface (callers see the opaque tokenizer and its functions only). */
#ifndef LOOM_TOKENIZER_INTERNAL_H
#define LOOM_TOKENIZER_INTERNAL_H

#include "core/text/tokenizer.h"

typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

int tok_ids_push(tok_ids *b, int32_t id);

typedef struct tokenizer_ops {
    int (*encode)(tokenizer *t, const char *text, size_t n, tok_ids *out);
    size_t (*decode)(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap, int skip);
    int32_t (*special)(const tokenizer *t, const char *name);
    int (*is_special)(const tokenizer *t, int32_t id);
    void (*destroy)(tokenizer *t);
} tokenizer_ops;

struct tokenizer {
    const tokenizer_ops *ops;
    const char *kind;
    char describe[320];
    int vocab;
    uint64_t hash;
    int32_t bos, eos, eot, pad;
    char *chat_template;  /* owned, NULL when none */
    void *impl;           /* the implementation's state */
    int cont;             /* the text being encoded continues an input (tokenizer_encode_alloc_cont) */
};

/* Valid UTF-8 of text: NULL when text already is (nothing to do), else a malloc'd copy with each
 * maximal invalid subpart replaced by U+FFFD, NUL-terminated, length in *out_n. *err set on out of memory. */
char *tok_utf8_repair(const char *text, size_t n, size_t *out_n, int *err);

/* FNV-1a 64 of n bytes. */
uint64_t tok_fnv1a(const void *p, size_t n);

/* Load a tokenizer.json (path to the file itself) into t: fills t->ops, vocab, impl, hash. */
int tok_bpe_open(tokenizer *t, const char *path, const char *json, size_t len);

/* Load a SentencePiece .model file's len bytes into t: ops, kind, vocab, impl, hash, bos/eos/pad. */
int tok_spm_open(tokenizer *t, const char *path, const char *data, size_t len);

#endif
