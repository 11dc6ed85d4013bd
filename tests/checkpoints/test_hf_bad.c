/* test_hf_bad.c: lying Hugging Face folders and safetensors files, each refused by hf_open with
 * one line naming the file (and tensor), never a crash or a huge allocation: no config.json, an
 * unknown model_type, header length / offsets that lie (overlap, past the end, overflow), a
 * truncated file, an unknown dtype, a shape disagreeing with config.json, a missing or an extra
 * tensor, an index naming a missing shard; a streamed write pushing the wrong number of values.
 * Arguments: the fixtures folder, a scratch folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/hf.h"
#include "tests/check.h"

static char scratch[2048];

static void put(const char *dir, const char *name, const void *data, size_t n)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) { fwrite(data, 1, n, f); fclose(f); }
}

/* A folder `name` with a config.json and a model.safetensors of header `hdr` + `data` bytes of
 * zeros (hlen_override != 0 replaces the header length). */
static const char *folder(const char *name, const char *config, const char *hdr, size_t data, uint64_t hlen_override)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", scratch, name);
    mkdir(dir, 0755);
    if (config) put(dir, "config.json", config, strlen(config));
    if (hdr) {
        size_t hl = strlen(hdr), n = 8 + hl + data;
        unsigned char *b = calloc(1, n);
        uint64_t L = hlen_override ? hlen_override : hl;
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(L >> (8 * i));
        memcpy(b + 8, hdr, hl);
        put(dir, "model.safetensors", b, n);
        free(b);
    }
    return dir;
}

static void refused(const char *dir, const char *want)
{
    hf_model *h = hf_open(dir);
    CHECK(h == NULL, "%s: accepted", dir);
    hf_close(h);
    const char *e = loom_error();
    CHECK(strchr(e, '\n') == NULL && strstr(e, want) != NULL, "%s: message '%s' lacks '%s'", dir, e, want);
    printf("refused: %s\n", e);
}

/* A one-layer tiny Llama config and its tensors' header entries. */
#define CFG "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":4,\"hidden_size\":4," \
            "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"intermediate_size\":4," \
            "\"tie_word_embeddings\":true}"

