/* test_gguf.c: `loom export gguf` against llama.cpp's own converter. For each fixture family
 * (tests/fixtures/hf/<arch> with the BPE tokenizer of tests/fixtures/gguf/tokenizer, as
 * make_gguf.py converted them) and each type (f32, f16, bf16, q8_0): import, export, then every
 * key (type, value, order) and every tensor (name, type, shape, SHA-256 of its bytes, order) equal
 * to the digest of the converter's file, but the keys docs/gguf.md lists as not written. Also: the
 * number formats on the values where rounding rules differ, alignment, and the bad inputs (one
 * line naming the file and field, no file left). Arguments: tests/fixtures, a scratch folder. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/gguf.h"
#include "checkpoints/gguf_internal.h"
#include "checkpoints/hf.h"
#include "core/text/tokenizer.h"
#include "core/train/train.h"
#include "tests/check.h"
#include "tests/checkpoints/gguf_read_test.h"

static const char *const archs[] = {"gpt2", "llama", "mistral", "qwen2", "qwen3"};
static const char *const types[] = {"f32", "f16", "bf16", "q8_0"};
/* what llama.cpp's converter writes and loom does not (docs/gguf.md says why) */
static const char *const not_written[] = {"general.name", "general.finetune", "general.basename", "general.size_label"};

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0) rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in) fclose(in);
    if (out && fclose(out)) rc = -1;
    return rc;
}

static void test_formats(void)
{
    /* bf16: round to nearest even; NaN quiet, never an infinity */
    static const struct { uint32_t in; uint16_t want; } bf[] = {
        {0x3F800000, 0x3F80}, {0x3F808000, 0x3F80}, {0x3F818000, 0x3F82}, {0x3F808001, 0x3F81},
        {0x7F800000, 0x7F80}, {0x7F800001, 0x7FC0}, {0xFFC00001, 0xFFC0}, {0x7F7FFFFF, 0x7F80}, {0x00000001, 0x0000}};
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) {
        float f;
        memcpy(&f, &bf[i].in, 4);
        CHECK(gguf_fp32_to_bf16(f) == bf[i].want, "bf16(%08x) = %04x, want %04x", bf[i].in, gguf_fp32_to_bf16(f), bf[i].want);
    }
    /* fp16: ties to even, overflow to inf, subnormals, NaN -> 0x7E00 with its sign */
    static const struct { uint32_t in; uint16_t want; } hf[] = {
        {0x3F800000, 0x3C00}, {0x477FF000, 0x7C00}, {0x477FEF00, 0x7BFF}, {0x33800000, 0x0001}, {0x33000000, 0x0000},
        {0x33C00000, 0x0002}, {0x7FC00000, 0x7E00}, {0xFF800001, 0xFE00}, {0xFF800000, 0xFC00}, {0x3F801000, 0x3C00}};
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        float f;
        memcpy(&f, &hf[i].in, 4);
        CHECK(gguf_fp32_to_fp16(f) == hf[i].want, "fp16(%08x) = %04x, want %04x", hf[i].in, gguf_fp32_to_fp16(f), hf[i].want);
        if (hf[i].want != 0x7E00 && hf[i].want != 0xFE00)
            CHECK(gguf_fp32_to_fp16(gguf_fp16_to_fp32(hf[i].want)) == hf[i].want, "fp16 round trip %04x", hf[i].want);
    }
    /* q8_0: d = amax/127 = 1 here, roundf halves away from zero (2.5 -> 3, not rint's 2) */
    float x[32] = {127, 0.5f, -0.5f, 2.5f, -126.6f};
    uint8_t q[34];
    gguf_quantize_q8_0(x, q);
    CHECK(q[0] == 0x00 && q[1] == 0x3C, "q8_0 d = %02x%02x, want 3c00", q[1], q[0]);
    static const int8_t want[5] = {127, 1, -1, 3, -127};
    for (int j = 0; j < 5; j++) CHECK((int8_t)q[2 + j] == want[j], "q8_0 q[%d] = %d, want %d", j, (int8_t)q[2 + j], want[j]);
    float z[32] = {0};
    gguf_quantize_q8_0(z, q);
    CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0, "q8_0 of zeros: d = 0, q = 0 (id = 0, no division by zero)");
}

/* the value of key kv as the digest writes it (make_gguf.py: scalars, or [elem type, [values]]) */
static int kv_equal(const gt_kv *kv, const cJSON *type, const cJSON *val)
{
    if (!cJSON_IsNumber(type) || (uint32_t)type->valueint != kv->type) return 0;
    const unsigned char *p = kv->val;
    if (kv->type == 8) return cJSON_IsString(val) && kv->len == 8 + strlen(val->valuestring) && memcmp(p + 8, val->valuestring, kv->len - 8) == 0;
    if (kv->type == 4) { uint32_t u; memcpy(&u, p, 4); return cJSON_IsNumber(val) && (double)u == val->valuedouble; }
    if (kv->type == 6) { float f; memcpy(&f, p, 4); return cJSON_IsNumber(val) && f == (float)val->valuedouble; }
    if (kv->type == 7) return cJSON_IsBool(val) && (p[0] != 0) == cJSON_IsTrue(val);
    if (kv->type != 9) return 0;
    /* arrays: element type, count and the SHA-256 of the elements as stored */
    const cJSON *et = cJSON_GetArrayItem(val, 0), *n = cJSON_GetArrayItem(val, 1), *sha = cJSON_GetArrayItem(val, 2);
    char got[65];
    gt_sha256(kv->val, kv->len, got);
    return cJSON_IsNumber(et) && (uint32_t)et->valueint == kv->elem && cJSON_IsNumber(n) && (double)kv->n == n->valuedouble &&
           cJSON_IsString(sha) && strcmp(sha->valuestring, got) == 0;
}

