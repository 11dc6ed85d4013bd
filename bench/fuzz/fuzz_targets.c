/* fuzz_targets.c: the fuzz entry points of fuzz_targets.h over loom's real parsers. Scratch
 * files live in $LOOM_FUZZ_TMP (default /dev/shm or /tmp), named by pid, removed after each run.
 * Must never keep state between inputs (a crash must replay from its input alone). */
#include "fuzz_targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/gguf.h"
#include "checkpoints/hf.h"
#include "checkpoints/needle.h"
#include "checkpoints/safetensors.h"
#include "core/text/chat.h"
#include "core/config/config.h"
#include "core/text/sft_data.h"
#include "core/text/tokenizer.h"
#include "core/text/toolcall.h"

#include <utf8proc.h>

/* data as a NUL-terminated string (malloc'd; NULL on OOM). */
static char *fuzz_str(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

/* A scratch path for this process: dir/loom-fuzz-<pid>.<ext>. */
static void fuzz_scratch(char *path, size_t len, const char *ext)
{
    const char *dir = getenv("LOOM_FUZZ_TMP");
    if (!dir || !dir[0]) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, len, "%s/loom-fuzz-%d.%s", dir, (int)getpid(), ext);
}

static int fuzz_write(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return (fclose(f) != 0 || w != n) ? -1 : 0;
}

/* data written to this process's scratch file with extension ext (its path in path). */
static int fuzz_to_scratch(char *path, size_t len, const char *ext, const uint8_t *data, size_t n)
{
    fuzz_scratch(path, len, ext);
    return fuzz_write(path, data, n);
}

int fuzz_config(const uint8_t *data, size_t n)
{
    char *s = fuzz_str(data, n);
    if (!s) return 0;
    size_t first = strlen(s); /* text up to the first NUL is the file, the rest one override */
    const char *override = first < n ? s + first + 1 : NULL;
    job_config *cfg = malloc(sizeof *cfg);
    if (cfg && config_load_string(cfg, s, "fuzz.json", override ? &override : NULL, override ? 1 : 0) == 0) {
        /* what a loaded config goes through next: validation and the round trip to JSON */
        config_validate(cfg);
        char *json = config_to_json(cfg), *mj = config_model_to_json(&cfg->model);
        model_config back;
        if (mj && config_model_from_json(&back, mj) == 0 && config_model_diff(&back, &cfg->model))
            abort(); /* the model config must survive its own JSON: a checkpoint relies on it */
        free(json);
        free(mj);
    }
    free(cfg);
    free(s);
    return 0;
}

/* loom's format on the byte tokenizer (stateless: opened once, never changes) */
static const chat_template *fuzz_chat(void)
{
    static chat_template ct;
    static tokenizer *tok;
    if (!tok && ((tok = tokenizer_open("byte")) == NULL || chat_template_init(&ct, tok, "loom"))) abort();
    return &ct;
}

/* Needle's format on the committed Needle SentencePiece model (stateless, as fuzz_chat). */
static const chat_template *fuzz_needle_chat(void)
{
    static chat_template ct;
    static tokenizer *tok;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/needle/needle.model", LOOM_SOURCE_DIR);
    if (!tok && ((tok = tokenizer_open(path)) == NULL || chat_template_init(&ct, tok, "needle"))) abort();
    return &ct;
}

/* Each line on its own through chat.h on template ct, as `loom sample` and the evaluator use it. */
static void fuzz_chat_lines(const chat_template *ct, const char *s, int flags)
{
    int32_t tokens[512];
    uint8_t mask[512];
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        sft_example ex;
        if (chat_example_parse(p, len, &ex, flags) == 0) {
            if (ex.answers_json) chat_render(ct, &ex, tokens, mask, 512);
            chat_render_prompt(ct, &ex, tokens, 512);
            chat_example_free(&ex);
        }
        p += len + (e ? 1 : 0);
    }
}

