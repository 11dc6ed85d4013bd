/* gguf_vocab.c: a Hugging Face tokenizer as the tokenizer keys of a GGUF, following llama.cpp's
 * converter: its choice of vocabulary (LlamaModel / Qwen2Model.set_vocab: tokenizer.model, a
 * byte-fallback tokenizer.json, else byte-level BPE), TextModel.get_vocab_base and _set_vocab_gpt2
 * (conversion/base.py), gguf-py's SpecialVocab (vocab.py); the "llama" token lists are
 * gguf_vocab_spm.c's. Tokenizers it has no form for (WordLevel, a byte-fallback one the converter
 * would not take) are refused with the field that says so (docs/gguf.md). */
#include "checkpoints/gguf_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

/* The whole file as a NUL-terminated string (malloc'd); NULL when it is absent (*absent = 1) or
 * cannot be read or held (*absent = 0). */
static char *vocab_slurp(const char *path, int *absent)
{
    size_t n;
    char *buf = gguf_slurp(path, &n);
    *absent = !buf && access(path, F_OK) != 0;
    return buf;
}

/* dir/name parsed into *out (NULL when the file is absent); -1 + loom_fail when it is not JSON */
static int vocab_json(const char *dir, const char *name, char *path, size_t len, cJSON **out)
{
    snprintf(path, len, "%s/%s", dir, name);
    *out = NULL;
    int absent;
    char *buf = vocab_slurp(path, &absent);
    if (absent) return 0;
    if (buf) *out = cJSON_Parse(buf);
    free(buf);
    return *out ? 0 : loom_fail("%s: not valid JSON", path);
}

/* The pre-tokenizer's llama.cpp name. llama.cpp tells them by hashing the ids of a test string,
 * which needs the real vocabulary; loom reads the pre-tokenizer itself, which names the same
 * splitting for the families loom imports (docs/gguf.md). NULL: unknown. */
static const char *vocab_pre_name(const cJSON *pre)
{
    static const char *const llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *const qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(ty)) return NULL;
    if (strcmp(ty->valuestring, "ByteLevel") == 0) return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex")) ? NULL : "gpt-2";
    if (strcmp(ty->valuestring, "Sequence") != 0) return NULL;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const cJSON *a = cJSON_GetArrayItem(seq, 0), *b = cJSON_GetArrayItem(seq, 1);
    if (cJSON_GetArraySize(seq) != 2 || !b) return NULL;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(a, "type"), *bt = cJSON_GetObjectItemCaseSensitive(b, "type");
    if (!cJSON_IsString(at) || !cJSON_IsString(bt) || strcmp(bt->valuestring, "ByteLevel") != 0) return NULL;
    if (strcmp(at->valuestring, "Digits") == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "individual_digits")))
        return "smollm";
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(a, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (strcmp(at->valuestring, "Split") != 0 || !cJSON_IsString(re)) return NULL;
    if (strcmp(re->valuestring, llama3) == 0) return "llama-bpe";
    if (strcmp(re->valuestring, qwen2) == 0) return "qwen2";
    return NULL;
}


typedef struct vocab {
    const char *path;          /* tokenizer.json, for messages */
    int n;
    const char **tok;          /* borrowed from the JSON, or pad[i] */
    int32_t *type;
    char (*pad)[24];
} vocab;

/* tokens and types, as get_vocab_base: ids without a token are [PADi] UNUSED; added tokens
 * CONTROL when special (or looking special), else USER_DEFINED */
static int vocab_tokens(vocab *v, const cJSON *tj)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    v->tok = calloc((size_t)v->n, sizeof *v->tok);
    v->type = calloc((size_t)v->n, sizeof *v->type);
    v->pad = calloc((size_t)v->n, sizeof *v->pad);
    if (!v->tok || !v->type || !v->pad) return loom_fail("%s: out of memory for the vocabulary", v->path);
    if (!cJSON_IsObject(map)) return loom_fail("%s: field 'model.vocab' is not an object", v->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsNumber(e) || e->valueint < 0) return loom_fail("%s: model.vocab '%s' has no id", v->path, e->string);
        if (e->valueint >= v->n)
            return loom_fail("%s: model.vocab '%s' has id %d, beyond the model's vocab_size %d", v->path, e->string, e->valueint, v->n);
        v->tok[e->valueint] = e->string;
        v->type[e->valueint] = TT_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valueint < 0)
            return loom_fail("%s: an entry of 'added_tokens' lacks id or content", v->path);
        if (id->valueint >= v->n)
            return loom_fail("%s: added_tokens '%s' has id %d, beyond the model's vocab_size %d", v->path, c->valuestring, id->valueint, v->n);
        v->tok[id->valueint] = c->valuestring;
        v->type[id->valueint] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) || gguf_looks_special(c->valuestring)
                                    ? TT_CONTROL : TT_USER_DEFINED;
    }
    for (int i = 0; i < v->n; i++)
        if (!v->tok[i]) {
            snprintf(v->pad[i], sizeof v->pad[i], "[PAD%d]", i);
            v->tok[i] = v->pad[i];
            v->type[i] = TT_UNUSED;
        }
    return 0;
}

