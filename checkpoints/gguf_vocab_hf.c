/* gguf_vocab_hf.c: a GGUF's tokenizer keys back as Hugging Face files: a byte-level BPE
 * (tokenizer.ggml.model "gpt2") or SentencePiece-style one ("llama") as tokenizer.json or
 * tokenizer.model, tokenizer_config.json, and the special token ids added to dir/config.json when it
 * exists. What gguf_vocab.c reads, so an import exports the same keys. */
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
/* One entry of tokenizer.json's added_tokens, as transformers writes a token of a GGUF's control
 * (special) or user-defined type. */
static void vh_added_token(cJSON *added, size_t id, const char *content, int special)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", (double)id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddBoolToObject(a, "special", special);
    cJSON_AddItemToArray(added, a);
}

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
        if (ty == TT_UNUSED) continue; /* UNUSED: an id without a token */
        cJSON_AddNumberToObject(vocab, tok[i], (double)i);
        if (ty != TT_CONTROL && ty != TT_USER_DEFINED) continue;
        vh_added_token(added, i, tok[i], ty == TT_CONTROL);
    }
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < nm; i++) cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
    return o;
}

/* tokenizer_config.json (special tokens by content, add_* flags, chat template); the ids also into
 * dir/config.json when it exists (the import's HF config), as HF configs carry them */
static int vh_config(const gguf_file *f, const char *dir, const char **tok, size_t n, cJSON *tc)
{
    static const char *const keys[] = {"bos", "eos", "unknown", "seperator", "padding"};
    static const char *const names[] = {"bos", "eos", "unk", "sep", "pad"};
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

/* ---- tokenizer.ggml.model "llama" (SentencePiece-style vocabularies) ---- */

static int32_t vh_type(const void *types, size_t i)
{
    int32_t t;
    memcpy(&t, (const char *)types + 4 * i, 4);
    return t;
}

static float vh_score(const void *scores, size_t i)
{
    float s;
    memcpy(&s, (const char *)scores + 4 * i, 4);
    return s;
}

/* text -> id of the NORMAL tokens (open addressing), for the merges */
typedef struct vh_map {
    int32_t *slot;
    size_t mask;
    const char **tok;
} vh_map;

static size_t vh_hash(const char *s, size_t n)
{
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int32_t vh_map_get(const vh_map *m, const char *s, size_t n)
{
    for (size_t k = vh_hash(s, n) & m->mask;; k = (k + 1) & m->mask) {
        int32_t id = m->slot[k];
        if (id < 0) return -1;
        if (strlen(m->tok[id]) == n && memcmp(m->tok[id], s, n) == 0) return id;
    }
}

typedef struct vh_merge {
    int32_t l, r;
} vh_merge;

/* the NORMAL tokens below base by rank: score descending (ties and no scores: id order) */
static const void *vh_rank_scores;
static int vh_rank_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float sx = vh_score(vh_rank_scores, (size_t)x), sy = vh_score(vh_rank_scores, (size_t)y);
    return sx != sy ? (sx > sy ? -1 : 1) : (x > y) - (x < y);
}

static int vh_merge_cmp(const void *a, const void *b)
{
    const vh_merge *x = a, *y = b;
    return x->l != y->l ? (x->l < y->l ? -1 : 1) : (x->r > y->r) - (x->r < y->r);
}

/* transformers' SentencePieceExtractor: for each NORMAL token by rank (its score, highest first,
 * as HF made Llama 2's tokenizer.json merges from its tokenizer.model; with scores NULL its id, for
 * a "llama" GGUF of a tokenizer.json, whose scores are all -1000: a BPE trained by the tokenizers
 * library numbers its merges' results in order), every split into two NORMAL tokens, ordered by
 * their ids. */
static cJSON *vh_merges(const char **tok, const void *types, const void *scores, size_t base)
{
    vh_map m = {NULL, 0, tok};
    size_t cap = 16;
    while (cap < 2 * base) cap *= 2;
    m.slot = malloc(cap * sizeof *m.slot);
    m.mask = cap - 1;
    cJSON *arr = cJSON_CreateArray();
    vh_merge *local = NULL;
    size_t lcap = 0;
    int32_t *order = malloc((base + 1) * sizeof *order);
    if (!m.slot || !arr || !order) goto fail;
    for (size_t i = 0; i < base; i++) order[i] = (int32_t)i;
    vh_rank_scores = scores;
    if (scores) qsort(order, base, sizeof *order, vh_rank_cmp);
    for (size_t k = 0; k < cap; k++) m.slot[k] = -1;
    for (size_t i = 0; i < base; i++) {
        if (vh_type(types, i) != TT_NORMAL) continue;
        size_t k = vh_hash(tok[i], strlen(tok[i])) & m.mask;
        while (m.slot[k] >= 0) k = (k + 1) & m.mask;
        m.slot[k] = (int32_t)i;
    }
    for (size_t o = 0; o < base; o++) {
        size_t i = (size_t)order[o], n = strlen(tok[i]), nl = 0;
        if (vh_type(types, i) != TT_NORMAL || n > 4096) continue; /* no real piece is longer; n^2 work */
        if (n > lcap) {
            vh_merge *b = realloc(local, n * sizeof *b);
            if (!b) goto fail;
            local = b;
            lcap = n;
        }
        for (size_t c = 1; c < n; c++) {
            if (((unsigned char)tok[i][c] & 0xC0) == 0x80) continue; /* split at characters, as Python slices */
            int32_t l = vh_map_get(&m, tok[i], c), r = l >= 0 ? vh_map_get(&m, tok[i] + c, n - c) : -1;
            if (r >= 0) local[nl++] = (vh_merge){l, r};
        }
        qsort(local, nl, sizeof *local, vh_merge_cmp);
        for (size_t k = 0; k < nl; k++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(tok[local[k].l]));
            cJSON_AddItemToArray(pair, cJSON_CreateString(tok[local[k].r]));
            cJSON_AddItemToArray(arr, pair);
        }
    }
    free(local);
    free(order);
    free(m.slot);
    return arr;
fail:
    free(local);
    free(order);
    free(m.slot);
    cJSON_Delete(arr);
    return NULL;
}