int fuzz_jsonl(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    char *s = fuzz_str(data + 1, n - 1);
    if (!s) return 0;
    int needle = data[0] & 8;
    const chat_template *ct = needle ? fuzz_needle_chat() : fuzz_chat();
    fuzz_chat_lines(ct, s, ((data[0] & 2) ? CHAT_PARSE_PROMPT_ONLY : 0) | (needle ? CHAT_PARSE_NEEDLE : 0));
    data_config dc;
    memset(&dc, 0, sizeof dc);
    fuzz_scratch(dc.train, sizeof dc.train, "jsonl");
    dc.val_split = (data[0] & 4) ? 0.25f : 0.0f;
    dc.max_len = 256;
    dc.skip_bad_lines = data[0] & 1;
    if (fuzz_write(dc.train, data + 1, n - 1) == 0) {
        sft_data d;
        if (sft_data_load(&d, &dc, ct, 1234) == 0) { /* reads the Needle way under its format */
            int32_t tok[2 * 256], tgt[2 * 256];
            sft_batch(&d, 1234, 0, 0, 2, d.T, tok, tgt);
            sft_data_free(&d);
        }
    }
    unlink(dc.train);
    free(s);
    return 0;
}

/* The fixed table fuzz_ckpt reads and fuzz_ckpt_seed writes: small, 0-d to 2-d. */
static const ckpt_tensor fuzz_table[] = {
    {"w", 2, {3, 4}, 0}, {"b", 1, {4}, 12}, {"s", 0, {0}, 16},
};
#define FUZZ_NT 3
#define FUZZ_NELEM 17

/* ckpt_inspect's report of each tensor, every field read (as `loom ckpt info` reads them). */
static void fuzz_ckpt_tensor(void *ctx, const ckpt_tensor_report *t)
{
    size_t *sum = ctx;
    *sum += strlen(t->name) + strlen(t->status) + (size_t)t->numel;
    for (int d = 0; d < t->ndim; d++) *sum += (size_t)t->shape[d];
}

int fuzz_ckpt(const uint8_t *data, size_t n)
{
    char path[512];
    if (fuzz_to_scratch(path, sizeof path, "h5", data, n) != 0) return 0;
    ckpt_reader *r = ckpt_open(path);
    if (r) {
        ckpt_state st;
        if (ckpt_read_state(r, &st) == 0) ckpt_state_free(&st);
        float buf[2][FUZZ_NELEM];
        ckpt_group g[2] = {{"model", fuzz_table, FUZZ_NT, buf[0], NULL, NULL}, {"optimizer/m", fuzz_table, FUZZ_NT, buf[1], NULL, NULL}};
        for (int i = 0; i < 2; i++)
            if (ckpt_has_group(r, g[i].path)) ckpt_read_group(r, &g[i]);
        ckpt_close(r);
        size_t sum = 0;
        ckpt_inspect_fns fns = {NULL, NULL, fuzz_ckpt_tensor};
        ckpt_inspect(path, &fns, &sum);
    }
    unlink(path);
    return 0;
}

int fuzz_ckpt_seed(const char *path)
{
    float data[FUZZ_NELEM];
    for (int i = 0; i < FUZZ_NELEM; i++) data[i] = 0.25f * (float)i - 1.0f;
    ckpt_group g[2] = {{"model", fuzz_table, FUZZ_NT, data, NULL, NULL}, {"optimizer/m", fuzz_table, FUZZ_NT, data, NULL, NULL}};
    ckpt_state st = {0};
    st.step = 7;
    st.model_config_json = "{\"preset\":\"tiny\"}";
    st.job_config_json = "{}";
    st.world_size = 1;
    st.backend = "cpu";
    /* ckpt_save names the file itself: save into a scratch dir, then move it to `path` */
    char dir[600], file[700];
    snprintf(dir, sizeof dir, "%s.d", path);
    if (ckpt_save(dir, &st, g, 2, 0) != 0) return -1;
    snprintf(file, sizeof file, "%s/step_00000007.h5", dir);
    int rc = rename(file, path);
    snprintf(file, sizeof file, "%s/latest", dir);
    unlink(file);
    rmdir(dir);
    return rc;
}