/* SpecialVocab's merges: "a b" strings as they are; [a, b] pairs joined by a space, a space
 * inside a part written as U+0120 (chr(ord(' ') + 256)) */
static int vocab_merges(gguf_writer *w, const cJSON *tj, const char *path)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
    int n = cJSON_GetArraySize(merges);
    if (!cJSON_IsArray(merges) || n == 0) return 0;
    char **m = calloc((size_t)n, sizeof *m);
    int rc = m ? 0 : loom_fail("%s: out of memory for the merges", path), i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        if (rc) break;
        if (cJSON_IsString(e)) { m[i++] = strdup(e->valuestring); continue; }
        const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(a) || !cJSON_IsString(b)) { rc = loom_fail("%s: field 'model.merges' entry %d is not a pair", path, i); break; }
        size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
        char *s = malloc(2 * (la + lb) + 2), *o = s;
        for (const char *p = a->valuestring; s && *p; p++) *p == ' ' ? (*o++ = '\xc4', *o++ = '\xa0') : (*o++ = *p);
        if (s) *o++ = ' ';
        for (const char *p = b->valuestring; s && *p; p++) *p == ' ' ? (*o++ = '\xc4', *o++ = '\xa0') : (*o++ = *p);
        if (s) *o = '\0';
        m[i++] = s;
    }
    for (int k = 0; rc == 0 && k < i; k++)
        if (!m[k]) rc = loom_fail("%s: out of memory for the merges", path);
    if (rc == 0) rc = gguf_kv_strs(w, "tokenizer.ggml.merges", (const char *const *)m, (size_t)i);
    for (int k = 0; m && k < i; k++) free(m[k]);
    free(m);
    return rc;
}

static const char *const special_types[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
/* GGUFWriter's key per type; NULL: it has no add_<typ>_token_id, so SpecialVocab skips it (cls) */
static const char *const special_keys[] = {"bos_token_id", "eos_token_id", "unknown_token_id", "seperator_token_id",
                                           "padding_token_id", NULL, "mask_token_id"};
enum { NSPECIAL = 7 };

typedef struct specials {
    int id[NSPECIAL];          /* -1: unset */
    int order[NSPECIAL], n;    /* the order they were found (the file keeps it) */
    int add[NSPECIAL], add_order[NSPECIAL], nadd; /* add_<typ>_token: -1 unset */
} specials;

static void special_set(specials *s, int t, int id, int nvocab)
{
    if (id < 0 || id >= nvocab || s->id[t] >= 0) return;
    s->id[t] = id;
    s->order[s->n++] = t;
}

static void special_add(specials *s, int t, int val, int only_unset)
{
    if (s->add[t] >= 0 && only_unset) return;
    if (s->add[t] < 0) s->add_order[s->nadd++] = t;
    s->add[t] = val;
}

/* The content of tokenizer_config's <typ>_token (a string or {"content": ...}), NULL if none. */
static const char *special_content(const cJSON *tc, const char *typ)
{
    char key[32];
    snprintf(key, sizeof key, "%s_token", typ);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, key);
    if (cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "content");
    return cJSON_IsString(e) ? e->valuestring : NULL;
}

/* tokenizer_config's `typ`_token as Python sees the value: set (a non-empty string or object) or
 * not, and the string itself when it is one (an AddedToken object never equals a string) */
static int special_set_raw(const cJSON *tc, const char *typ, const char **str)
{
    char key[32];
    snprintf(key, sizeof key, "%s_token", typ);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, key);
    *str = cJSON_IsString(e) ? e->valuestring : NULL;
    return (cJSON_IsString(e) && e->valuestring[0]) || (cJSON_IsObject(e) && e->child);
}

