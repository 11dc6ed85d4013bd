/* tokenizer.c: the tokenizer interface (see tokenizer.h): opening by spec, the byte-level
 * tokenizer, UTF-8 repair and the pieces every implementation shares. Never writes to stdout
 * and never exits: errors go to loom_fail. The BPE implementation is in tokenizer_bpe*.c, the
 * SentencePiece one in tokenizer_spm*.c. */
#include "core/text/tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/error.h"

static const char *const byte_special_names[] = {
    "<|endoftext|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|end|>", "<|tools|>", "<|call|>", "<|think|>",
};
#define BYTE_N_SPECIAL ((int)(sizeof byte_special_names / sizeof *byte_special_names))

/* ---- UTF-8 repair: the Unicode "maximal subpart" practice, which CPython follows ---- */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 with *bad the bytes to replace. */
static int tok_utf8_len(const unsigned char *s, size_t n, int *bad)
{
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    *bad = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        unsigned b = s[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
        *bad = k + 1;
    }
    return need + 1;
}

char *tok_utf8_repair(const char *text, size_t n, size_t *out_n, int *err)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    int bad;
    *err = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int k = tok_utf8_len(s + i, n - i, &bad);
        if (!k) break;
        i += (size_t)k;
    }
    if (i == n) return NULL;
    char *o = malloc(3 * n + 1); /* each bad byte becomes at most 3 */
    if (!o) { *err = 1; return NULL; }
    memcpy(o, text, i);
    size_t w = i;
    while (i < n) {
        int k = tok_utf8_len(s + i, n - i, &bad);
        if (k) {
            memcpy(o + w, s + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(o + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += (size_t)bad;
        }
    }
    o[w] = '\0'; /* a C string too */
    *out_n = w;
    return o;
}

/* ---- the byte tokenizer ---- */

static int byte_encode(tokenizer *t, const char *text, size_t n, tok_ids *out)
{
    (void)t;
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(out, (unsigned char)text[i])) return -1;
    return 0;
}

static size_t byte_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap, int skip)
{
    (void)t;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        char b = (char)id;
        const char *s = &b;
        size_t len = 1;
        if (id < 0 || id >= 256) {
            if (skip) continue;
            s = id >= TOK_EOT && id < TOK_EOT + BYTE_N_SPECIAL ? byte_special_names[id - TOK_EOT] : "<?>";
            len = strlen(s);
        }
        if (w + len >= cap) break;
        memcpy(out + w, s, len);
        w += len;
    }
    return w;
}

static int32_t byte_special(const tokenizer *t, const char *name)
{
    (void)t;
    for (int i = 0; i < BYTE_N_SPECIAL; i++)
        if (strcmp(byte_special_names[i], name) == 0) return TOK_EOT + i;
    return -1;
}

static int byte_is_special(const tokenizer *t, int32_t id)
{
    (void)t;
    return id >= 256;
}

static void byte_destroy(tokenizer *t) { (void)t; }

static const tokenizer_ops byte_ops = {byte_encode, byte_decode, byte_special, byte_is_special, byte_destroy};

/* ---- opening ---- */

static char *tok_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) { loom_fail("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 1 >= cap) {
            cap = cap ? cap * 2 : 1 << 16;
            char *b = realloc(buf, cap);
            if (!b) { free(buf); fclose(f); loom_fail("%s: out of memory", path); return NULL; }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* A token field of tokenizer_config.json: "text" or {"content": "text"}. */
static const char *tok_config_token(const cJSON *root, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* eos_token and chat_template from dir/tokenizer_config.json when there is one. */
/* dir/name whole into *text (malloc'd; NULL when there is no such file) and path. -1 + loom_fail
 * when it exists but cannot be read. */
static int tok_read_beside(const char *dir, const char *name, char *path, size_t cap, char **text, size_t *len)
{
    snprintf(path, cap, "%s/%s", dir, name);
    struct stat st;
    *text = NULL;
    if (stat(path, &st) != 0) return 0;
    *text = tok_read(path, len);
    return *text ? 0 : -1;
}

static int tok_read_config(tokenizer *t, const char *dir)
{
    char path[1100], *text;
    size_t len;
    if (tok_read_beside(dir, "tokenizer_config.json", path, sizeof path, &text, &len)) return -1;
    if (!text) return 0;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return loom_fail("%s: invalid JSON", path);
    const char *eos = tok_config_token(root, "eos_token"), *pad = tok_config_token(root, "pad_token");
    if (eos && t->ops->special(t, eos) >= 0) t->eos = t->ops->special(t, eos);
    if (pad && t->ops->special(t, pad) >= 0) t->pad = t->ops->special(t, pad);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsArray(ct) && cJSON_GetArraySize(ct) > 0) /* [{name, template}]: the default one */
        ct = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ct, 0), "template");
    if (cJSON_IsString(ct)) {
        t->chat_template = malloc(strlen(ct->valuestring) + 1);
        if (t->chat_template) strcpy(t->chat_template, ct->valuestring);
    }
    cJSON_Delete(root);
    return 0;
}