static int is_not_written(const char *key)
{
    for (size_t i = 0; i < sizeof not_written / sizeof not_written[0]; i++)
        if (strcmp(key, not_written[i]) == 0) return 1;
    return 0;
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

/* loom's file against the converter's digest: keys in order (skipping not_written; with prefix,
 * only the keys that start with it), tensors in order */
static void compare(const char *what, const gt_file *g, const cJSON *ref, const char *prefix)
{
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ref, "kv"), *ts = cJSON_GetObjectItemCaseSensitive(ref, "tensors"), *e;
    CHECK(g->version == 3 && g->aligned, "%s: GGUF v3 with aligned tensors (version %u)", what, g->version);
    uint64_t k = 0;
    cJSON_ArrayForEach(e, kvs) {
        const char *key = cJSON_GetArrayItem(e, 0)->valuestring;
        if (is_not_written(key) || (prefix && strncmp(key, prefix, strlen(prefix)) != 0)) continue;
        if (k >= g->nkv || strcmp(g->kv[k].key, key) != 0) {
            CHECK(0, "%s: key %llu is %s, llama.cpp's is %s", what, (unsigned long long)k, k < g->nkv ? g->kv[k].key : "(none)", key);
            return;
        }
        CHECK(kv_equal(&g->kv[k], cJSON_GetArrayItem(e, 1), cJSON_GetArrayItem(e, 2)), "%s: key %s differs from llama.cpp's", what, key);
        k++;
    }
    CHECK(k == g->nkv, "%s: %llu keys beyond llama.cpp's", what, (unsigned long long)(g->nkv - k));
    CHECK((uint64_t)cJSON_GetArraySize(ts) == g->nt, "%s: %llu tensors, llama.cpp %d", what, (unsigned long long)g->nt, cJSON_GetArraySize(ts));
    uint64_t i = 0;
    cJSON_ArrayForEach(e, ts) {
        if (i >= g->nt) break;
        const gt_tensor *t = &g->t[i++];
        const cJSON *shape = cJSON_GetArrayItem(e, 2);
        int same = strcmp(t->name, cJSON_GetArrayItem(e, 0)->valuestring) == 0 && (int)t->type == cJSON_GetArrayItem(e, 1)->valueint &&
                   (int)t->ndim == cJSON_GetArraySize(shape);
        for (uint32_t d = 0; same && d < t->ndim; d++) same = (double)t->ne[d] == cJSON_GetArrayItem(shape, (int)d)->valuedouble;
        CHECK(same, "%s: tensor %llu is %s type %u, llama.cpp's %s type %d", what, (unsigned long long)i - 1, t->name, t->type,
              cJSON_GetArrayItem(e, 0)->valuestring, cJSON_GetArrayItem(e, 1)->valueint);
        CHECK(!same || strcmp(t->sha256, cJSON_GetArrayItem(e, 3)->valuestring) == 0, "%s: tensor %s: bytes differ from llama.cpp's", what, t->name);
    }
}

static void test_reference(const char *fix, const char *tmp)
{
    char src[4096], p[4200], q[4200], imp[4096];
    static const char *const tok[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        snprintf(src, sizeof src, "%s/src_%s", tmp, archs[a]);
        mkdir(src, 0755);
        for (int i = 0; i < 2; i++) {
            const char *f = i ? "model.safetensors" : "config.json";
            snprintf(p, sizeof p, "%s/hf/%s/%s", fix, archs[a], f);
            snprintf(q, sizeof q, "%s/%s", src, f);
            CHECK(copy_file(p, q) == 0, "copy %s", p);
        }
        for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++) {
            snprintf(p, sizeof p, "%s/gguf/tokenizer/%s", fix, tok[i]);
            snprintf(q, sizeof q, "%s/%s", src, tok[i]);
            if (access(p, R_OK) == 0) CHECK(copy_file(p, q) == 0, "copy %s", p);
        }
        snprintf(imp, sizeof imp, "%s/imp_%s", tmp, archs[a]);
        if (import_hf(src, imp)) { CHECK(0, "import %s: %s", src, loom_error()); continue; }
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            char out[4200], what[64], err[512];
            snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp, archs[a], types[t]);
            snprintf(what, sizeof what, "%s %s", archs[a], types[t]);
            export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = (gguf_type)gguf_type_parse(types[t])};
            if (export_hf(&o)) { CHECK(0, "%s: export: %s", what, loom_error()); continue; }
            snprintf(p, sizeof p, "%s/gguf/%s-%s.json", fix, archs[a], types[t]);
            cJSON *ref = read_json(p);
            gt_file g;
            CHECK(ref != NULL, "%s: no digest %s", what, p);
            if (gt_read(out, &g, err, sizeof err)) { CHECK(0, "%s: %s", what, err); cJSON_Delete(ref); continue; }
            if (ref) compare(what, &g, ref, NULL);
            gt_free(&g);
            cJSON_Delete(ref);
        }
    }
}