/* the id of a TemplateProcessing item i's `kind` ("SpecialToken" or "Sequence"), NULL if none */
static const char *tmpl_id(const cJSON *items, int i, const char *kind)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, i), kind), "id");
    return cJSON_IsString(id) ? id->valuestring : NULL;
}

/* TemplateProcessing<pair> (SpecialVocab): past single's first and last special tokens, "A ... B"
 * with a separator (sep or eos) between sets add_sep_token, any other middle clears it */
static void vocab_pair_sep(specials *s, const cJSON *pair, const char *first, const char *last, const char *sep, const char *eos)
{
    int n = cJSON_GetArraySize(pair), lo = 0, hi = n;
    if (n == 0) return;
    const char *p0 = tmpl_id(pair, 0, "SpecialToken"), *pn = tmpl_id(pair, n - 1, "SpecialToken");
    if (first && p0 && strcmp(p0, first) == 0) lo = 1;
    if (last && pn && strcmp(pn, last) == 0) hi = n - 1;
    if (hi <= lo) return;
    const char *a = tmpl_id(pair, lo, "Sequence"), *b = tmpl_id(pair, hi - 1, "Sequence");
    if (!a || !b || strcmp(a, "A") != 0 || strcmp(b, "B") != 0 || hi - lo <= 2) return;
    int add_sep = 0;
    const char *m0 = tmpl_id(pair, lo + 1, "SpecialToken");
#define IS_SEP(x) ((sep && strcmp((x), sep) == 0) || (eos && strcmp((x), eos) == 0))
    if (m0 && IS_SEP(m0) && !last) add_sep = 1;
    if (hi - lo - 2 == 2) {
        const char *m1 = tmpl_id(pair, lo + 2, "SpecialToken");
        if (m1 && IS_SEP(m1)) add_sep = 1;
    }
#undef IS_SEP
    special_add(s, 3, add_sep, 0);
}

/* SpecialVocab._try_load_from_tokenizer_json (the post-processor's add_* defaults, its simple
 * TemplateProcessing case) and _try_load_from_config_json */
static void vocab_specials(specials *s, const cJSON *tj, const cJSON *tc, const cJSON *cfg, int nvocab)
{
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
    const cJSON *procs = cJSON_GetObjectItemCaseSensitive(pp, "processors"), *p;
    const char *bos = special_content(tc, "bos"), *eos = special_content(tc, "eos");
    /* the content whose added token gives bos its id: an unset bos takes cls's (SpecialVocab) */
    const char *bos_id_from = bos, *bs, *cs;
    int has_b = special_set_raw(tc, "bos", &bs), has_c = special_set_raw(tc, "cls", &cs);
    if (tj && tc && !has_b && has_c) has_b = 1, bs = cs, bos_id_from = special_content(tc, "cls");
    for (int i = 0; pp && i < (procs ? cJSON_GetArraySize(procs) : 1); i++) {
        p = procs ? cJSON_GetArrayItem(procs, i) : pp;
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsString(ty)) continue;
        if (strcmp(ty->valuestring, "ByteLevel") == 0) {
            special_add(s, 0, 0, 1);
            special_add(s, 1, 0, 1);
        } else if (strcmp(ty->valuestring, "TemplateProcessing") == 0) {
            const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
            int n = cJSON_GetArraySize(single);
            const char *first = n > 1 ? tmpl_id(single, 0, "SpecialToken") : NULL, *last = n > 1 ? tmpl_id(single, n - 1, "SpecialToken") : NULL;
            if (first) { /* a leading special token not bos nor cls (as values) becomes each that is unset */
                int named = (bs && strcmp(first, bs) == 0) || (cs && strcmp(first, cs) == 0);
                if (!tc || (!named && !has_b)) bos_id_from = first;
                special_add(s, 0, named || !tc || !has_b || !has_c, 0);
            }
            if (last) special_add(s, 1, eos && strcmp(last, eos) == 0, 0);
            vocab_pair_sep(s, cJSON_GetObjectItemCaseSensitive(p, "pair"), first, last, special_content(tc, "sep"), eos);
        }
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *a;
    for (int t = 0; tc && t < NSPECIAL; t++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", special_types[t]);
        const cJSON *flag = cJSON_GetObjectItemCaseSensitive(tc, key);
        if (cJSON_IsBool(flag)) special_add(s, t, cJSON_IsTrue(flag), 1);
        const char *c = t == 0 ? bos_id_from : special_content(tc, special_types[t]);
        if (!c) continue;
        cJSON_ArrayForEach(a, added) { /* the first added token with that content (SpecialVocab looks nowhere else) */
            const cJSON *ac = cJSON_GetObjectItemCaseSensitive(a, "content"), *id = cJSON_GetObjectItemCaseSensitive(a, "id");
            if (cJSON_IsString(ac) && cJSON_IsNumber(id) && strcmp(ac->valuestring, c) == 0) {
                special_set(s, t, id->valueint, nvocab);
                break;
            }
        }
    }
    for (int t = 0; cfg && t < NSPECIAL; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", special_types[t]);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(cfg, key);
        if (cJSON_IsNumber(id) && id->valuedouble == (double)id->valueint) special_set(s, t, id->valueint, nvocab);
    }
}