int fuzz_safetensors(const uint8_t *data, size_t n)
{
    char path[512];
    if (fuzz_to_scratch(path, sizeof path, "safetensors", data, n) != 0) return 0;
    st_file *f = st_open(path);
    if (f) { /* every tensor the header let through must convert without reading out of bounds */
        float buf[4096];
        for (int i = 0; i < f->ntensors; i++)
            if (f->t[i].numel <= 4096) st_read_f32(f, i, buf, f->t[i].numel);
        st_close(f);
    }
    unlink(path);
    return 0;
}

/* A Needle file: the first byte says which reader (even: a base checkpoint, whose every tensor up to
 * 4096 elements is read to fp32; odd: a LoRA adapter), the rest is the file. */
int fuzz_needle(const uint8_t *data, size_t n)
{
    char path[512];
    if (n < 1 || fuzz_to_scratch(path, sizeof path, "safetensors", data + 1, n - 1) != 0) return 0;
    if (data[0] & 1) {
        needle_adapter_close(needle_adapter_open(path));
    } else {
        needle_file *f = needle_open(path);
        if (f) {
            float buf[4096];
            for (int i = 0; i < needle_file_count(f); i++) {
                const st_tensor *t = needle_file_tensor(f, i);
                if (t->numel <= 4096) needle_file_read(f, i, buf, t->numel);
            }
            needle_close(f);
        }
    }
    unlink(path);
    return 0;
}

static const float *fuzz_st_fetch(void *ctx, int k)
{
    (void)k;
    return ctx;
}

int fuzz_safetensors_seed(const char *dir)
{
    static const float v[12] = {1, -2, 0.5f, 3, 1e-3f, -7, 65504, 1e-8f, 0, -0.0f, 2, 4};
    st_wtensor t[3] = {{"a.weight", 2, {3, 4}}, {"a.bias", 1, {4}}, {"s", 0, {0}}};
    return st_write_dir(dir, "model", ST_BF16, t, 3, fuzz_st_fetch, (void *)v, (uint64_t)1 << 30);
}

/* ---- GGUF ---- */

int fuzz_gguf(const uint8_t *data, size_t n)
{
    char path[512];
    if (fuzz_to_scratch(path, sizeof path, "gguf", data, n) != 0) return 0;
    gguf_file *g = gguf_open(path);
    if (g) { /* the keys an import reads, of each kind, and every tensor up to 4096 elements */
        const char *s, **ss;
        const void *iv;
        uint32_t u;
        float f;
        int b;
        size_t k;
        if (gguf_get_str(g, "general.architecture", &s) == 0) free((void *)s);
        if (gguf_get_strs(g, "tokenizer.ggml.tokens", &ss, &k) == 0) {
            for (size_t i = 0; i < k; i++) free((void *)ss[i]);
            free((void *)ss);
        }
        gguf_get_i32s(g, "tokenizer.ggml.token_type", &iv, &k);
        gguf_get_f32s(g, "tokenizer.ggml.scores", &iv, &k);
        gguf_get_u32(g, "llama.block_count", &u);
        gguf_get_f32(g, "llama.rope.freq_base", &f);
        gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b);
        for (size_t i = 0; i < gguf_n_tensors(g); i++) {
            const char *name = gguf_tensor_name(g, i);
            int nd;
            int64_t ne[4];
            gguf_type t;
            if (gguf_tensor_info(g, name, &nd, ne, &t) != 0) continue;
            uint64_t numel = 1;
            for (int d = 0; d < nd; d++) numel *= (uint64_t)ne[d];
            float buf[4096];
            if (numel <= 4096) gguf_tensor_read(g, name, buf, (size_t)numel);
        }
        gguf_close(g);
    }
    gguf_model_close(gguf_model_open(path)); /* the mapping onto loom's families */
    unlink(path);
    return 0;
}