/* transformers 5 saves the chat template beside tokenizer_config.json, as dir/chat_template.jinja
 * (the text itself), rather than inside it: read it when the config carried none. */
static int tok_read_template_file(tokenizer *t, const char *dir)
{
    char path[1100];
    size_t len;
    return tok_read_beside(dir, "chat_template.jinja", path, sizeof path, &t->chat_template, &len);
}

/* Defaults for eos / end of turn / padding from the usual names, first found wins. */
static void tok_default_ids(tokenizer *t)
{
    static const char *const eos[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", NULL};
    static const char *const eot[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", "<|endoftext|>", NULL};
    static const char *const pad[] = {"<|pad|>", "<pad>", "<|finetune_right_pad_id|>", NULL};
    for (int i = 0; t->eos < 0 && eos[i]; i++) t->eos = t->ops->special(t, eos[i]);
    for (int i = 0; t->eot < 0 && eot[i]; i++) t->eot = t->ops->special(t, eot[i]);
    for (int i = 0; t->pad < 0 && pad[i]; i++) t->pad = t->ops->special(t, pad[i]);
    if (t->pad < 0) t->pad = t->eos >= 0 ? t->eos : 0;
}

/* The tokenizer.json of a spec (a file, or a folder holding one) and the folder around it. */
static int tok_json_path(const char *spec, char *path, size_t path_cap, char *dir, size_t dir_cap)
{
    struct stat st;
    if (stat(spec, &st) != 0) return loom_fail("model.tokenizer: %s: %s", spec, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, dir_cap, "%s", spec);
        snprintf(path, path_cap, "%s/tokenizer.json", spec);
    } else {
        snprintf(path, path_cap, "%s", spec);
        const char *slash = strrchr(spec, '/');
        snprintf(dir, dir_cap, "%.*s", slash ? (int)(slash - spec) : 1, slash ? spec : ".");
    }
    return 0;
}

/* 1 when spec names a SentencePiece model: a file ending in ".model", or a folder with a
 * tokenizer.model and no tokenizer.json (path: the file). 0 otherwise, path untouched. */
static int tok_spm_path(const char *spec, char *path, size_t cap)
{
    struct stat st;
    size_t n = strlen(spec);
    if (stat(spec, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) {
        if (n < 6 || strcmp(spec + n - 6, ".model") != 0) return 0;
        snprintf(path, cap, "%s", spec);
        return 1;
    }
    snprintf(path, cap, "%s/tokenizer.json", spec);
    if (stat(path, &st) == 0) return 0;
    snprintf(path, cap, "%s/tokenizer.model", spec);
    return stat(path, &st) == 0;
}

static int tok_open_spm(tokenizer *t, const char *path)
{
    size_t len;
    char *data = tok_read(path, &len);
    if (!data) return -1;
    int rc = tok_spm_open(t, path, data, len);
    free(data);
    return rc;
}

static int tok_open_json(tokenizer *t, const char *spec)
{
    char path[1100], dir[1024];
    if (tok_json_path(spec, path, sizeof path, dir, sizeof dir)) return -1;
    size_t len;
    char *json = tok_read(path, &len);
    if (!json) return -1;
    int rc = tok_bpe_open(t, path, json, len);
    free(json);
    if (rc) return -1;
    snprintf(t->describe, sizeof t->describe, "bpe %.280s (%d ids)", path, t->vocab);
    if (tok_read_config(t, dir)) return -1;
    return t->chat_template ? 0 : tok_read_template_file(t, dir);
}

tokenizer *tokenizer_open(const char *spec)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) { loom_fail("tokenizer: out of memory"); return NULL; }
    t->bos = t->eos = t->eot = t->pad = -1;
    if (!spec || !spec[0] || strcmp(spec, "byte") == 0) {
        t->ops = &byte_ops;
        t->kind = "byte";
        snprintf(t->describe, sizeof t->describe, "byte (%d ids)", TOKENIZER_VOCAB);
        t->vocab = TOKENIZER_VOCAB;
        t->hash = TOKENIZER_BYTE_HASH;
        t->eos = TOK_EOT;
        t->eot = TOK_END;
        t->pad = TOK_PAD;
        return t;
    }
    char spm[1100];
    if (tok_spm_path(spec, spm, sizeof spm)) {
        if (tok_open_spm(t, spm)) {
            tokenizer_free(t);
            return NULL;
        }
        return t;
    }
    t->kind = "bpe";
    if (tok_open_json(t, spec)) {
        tokenizer_free(t);
        return NULL;
    }
    tok_default_ids(t);
    return t;
}

