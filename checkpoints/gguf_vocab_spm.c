/* gguf_vocab_spm.c: SentencePiece-style vocabularies as the token list of a GGUF whose
 * tokenizer.ggml.model is "llama" (tokens, scores, token types), as llama.cpp's converter builds it
 * (conversion/base.py _create_vocab_sentencepiece from a tokenizer.model; gguf-py's LlamaHfVocab from
 * a byte-fallback tokenizer.json), and the way back: a tokenizer.model written from such a GGUF.
 * Reads and writes only the few protobuf fields a SentencePiece BPE model needs (docs/gguf.md). */
#include "checkpoints/gguf_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

char *gguf_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (buf) buf[got] = '\0';
    *len = got;
    return buf;
}

/* TextModel.does_token_look_special, the cases a BPE vocab of these families meets */
int gguf_looks_special(const char *t)
{
    size_t n = strlen(t);
    if (strcmp(t, "<pad>") == 0 || strcmp(t, "<mask>") == 0 || strcmp(t, "<2mass>") == 0 || strcmp(t, "[@BOS@]") == 0) return 1;
    if (n >= 4 && strncmp(t, "<|", 2) == 0 && strcmp(t + n - 2, "|>") == 0) return 1;
    return n >= 8 && strncmp(t, "<unused", 7) == 0 && t[n - 1] == '>';
}

int gguf_spm_init(gguf_spm_vocab *v, int n, const char *path)
{
    memset(v, 0, sizeof *v);
    v->tok = calloc((size_t)n + 1, sizeof *v->tok);
    v->score = calloc((size_t)n + 1, sizeof *v->score);
    v->type = calloc((size_t)n + 1, sizeof *v->type);
    if (!v->tok || !v->score || !v->type) return loom_fail("%s: out of memory for the vocabulary", path);
    v->n = n;
    return 0;
}

void gguf_spm_free(gguf_spm_vocab *v)
{
    for (int i = 0; v->tok && i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->score);
    free(v->type);
    memset(v, 0, sizeof *v);
}

static int spm_set(gguf_spm_vocab *v, int id, const char *s, size_t len, float score, int type, const char *path)
{
    char *t = malloc(len + 1);
    if (!t) return loom_fail("%s: out of memory for the vocabulary", path);
    memcpy(t, s, len);
    t[len] = '\0';
    free(v->tok[id]);
    v->tok[id] = t;
    v->score[id] = score;
    v->type[id] = type;
    return 0;
}

/* ---- tokenizer.model: the protobuf wire format, the fields of ModelProto.pieces only ---- */

typedef struct pbr {
    const unsigned char *p, *end;
} pbr;

