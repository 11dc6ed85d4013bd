/* test_needle_bad.c: Needle files that lie, each refused with one line naming the file and the
 * field or tensor, never a crash: damaged bytes, a wrong format_version, an unknown or mistyped config
 * field, a Needle 2 config, shapes that disagree with the config, missing / extra / half-present
 * tensors; adapters with an unpaired matrix, a lying rank, a Whistle rows tensor, a bad scale, a
 * kernel that is no LoRA target. Arguments: the fixtures folder, a scratch folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "checkpoints/needle.h"
#include "tests/check.h"

static char fixtures[2048], scratch[2048];
static needle_file *base;
static needle_wtensor bw[256];
static needle_meta bm[16];
static int bn, bnm;

static const char *spath(const char *name)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s.safetensors", scratch, name);
    return p;
}

static void refused_msg(const char *path, const char *want, int ok)
{
    const char *e = loom_error();
    CHECK(!ok, "%s: accepted", path);
    CHECK(strchr(e, '\n') == NULL && strstr(e, path) && strstr(e, want), "%s: message '%s' lacks the file or '%s'", path,
          e, want);
    printf("refused: %s\n", e);
}

static void refused(const char *path, const char *want)
{
    loom_error_clear();
    needle_file *f = needle_open(path);
    refused_msg(path, want, f != NULL);
    needle_close(f);
}

/* The fixture's tensors minus `drop` (NULL: none) plus `extra` (NULL: none), with metadata `cfg`
 * for config and `ver` for format_version (NULL: the fixture's; "-": left out). */
static const char *variant(const char *name, const char *drop, const needle_wtensor *extra, const char *cfg, const char *ver)
{
    needle_wtensor w[260];
    needle_meta m[16];
    int n = 0, nm = 0;
    for (int i = 0; i < bn; i++)
        if (!drop || strncmp(bw[i].name, drop, strlen(drop)) != 0) w[n++] = bw[i];
    if (extra) w[n++] = *extra;
    for (int i = 0; i < bnm; i++) {
        m[nm] = bm[i];
        if (strcmp(bm[i].key, "config") == 0 && cfg) m[nm].value = cfg;
        if (strcmp(bm[i].key, "format_version") == 0 && ver) {
            if (strcmp(ver, "-") == 0) continue;
            m[nm].value = ver;
        }
        nm++;
    }
    const char *p = spath(name);
    CHECK(needle_write(p, w, n, m, nm) == 0, "write %s", p);
    return p;
}

/* The fixture's config with `from` replaced by `to` (static). */
static const char *cfg_with(const char *from, const char *to)
{
    static char out[8192];
    const char *c = needle_file_meta(base, "config"), *at = strstr(c, from);
    CHECK(at != NULL, "fixture config lacks '%s'", from);
    if (!at) return c;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - c), c, to, at + strlen(from));
    return out;
}

static void put_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
}

static void bad_bytes(void)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/model_base.safetensors", fixtures);
    FILE *f = fopen(src, "rb");
    static unsigned char buf[1 << 21];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n > 100000, "read %s", src);
    put_bytes(spath("truncated"), buf, n / 2);
    refused(spath("truncated"), "past the end");
    unsigned char keep[8];
    memcpy(keep, buf, 8);
    memset(buf, 0xff, 8);
    put_bytes(spath("hlen"), buf, n);
    refused(spath("hlen"), "header length");
    memcpy(buf, keep, 8);
    buf[8] = '[';
    put_bytes(spath("garbage"), buf, n);
    refused(spath("garbage"), "not a JSON object");
    put_bytes(spath("tiny"), "hello", 5);
    refused(spath("tiny"), "too short");
    refused(spath("absent"), "cannot open");
}

static void bad_meta(void)
{
    refused(variant("version1", NULL, NULL, NULL, "1"), "format_version: '1'");
    refused(variant("noversion", NULL, NULL, NULL, "-"), "format_version: missing");
    refused(variant("unknown", NULL, NULL, cfg_with("\"d_model\"", "\"d_modle\": 3, \"d_model\""), NULL),
            "config field d_modle");
    refused(variant("needle2", NULL, NULL, "{\"vocab_size\": 512, \"attn_dim\": 768, \"d_model\": 768}", NULL),
            "config field attn_dim");
    refused(variant("mistyped", NULL, NULL, cfg_with("\"num_layers\": 4", "\"num_layers\": \"4\""), NULL),
            "config field num_layers");
    refused(variant("badsite", NULL, NULL, cfg_with("\"engram_layers\": [2, 3]", "\"engram_layers\": [2, 9]"), NULL),
            "config field engram_layers");
    refused(variant("badheads", NULL, NULL, cfg_with("\"num_kv_heads\": 2", "\"num_kv_heads\": 3"), NULL),
            "config field num_kv_heads");
    refused(variant("notjson", NULL, NULL, "{\"d_model\": ", NULL), "config: not a JSON object");
}