/* fixtures/hf/qwen2-chat as it is (its Qwen2 tokenizer, added tokens, Qwen2.5's chat template) */
static void test_chat(const char *fix, const char *tmp)
{
    char src[4200], imp[4200], out[4200], p[4200], err[512];
    snprintf(src, sizeof src, "%s/hf/qwen2-chat", fix);
    snprintf(imp, sizeof imp, "%s/imp_chat", tmp);
    snprintf(out, sizeof out, "%s/qwen2-chat-f32.gguf", tmp);
    snprintf(p, sizeof p, "%s/gguf/qwen2-chat-f32.json", fix);
    CHECK(import_hf(src, imp) == 0, "import %s: %s", src, loom_error());
    export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = GGUF_F32};
    CHECK(export_hf(&o) == 0, "qwen2-chat: export: %s", loom_error());
    cJSON *ref = read_json(p);
    gt_file g;
    if (ref && gt_read(out, &g, err, sizeof err) == 0) {
        compare("qwen2-chat f32", &g, ref, NULL);
        gt_free(&g);
    } else {
        CHECK(0, "qwen2-chat: %s", ref ? err : "no digest");
    }
    cJSON_Delete(ref);
}

/* the family tokenizers of fixtures/tokenizers (GPT-2, Llama 3, Qwen2, SmolLM2 pre-tokenizers): the
 * tokenizer keys alone against the converter's --vocab-only file */
static void test_vocabs(const char *fix, const char *tmp)
{
    static const char *const names[] = {"gpt2", "llama3", "qwen2", "smollm2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[4000], p[4200], q[4200], out[4300], err[512];
        snprintf(dir, sizeof dir, "%s/vocab_%s", tmp, names[i]);
        mkdir(dir, 0755);
        snprintf(p, sizeof p, "%s/tokenizers/%s.json", fix, names[i]);
        snprintf(q, sizeof q, "%s/tokenizer.json", dir);
        CHECK(copy_file(p, q) == 0, "copy %s", p);
        snprintf(p, sizeof p, "%s/hf/qwen2/config.json", fix);
        snprintf(q, sizeof q, "%s/config.json", dir);
        CHECK(copy_file(p, q) == 0, "copy %s", p);
        snprintf(p, sizeof p, "%s/gguf/vocab-%s.json", fix, names[i]);
        cJSON *ref = read_json(p), *e;
        int n = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(ref, "kv"))
            if (strcmp(cJSON_GetArrayItem(e, 0)->valuestring, "tokenizer.ggml.tokens") == 0) n = cJSON_GetArrayItem(cJSON_GetArrayItem(e, 2), 1)->valueint;
        CHECK(ref && n > 0, "%s: no digest or no tokens in it", p);
        snprintf(out, sizeof out, "%s/vocab-%s.gguf", tmp, names[i]);
        gguf_writer *w = gguf_create(out, 32);
        int rc = w && gguf_vocab_write(w, dir, n, GGUF_ARCH_QWEN2) == 0 && gguf_data_begin(w) == 0 ? 0 : -1;
        if (w && rc == 0) rc = gguf_commit(w);
        else gguf_abort(w);
        gt_file g;
        if (rc == 0 && ref && gt_read(out, &g, err, sizeof err) == 0) {
            char what[64];
            snprintf(what, sizeof what, "vocab %s", names[i]);
            cJSON_DeleteItemFromObjectCaseSensitive(ref, "tensors");
            cJSON_AddArrayToObject(ref, "tensors");
            compare(what, &g, ref, "tokenizer.");
            gt_free(&g);
        } else {
            CHECK(0, "vocab %s: %s", names[i], rc ? loom_error() : err);
        }
        cJSON_Delete(ref);
    }
}

static int same_bytes(const char *a, const char *b);

/* make_gguf.py's spm_folder: "llama2" / "mistral" a byte-fallback tokenizer.json (fixtures/tokenizers'
 * with gguf/spm/patch-<name>.json's fields put in; "llama2-defaults" llama2's with a tokenizer_config
 * that leaves bos/eos/unk_token to LlamaTokenizer's class defaults), "spm" gguf/spm/tokenizer.model, "spm-json" both
 * (tokenizer.model and llama2's tokenizer.json, as a Llama 2 folder); each with its tokenizer_config
 * and the llama fixture's config.json */
static int spm_folder(const char *fix, const char *name, const char *dst)
{
    char p[4200], q[4200];
    mkdir(dst, 0755);
    int spm = strncmp(name, "spm", 3) == 0, defaults = strcmp(name, "llama2-defaults") == 0, rc = 0;
    const char *base = spm || defaults ? "llama2" : name;
    snprintf(p, sizeof p, "%s/gguf/spm/tokenizer_config-%s.json", fix, defaults ? name : base);
    snprintf(q, sizeof q, "%s/tokenizer_config.json", dst);
    rc |= copy_file(p, q);
    snprintf(p, sizeof p, "%s/hf/llama/config.json", fix);
    snprintf(q, sizeof q, "%s/config.json", dst);
    rc |= copy_file(p, q);
    if (spm) {
        snprintf(p, sizeof p, "%s/gguf/spm/tokenizer.model", fix);
        snprintf(q, sizeof q, "%s/tokenizer.model", dst);
        rc |= copy_file(p, q);
        if (strcmp(name, "spm") == 0) return rc;
    }
    snprintf(p, sizeof p, "%s/tokenizers/%s.json", fix, base);
    cJSON *t = read_json(p), *e;
    snprintf(p, sizeof p, "%s/gguf/spm/patch-%s.json", fix, base);
    cJSON *patch = read_json(p);
    if (!t || !patch) rc = -1;
    cJSON_ArrayForEach(e, patch) if (t) cJSON_ReplaceItemInObjectCaseSensitive(t, e->string, cJSON_Duplicate(e, 1));
    char *txt = t ? cJSON_PrintUnformatted(t) : NULL;
    snprintf(q, sizeof q, "%s/tokenizer.json", dst);
    FILE *f = txt ? fopen(q, "wb") : NULL;
    if (!f || fputs(txt, f) < 0) rc = -1;
    if (f && fclose(f)) rc = -1;
    free(txt);
    cJSON_Delete(t);
    cJSON_Delete(patch);
    return rc;
}

