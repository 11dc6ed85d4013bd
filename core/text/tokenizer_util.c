/* tokenizer_util.c: the small helpers every tokenizer implementation shares (declared in
 * tokenizer_internal.h): a growable id buffer and the FNV-1a hash of bytes. The bottom of the
 * tokenizer files: it calls none of them. */
#include <stdlib.h>

#include "base/error.h"
#include "core/text/tokenizer_internal.h"

int tok_ids_push(tok_ids *b, int32_t id)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return loom_fail("tokenizer: out of memory");
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = id;
    return 0;
}

uint64_t tok_fnv1a(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}