int fuzz_gguf_seed(const char *path)
{
    static const float v[64] = {1, -2, 0.5f, 3, 1e-3f, -7, 65504, 1e-8f, 0, -0.0f, 2, 4, 100, -100, 0.25f, 9};
    static const char *const toks[] = {"a", "b", "<s>"};
    static const int32_t types[] = {1, 1, 3};
    const int64_t ne32[2] = {32, 2}, ne4[1] = {4};
    gguf_writer *w = gguf_create(path, 32);
    int rc = !w || gguf_kv_str(w, "general.architecture", "llama") || gguf_kv_u32(w, "llama.block_count", 1) ||
             gguf_kv_f32(w, "llama.rope.freq_base", 10000.0f) || gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", 1) ||
             gguf_kv_strs(w, "tokenizer.ggml.tokens", toks, 3) || gguf_kv_i32s(w, "tokenizer.ggml.token_type", types, 3) ||
             gguf_tensor_add(w, "q8", 2, ne32, GGUF_Q8_0) || gguf_tensor_add(w, "f16", 1, ne4, GGUF_F16) ||
             gguf_tensor_add(w, "bf16", 1, ne4, GGUF_BF16) || gguf_tensor_add(w, "f32", 1, ne4, GGUF_F32) ||
             gguf_data_begin(w) || gguf_put(w, v, 64) || gguf_put(w, v, 4) || gguf_put(w, v + 4, 4) ||
             gguf_put(w, v + 8, 4);
    if (rc) {
        if (w) gguf_abort(w);
        return -1;
    }
    return gguf_commit(w);
}

/* ---- tokenizers ---- */

/* Text every opened tokenizer.json encodes: ASCII words and digits, whitespace runs, accents,
 * CJK, an emoji, a lone surrogate's bytes (repaired) and the markers of the chat formats. */
static const char fuzz_text[] = "Hello world, 12345 tokens!\n\n  \tcafé naïve 東京 😀 \xED\xA0\x80 "
                                "<|im_start|>user<|im_end|> <tool_call>{\"a\": 1}</tool_call> "
                                "[INST] [TOOL_CALLS] <|eot_id|> <|endoftext|>";

/* A tool-calling example (a user turn, a call, the tool list) for the chat templates a fuzzed
 * file makes: rendered whole and as a prompt. */
static const char fuzz_example[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                   "{\"role\": \"assistant\", \"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}], "
                                   "\"tools\": [{\"name\": \"f\", \"parameters\": {}}]}";

/* ids must lie in the vocabulary and decode without overrunning out (cap bytes); out ends as
 * the decode with special tokens written, whose length it returns. */
static size_t fuzz_decode_check(const tokenizer *tok, const int32_t *ids, size_t n, char *out, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab(tok)) abort();
    tokenizer_decode(tok, ids, n, out, cap, 1);
    size_t w = tokenizer_decode(tok, ids, n, out, cap, 0);
    if (w >= cap || out[w] != '\0') abort();
    return w;
}

/* A Needle row (native form, tools as a string, a float) for the needle format. */
static const char fuzz_needle_row[] = "{\"query\": \"hi <tool_call>\", \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\", "
                                      "\"answers\": [{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}], \"reasoning\": \" r \"}";

/* An opened tokenizer: the fixed text encoded and decoded, the special ids, and the example
 * rendered in the chat format its markers pick (Needle's rows too under "needle"). */
static void fuzz_tok_use(tokenizer *tok)
{
    size_t count = 0;
    int32_t *ids = tokenizer_encode_alloc(tok, fuzz_text, sizeof fuzz_text - 1, &count);
    if (ids) {
        size_t cap = 64 * count + 64;
        char *out = malloc(cap);
        if (out) fuzz_decode_check(tok, ids, count, out, cap);
        free(out);
        free(ids);
    }
    tokenizer_special(tok, "<|im_end|>");
    tokenizer_bos(tok), tokenizer_eos(tok), tokenizer_eot(tok), tokenizer_pad(tok);
    chat_template ct;
    if (chat_template_init(&ct, tok, "") == 0) {
        fuzz_chat_lines(&ct, fuzz_example, 0);
        if (strcmp(ct.format, "needle") == 0) {
            fuzz_chat_lines(&ct, fuzz_example, CHAT_PARSE_NEEDLE);
            fuzz_chat_lines(&ct, fuzz_needle_row, CHAT_PARSE_NEEDLE);
        }
    }
}