static cJSON *vh_parse(const char *json)
{
    return cJSON_Parse(json);
}

/* Llama 2's tokenizer.json around a "llama" vocabulary from a tokenizer.json (all scores -1000):
 * model.vocab the ids before the trailing run of control / user-defined tokens (the added tokens
 * LlamaHfVocab put after the base vocabulary), which with the other control tokens are the
 * added_tokens; byte fallback, merges rebuilt (vh_merges); the legacy normaliser (a U+2581
 * prepended when add_space_prefix, spaces to U+2581) and the Llama converter's decoder, which
 * `loom export gguf` reads back to the same keys (LlamaHfVocab). */
static cJSON *vh_llama_json(const char **tok, const void *types, const void *scores, size_t n, int unk, int space_prefix,
                            int bos_pp, const char *bos)
{
    size_t base = n;
    while (base > 0 && (vh_type(types, base - 1) == TT_CONTROL || vh_type(types, base - 1) == TT_USER_DEFINED)) base--;
    cJSON *o = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", "1.0");
    cJSON_AddNullToObject(o, "truncation");
    cJSON_AddNullToObject(o, "padding");
    cJSON_AddItemToObject(o, "added_tokens", added);
    cJSON_AddItemToObject(o, "normalizer", vh_parse(space_prefix
        ? "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]}"
        : "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}"));
    cJSON_AddNullToObject(o, "pre_tokenizer");
    if (bos_pp) { /* Llama 2's: <s> $A, <s> $A <s> $B (SpecialVocab reads add_bos_token from it, add_sep_token false) */
        char pp[1024];
        snprintf(pp, sizeof pp, "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":%s,\"type_id\":0}},"
                 "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":%s,\"type_id\":0}},"
                 "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":%s,\"type_id\":1}},"
                 "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{}}", bos, bos, bos);
        cJSON_AddItemToObject(o, "post_processor", vh_parse(pp));
    } else {
        cJSON_AddNullToObject(o, "post_processor");
    }
    cJSON_AddItemToObject(o, "decoder", vh_parse(space_prefix
        ? "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
          "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}"
        : "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
          "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}"));
    cJSON_AddItemToObject(o, "model", model);
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    if (unk >= 0) cJSON_AddStringToObject(model, "unk_token", tok[unk]);
    else cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON_AddItemToObject(model, "vocab", vocab);
    for (size_t i = 0; i < n; i++) {
        int32_t ty = vh_type(types, i);
        if (i < base) cJSON_AddNumberToObject(vocab, tok[i], (double)i);
        if (i < base && ty != TT_CONTROL) continue;
        vh_added_token(added, i, tok[i], ty == TT_CONTROL);
    }
    cJSON *m = vh_merges(tok, types, scores, base);
    if (!m) { cJSON_Delete(o); return NULL; }
    cJSON_AddItemToObject(model, "merges", m);
    return o;
}