/* tokenizer.ggml.tokens' count in a digest */
static int digest_tokens(const cJSON *ref)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(ref, "kv"))
        if (strcmp(cJSON_GetArrayItem(e, 0)->valuestring, "tokenizer.ggml.tokens") == 0) return cJSON_GetArrayItem(cJSON_GetArrayItem(e, 2), 1)->valueint;
    return 0;
}

/* the tokenizer keys of dir (a Llama model's, vocab n) alone in out; 0 when written */
static int vocab_file(const char *dir, int n, const char *out)
{
    gguf_writer *w = gguf_create(out, 32);
    int rc = w && gguf_vocab_write(w, dir, n, GGUF_ARCH_LLAMA) == 0 && gguf_data_begin(w) == 0 ? 0 : -1;
    if (w && rc == 0) return gguf_commit(w);
    gguf_abort(w);
    return -1;
}

/* loom's ids for text.txt with the tokenizer at spec (NULL + a failed check when it cannot) */
static int32_t *spm_encode(const char *spec, const char *text, size_t n, size_t *count)
{
    tokenizer *t = tokenizer_open(spec);
    int32_t *ids = t ? tokenizer_encode_alloc(t, text, n, count) : NULL;
    CHECK(ids != NULL, "%s: %s", spec, loom_error());
    tokenizer_free(t);
    return ids;
}

/* SentencePiece-style vocabularies (tokenizer.ggml.model "llama"): loom's keys equal the converter's
 * (--vocab-only through the Llama converter); imported back (gguf_vocab_to_hf) they export to the
 * same bytes, and the imported tokenizer gives the ids of the original on text.txt (llama2,
 * llama2-defaults and mistral: the tokenizers library's, tokenizers/<name>.ids; spm, spm-json: loom's own on
 * tokenizer.model; spm-json's import is read through the tokenizer.json it writes beside it) */
static void test_spm_vocabs(const char *fix, const char *tmp)
{
    static const char *const names[] = {"llama2", "llama2-defaults", "mistral", "spm", "spm-json"};
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizers/text.txt", fix);
    size_t tn = 0;
    char *text = check_read_file(tp, &tn);
    CHECK(text != NULL, "no %s", tp);
    for (size_t i = 0; text && i < sizeof names / sizeof names[0]; i++) {
        char dir[4000], back[4000], p[4200], out[4300], again[4300], err[512], what[64];
        snprintf(dir, sizeof dir, "%s/spmv_%s", tmp, names[i]);
        snprintf(back, sizeof back, "%s/spmb_%s", tmp, names[i]);
        snprintf(what, sizeof what, "vocab %s", names[i]);
        CHECK(spm_folder(fix, names[i], dir) == 0, "%s: fixture folder", what);
        snprintf(p, sizeof p, "%s/gguf/vocab-%s.json", fix, names[i]);
        cJSON *ref = read_json(p);
        int n = digest_tokens(ref);
        CHECK(ref && n > 0, "%s: no digest or no tokens in it", p);
        snprintf(out, sizeof out, "%s/vocab-%s.gguf", tmp, names[i]);
        gt_file g;
        if (vocab_file(dir, n, out) || !ref || gt_read(out, &g, err, sizeof err)) {
            CHECK(0, "%s: %s", what, loom_error());
            cJSON_Delete(ref);
            continue;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ref, "tensors");
        cJSON_AddArrayToObject(ref, "tensors");
        compare(what, &g, ref, "tokenizer.");
        gt_free(&g);
        cJSON_Delete(ref);
        /* back to tokenizer files (config.json takes the special ids, as an import's does), and out again */
        mkdir(back, 0755);
        snprintf(p, sizeof p, "%s/config.json", back);
        FILE *cf = fopen(p, "w");
        if (cf) { fputs("{}\n", cf); fclose(cf); }
        gguf_file *f = gguf_open(out);
        CHECK(f && gguf_vocab_to_hf(f, back) == 0, "%s: import: %s", what, loom_error());
        gguf_close(f);
        snprintf(again, sizeof again, "%s/vocab-%s-again.gguf", tmp, names[i]);
        CHECK(vocab_file(back, n, again) == 0, "%s: export of the import: %s", what, loom_error());
        CHECK(same_bytes(out, again), "%s: the export of the import differs from the file imported", what);
        size_t ng = 0, nw = 0;
        int32_t *got = spm_encode(back, text, tn, &ng), *want = NULL;
        if (i < 3) { /* the library's ids, little-endian uint16 (llama2-defaults: llama2's tokenizer.json) */
            snprintf(p, sizeof p, "%s/tokenizers/%s.ids", fix, i == 1 ? "llama2" : names[i]);
            unsigned char *raw = (unsigned char *)check_read_file(p, &nw);
            nw /= 2;
            want = raw ? malloc((nw + 1) * sizeof *want) : NULL;
            for (size_t k = 0; want && k < nw; k++) want[k] = raw[2 * k] | raw[2 * k + 1] << 8;
            free(raw);
        } else {
            snprintf(p, sizeof p, "%s/gguf/spm/tokenizer.model", fix);
            want = spm_encode(p, text, tn, &nw);
        }
        size_t first = 0;
        while (got && want && first < ng && first < nw && got[first] == want[first]) first++;
        CHECK(got && want && ng == nw && first == ng, "%s: the imported tokenizer gives %zu ids, the original %zu; first "
              "difference at %zu", what, ng, nw, first);
        free(got);
        free(want);
    }
    free(text);
}