int fuzz_spm(const uint8_t *data, size_t n)
{
    char path[512];
    if (fuzz_to_scratch(path, sizeof path, "model", data, n) != 0) return 0;
    tokenizer *tok = tokenizer_open(path);
    if (tok) {
        if (strcmp(tokenizer_kind(tok), "sentencepiece") != 0) abort(); /* a .model is one or refused */
        fuzz_tok_use(tok);
        tokenizer_free(tok);
    }
    unlink(path);
    return 0;
}

int fuzz_tokenizer(const uint8_t *data, size_t n)
{
    char path[512];
    if (fuzz_to_scratch(path, sizeof path, "tokenizer.json", data, n) != 0) return 0;
    tokenizer *tok = tokenizer_open(path);
    if (tok) {
        fuzz_tok_use(tok);
        tokenizer_free(tok);
    }
    unlink(path);
    return 0;
}

/* The committed tokenizers (tests/fixtures/tokenizers, and the demo's), each with the chat format
 * its model family uses ("" where its vocabulary lacks the format's markers) and whether its
 * decoding gives back any valid UTF-8 text exactly (byte-level BPE without a normalizer). */
static const struct fuzz_tok {
    const char *file, *format; /* file: from the source tree's root */
    int round_trip;
} fuzz_toks[] = {
    {"tests/fixtures/tokenizers/gpt2.json", "", 1},
    {"tests/fixtures/tokenizers/llama3.json", "llama3", 1},
    {"tests/fixtures/tokenizers/smollm2.json", "chatml", 1},
    {"tests/fixtures/tokenizers/qwen2.json", "qwen2.5", 0},
    {"tests/fixtures/tokenizers/llama2.json", "", 0},
    {"tests/fixtures/tokenizers/mistral.json", "mistral", 0},
    {"configs/demo-tokenizer.json", "loom", 1},
    {"tests/fixtures/needle/needle.model", "needle", 0},
};
#define FUZZ_NTOK ((int)(sizeof fuzz_toks / sizeof *fuzz_toks))

/* Opened once each (stateless: encoding never changes a tokenizer); NULL template when none. */
static tokenizer *fuzz_tok_open(int i, const chat_template **ct)
{
    static tokenizer *tok[FUZZ_NTOK];
    static chat_template cts[FUZZ_NTOK];
    static int has_ct[FUZZ_NTOK];
    if (!tok[i]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", LOOM_SOURCE_DIR, fuzz_toks[i].file);
        if (!(tok[i] = tokenizer_open(path))) abort();
        has_ct[i] = fuzz_toks[i].format[0] && chat_template_init(&cts[i], tok[i], fuzz_toks[i].format) == 0;
        if (fuzz_toks[i].format[0] && !has_ct[i]) abort();
    }
    *ct = has_ct[i] ? &cts[i] : NULL;
    return tok[i];
}