static int vocab_special_keys(gguf_writer *w, const cJSON *tj, const cJSON *tc, const cJSON *cfg, int nvocab)
{
    specials s;
    memset(&s, 0, sizeof s);
    for (int t = 0; t < NSPECIAL; t++) s.id[t] = -1;
    for (int t = 0; t < NSPECIAL; t++) s.add[t] = -1;
    vocab_specials(&s, tj, tc, cfg, nvocab);
    char key[64];
    for (int i = 0; i < s.n; i++) {
        if (!special_keys[s.order[i]]) continue;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", special_keys[s.order[i]]);
        if (gguf_kv_u32(w, key, (uint32_t)s.id[s.order[i]])) return -1;
    }
    for (int i = 0; i < s.nadd; i++) { /* GGUFWriter has add_add_{bos,eos,sep}_token only */
        int t = s.add_order[i];
        if (t != 0 && t != 1 && t != 3) continue;
        snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", special_types[s.add_order[i]]);
        if (gguf_kv_bool(w, key, s.add[s.add_order[i]])) return -1;
    }
    return 0;
}

/* tokenizer_config's chat_template (a string), else chat_template.jinja beside it */
static int vocab_chat_template(gguf_writer *w, const cJSON *tc, const char *dir)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    if (cJSON_IsString(ct)) return gguf_kv_str(w, "tokenizer.chat_template", ct->valuestring);
    if (ct && !cJSON_IsNull(ct)) return 0; /* a list of named templates: not carried (docs/gguf.md) */
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    int absent;
    char *buf = vocab_slurp(path, &absent);
    if (absent) return 0;
    if (!buf) return loom_fail("%s: out of memory", path);
    int rc = gguf_kv_str(w, "tokenizer.chat_template", buf);
    free(buf);
    return rc;
}

/* The tokenizer.json must be one GGUF's "gpt2" model describes: byte-level BPE. */
static int vocab_check(const cJSON *tj, const char *path, const char **pre, int arch)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "?";
    if (strcmp(t, "BPE") != 0)
        return loom_fail("%s: field 'model.type' is '%s': GGUF export takes BPE tokenizers only", path, t);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
        if (arch != GGUF_ARCH_LLAMA)
            return loom_fail("%s: field 'model.byte_fallback' is true (a SentencePiece-style vocab): llama.cpp's converter "
                             "writes one for a model other than Llama / Mistral only from a tokenizer.model beside it "
                             "(docs/gguf.md)", path);
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "decoder"), "type");
        return loom_fail("%s: field 'decoder.type' is '%s': llama.cpp's converter reads a byte-fallback tokenizer.json only "
                         "with the Llama converter's Sequence decoder, else from tokenizer.model (docs/gguf.md)", path,
                         cJSON_IsString(dec) ? dec->valuestring : "none");
    }
    *pre = vocab_pre_name(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"));
    if (!*pre) return loom_fail("%s: field 'pre_tokenizer' is not one llama.cpp names (GPT-2, Llama 3, Qwen2, SmolLM)", path);
    return 0;
}

/* LlamaHfVocab takes a tokenizer.json of a BPE model with byte fallback and a Sequence decoder */
static int vocab_is_llama_hf(const cJSON *tj)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "decoder"), "type");
    return cJSON_IsString(ty) && strcmp(ty->valuestring, "BPE") == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) &&
           cJSON_IsString(dec) && strcmp(dec->valuestring, "Sequence") == 0;
}

