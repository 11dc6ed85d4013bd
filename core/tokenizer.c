/* tokenizer.c: the byte-level tokenizer (see tokenizer.h). */
#include "tokenizer.h"

#include <stdio.h>
#include <string.h>

static const char *const special_names[] = {
    "<|endoftext|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|end|>", "<|tools|>", "<|call|>", "<|think|>",
};

size_t tokenizer_encode(const char *text, size_t n, int32_t *out, size_t cap)
{
    size_t k = n < cap ? n : cap;
    for (size_t i = 0; i < k; i++) out[i] = (unsigned char)text[i];
    return k;
}

const char *tokenizer_name(int32_t id, char buf[16])
{
    if (id >= 0 && id < 256) {
        buf[0] = (char)id;
        buf[1] = '\0';
        return buf;
    }
    int s = id - TOK_EOT;
    if (s >= 0 && s < (int)(sizeof special_names / sizeof *special_names)) return special_names[s];
    snprintf(buf, 16, "<%d>", id > 99999 ? 99999 : id);
    return buf;
}

size_t tokenizer_decode(const int32_t *tokens, size_t n, char *out, size_t cap, int skip_special)
{
    size_t w = 0;
    char buf[16];
    if (cap == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= 256 && skip_special) continue;
        const char *s = tokenizer_name(tokens[i], buf);
        size_t len = tokens[i] < 256 ? 1 : strlen(s);
        if (w + len >= cap) break;
        memcpy(out + w, s, len);
        w += len;
    }
    out[w] = '\0';
    return w;
}