static int fuzz_utf8_valid(const uint8_t *s, size_t n)
{
    utf8proc_int32_t c;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* The answer generated calls are graded against (one call, as the shipped data has). */
static const cJSON *fuzz_answers(void)
{
    static cJSON *a;
    if (!a && !(a = cJSON_Parse("[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]")))
        abort();
    return a;
}

int fuzz_text_encode(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const chat_template *ct;
    int which = data[0] % FUZZ_NTOK;
    tokenizer *tok = fuzz_tok_open(which, &ct);
    const char *text = (const char *)data + 1;
    size_t len = n - 1, count = 0;
    int32_t *ids = tokenizer_encode_alloc(tok, text, len, &count);
    if (!ids) abort(); /* any bytes encode (bad UTF-8 is repaired): only out of memory fails */
    size_t cap = 3 * len + 64 * count + 64;
    char *out = malloc(cap);
    if (out) {
        size_t w = fuzz_decode_check(tok, ids, count, out, cap);
        if (fuzz_toks[which].round_trip && fuzz_utf8_valid(data + 1, len) && (w != len || memcmp(out, text, len) != 0))
            abort(); /* byte-level BPE loses nothing */
        free(out);
    }
    /* the text as a model's generation: its calls extracted and graded, as the evaluator does */
    char calls[4096];
    if (ct && chat_extract_calls(ct, ids, (int)(count < 4096 ? count : 4096), calls, sizeof calls) >= 0) {
        toolcall_grade g = toolcall_grade_text(calls, fuzz_answers());
        if (g.exact && (!g.names || !g.valid)) abort();
    }
    char *s = fuzz_str(data + 1, len);
    if (s) {
        cJSON *c = toolcall_parse(s);
        toolcall_grade g = toolcall_grade_text(s, fuzz_answers());
        if (g.valid != (c != NULL)) abort(); /* one parse decides validity */
        cJSON_Delete(c);
        free(s);
    }
    free(ids);
    return 0;
}

/* ---- Hugging Face model folders ---- */

/* The committed HF fixtures (tests/fixtures/hf) whose folders the target rebuilds around one
 * fuzzed file, and the files it fuzzes. */
static const char *const fuzz_hf_dirs[] = {"llama", "qwen2-chat", "gpt2", "mistral", "qwen3",
                                           "gpt2-sharded", "llama-sharded"};
#define FUZZ_NHF ((int)(sizeof fuzz_hf_dirs / sizeof *fuzz_hf_dirs))
static const char *const fuzz_hf_files[] = {"config.json", "tokenizer_config.json",
                                            "model.safetensors.index.json"};

/* The scratch folder dir and the files (links) in it, removed. */
static void fuzz_rmdir_flat(const char *dir)
{
    char path[4096];
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name), unlink(path);
    if (d) closedir(d);
    rmdir(dir);
}

int fuzz_hf_folder(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const char *fuzzed = fuzz_hf_files[data[0] % 3];
    char dir[512], path[4096], src[4096], from[8192];
    snprintf(src, sizeof src, "%s/tests/fixtures/hf/%s", LOOM_SOURCE_DIR, fuzz_hf_dirs[(data[0] / 3) % FUZZ_NHF]);
    fuzz_scratch(dir, sizeof dir, "hf");
    if (mkdir(dir, 0700) != 0) return 0;
    DIR *d = opendir(src);
    struct dirent *e;
    int ok = d != NULL;
    while (ok && (e = readdir(d))) /* the fixture's files, linked */
        if (e->d_name[0] != '.' && strcmp(e->d_name, fuzzed) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            snprintf(from, sizeof from, "%s/%s", src, e->d_name);
            ok = symlink(from, path) == 0;
        }
    if (d) closedir(d);
    snprintf(path, sizeof path, "%s/%s", dir, fuzzed);
    ok = ok && fuzz_write(path, data + 1, n - 1) == 0;
    if (ok) {
        hf_model *h = hf_open(dir);
        if (h) { /* every tensor the checks let through must read */
            int nt;
            const hf_loom_tensor *t = hf_tensors(h, &nt);
            for (int i = 0; i < nt; i++) {
                float *buf = malloc(t[i].numel * sizeof *buf);
                if (buf) hf_read(h, t[i].name, buf, t[i].numel);
                free(buf);
            }
            hf_close(h);
        }
        tokenizer *tok = tokenizer_open(dir);
        chat_template ct;
        if (tok && chat_template_init(&ct, tok, "") == 0) fuzz_chat_lines(&ct, fuzz_example, 0);
        tokenizer_free(tok);
    }
    fuzz_rmdir_flat(dir);
    return 0;
}

fuzz_target_fn fuzz_target_by_name(const char *name)
{
    if (strcmp(name, "hf") == 0) return fuzz_hf_folder;
    if (strcmp(name, "tokenizer") == 0) return fuzz_tokenizer;
    if (strcmp(name, "spm") == 0) return fuzz_spm;
    if (strcmp(name, "text") == 0) return fuzz_text_encode;
    if (strcmp(name, "safetensors") == 0) return fuzz_safetensors;
    if (strcmp(name, "needle") == 0) return fuzz_needle;
    if (strcmp(name, "config") == 0) return fuzz_config;
    if (strcmp(name, "jsonl") == 0) return fuzz_jsonl;
    if (strcmp(name, "ckpt") == 0) return fuzz_ckpt;
    if (strcmp(name, "gguf") == 0) return fuzz_gguf;
    return NULL;
}