/* tokenizer.ggml.model "llama": _set_vocab_sentencepiece / _set_vocab_llama_hf's keys before SpecialVocab's */
static int vocab_write_llama(gguf_writer *w, const gguf_spm_vocab *v)
{
    return gguf_kv_str(w, "tokenizer.ggml.model", "llama") || gguf_kv_str(w, "tokenizer.ggml.pre", "default") ||
           gguf_kv_strs(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (size_t)v->n) ||
           gguf_kv_f32s(w, "tokenizer.ggml.scores", v->score, (size_t)v->n) ||
           gguf_kv_i32s(w, "tokenizer.ggml.token_type", v->type, (size_t)v->n);
}

/* tokenizer.ggml.model "gpt2": _set_vocab_gpt2's keys before SpecialVocab's (merges included) */
static int vocab_write_gpt2(gguf_writer *w, const cJSON *tj, const char *tpath, int nvocab, int arch)
{
    const char *pre = NULL;
    vocab v = {tpath, nvocab, NULL, NULL, NULL};
    int rc = vocab_check(tj, tpath, &pre, arch);
    if (rc == 0) rc = vocab_tokens(&v, tj);
    if (rc == 0) rc = gguf_kv_str(w, "tokenizer.ggml.model", "gpt2") || gguf_kv_str(w, "tokenizer.ggml.pre", pre);
    if (rc == 0) rc = gguf_kv_strs(w, "tokenizer.ggml.tokens", v.tok, (size_t)v.n) ||
                      gguf_kv_i32s(w, "tokenizer.ggml.token_type", v.type, (size_t)v.n);
    if (rc == 0) rc = vocab_merges(w, tj, tpath);
    free(v.tok);
    free(v.type);
    free(v.pad);
    return rc;
}

int gguf_vocab_write(gguf_writer *w, const char *src_dir, int nvocab, int arch)
{
    char tpath[4096], cpath[4096], gpath[4096], mpath[4200];
    if (!src_dir) return loom_fail("export gguf: no tokenizer.json beside the checkpoint or in finetune.base "
                                   "(a GGUF carries its tokenizer)");
    cJSON *tj = NULL, *tc = NULL, *cfg = NULL;
    /* the converter's order: tokenizer.model first (Llama, Qwen2, Qwen3), then tokenizer.json */
    snprintf(mpath, sizeof mpath, "%s/tokenizer.model", src_dir);
    FILE *mf = arch != GGUF_ARCH_GPT2 ? fopen(mpath, "rb") : NULL;
    int spm = mf != NULL;
    if (mf) fclose(mf);
    int rc = vocab_json(src_dir, "tokenizer.json", tpath, sizeof tpath, &tj);
    if (rc == 0 && !tj && !spm) rc = loom_fail("%s: missing (a GGUF carries its tokenizer)", tpath);
    if (rc == 0) rc = vocab_json(src_dir, "tokenizer_config.json", cpath, sizeof cpath, &tc);
    if (rc == 0) rc = vocab_json(src_dir, "config.json", gpath, sizeof gpath, &cfg);
    if (rc == 0 && !cfg) rc = vocab_json(src_dir, "hf_config.json", gpath, sizeof gpath, &cfg);
    const cJSON *asp = cJSON_GetObjectItemCaseSensitive(tc, "add_prefix_space");
    if (rc == 0 && arch == GGUF_ARCH_LLAMA && cJSON_IsBool(asp)) rc = gguf_kv_bool(w, "tokenizer.ggml.add_space_prefix", cJSON_IsTrue(asp));
    gguf_spm_vocab sv = {0};
    int ntok = nvocab;
    if (rc == 0 && (spm || (arch == GGUF_ARCH_LLAMA && vocab_is_llama_hf(tj)))) {
        rc = spm ? gguf_spm_from_model(&sv, src_dir, tc, nvocab) : gguf_spm_from_hf(&sv, tj, tc, tpath);
        if (rc == 0) rc = vocab_write_llama(w, &sv);
        ntok = sv.n; /* SpecialVocab(n_vocab = len(tokens)) */
    } else if (rc == 0) {
        rc = vocab_write_gpt2(w, tj, tpath, nvocab, arch);
    }
    gguf_spm_free(&sv);
    if (rc == 0) rc = vocab_special_keys(w, tj, tc, cfg, ntok);
    if (rc == 0 && tc) rc = vocab_chat_template(w, tc, src_dir);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    cJSON_Delete(cfg);
    return rc;
}