static int pbr_varint(pbr *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        unsigned char b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* the next field: number, wire type, and (length-delimited) its bytes or (varint) its value */
static int pbr_field(pbr *r, uint32_t *field, int *wt, pbr *sub, uint64_t *val)
{
    uint64_t k, n;
    if (pbr_varint(r, &k)) return -1;
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    if (*wt == 0) return pbr_varint(r, val);
    if (*wt == 2) {
        if (pbr_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
        *sub = (pbr){r->p, r->p + n};
        r->p += n;
        return 0;
    }
    size_t w = *wt == 1 ? 8 : *wt == 5 ? 4 : 0;
    if (!w || (size_t)(r->end - r->p) < w) return -1;
    *val = 0;
    memcpy(val, r->p, w); /* little-endian host, as everywhere loom builds */
    r->p += w;
    return 0;
}

/* One ModelProto.SentencePiece: its text, score, type as the converter maps it (IsUnknown,
 * IsControl, IsUnused, IsByte; any other piece, user-defined ones too, NORMAL). */
static int spm_piece(pbr *r, gguf_spm_vocab *v, int id, const char *path)
{
    const unsigned char *text = NULL;
    size_t len = 0;
    float score = 0;
    uint64_t ty = TT_NORMAL, val;
    uint32_t f;
    int wt;
    pbr sub;
    while (r->p < r->end) {
        if (pbr_field(r, &f, &wt, &sub, &val)) return loom_fail("%s: piece %d: not a SentencePiece model (truncated field)", path, id);
        if (f == 1 && wt == 2) text = sub.p, len = (size_t)(sub.end - sub.p);
        else if (f == 2 && wt == 5) { uint32_t u = (uint32_t)val; memcpy(&score, &u, 4); }
        else if (f == 3 && wt == 0) ty = val;
    }
    if (!text) return loom_fail("%s: piece %d has no text", path, id);
    int type = ty == TT_UNKNOWN || ty == TT_CONTROL || ty == TT_UNUSED || ty == TT_BYTE ? (int)ty : TT_NORMAL;
    return spm_set(v, id, (const char *)text, len, score, type, path);
}

/* _create_vocab_sentencepiece: nvocab ids ([PADi], -10000, UNUSED where no piece is), the pieces,
 * then added_tokens.json (-1000, USER_DEFINED) and tokenizer_config's added_tokens_decoder
 * (-1000; CONTROL when special or looking special, else USER_DEFINED with U+2581 as a space). */
int gguf_spm_from_model(gguf_spm_vocab *v, const char *dir, const cJSON *tc, int nvocab)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    size_t len = 0;
    unsigned char *data = (unsigned char *)gguf_slurp(path, &len);
    if (!data) return loom_fail("%s: cannot read", path);
    int rc = gguf_spm_init(v, nvocab, path), id = 0;
    for (int i = 0; rc == 0 && i < nvocab; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", i);
        rc = spm_set(v, i, pad, strlen(pad), -10000.0f, TT_UNUSED, path);
    }
    pbr r = {data, data + len}, sub;
    uint32_t f;
    int wt;
    uint64_t val;
    while (rc == 0 && r.p < r.end) {
        if (pbr_field(&r, &f, &wt, &sub, &val)) { rc = loom_fail("%s: not a SentencePiece model (truncated field)", path); break; }
        if (f != 1 || wt != 2) continue;
        if (id < nvocab) rc = spm_piece(&sub, v, id, path);
        id++;
    }
    if (rc == 0 && id == 0) rc = loom_fail("%s: no pieces (not a SentencePiece model)", path);
    free(data);
    snprintf(path, sizeof path, "%s/added_tokens.json", dir);
    char *buf = rc == 0 ? gguf_slurp(path, &len) : NULL;
    cJSON *at = buf ? cJSON_Parse(buf) : NULL, *e;
    free(buf);
    cJSON_ArrayForEach(e, at) {
        if (rc || !cJSON_IsNumber(e) || e->valueint < 0 || e->valueint >= nvocab) continue;
        rc = spm_set(v, e->valueint, e->string, strlen(e->string), -1000.0f, TT_USER_DEFINED, path);
    }
    cJSON_Delete(at);
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tc, "added_tokens_decoder")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        char *end;
        long tid = strtol(e->string, &end, 10);
        if (rc || !cJSON_IsString(c) || *end || tid < 0 || tid >= nvocab) continue;
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) || gguf_looks_special(c->valuestring);
        size_t cl = strlen(c->valuestring);
        char *t = malloc(cl + 1), *o = t;
        if (!t) { rc = loom_fail("%s: out of memory", path); break; }
        for (const char *s = c->valuestring; *s; s++) /* pre-normalise user-defined spaces: U+2581 -> ' ' */
            if (!special && strncmp(s, "\xe2\x96\x81", 3) == 0) *o++ = ' ', s += 2;
            else *o++ = *s;
        rc = spm_set(v, (int)tid, t, (size_t)(o - t), -1000.0f, special ? TT_CONTROL : TT_USER_DEFINED, path);
        free(t);
    }
    return rc;
}

/* ---- tokenizer.json: gguf-py's LlamaHfVocab (transformers 5's fast tokenizer) ---- */

/* transformers' LlamaTokenizer (and its Fast name) class defaults, which AutoTokenizer gives a
 * tokenizer_config.json without the key (a key set to null keeps none): the converter's
 * LlamaHfVocab takes its CONTROL tokens from that tokenizer's all_special_tokens. */
static const char *hf_class_default(const cJSON *tc, int i)
{
    static const char *const llama[3] = {"<s>", "</s>", "<unk>"}; /* bos, eos, unk */
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(tc, "tokenizer_class");
    if (i >= 3 || !cJSON_IsString(cls) ||
        (strcmp(cls->valuestring, "LlamaTokenizer") != 0 && strcmp(cls->valuestring, "LlamaTokenizerFast") != 0))
        return NULL;
    return llama[i];
}

/* the contents of tokenizer_config's named special tokens (or their class defaults) and its
 * additional/extra special tokens */
static int hf_is_special(const cJSON *tc, const char *s)
{
    static const char *const named[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
    for (int i = 0; i < 7; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, named[i]);
        if (!e) {
            const char *d = hf_class_default(tc, i);
            if (d && strcmp(d, s) == 0) return 1;
            continue;
        }
        if (cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsString(e) && strcmp(e->valuestring, s) == 0) return 1;
    }
    for (int k = 0; k < 2; k++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tc, k ? "extra_special_tokens" : "additional_special_tokens")) {
            const cJSON *c = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "content") : e;
            if (cJSON_IsString(c) && strcmp(c->valuestring, s) == 0) return 1;
        }
    }
    return 0;
}

static int hf_is_byte(const char *s)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    return strlen(s) == 6 && strncmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && strchr(hex, s[3]) && s[4] && strchr(hex, s[4]);
}

/* The base vocabulary (model.vocab, every id below its size) then the added tokens beyond it, in id
 * order; scores all -1000 (LlamaHfVocab's placeholder); BYTE for <0xNN>, CONTROL for the special
 * tokens tokenizer_config names (and a LlamaTokenizer's class defaults it leaves out), NORMAL else;
 * added tokens beyond the base CONTROL when special, else USER_DEFINED. */