int tokenizer_hash_of(const char *spec, uint64_t *hash)
{
    if (!spec || !spec[0] || strcmp(spec, "byte") == 0) {
        *hash = TOKENIZER_BYTE_HASH;
        return 0;
    }
    char path[1100], dir[1024];
    size_t len;
    char *json = tok_spm_path(spec, path, sizeof path) ? tok_read(path, &len) /* as tok_spm_open names it */
                 : tok_json_path(spec, path, sizeof path, dir, sizeof dir) ? NULL : tok_read(path, &len);
    if (!json) return -1;
    *hash = tok_fnv1a(json, len); /* as tok_bpe_open names it */
    free(json);
    return 0;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    if (t->ops) t->ops->destroy(t);
    free(t->chat_template);
    free(t);
}

const char *tokenizer_kind(const tokenizer *t) { return t->kind; }
const char *tokenizer_describe(const tokenizer *t) { return t->describe; }
int tokenizer_vocab(const tokenizer *t) { return t->vocab; }
uint64_t tokenizer_hash(const tokenizer *t) { return t->hash; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
int32_t tokenizer_eot(const tokenizer *t) { return t->eot; }
int32_t tokenizer_pad(const tokenizer *t) { return t->pad; }
const char *tokenizer_chat_template(const tokenizer *t) { return t->chat_template; }

int32_t tokenizer_special(const tokenizer *t, const char *name) { return t->ops->special(t, name); }

int tokenizer_is_special(const tokenizer *t, int32_t id) { return t->ops->is_special(t, id); }

int32_t *tokenizer_encode_alloc(tokenizer *t, const char *text, size_t n, size_t *count)
{
    tok_ids b = {0};
    char *fixed = NULL;
    if (t->ops != &byte_ops) {
        int err;
        size_t fn = 0;
        fixed = tok_utf8_repair(text, n, &fn, &err);
        if (err) { loom_fail("tokenizer: out of memory"); return NULL; }
        if (fixed) { text = fixed; n = fn; }
    }
    int rc = t->ops->encode(t, text, n, &b);
    free(fixed);
    if (rc == 0 && !b.v) rc = tok_ids_push(&b, 0), b.n = 0; /* a valid pointer for 0 ids */
    if (rc) { free(b.v); return NULL; }
    *count = b.n;
    return b.v;
}

int32_t *tokenizer_encode_alloc_cont(tokenizer *t, const char *text, size_t n, size_t *count)
{
    t->cont = 1;
    int32_t *ids = tokenizer_encode_alloc(t, text, n, count);
    t->cont = 0;
    return ids;
}

long tokenizer_encode(tokenizer *t, const char *text, size_t n, int32_t *out, size_t cap)
{
    size_t count;
    int32_t *ids = tokenizer_encode_alloc(t, text, n, &count);
    if (!ids) return -1;
    if (out) memcpy(out, ids, (count < cap ? count : cap) * sizeof *ids);
    free(ids);
    return (long)count;
}

size_t tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap,
                        int skip_special)
{
    if (cap == 0) return 0;
    size_t w = t->ops->decode(t, ids, n, out, cap, skip_special);
    out[w] = '\0';
    return w;
}