static void bad_tensors(void)
{
    refused(variant("qkdim", NULL, NULL, cfg_with("\"qk_head_dim\": 16", "\"qk_head_dim\": 24"), NULL), "config implies");
    int q = needle_file_find(base, "stack/layers/block/self_attn/q_proj/kernel");
    needle_wtensor lie = bw[q];
    lie.shape[1] = 64, lie.shape[2] = 96;
    bw[q] = lie;
    refused(variant("shape", NULL, NULL, NULL, NULL), "q_proj/kernel: shape [4,64,96]");
    bw[q].shape[1] = 96, bw[q].shape[2] = 64;
    refused(variant("missing", "stack/mhc_a_res", NULL, NULL, NULL), "stack/mhc_a_res is missing");
    refused(variant("halfhead", "router_head/query", NULL, NULL, NULL), "router_head/query is missing");
    needle_wtensor extra = bw[0];
    extra.name = "stack/extra";
    refused(variant("extra", NULL, &extra, NULL, NULL), "stack/extra: not a parameter");
    extra.name = "ab_scales/x/a";
    refused(variant("ab", NULL, &extra, NULL, NULL), "AB quantisation");
    /* a checkpoint without one probe head loads (the LM forward never calls it) */
    needle_file *f = needle_open(variant("nohead", "embedding_head/", NULL, NULL, NULL));
    CHECK(f && needle_file_find(f, "embedding_head/query") < 0, "a base without embedding_head refused");
    needle_close(f);
    /* a dtype the reader does not know (I64), written by hand */
    static const char hdr[] = "{\"__metadata__\":{\"format_version\":\"2\"},\"a\":{\"dtype\":\"I64\",\"shape\":[1],"
                              "\"data_offsets\":[0,8]}}";
    unsigned char b[sizeof hdr + 16] = {0};
    b[0] = (unsigned char)(sizeof hdr - 1);
    memcpy(b + 8, hdr, sizeof hdr - 1);
    put_bytes(spath("i64"), b, 8 + sizeof hdr - 1 + 8);
    refused(spath("i64"), "unsupported dtype 'I64'");
}

static void refused_adapter(const char *path, const char *want)
{
    loom_error_clear();
    needle_adapter *a = needle_adapter_open(path);
    refused_msg(path, want, a != NULL);
    needle_adapter_close(a);
}

static void bad_adapters(void)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/model_lora.safetensors", fixtures);
    needle_adapter *a = needle_adapter_open(src);
    CHECK(a != NULL, "open %s", src);
    if (!a) return;
    needle_wtensor w[16];
    for (int i = 0; i < a->st->ntensors; i++) {
        const st_tensor *t = &a->st->t[i];
        w[i].name = t->name, w[i].dtype = t->dtype, w[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
        w[i].data = a->st->map + a->st->data_start + t->begin;
    }
    int n = a->st->ntensors;
    needle_meta m[6];
    for (int k = 0; k < 6; k++) m[k].key = needle_adapter_keys[k], m[k].value = a->meta[k];
    CHECK(needle_write(spath("lora_noB"), w, n - 1, m, 6) == 0, "write");
    refused_adapter(spath("lora_noB"), "/B is missing");
    m[2].value = "8";
    CHECK(needle_write(spath("lora_rank"), w, n, m, 6) == 0, "write");
    refused_adapter(spath("lora_rank"), "rank");
    m[2].value = a->meta[2], m[0].value = "\"two\"";
    CHECK(needle_write(spath("lora_scale"), w, n, m, 6) == 0, "write");
    refused_adapter(spath("lora_scale"), "metadata scale");
    m[0].value = a->meta[0];
    w[n] = w[0], w[n].name = "rows";
    CHECK(needle_write(spath("lora_rows"), w, n + 1, m, 6) == 0, "write");
    refused_adapter(spath("lora_rows"), "Whistle");
    w[n].name = "lora/x";
    CHECK(needle_write(spath("lora_name"), w, n + 1, m, 6) == 0, "write");
    refused_adapter(spath("lora_name"), "lora/x: not lora/<path>/A");
    w[0].name = "lora/engrams_0/key_proj/kernel/A", w[1].name = "lora/engrams_0/key_proj/kernel/B";
    CHECK(needle_write(spath("lora_target"), w, n, m, 6) == 0, "write");
    needle_adapter *b = needle_adapter_open(spath("lora_target"));
    CHECK(b != NULL, "open lora_target");
    if (b) {
        loom_error_clear();
        int rc = needle_adapter_check(b, base);
        refused_msg(spath("lora_target"), "not a LoRA target", rc == 0);
    }
    needle_adapter_close(b);
    needle_adapter_close(a);
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: test_needle_bad FIXTURES SCRATCH\n"); return 2; }
    snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    snprintf(scratch, sizeof scratch, "%s", argv[2]);
    mkdir(scratch, 0755);
    char p[4096];
    snprintf(p, sizeof p, "%s/model_base.safetensors", fixtures);
    base = needle_open(p);
    CHECK(base != NULL, "open %s", p);
    if (!base) return check_exit_code("test_needle_bad");
    bn = needle_file_count(base);
    for (int i = 0; i < bn; i++) {
        const st_tensor *t = needle_file_tensor(base, i);
        size_t nb;
        bw[i].name = t->name, bw[i].dtype = t->dtype, bw[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) bw[i].shape[d] = t->shape[d];
        bw[i].data = needle_file_bytes(base, i, &nb);
    }
    bnm = needle_file_meta_count(base);
    for (int i = 0; i < bnm; i++) bm[i].key = needle_file_meta_at(base, i, &bm[i].value);
    bad_bytes();
    bad_meta();
    bad_tensors();
    bad_adapters();
    needle_close(base);
    return check_exit_code("test_needle_bad");
}