int gguf_spm_from_hf(gguf_spm_vocab *v, const cJSON *tj, const cJSON *tc, const char *path)
{
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *e;
    if (!cJSON_IsObject(map)) return loom_fail("%s: field 'model.vocab' is not an object", path);
    int base = cJSON_GetArraySize(map), n = base;
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(id) && id->valueint >= n) n = id->valueint + 1;
    }
    if (gguf_spm_init(v, n, path)) return -1;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsNumber(e) || e->valueint < 0 || e->valueint >= base)
            return loom_fail("%s: model.vocab '%s' has id %d, outside the %d ids of model.vocab", path, e->string, e->valueint, base);
        if (spm_set(v, e->valueint, e->string, strlen(e->string), -1000.0f, TT_NORMAL, path)) return -1;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valueint < 0)
            return loom_fail("%s: an entry of 'added_tokens' lacks id or content", path);
        if (spm_set(v, id->valueint, c->valuestring, strlen(c->valuestring), -1000.0f, TT_USER_DEFINED, path)) return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!v->tok[i]) /* the converter numbers the added tokens after the base ones, one by one */
            return loom_fail("%s: no token has id %d (model.vocab and added_tokens must number 0..%d without a gap)", path, i, n - 1);
        if (i < base) v->type[i] = hf_is_byte(v->tok[i]) ? TT_BYTE : hf_is_special(tc, v->tok[i]) ? TT_CONTROL : TT_NORMAL;
        else v->type[i] = hf_is_special(tc, v->tok[i]) ? TT_CONTROL : TT_USER_DEFINED;
    }
    return 0;
}

/* ---- a tokenizer.model from a GGUF's "llama" vocabulary (gguf_vocab_hf.c) ---- */

typedef struct pbw {
    unsigned char *b;
    size_t n, cap;
} pbw;

static int pbw_raw(pbw *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 4096;
        while (cap < w->n + n) cap *= 2;
        unsigned char *b = realloc(w->b, cap);
        if (!b) return -1;
        w->b = b;
        w->cap = cap;
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
    return 0;
}

static int pbw_varint(pbw *w, uint64_t v)
{
    unsigned char b[10];
    int k = 0;
    do {
        b[k] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) b[k] |= 0x80;
        k++;
    } while (v);
    return pbw_raw(w, b, (size_t)k);
}

static int pbw_key(pbw *w, uint32_t field, int wt) { return pbw_varint(w, (uint64_t)field << 3 | (uint64_t)wt); }
static int pbw_bytes(pbw *w, uint32_t field, const void *p, size_t n) { return pbw_key(w, field, 2) || pbw_varint(w, n) || pbw_raw(w, p, n); }
static int pbw_uint(pbw *w, uint32_t field, uint64_t v) { return pbw_key(w, field, 0) || pbw_varint(w, v); }

/* A BPE ModelProto: the pieces (text, score, type), a TrainerSpec (model_type BPE, vocab size,
 * byte_fallback), a NormalizerSpec "identity" (no charsmap, the dummy prefix as add_space_prefix,
 * spaces kept and escaped to U+2581): llama.cpp's own SentencePiece tokenizer on these keys. */
int gguf_spm_write_model(const char *path, const char *const *tok, const float *score, const int32_t *type, int n,
                         int byte_fallback, int add_dummy_prefix)
{
    pbw w = {0}, p = {0};
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        p.n = 0;
        uint32_t u;
        memcpy(&u, &score[i], 4);
        rc = pbw_bytes(&p, 1, tok[i], strlen(tok[i])) || pbw_key(&p, 2, 5) || pbw_raw(&p, &u, 4) ||
             (type[i] != TT_NORMAL && pbw_uint(&p, 3, (uint64_t)type[i])) || pbw_bytes(&w, 1, p.b, p.n);
    }
    p.n = 0; /* TrainerSpec: model_type = 3 (BPE 2), vocab_size = 4, byte_fallback = 35 */
    if (rc == 0) rc = pbw_uint(&p, 3, 2) || pbw_uint(&p, 4, (uint64_t)n) || pbw_uint(&p, 35, byte_fallback ? 1 : 0) ||
                      pbw_bytes(&w, 2, p.b, p.n);
    p.n = 0; /* NormalizerSpec: name = 1, add_dummy_prefix = 3, remove_extra_whitespaces = 4, escape_whitespaces = 5 */
    if (rc == 0) rc = pbw_bytes(&p, 1, "identity", 8) || pbw_uint(&p, 3, add_dummy_prefix ? 1 : 0) || pbw_uint(&p, 4, 0) ||
                      pbw_uint(&p, 5, 1) || pbw_bytes(&w, 3, p.b, p.n);
    FILE *f = rc == 0 ? fopen(path, "wb") : NULL;
    if (rc) rc = loom_fail("%s: out of memory", path);
    else if (!f || fwrite(w.b, 1, w.n, f) != w.n) rc = loom_fail("%s: cannot write", path);
    if (f && fclose(f) != 0 && rc == 0) rc = loom_fail("%s: cannot write", path);
    free(w.b);
    free(p.b);
    return rc;
}
