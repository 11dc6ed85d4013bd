/* tokenizer.h: text <-> token ids behind one interface: loom's byte-level tokenizer ("byte"),
 * Hugging Face tokenizer.json files (BPE, byte-level or byte-fallback) and SentencePiece .model
 * files (BPE, Needle's), chosen by model.tokenizer. Special tokens are only produced on purpose
 * (tokenizer_special), never by encoding user text, except a SentencePiece model's user-defined
 * symbols, which the library matches anywhere in the text (Needle's chat markers). */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* The byte tokenizer's ids: 0..255 are the bytes, its special tokens follow. Only the byte
 * tokenizer has these ids; other code looks specials up by name (tokenizer_special). */
enum {
    TOK_EOT = 256,       /* <|endoftext|>: end of a document (pretraining) */
    TOK_PAD,             /* <|pad|>: padding (no loss) */
    TOK_SYSTEM,          /* <|system|> <|user|> <|assistant|>: chat turn openers */
    TOK_USER,
    TOK_ASSISTANT,
    TOK_END,             /* <|end|>: end of a turn */
    TOK_TOOLS,           /* <|tools|>: the tool schemas follow */
    TOK_CALL,            /* <|call|>: a tool call follows */
    TOK_THINK,           /* <|think|>: reasoning follows */
    TOKENIZER_VOCAB = 272 /* bytes + specials, rounded up to a multiple of 16 */
};

typedef struct tokenizer tokenizer; /* opaque; owned by whoever opened it */

/* Open by spec: "byte" (or "") for the byte-level tokenizer, a SentencePiece model (a file named
 * *.model, or a folder holding tokenizer.model and no tokenizer.json), else a tokenizer.json file
 * or a folder holding one (and optionally tokenizer_config.json, for eos_token and chat_template).
 * NULL + loom_fail naming the file and the problem (unsupported model type, unknown token...). */
tokenizer *tokenizer_open(const char *spec);
void tokenizer_free(tokenizer *t);

/* "byte", "bpe" or "sentencepiece" (with the file's path after it in tokenizer_describe). */
const char *tokenizer_kind(const tokenizer *t);
const char *tokenizer_describe(const tokenizer *t);

/* Ids run 0 .. vocab-1 (a model's vocab must be at least this). */
int tokenizer_vocab(const tokenizer *t);

/* A 64-bit hash naming the tokenizer exactly: the byte tokenizer's is fixed, a tokenizer.json's
 * or a .model's is FNV-1a of the file's bytes. Token files record it (docs/token-format.md). */
uint64_t tokenizer_hash(const tokenizer *t);
#define TOKENIZER_BYTE_HASH 0x6c6f6f6d62797465ull /* "loombyte" */

/* The hash tokenizer_open(spec) would give, from the file's bytes alone (no parsing): what a
 * checkpoint records and a resume compares, so a moved tokenizer.json is still the same one.
 * -1 + loom_fail naming the path when it cannot be read. */
int tokenizer_hash_of(const char *spec, uint64_t *hash);

/* Encode n bytes of text. Writes the first min(count, cap) ids to out (out may be NULL with cap
 * 0 to measure) and returns count, or -1 + loom_fail. Text that is not valid UTF-8 is first
 * repaired by replacing each maximal invalid subsequence with U+FFFD (as Python's
 * bytes.decode("utf-8", "replace")), except by the byte tokenizer, which takes every byte as is.
 * Special tokens in the text stay text (a SentencePiece model's user-defined symbols excepted:
 * they match anywhere, as in the library); no BOS/EOS is added. Each call is one encode of the
 * library: a SentencePiece model adds its dummy prefix ("▁") to each. Not thread-safe (a cache). */
long tokenizer_encode(tokenizer *t, const char *text, size_t n, int32_t *out, size_t cap);

/* The same into a malloc'd array (the caller frees it), *count ids; NULL + loom_fail on error. */
int32_t *tokenizer_encode_alloc(tokenizer *t, const char *text, size_t n, size_t *count);

/* The same for text that continues an input already begun (a chat template's text after a
 * marker): the tokenizers library adds Metaspace's "first" prefix ("▁") only at offset 0 of the
 * whole input, so this text gets none (nor a SentencePiece model's dummy prefix). */
int32_t *tokenizer_encode_alloc_cont(tokenizer *t, const char *text, size_t n, size_t *count);

/* Decode ids into out (capacity cap, NUL-terminated, cut at a token boundary when full); special
 * tokens are written as their names unless skip_special. Returns the bytes written. With
 * skip_special a SentencePiece model decodes as the library's decode (control pieces invisible,
 * one leading space dropped, byte pieces joined into characters, ids out of range skipped). */
size_t tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap,
                        int skip_special);

/* The id of a special (or added) token by its text, e.g. "<|im_end|>"; -1 when it has none. */
int32_t tokenizer_special(const tokenizer *t, const char *name);

/* 1 when id is a special token (never produced from text: markers, end of text, padding). */
int tokenizer_is_special(const tokenizer *t, int32_t id);

/* Beginning of a sequence (a SentencePiece model's bos piece; -1 for the others), end of a
 * document (pretraining separator), end of a turn (generation stops there; a SentencePiece
 * model's eos, where Needle's generation stops), padding (never a target). Each is -1 when the
 * tokenizer has none; padding falls back to eos. */
int32_t tokenizer_bos(const tokenizer *t);
int32_t tokenizer_eos(const tokenizer *t);
int32_t tokenizer_eot(const tokenizer *t);
int32_t tokenizer_pad(const tokenizer *t);

/* The chat_template text from the model folder's tokenizer_config.json, or NULL. */
const char *tokenizer_chat_template(const tokenizer *t);

#endif