/* the <unk>: tokenizer.ggml.unknown_token_id, else a token "<unk>", else the first UNKNOWN one; -1 none */
static int vh_unk(const gguf_file *f, const char **tok, const void *types, size_t n)
{
    uint32_t id;
    if (gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &id) == 0 && id < n) return (int)id;
    for (size_t i = 0; i < n; i++)
        if (strcmp(tok[i], "<unk>") == 0) return (int)i;
    for (size_t i = 0; i < n; i++)
        if (vh_type(types, i) == TT_UNKNOWN) return (int)i;
    return -1;
}

/* A "llama" GGUF of a tokenizer.model (real scores) back as a tokenizer.model: the pieces but the
 * [PADi] ids the converter padded with, the <unk> an UNKNOWN piece; the tokens the converter took
 * from added_tokens_decoder (score -1000, control or user-defined) listed there again in tc. */
static int vh_llama_spm(const char *dir, const char **tok, const void *types, const void *scores, size_t n, int unk,
                        int space_prefix, cJSON *tc, size_t *pieces)
{
    size_t np = n;
    char pad[32];
    while (np > 0 && vh_type(types, np - 1) == TT_UNUSED && vh_score(scores, np - 1) == -10000.0f &&
           (snprintf(pad, sizeof pad, "[PAD%zu]", np - 1), strcmp(tok[np - 1], pad) == 0))
        np--;
    float *sc = malloc((np + 1) * sizeof *sc);
    int32_t *ty = malloc((np + 1) * sizeof *ty);
    int byte_fallback = 0, rc = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (!sc || !ty) rc = loom_fail("%s: out of memory", path);
    cJSON *atd = cJSON_AddObjectToObject(tc, "added_tokens_decoder");
    for (size_t i = 0; rc == 0 && i < np; i++) {
        sc[i] = vh_score(scores, i);
        ty[i] = (int)i == unk ? TT_UNKNOWN : vh_type(types, i);
        byte_fallback |= ty[i] == TT_BYTE;
        int32_t gt = vh_type(types, i);
        if (sc[i] != -1000.0f || (gt != TT_CONTROL && gt != TT_USER_DEFINED)) continue;
        char key[24];
        snprintf(key, sizeof key, "%zu", i);
        cJSON *a = cJSON_AddObjectToObject(atd, key);
        cJSON_AddStringToObject(a, "content", tok[i]);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "special", gt == TT_CONTROL);
    }
    if (rc == 0) rc = gguf_spm_write_model(path, tok, sc, ty, (int)np, byte_fallback, space_prefix);
    *pieces = np;
    free(sc);
    free(ty);
    return rc;
}

/* a gguf_get_* result for a key the vocabulary needs: absent (1) is an error too */
static int vh_need(const gguf_file *f, const char *key, int r)
{
    return r == 1 ? loom_fail("%s: key %s is missing", gguf_path(f), key) : r;
}

/* tokenizer.ggml.model "llama": a tokenizer.model when the scores are real (the converter read a
 * tokenizer.model), else (all -1000: LlamaHfVocab read a tokenizer.json) a byte-fallback
 * tokenizer.json; tokenizer_config.json and config.json's ids as for gpt2 (vh_config). */