/* a whole model with the SentencePiece tokenizer (the mistral fixture + gguf/spm/tokenizer.model, as
 * make_gguf.py converted it): HF folder -> loom -> GGUF equal to the converter's, then the GGUF ->
 * loom (tokenizer.model written back) -> GGUF the same bytes */
static void test_spm_model(const char *fix, const char *tmp)
{
    char src[4000], p[4400], q[4400], imp[4000], out[4000], back[4000], again[4000], err[512];
    snprintf(src, sizeof src, "%s/src_mistral_spm", tmp);
    CHECK(spm_folder(fix, "spm", src) == 0, "mistral-spm: fixture folder");
    for (int i = 0; i < 2; i++) {
        const char *f = i ? "model.safetensors" : "config.json";
        snprintf(p, sizeof p, "%s/hf/mistral/%s", fix, f);
        snprintf(q, sizeof q, "%s/%s", src, f);
        CHECK(copy_file(p, q) == 0, "copy %s", p);
    }
    snprintf(imp, sizeof imp, "%s/imp_mistral_spm", tmp);
    snprintf(out, sizeof out, "%s/mistral-spm-f32.gguf", tmp);
    if (import_hf(src, imp)) { CHECK(0, "import %s: %s", src, loom_error()); return; }
    export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = GGUF_F32};
    if (export_hf(&o)) { CHECK(0, "mistral-spm: export: %s", loom_error()); return; }
    snprintf(p, sizeof p, "%s/gguf/mistral-spm-f32.json", fix);
    cJSON *ref = read_json(p);
    gt_file g;
    if (ref && gt_read(out, &g, err, sizeof err) == 0) {
        compare("mistral-spm f32", &g, ref, NULL);
        gt_free(&g);
    } else {
        CHECK(0, "mistral-spm: %s", ref ? err : "no digest");
    }
    cJSON_Delete(ref);
    snprintf(back, sizeof back, "%s/back_mistral_spm", tmp);
    snprintf(again, sizeof again, "%s/again_mistral_spm.gguf", tmp);
    o.ckpt = back;
    o.out_dir = again;
    CHECK(import_gguf(out, back) == 0 && export_hf(&o) == 0, "mistral-spm: import, export: %s", loom_error());
    CHECK(same_bytes(out, again), "mistral-spm: the export of the import differs from the file imported");
    snprintf(p, sizeof p, "%s/tokenizer.model", back);
    CHECK(access(p, R_OK) == 0, "mistral-spm: the import has no tokenizer.model beside it");
    tokenizer *t = tokenizer_open(back);
    CHECK(t && strcmp(tokenizer_kind(t), "sentencepiece") == 0 && tokenizer_vocab(t) == 270,
          "mistral-spm: the import's tokenizer: %s", t ? tokenizer_kind(t) : loom_error());
    tokenizer_free(t);
}

/* LoRA adapters with make_gguf.py's lora_value() weights, in loom's layout */
typedef struct lora_src {
    const hf_loom_tensor *t;
    int n;
    float buf[64 * 64];
} lora_src;

