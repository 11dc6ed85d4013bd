/* tokenizer.h: byte-level tokenizer: ids 0..255 are the bytes, special tokens follow.
 * Every UTF-8 text round-trips exactly; special tokens are only produced on purpose (by
 * tokenizer_special), never by encoding user text, so user text cannot forge a turn marker. */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

enum {
    TOK_EOT = 256,       /* end of a document (pretraining) */
    TOK_PAD,             /* padding (no loss) */
    TOK_SYSTEM,          /* chat turn openers */
    TOK_USER,
    TOK_ASSISTANT,
    TOK_END,             /* end of a turn */
    TOK_TOOLS,           /* the tool schemas follow */
    TOK_CALL,            /* a tool call follows */
    TOK_THINK,           /* reasoning follows */
    TOKENIZER_VOCAB = 272 /* bytes + specials, rounded up to a multiple of 16 */
};

/* Encode n bytes of text into out (capacity cap); returns the number of tokens (== n). */
size_t tokenizer_encode(const char *text, size_t n, int32_t *out, size_t cap);

/* Decode tokens into text (capacity cap, NUL-terminated); specials are written as their names,
 * e.g. "<|user|>", unless skip_special. Returns bytes written (without the NUL). */
size_t tokenizer_decode(const int32_t *tokens, size_t n, char *out, size_t cap, int skip_special);

/* The printable name of a token id ("<|end|>" or the byte as a 1-char string in buf). */
const char *tokenizer_name(int32_t id, char buf[16]);

#endif