static int vh_llama(const gguf_file *f, const char *dir)
{
    const char **tok = NULL;
    const void *types = NULL, *scores = NULL;
    size_t n = 0, nt = 0, ns = 0;
    int rc = vh_need(f, "tokenizer.ggml.tokens", gguf_get_strs(f, "tokenizer.ggml.tokens", &tok, &n));
    if (rc == 0) rc = vh_need(f, "tokenizer.ggml.token_type", gguf_get_i32s(f, "tokenizer.ggml.token_type", &types, &nt));
    if (rc == 0) rc = vh_need(f, "tokenizer.ggml.scores", gguf_get_f32s(f, "tokenizer.ggml.scores", &scores, &ns));
    if (rc == 0 && (nt != n || ns != n))
        rc = loom_fail("%s: keys tokenizer.ggml.token_type / scores have %zu / %zu entries for %zu tokens", gguf_path(f), nt, ns, n);
    int space_prefix = 1, add_bos = 0, add_sep = 1;
    if (rc == 0 && (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos) < 0 || gguf_get_bool(f, "tokenizer.ggml.add_sep_token", &add_sep) < 0)) rc = -1;
    int hf = 1, unk = rc ? -1 : vh_unk(f, tok, types, n), asp_set = 0;
    if (rc == 0) {
        int r = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &space_prefix);
        if (r < 0) rc = -1;
        asp_set = r == 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int32_t t = vh_type(types, i);
        if (t < TT_NORMAL || t > TT_BYTE) rc = loom_fail("%s: key tokenizer.ggml.token_type: token %zu has type %d", gguf_path(f), i, t);
        hf &= vh_score(scores, i) == -1000.0f;
    }
    if (rc == 0 && !hf && unk < 0) rc = loom_fail("%s: a SentencePiece vocabulary without an <unk> token", gguf_path(f));
    cJSON *tc = cJSON_CreateObject();
    if (asp_set) cJSON_AddBoolToObject(tc, "add_prefix_space", space_prefix); /* the Llama converter's add_space_prefix */
    if (rc == 0 && hf) {
        /* the control tokens export must find special again: those tokenizer_config does not name */
        cJSON *extra = cJSON_AddArrayToObject(tc, "additional_special_tokens");
        for (size_t i = 0; i < n; i++) {
            uint32_t id;
            int named = 0;
            static const char *const keys[] = {"bos", "eos", "unknown", "seperator", "padding"};
            for (int k = 0; k < 5; k++) {
                char key[64];
                snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", keys[k]);
                named |= gguf_get_u32(f, key, &id) == 0 && id == i;
            }
            if (vh_type(types, i) == TT_CONTROL && !named) cJSON_AddItemToArray(extra, cJSON_CreateString(tok[i]));
        }
    }
    size_t pieces = n;
    if (rc == 0 && !hf) rc = vh_llama_spm(dir, tok, types, scores, n, unk, space_prefix, tc, &pieces);
    /* a tokenizer.json: the one the converter read; for a tokenizer.model, the Llama converter's of
     * it when add_sep_token came from a tokenizer.json's post-processor beside it (as in Llama 2's
     * folder), which tokenizer_config's flags alone would write in another order */
    int sep_key = rc == 0 && gguf_get_bool(f, "tokenizer.ggml.add_sep_token", &add_sep) == 0;
    if (rc == 0 && (hf || sep_key)) {
        uint32_t bos_id;
        char bos[512] = "null";
        if (gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos_id) == 0 && bos_id < n) {
            cJSON *bs = cJSON_CreateString(tok[bos_id]);
            char *js = bs ? cJSON_PrintUnformatted(bs) : NULL;
            if (js && strlen(js) < sizeof bos) snprintf(bos, sizeof bos, "%s", js);
            free(js);
            cJSON_Delete(bs);
        }
        cJSON *tj = vh_llama_json(tok, types, hf ? NULL : scores, pieces, unk, space_prefix,
                                  add_bos && sep_key && !add_sep && strcmp(bos, "null") != 0, bos);
        rc = tj ? vh_write(dir, "tokenizer.json", tj) : loom_fail("%s: out of memory", gguf_path(f));
        cJSON_Delete(tj);
    }
    if (rc == 0) rc = vh_config(f, dir, tok, n, tc);
    else cJSON_Delete(tc);
    vh_free_strs(tok, n);
    return rc;
}

int gguf_vocab_to_hf(const gguf_file *f, const char *dir)
{
    const char *model = NULL, *pre = NULL, **tok = NULL, **merges = NULL;
    const void *types = NULL;
    size_t n = 0, nt = 0, nm = 0;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc == 1) rc = loom_fail("%s: key tokenizer.ggml.model is missing (a GGUF without its tokenizer)", gguf_path(f));
    if (rc == 0 && strcmp(model, "llama") == 0) {
        free((void *)model);
        return vh_llama(f, dir);
    }
    if (rc == 0 && strcmp(model, "gpt2") != 0)
        rc = loom_fail("%s: key tokenizer.ggml.model is '%s': loom imports byte-level BPE (gpt2) and SentencePiece "
                       "(llama) tokenizers only", gguf_path(f), model);
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
    if (rc == 0) rc = vh_config(f, dir, tok, n, cJSON_CreateObject());
    vh_free_strs(tok, n);
    vh_free_strs(merges, nm);
    free((void *)model);
    free((void *)pre);
    return rc;
}