static void bad_safetensors(void)
{
    refused(folder("hlen_huge", CFG, "{}", 0, (uint64_t)1 << 60), "header length");
    refused(folder("hlen_past", CFG, "{}", 0, 4000), "header length");
    refused(folder("not_json", CFG, "{not json", 0, 0), "not a JSON object");
    refused(folder("past_end", CFG, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0), "past the end");
    refused(folder("overlap", CFG,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, 0), "overlaps");
    refused(folder("overflow", CFG,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", 16, 0), "overflows");
    refused(folder("negative", CFG, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", 16, 0), "byte range");
    refused(folder("wrong_size", CFG, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 16, 0), "bytes for");
    refused(folder("dtype", CFG, "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, 0), "unsupported dtype 'I64'");
    refused(folder("dup", CFG,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0), "twice");
    refused(folder("short", CFG, NULL, 0, 0), "no model.safetensors");
    const char *d = folder("tiny_file", CFG, NULL, 0, 0);
    put(d, "model.safetensors", "abc", 3);
    refused(d, "too short");
}

static void bad_folders(const char *fixtures)
{
    refused(folder("no_config", NULL, "{}", 0, 0), "no config.json");
    refused(folder("unknown_type", "{\"model_type\":\"bert\",\"architectures\":[\"BertForMaskedLM\"]}", "{}", 0, 0),
            "BertForMaskedLM");
    refused(folder("missing_field", "{\"model_type\":\"llama\",\"hidden_size\":4}", "{}", 0, 0), "vocab_size");
    /* a real fixture, altered: copy its safetensors next to a config that disagrees */
    char src[4096], cfg[8192];
    snprintf(src, sizeof src, "%s/qwen2/model.safetensors", fixtures);
    FILE *f = fopen(src, "rb");
    CHECK(f != NULL, "no fixture %s", src);
    if (!f) return;
    static unsigned char buf[1 << 21];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    snprintf(src, sizeof src, "%s/qwen2/config.json", fixtures);
    f = fopen(src, "rb");
    size_t cn = f ? fread(cfg, 1, sizeof cfg - 1, f) : 0;
    if (f) fclose(f);
    cfg[cn] = '\0';
    /* shape: a wider intermediate_size than the tensors have */
    char alt[8192];
    char *p = strstr(cfg, "\"intermediate_size\": 64");
    CHECK(p != NULL, "fixture config lacks intermediate_size 64");
    if (!p) return;
    snprintf(alt, sizeof alt, "%.*s\"intermediate_size\": 96%s", (int)(p - cfg), cfg, p + strlen("\"intermediate_size\": 64"));
    const char *d = folder("shape", alt, NULL, 0, 0);
    put(d, "model.safetensors", buf, n);
    refused(d, "disagrees with config.json");
    /* extra tensor: three layers' worth of tensors for a config of one fewer layer */
    p = strstr(cfg, "\"num_hidden_layers\": 2");
    snprintf(alt, sizeof alt, "%.*s\"num_hidden_layers\": 1%s", (int)(p - cfg), cfg, p + strlen("\"num_hidden_layers\": 2"));
    d = folder("extra", alt, NULL, 0, 0);
    put(d, "model.safetensors", buf, n);
    refused(d, "unexpected tensor");
    /* missing tensor: one more layer than the file holds */
    snprintf(alt, sizeof alt, "%.*s\"num_hidden_layers\": 3%s", (int)(p - cfg), cfg, p + strlen("\"num_hidden_layers\": 2"));
    d = folder("missing", alt, NULL, 0, 0);
    put(d, "model.safetensors", buf, n);
    refused(d, "model.layers.2.input_layernorm.weight is missing");
    /* truncated: the real file cut short */
    d = folder("truncated", cfg, NULL, 0, 0);
    put(d, "model.safetensors", buf, n - 100);
    refused(d, "past the end");
    /* index naming a missing shard */
    d = folder("no_shard", cfg, NULL, 0, 0);
    const char *idx = "{\"metadata\":{},\"weight_map\":{\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\"}}";
    put(d, "model.safetensors.index.json", idx, strlen(idx));
    refused(d, "shard model-00001-of-00002.safetensors is missing");
    /* a shard name leaving the folder */
    d = folder("escape", cfg, NULL, 0, 0);
    idx = "{\"weight_map\":{\"model.embed_tokens.weight\":\"../qwen2/model.safetensors\"}}";
    put(d, "model.safetensors.index.json", idx, strlen(idx));
    refused(d, "not a file name in the folder");
}

static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const float twos[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static int head_differs;
static const float *fetch_tied(void *ctx, int k)
{
    return (k == *(int *)ctx && head_differs) ? twos : ones;
}

/* A tied model that also saved lm_head.weight: accepted when it is the embedding, else refused. */
static void tied_head(void)
{
    st_wtensor t[13] = {{"model.embed_tokens.weight", 2, {4, 4}}, {"model.layers.0.input_layernorm.weight", 1, {4}},
                        {"model.layers.0.self_attn.q_proj.weight", 2, {4, 4}}, {"model.layers.0.self_attn.k_proj.weight", 2, {2, 4}},
                        {"model.layers.0.self_attn.v_proj.weight", 2, {2, 4}}, {"model.layers.0.self_attn.o_proj.weight", 2, {4, 4}},
                        {"model.layers.0.post_attention_layernorm.weight", 1, {4}}, {"model.layers.0.mlp.gate_proj.weight", 2, {4, 4}},
                        {"model.layers.0.mlp.up_proj.weight", 2, {4, 4}}, {"model.layers.0.mlp.down_proj.weight", 2, {4, 4}},
                        {"model.norm.weight", 1, {4}}, {"lm_head.weight", 2, {4, 4}}};
    int head = 11;
    for (head_differs = 0; head_differs < 2; head_differs++) {
        const char *d = folder(head_differs ? "tied_head_differs" : "tied_head_same", CFG, NULL, 0, 0);
        CHECK(st_write_dir(d, "model", ST_F32, t, 12, fetch_tied, &head, (uint64_t)1 << 30) == 0, "%s", loom_error());
        if (head_differs) refused(d, "differs from the embedding");
        else {
            hf_model *h = hf_open(d);
            CHECK(h != NULL, "%s: a tied model with its saved head refused: %s", d, loom_error());
            hf_close(h);
        }
    }
}

/* st_write_dir_stream: a writer that pushes one value too few or too many for a tensor's shape is
 * refused with one line naming the tensor, and leaves no file; in pieces the bytes are those of
 * the whole-tensor writer. */
static int stream_extra; /* values pushed beyond (or, negative, short of) the shape */
static int stream_ones(void *ctx, int k, st_sink *sink)
{
    (void)ctx;
    size_t n = k == 0 ? 16 : 4;
    if (k == 1) n = (size_t)((int)n + stream_extra);
    for (size_t i = 0; i < n; i += 3) /* pieces of 3: uneven ones too */
        if (st_sink_put(sink, ones, n - i < 3 ? n - i : 3)) return -1;
    return 0;
}

static const float *fetch_ones(void *ctx, int k)
{
    (void)ctx, (void)k;
    return ones;
}

static void streamed_writes(void)
{
    st_wtensor t[2] = {{"a", 2, {4, 4}}, {"b", 1, {4}}};
    char d[4096], p[4200], q[4300];
    snprintf(d, sizeof d, "%s/stream", scratch);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    const struct { int extra; const char *want; } cases[] = {{-1, "tensor b: 1 values short of its shape"},
                                                             {1, "tensor b: more values than its shape holds"}};
    for (int c = 0; c < 2; c++) {
        stream_extra = cases[c].extra;
        unlink(p);
        CHECK(st_write_dir_stream(d, "model", ST_BF16, t, 2, stream_ones, NULL, (uint64_t)1 << 30) == -1 &&
                  strstr(loom_error(), cases[c].want) && !strchr(loom_error(), '\n'),
              "a stream %+d values off: got '%s'", cases[c].extra, loom_error());
        struct stat sb;
        snprintf(q, sizeof q, "%s.tmp", p);
        CHECK(stat(p, &sb) != 0 && stat(q, &sb) != 0, "a refused stream left a file");
    }
    stream_extra = 0;
    CHECK(st_write_dir_stream(d, "streamed", ST_BF16, t, 2, stream_ones, NULL, (uint64_t)1 << 30) == 0, "%s", loom_error());
    CHECK(st_write_dir(d, "whole", ST_BF16, t, 2, fetch_ones, NULL, (uint64_t)1 << 30) == 0, "%s", loom_error());
    snprintf(p, sizeof p, "%s/streamed.safetensors", d);
    snprintf(q, sizeof q, "%s/whole.safetensors", d);
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    int same = a && b;
    for (int x = 0, y = 0; same && (x != EOF || y != EOF);) same = (x = fgetc(a)) == (y = fgetc(b));
    CHECK(same, "streamed and whole writes differ");
    if (a) fclose(a);
    if (b) fclose(b);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: test_hf_bad FIXTURES_DIR TMP_DIR\n"); return 2; }
    log_set_quiet(1);
    snprintf(scratch, sizeof scratch, "%s", argv[2]);
    mkdir(scratch, 0755);
    bad_safetensors();
    bad_folders(argv[1]);
    tied_head();
    streamed_writes();
    return failures != 0;
}