static const float *lora_get(void *ctx, const char *name)
{
    static const char *const stems[8] = {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc", "mlp.gate", "mlp.up", "mlp.down"};
    lora_src *s = ctx;
    int layer = -1, n = 0;
    char stem[32] = "", w[64];
    const char *lo = strstr(name, ".lora_");
    if (!lo || sscanf(name, "h.%d.%n", &layer, &n) != 1 || lo - (name + n) >= (long)sizeof stem || lo[7]) return NULL;
    memcpy(stem, name + n, (size_t)(lo - (name + n)));
    stem[lo - (name + n)] = '\0';
    char ab = lo[6];
    int target = -1;
    for (int t = 0; t < 8; t++)
        if (strcmp(stem, stems[t]) == 0) target = t;
    snprintf(w, sizeof w, "h.%d.%s.weight", layer, stem);
    for (int i = 0; i < s->n && target >= 0; i++) {
        if (strcmp(s->t[i].name, w) != 0) continue;
        int64_t out = s->t[i].shape[0], in = s->t[i].shape[1], numel = 2 * (ab == 'A' ? in : out), b = ab == 'B';
        for (int64_t k = 0; k < numel; k++) s->buf[k] = (float)((double)((7 * k + 13 * layer + 5 * target + 3 * b) % 17 - 8) / 64.0);
        return s->buf;
    }
    return NULL;
}

/* `--adapter`: loom's adapters as llama.cpp's convert_lora_to_gguf.py writes the PEFT adapter of the
 * same values (llama: B's q/k rows in loom's pair order; qwen2: in HF's halves) */
static void test_adapters(const char *fix, const char *tmp)
{
    static const char *const aarchs[] = {"llama", "qwen2"}, *const atypes[] = {"f32", "q8_0"};
    for (int a = 0; a < 2; a++) {
        char dir[4096], p[4200], out[4300], err[512], what[64];
        snprintf(dir, sizeof dir, "%s/hf/%s", fix, aarchs[a]);
        hf_model *h = hf_open(dir);
        if (!h) { CHECK(0, "open %s: %s", dir, loom_error()); continue; }
        lora_src src;
        src.t = hf_tensors(h, &src.n);
        for (int t = 0; t < 2; t++) {
            snprintf(out, sizeof out, "%s/adapter-%s-%s.gguf", tmp, aarchs[a], atypes[t]);
            snprintf(what, sizeof what, "adapter %s %s", aarchs[a], atypes[t]);
            unsigned targets = 1u | 2u | 4u | 8u | 32u | 64u | 128u; /* q, k, v, o, gate, up, down */
            if (gguf_export_adapter(out, hf_model_json(h), dir, lora_get, &src, 2, 4.0f, targets,
                                    (gguf_type)gguf_type_parse(atypes[t]))) {
                CHECK(0, "%s: %s", what, loom_error());
                continue;
            }
            snprintf(p, sizeof p, "%s/gguf/adapter-%s-%s.json", fix, aarchs[a], atypes[t]);
            cJSON *ref = read_json(p);
            gt_file g;
            if (ref && gt_read(out, &g, err, sizeof err) == 0) {
                compare(what, &g, ref, NULL);
                gt_free(&g);
            } else {
                CHECK(0, "%s: %s", what, ref ? err : "no digest");
            }
            cJSON_Delete(ref);
        }
        hf_close(h);
    }
}

static int same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* `loom import` of the files test_reference exported (so of files equal to llama.cpp's), exported
 * again in the same type: bitwise the same file, keys, tokenizer and tensors (q8_0 included:
 * requantizing q * d gives back d and q); llama's llama3 RoPE scaling comes back from rope_freqs.weight
 * (factor 8, low 1, high 4, original context 16: the same factors). */
static void test_import(const char *tmp)
{
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            char src[4200], imp[4200], out[4300], what[64];
            snprintf(src, sizeof src, "%s/%s-%s.gguf", tmp, archs[a], types[t]);
            snprintf(imp, sizeof imp, "%s/back_%s-%s", tmp, archs[a], types[t]);
            snprintf(out, sizeof out, "%s/again_%s-%s.gguf", tmp, archs[a], types[t]);
            snprintf(what, sizeof what, "import %s %s", archs[a], types[t]);
            if (import_gguf(src, imp)) { CHECK(0, "%s: %s", what, loom_error()); continue; }
            export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = (gguf_type)gguf_type_parse(types[t])};
            CHECK(export_hf(&o) == 0, "%s: export again: %s", what, loom_error());
            CHECK(same_bytes(src, out), "%s: the export of the import differs from the file imported", what);
        }
    char src[4200], imp[4200], out[4300];
    snprintf(src, sizeof src, "%s/qwen2-chat-f32.gguf", tmp);
    snprintf(imp, sizeof imp, "%s/back_chat", tmp);
    snprintf(out, sizeof out, "%s/again_chat.gguf", tmp);
    export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = GGUF_F32};
    CHECK(import_gguf(src, imp) == 0 && export_hf(&o) == 0, "qwen2-chat import, export: %s", loom_error());
    CHECK(same_bytes(src, out), "qwen2-chat: the export of the import differs (tokenizer, chat template)");
}

/* a copy of src with n bytes at the first occurrence of `find` + off replaced by `put` (or cut
 * to `cut` bytes); 0 when done */
static int lie(const char *src, const char *dst, const char *find, size_t flen, long off, const void *put, size_t n, long cut)
{
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)size);
    size_t got = fread(b, 1, (size_t)size, f);
    fclose(f);
    int rc = got == (size_t)size ? 0 : -1;
    if (rc == 0 && find) {
        unsigned char *at = NULL;
        for (long i = 0; !at && i + (long)flen <= size; i++)
            if (memcmp(b + i, find, flen) == 0) at = b + i;
        if (!at || at - b + off + (long)n > size) rc = -1;
        else memcpy(at + off, put, n);
    }
    FILE *o = rc == 0 ? fopen(dst, "wb") : NULL;
    if (o) { rc = fwrite(b, 1, cut ? (size_t)cut : (size_t)size, o) > 0 ? 0 : -1; fclose(o); }
    free(b);
    return o ? rc : -1;
}

