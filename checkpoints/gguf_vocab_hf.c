/* gguf_vocab_hf.c: a GGUF's tokenizer keys (a byte-level BPE: tokenizer.ggml.model "gpt2") back as
 * Hugging Face files: tokenizer.json, tokenizer_config.json, and the special token ids added to
 * dir/config.json when it exists. What gguf_vocab.c reads, so an import exports the same keys. */
#include "checkpoints/gguf_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* the pre-tokenizer tokenizer.ggml.pre names (gguf_vocab.c reads it back to the same name) */
static cJSON *vh_pre(const char *pre)
{
    static const char *const llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *const qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    int split = strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "qwen2") == 0, digits = strcmp(pre, "smollm") == 0;
    if (!split && !digits && strcmp(pre, "gpt-2") != 0) return NULL;
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
    cJSON_AddBoolToObject(bl, "trim_offsets", 1);
    cJSON_AddBoolToObject(bl, "use_regex", !split);
    if (!split && !digits) return bl;
    cJSON *seq = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(seq, "pretokenizers"), *first = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    if (digits) {
        cJSON_AddStringToObject(first, "type", "Digits");
        cJSON_AddBoolToObject(first, "individual_digits", 1);
    } else {
        cJSON_AddStringToObject(first, "type", "Split");
        cJSON *pat = cJSON_AddObjectToObject(first, "pattern");
        cJSON_AddStringToObject(pat, "Regex", strcmp(pre, "qwen2") == 0 ? qwen2 : llama3);
        cJSON_AddStringToObject(first, "behavior", "Isolated");
        cJSON_AddBoolToObject(first, "invert", 0);
    }
    cJSON_AddItemToArray(arr, first);
    cJSON_AddItemToArray(arr, bl);
    return seq;
}

static int vh_write(const char *dir, const char *name, cJSON *o)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *txt = cJSON_Print(o);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int rc = f && fputs(txt, f) >= 0 ? 0 : loom_fail("%s: cannot write", path);
    if (f && fclose(f) != 0) rc = loom_fail("%s: cannot write", path);
    free(txt);
    return rc;
}

static void vh_free_strs(const char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free((void *)v[i]);
    free(v);
}

/* tokenizer.json: every token but the [PADi] ones in model.vocab, CONTROL / USER_DEFINED ones also
 * as added tokens (special: CONTROL) */
