/* tokenizer_bpe.h: the state of a tokenizer.json BPE tokenizer, shared by its loader
 * (tokenizer_bpe_load.c) and its encoder/decoder (tokenizer_bpe_encode.c). Private to the BPE
 * tokenizer's files in core/text/: nothing else may include it. */
#ifndef LOOM_TOKENIZER_BPE_H
#define LOOM_TOKENIZER_BPE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/text/tokenizer_internal.h"

enum { BPE_NORM_NFC = 1, BPE_NORM_NFKC, BPE_NORM_NFD, BPE_NORM_NFKD, BPE_NORM_PREPEND, BPE_NORM_REPLACE };
enum { BPE_PRE_SPLIT = 1, BPE_PRE_BYTELEVEL, BPE_PRE_DIGITS, BPE_PRE_METASPACE };
enum { BPE_ISOLATED = 1, BPE_REMOVED, BPE_MERGED_PREV, BPE_MERGED_NEXT, BPE_CONTIGUOUS };
enum { BPE_FIRST_ALWAYS, BPE_FIRST_FIRST, BPE_FIRST_NEVER };

typedef struct bpe_norm {
    int kind;
    char *a, *b;          /* PREPEND: a; REPLACE: a -> b (plain strings) */
} bpe_norm;

typedef struct bpe_pre {
    int kind;
    pcre2_code *re;       /* SPLIT, BYTELEVEL with use_regex */
    int behavior, invert; /* SPLIT; DIGITS: individual -> ISOLATED, else CONTIGUOUS */
    int add_prefix_space; /* BYTELEVEL */
    char repl[8];         /* METASPACE replacement (UTF-8) */
    int prepend, split;   /* METASPACE prepend scheme (BPE_FIRST_*), split on repl */
} bpe_pre;

typedef struct bpe_added {
    char *content;
    size_t len;
    int32_t id;
    int special;
    int lstrip, rstrip;   /* take the whitespace on that side into the token */
    int single_word;      /* only with no word character right before or after it */
    int normalized;       /* matched on the normalized text (as `match`), after the others */
    char *match;          /* what is searched for: content, or its normalized form (owned when
                             it differs from content) */
    size_t match_len;
} bpe_added;

typedef struct bpe_cache_entry {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids; /* into cache.arena (ids stored as int32) */
} bpe_cache_entry;

typedef struct bpe {
    /* vocab: id -> bytes (byte-level vocabularies are stored as raw bytes, not the mapped chars) */
    char *arena;
    size_t arena_n, arena_cap;
    uint32_t *tok_off, *tok_len;
    int32_t *vmap;           /* open addressing: ids, -1 empty */
    size_t vmap_mask;
    int32_t byte_id[256];    /* byte-level: the id of each single byte */
    /* merges: (left, right) -> rank and merged id */
    uint64_t *mkey;
    uint32_t *mrank;
    int32_t *mnew;
    size_t mmask;
    uint8_t *in_merge;       /* per id: 1 when it is the left or right of some merge; a symbol
                                that is not can never merge, so the merges on either side of it
                                are independent (bpe_word runs them apart, on small heaps) */
    uint32_t *first_c, *last_c; /* per id: its first / last char (byte, byte-level), packed */
    uint8_t join_ascii[128 * 128 / 8]; /* (last char of some merge's left, first of its right), */
    uint64_t *join;          /* ASCII pairs as bits, the others in a set (UINT64_MAX empty): */
    size_t join_mask;        /* two symbols whose pair is not in it never end up in one token */
    bpe_added *added;
    int n_added;
    uint8_t added_first[2][256]; /* [normalized]: 1 for a byte that starts some token's match */
    int any_added[2];
    uint8_t *special;        /* per id: 1 for special added tokens */
    bpe_norm norm[8];
    int n_norm;
    bpe_pre pre[8];
    int n_pre;
    int byte_level;          /* a ByteLevel pre-tokenizer: symbols are bytes */
    int byte_fallback, fuse_unk, ignore_merges;
    int word_level;          /* a WordLevel model: a word is its vocab id, or unk; no merges, and
                                decoding joins the tokens with spaces, as the library does */
    int32_t unk;
    int dec_meta, dec_strip;  /* decoder: "▁" -> " ", strip one leading space */
    char meta[8];            /* the metaspace character the decoder replaces (UTF-8) */
    pcre2_match_data *md;
    /* scratch for one word and the per-word cache */
    int32_t *sym, *prev, *next;
    int32_t *soff;           /* each symbol's byte offset in the word */
    uint64_t *heap;          /* (rank << 32 | pos) with the merged id in heap_new */
    int32_t *heap_new;
    size_t sym_cap, heap_cap;
    bpe_cache_entry *cache;
    size_t cache_mask, cache_used;
    char *carena;
    size_t carena_n, carena_cap;
} bpe;

/* tokenizer_bpe_encode.c */
int bpe_encode(tokenizer *t, const char *text, size_t n, tok_ids *out);
size_t bpe_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap, int skip);
int32_t bpe_lookup(const bpe *b, const char *s, size_t n);
uint64_t bpe_hash_bytes(const char *s, size_t n);
/* After the normalizers and added tokens are loaded: each normalized token's match text and the
 * first-byte tables. */
int bpe_prepare_added(bpe *b);
/* The join set's slot for a (l << 32 | r) key (open addressing, linear probing). */
static inline uint64_t bpe_join_hash(uint64_t key) { return key * 0x9E3779B97F4A7C15ull >> 29; }

/* 1 when a token ending in char l may ever merge with one starting with char r. Inline: the
 * encoder asks it at every symbol boundary, and the loader fills the tables it reads. */
static inline int bpe_joinable(const bpe *b, uint32_t l, uint32_t r)
{
    if (l < 128 && r < 128) return b->join_ascii[(l * 128 + r) >> 3] >> (r & 7) & 1;
    uint64_t key = (uint64_t)l << 32 | r;
    for (size_t h = bpe_join_hash(key) & b->join_mask;; h = (h + 1) & b->join_mask) {
        if (b->join[h] == key) return 1;
        if (b->join[h] == UINT64_MAX) return 0;
    }
}

#endif