/* lying and truncated GGUFs: one line naming the file and the field, no checkpoint, no temporary folder */
static void test_lying(const char *tmp)
{
    char src[4200], bad[4200], imp[4200], tf[4300];
    snprintf(src, sizeof src, "%s/qwen2-f32.gguf", tmp);
    snprintf(bad, sizeof bad, "%s/lie.gguf", tmp);
    snprintf(imp, sizeof imp, "%s/lie_imp", tmp);
    snprintf(tf, sizeof tf, "%s.gguf-import", imp);
    const uint64_t huge = (uint64_t)1 << 40;
    const uint32_t f32type = 6, q4_0 = 2;
    const uint64_t far = (uint64_t)1 << 30;
    const char name[] = "blk.0.attn_q.weight";
    struct { const char *why, *find; size_t flen; long off; const void *put; size_t n; long cut; const char *want; } cases[] = {
        {"truncated in the data", NULL, 0, 0, NULL, 0, 60000, "lies outside the file"},
        {"truncated in the keys", NULL, 0, 0, NULL, 0, 100, "runs past the end"},
        {"magic", "GGUF", 4, 0, "GGUX", 4, 0, "not a GGUF file (magic)"},
        {"key count", "GGUF", 4, 16, &huge, 8, 0, "not a real count"},
        {"string length", "general.architecture", 20, -8, &huge, 8, 0, "key 0 runs past the end"},
        {"architecture", "\x05\0\0\0\0\0\0\0qwen2", 13, 8, "qwenX", 5, 0, "general.architecture 'qwenX'"},
        {"key type", "qwen2.block_count", 17, 17, &f32type, 4, 0, "key qwen2.block_count has value type 6"},
        {"tensor type", name, sizeof name - 1, (long)sizeof name - 1 + 4 + 16, &q4_0, 4, 0, "ggml type 2 is not one loom reads"},
        {"tensor offset", name, sizeof name - 1, (long)sizeof name - 1 + 4 + 16 + 4, &far, 8, 0, "blk.0.attn_q.weight: data at offset"},
        {"tensor shape", name, sizeof name - 1, (long)sizeof name - 1 + 4, "\x10\0\0\0\0\0\0\0\x40", 9, 0, "blk.0.attn_q.weight has shape [16, 64]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (lie(src, bad, cases[i].find, cases[i].flen, cases[i].off, cases[i].put, cases[i].n, cases[i].cut)) {
            CHECK(0, "could not make the lying file '%s'", cases[i].why);
            continue;
        }
        CHECK(import_gguf(bad, imp) != 0, "%s: imported", cases[i].why);
        CHECK(strstr(loom_error(), "lie.gguf") && strstr(loom_error(), cases[i].want) && !strchr(loom_error(), '\n'),
              "%s: message '%s' (want '%s')", cases[i].why, loom_error(), cases[i].want);
        CHECK(access(imp, F_OK) != 0 && access(tf, F_OK) != 0, "%s: a checkpoint or temporary folder left", cases[i].why);
    }
}

/* a lying SentencePiece-style GGUF (test_spm_model's): scores stored as int32, no <unk> token */
static void test_spm_lying(const char *tmp)
{
    char src[4200], bad[4200], imp[4200], tf[4300];
    snprintf(src, sizeof src, "%s/mistral-spm-f32.gguf", tmp);
    snprintf(bad, sizeof bad, "%s/lie_spm.gguf", tmp);
    snprintf(imp, sizeof imp, "%s/lie_spm_imp", tmp);
    snprintf(tf, sizeof tf, "%s.gguf-import", imp);
    const uint32_t i32 = 5;
    struct { const char *why, *find; size_t flen; long off; const void *put; size_t n; const char *want; } cases[] = {
        {"scores of int32", "tokenizer.ggml.scores", 21, 21 + 4, &i32, 4, "key tokenizer.ggml.scores is an array of type 5, not of float32"},
        {"no <unk>", "\x05\0\0\0\0\0\0\0<unk>", 13, 12, "x", 1, "a SentencePiece vocabulary without an <unk> token"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (lie(src, bad, cases[i].find, cases[i].flen, cases[i].off, cases[i].put, cases[i].n, 0)) {
            CHECK(0, "could not make the lying file '%s'", cases[i].why);
            continue;
        }
        CHECK(import_gguf(bad, imp) != 0, "%s: imported", cases[i].why);
        CHECK(strstr(loom_error(), "lie_spm.gguf") && strstr(loom_error(), cases[i].want) && !strchr(loom_error(), '\n'),
              "%s: message '%s' (want '%s')", cases[i].why, loom_error(), cases[i].want);
        CHECK(access(imp, F_OK) != 0 && access(tf, F_OK) != 0, "%s: a checkpoint or temporary folder left", cases[i].why);
    }
}

/* rope_freqs.weight of factors no llama3 scaling gives (the llama fixture's [f0, 8, 8, 8] made
 * [f0, 7, 8, 8]): refused, naming the tensor, nothing left */
static void test_rope_lying(const char *tmp)
{
    char src[4200], bad[4200], imp[4200], tf[4300];
    snprintf(src, sizeof src, "%s/llama-f32.gguf", tmp);
    snprintf(bad, sizeof bad, "%s/lie_rope.gguf", tmp);
    snprintf(imp, sizeof imp, "%s/lie_rope_imp", tmp);
    snprintf(tf, sizeof tf, "%s.gguf-import", imp);
    const float seven = 7.0f;
    CHECK(lie(src, bad, "\0\0\0\x41\0\0\0\x41\0\0\0\x41", 12, 0, &seven, 4, 0) == 0, "could not make the lying rope_freqs");
    CHECK(import_gguf(bad, imp) != 0, "rope_freqs of no llama3 scaling: imported");
    CHECK(strstr(loom_error(), "lie_rope.gguf: tensor rope_freqs.weight: no llama3 RoPE scaling") != NULL, "message: %s", loom_error());
    CHECK(access(imp, F_OK) != 0 && access(tf, F_OK) != 0, "rope_freqs: a checkpoint or temporary folder left");
}

/* llama3 scaling back from the factors of Llama 3.1 (factor 8) and 3.2 (32): head dim 128, theta
 * 500000, low 1, high 4, original context 8192, as their config.json have it */
static void test_llama3_params(void)
{
    static const double factor[] = {8, 32};
    for (int k = 0; k < 2; k++) {
        hf_dims d;
        memset(&d, 0, sizeof d);
        d.d_model = 2048, d.n_head = 16, d.head_dim = 128, d.rope_theta = 500000, d.llama3 = 1;
        d.rope_factor = factor[k], d.rope_low = 1, d.rope_high = 4, d.rope_original_max_seq = 8192;
        float fr[64];
        gguf_rope_freqs(&d, fr);
        d.rope_factor = d.rope_low = d.rope_high = 0, d.rope_original_max_seq = 0;
        CHECK(gguf_llama3_params(&d, fr, 64) == 0 && d.rope_factor == factor[k] && d.rope_low == 1 && d.rope_high == 4 &&
                  d.rope_original_max_seq == 8192,
              "llama3 factor %g: back as %g / %g / %g / %d", factor[k], d.rope_factor, d.rope_low, d.rope_high, d.rope_original_max_seq);
    }
}

/* nothing but `keep` in dir: a failed export left no file, temporary or final */
static int only_file(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && (!keep || strcmp(e->d_name, keep) != 0)) n++;
    if (d) closedir(d);
    return n == 0;
}