static cJSON *vh_tokenizer(const char **tok, const void *types, size_t n, const char **merges, size_t nm, cJSON *pre, int llama3)
{
    cJSON *o = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", "1.0");
    cJSON_AddNullToObject(o, "truncation");
    cJSON_AddNullToObject(o, "padding");
    cJSON_AddItemToObject(o, "added_tokens", added);
    cJSON_AddNullToObject(o, "normalizer");
    cJSON_AddItemToObject(o, "pre_tokenizer", pre);
    cJSON_AddNullToObject(o, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(o, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
    cJSON_AddBoolToObject(dec, "trim_offsets", 1);
    cJSON_AddBoolToObject(dec, "use_regex", 1);
    cJSON_AddItemToObject(o, "model", model);
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", llama3); /* Llama 3's tokenizer.json sets it */
    cJSON_AddItemToObject(model, "vocab", vocab);
    for (size_t i = 0; i < n; i++) {
        int32_t ty;
        memcpy(&ty, (const char *)types + 4 * i, 4);
        if (ty == 5) continue; /* UNUSED: an id without a token */
        cJSON_AddNumberToObject(vocab, tok[i], (double)i);
        if (ty != 3 && ty != 4) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddStringToObject(a, "content", tok[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", ty == 3);
        cJSON_AddItemToArray(added, a);
    }
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < nm; i++) cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
    return o;
}

/* tokenizer_config.json (special tokens by content, add_* flags, chat template); the ids also into
 * dir/config.json when it exists (the import's HF config), as HF configs carry them */
static int vh_config(const gguf_file *f, const char *dir, const char **tok, size_t n)
{
    static const char *const keys[] = {"bos", "eos", "unknown", "seperator", "padding"};
    static const char *const names[] = {"bos", "eos", "unk", "sep", "pad"};
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "PreTrainedTokenizerFast");
    char path[4200], key[96];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "rb");
    cJSON *cfg = NULL;
    if (cf) {
        char buf[1 << 16];
        size_t got = fread(buf, 1, sizeof buf - 1, cf);
        fclose(cf);
        buf[got] = '\0';
        cfg = cJSON_Parse(buf);
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < 5; i++) {
        uint32_t id;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", keys[i]);
        int r = gguf_get_u32(f, key, &id);
        if (r < 0 || (r == 0 && id >= n)) rc = r < 0 ? -1 : loom_fail("%s: key %s is %u, beyond the %zu tokens", gguf_path(f), key, id, n);
        if (r != 0 || rc) continue;
        snprintf(key, sizeof key, "%s_token", names[i]);
        cJSON_AddStringToObject(tc, key, tok[id]);
        snprintf(key, sizeof key, "%s_token_id", names[i]);
        if (cfg) { cJSON_DeleteItemFromObjectCaseSensitive(cfg, key); cJSON_AddNumberToObject(cfg, key, id); }
    }
    for (int i = 0; rc == 0 && i < 4; i++) {
        static const char *const add[] = {"bos", "eos", "sep", NULL};
        if (!add[i]) break;
        int v;
        snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", add[i]);
        int r = gguf_get_bool(f, key, &v);
        if (r < 0) rc = -1;
        snprintf(key, sizeof key, "add_%s_token", add[i]);
        if (r == 0) cJSON_AddBoolToObject(tc, key, v);
    }
    const char *tmpl = NULL;
    int r = rc ? 0 : gguf_get_str(f, "tokenizer.chat_template", &tmpl);
    if (r < 0) rc = -1;
    if (r == 0 && tmpl) cJSON_AddStringToObject(tc, "chat_template", tmpl);
    free((void *)tmpl);
    if (rc == 0) rc = vh_write(dir, "tokenizer_config.json", tc);
    if (rc == 0 && cfg) rc = vh_write(dir, "config.json", cfg);
    cJSON_Delete(tc);
    cJSON_Delete(cfg);
    return rc;
}

int gguf_vocab_to_hf(const gguf_file *f, const char *dir)
{
    const char *model = NULL, *pre = NULL, **tok = NULL, **merges = NULL;
    const void *types = NULL;
    size_t n = 0, nt = 0, nm = 0;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc == 1) rc = loom_fail("%s: key tokenizer.ggml.model is missing (a GGUF without its tokenizer)", gguf_path(f));
    if (rc == 0 && strcmp(model, "gpt2") != 0)
        rc = loom_fail("%s: key tokenizer.ggml.model is '%s': loom imports byte-level BPE (gpt2) tokenizers only", gguf_path(f), model);
    if (rc == 0) rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    if (rc == 1) rc = loom_fail("%s: key tokenizer.ggml.pre is missing", gguf_path(f));
    if (rc == 0) rc = gguf_get_strs(f, "tokenizer.ggml.tokens", &tok, &n) ? -1 : 0;
    if (rc == 0) rc = gguf_get_i32s(f, "tokenizer.ggml.token_type", &types, &nt) ? -1 : 0;
    if (rc == 0 && nt != n) rc = loom_fail("%s: key tokenizer.ggml.token_type has %zu entries for %zu tokens", gguf_path(f), nt, n);
    int mr = rc ? 0 : gguf_get_strs(f, "tokenizer.ggml.merges", &merges, &nm);
    if (mr < 0) rc = -1;
    cJSON *p = rc ? NULL : vh_pre(pre);
    if (rc == 0 && !p) rc = loom_fail("%s: key tokenizer.ggml.pre is '%s' (loom knows gpt-2, llama-bpe, qwen2, smollm)", gguf_path(f), pre);
    if (rc == 0) {
        cJSON *tj = vh_tokenizer(tok, types, n, merges, nm, p, strcmp(pre, "llama-bpe") == 0);
        rc = vh_write(dir, "tokenizer.json", tj);
        cJSON_Delete(tj);
    }
    if (rc == 0) rc = vh_config(f, dir, tok, n);
    vh_free_strs(tok, n);
    vh_free_strs(merges, nm);
    free((void *)model);
    free((void *)pre);
    return rc;
}