static void test_bad(const char *fix, const char *tmp)
{
    char out_dir[4096], out[4200], imp[4200], src[4200];
    snprintf(out_dir, sizeof out_dir, "%s/bad", tmp);
    mkdir(out_dir, 0755);
    snprintf(out, sizeof out, "%s/x.gguf", out_dir);
    /* no architecture llama.cpp has (rmsnorm + gelu): the field named, no file */
    static const char *const odd = "{\"vocab\":272,\"d_model\":32,\"n_layer\":1,\"n_head\":4,\"n_kv_head\":4,\"d_ff\":64,"
                                   "\"max_seq\":16,\"norm\":\"rmsnorm\",\"mlp\":\"gelu\",\"positions\":\"learned\"}";
    CHECK(gguf_export(out, odd, "odd.h5", NULL, NULL, NULL, GGUF_F32, NULL) != 0, "an unknown architecture exported");
    CHECK(strstr(loom_error(), "odd.h5: model.norm/mlp/positions") && strstr(loom_error(), "rmsnorm/gelu/learned"), "message: %s", loom_error());
    CHECK(only_file(out_dir, NULL), "an unknown architecture left a file");
    /* a tokenizer GGUF has no form for (the HF fixture's own WordLevel): fails after the temporary
     * file exists, which must go too */
    snprintf(imp, sizeof imp, "%s/imp_wordlevel", tmp);
    snprintf(src, sizeof src, "%s/hf/llama", fix);
    CHECK(import_hf(src, imp) == 0, "import %s: %s", src, loom_error());
    export_options o = {.ckpt = imp, .out_dir = out, .gguf = 1, .gguf_type = GGUF_F16};
    CHECK(export_hf(&o) != 0, "a WordLevel tokenizer exported");
    CHECK(strstr(loom_error(), "tokenizer.json") && strstr(loom_error(), "model.type"), "message: %s", loom_error());
    CHECK(only_file(out_dir, NULL), "a failed export left a file");
    /* an output folder that cannot take the file: none is made, the message names it */
    snprintf(imp, sizeof imp, "%s/imp_qwen2", tmp);
    o.ckpt = imp;
    o.out_dir = "/proc/loom-test.gguf";
    CHECK(export_hf(&o) != 0, "a GGUF written into /proc");
    CHECK(strstr(loom_error(), "/proc/loom-test.gguf") != NULL, "message: %s", loom_error());
    CHECK(access("/proc/loom-test.gguf", F_OK) != 0, "a file in /proc");
    /* the one that works, into the same folder: only the final file is left */
    o.out_dir = out;
    CHECK(export_hf(&o) == 0, "export: %s", loom_error());
    CHECK(only_file(out_dir, "x.gguf"), "a temporary file left beside the export");
    CHECK(gguf_type_parse("q4_k") < 0 && gguf_type_parse("q8_0") == GGUF_Q8_0, "type names");
    /* GPT-2's adapters would need its fused attn_qkv: refused, naming the model's file, no file */
    static const char *const gpt2 = "{\"vocab\":272,\"d_model\":32,\"n_layer\":1,\"n_head\":4,\"n_kv_head\":4,\"d_ff\":128,"
                                    "\"max_seq\":16,\"norm\":\"layernorm\",\"mlp\":\"gelu\",\"positions\":\"learned\"}";
    snprintf(out, sizeof out, "%s/ad.gguf", out_dir);
    CHECK(gguf_export_adapter(out, gpt2, "g.h5", lora_get, NULL, 2, 4.0f, 1u, GGUF_F32) != 0, "GPT-2 adapter exported");
    CHECK(strstr(loom_error(), "g.h5: GGUF LoRA adapters of GPT-2") != NULL, "message: %s", loom_error());
    CHECK(access(out, F_OK) != 0, "a GPT-2 adapter file left");
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: test_gguf FIXTURES_DIR TMP_DIR\n"); return 2; }
    log_set_quiet(1);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", argv[2], argv[2]);
    if (system(cmd) != 0) return 2;
    test_formats();
    test_reference(argv[1], argv[2]);
    test_chat(argv[1], argv[2]);
    test_vocabs(argv[1], argv[2]);
    test_spm_vocabs(argv[1], argv[2]);
    test_spm_model(argv[1], argv[2]);
    test_adapters(argv[1], argv[2]);
    test_import(argv[2]);
    test_lying(argv[2]);
    test_spm_lying(argv[2]);
    test_rope_lying(argv[2]);
    test_llama3_params();
    test_bad(argv[1], argv[2]);
    if (failures == 0) printf("test_gguf: ok (5 families x 4 types, qwen2-chat, 4 + 4 SentencePiece-style tokenizers, mistral with tokenizer.model, "
                              "2 x 2 LoRA adapters equal to llama.cpp's converters; import round trips)\n");
    return failures != 0;
}
