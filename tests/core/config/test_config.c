/* test_config.c: the job configuration: defaults, preset/file/--set order, every error being
 * one line naming source and field (and leaving the config untouched), JSON round trips and
 * model diffs. Must never depend on the working directory (temp files go to /tmp). */
#include "core/config/config.h"
#include "base/error.h"
#include "tests/check.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* First field path where a and b differ (floats exactly), or NULL. */
static const char *fields_differ(const job_config *a, const job_config *b)
{
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++) {
        const char *pa = (const char *)a + f[i].offset, *pb = (const char *)b + f[i].offset;
        int same;
        switch (f[i].type) {
        case CFG_FLOAT: same = *(const float *)pa == *(const float *)pb; break;
        case CFG_STRING: same = strcmp(pa, pb) == 0; break;
        case CFG_U64: same = *(const uint64_t *)pa == *(const uint64_t *)pb; break;
        default: same = *(const int *)pa == *(const int *)pb; break;
        }
        if (!same) return f[i].path;
    }
    return NULL;
}

static int load(job_config *c, const char *json, const char *o1, const char *o2, const char *o3)
{
    const char *ov[3] = {0};
    int n = 0;
    if (o1) ov[n++] = o1;
    if (o2) ov[n++] = o2;
    if (o3) ov[n++] = o3;
    return config_load_string(c, json, json ? "job.json" : "--set", ov, n);
}

/* 1 if field f of c holds the value of the table's default text, decoded here independently of
 * config.c (cJSON straight into the member's type), so config_defaults is checked against the
 * table itself rather than against a second copy of the defaults. */
static int default_matches(const job_config *c, const config_field *f)
{
    cJSON *v = cJSON_Parse(f->default_value);
    const char *p = (const char *)c + f->offset;
    int ok = v != NULL;
    if (ok) switch (f->type) {
        case CFG_INT: ok = cJSON_IsNumber(v) && *(const int *)p == (int)v->valuedouble; break;
        case CFG_BOOL: ok = cJSON_IsBool(v) && *(const int *)p == cJSON_IsTrue(v); break;
        case CFG_FLOAT: ok = cJSON_IsNumber(v) && *(const float *)p == (float)v->valuedouble; break;
        case CFG_STRING: ok = cJSON_IsString(v) && strcmp(p, v->valuestring) == 0; break;
        case CFG_U64:
            ok = (cJSON_IsNumber(v) && *(const uint64_t *)p == (uint64_t)v->valuedouble) ||
                 (cJSON_IsString(v) && *(const uint64_t *)p == strtoull(v->valuestring, NULL, 10));
            break;
        }
    cJSON_Delete(v);
    return ok;
}

static void test_defaults(void)
{
    job_config c, d;
    config_defaults(&c);
    /* every field holds its table default (decoded independently, see default_matches) */
    int nf;
    const config_field *tf = config_fields(&nf);
    for (int i = 0; i < nf; i++)
        CHECK(default_matches(&c, &tf[i]), "config_defaults: %s is not its table default %s",
              tf[i].path, tf[i].default_value);
    CHECK(config_validate(&c) == 0, "defaults must validate: %s", loom_error());

    /* The table's model defaults are the tiny preset (so the docs tell the truth). */
    model_config tiny;
    CHECK(config_apply_preset(&tiny, "tiny") == 0, "%s", loom_error());
    const char *diff = config_model_diff(&c.model, &tiny);
    CHECK(diff == NULL, "default model differs from tiny.json at %s", diff);

    /* "{}" and no file at all both give exactly the defaults. */
    CHECK(load(&d, "{}", NULL, NULL, NULL) == 0 && !fields_differ(&c, &d), "{} != defaults");
    CHECK(config_load(&d, NULL, NULL, 0) == 0 && !fields_differ(&c, &d), "no file != defaults");

    /* Table sanity: unique paths, docs, in-bounds offsets, every default accepted strictly. */
    int n;
    const config_field *f = config_fields(&n);
    CHECK(n > 40 && n <= CONFIG_MAX_FIELDS, "%d fields (job_config.named holds %d)", n, CONFIG_MAX_FIELDS);
    for (int i = 0; i < n; i++) {
        CHECK(f[i].doc && f[i].doc[0] && f[i].offset + f[i].size <= sizeof(job_config), "%s",
              f[i].path);
        for (int j = 0; j < i; j++) CHECK(strcmp(f[i].path, f[j].path) != 0, "dup %s", f[i].path);
        char set[512];
        snprintf(set, sizeof set, "%s=%s", f[i].path, f[i].default_value);
        config_defaults(&d);
        CHECK(config_set(&d, set) == 0, "default of %s rejected: %s", f[i].path, loom_error());
        CHECK(!fields_differ(&c, &d), "setting the default of %s changed %s", f[i].path,
              fields_differ(&c, &d));
        int named = 0;
        for (int j = 0; j < n; j++) named += d.named[j];
        CHECK(config_named(&d, f[i].path) && named == 1, "--set %s: %d fields named", f[i].path, named);
    }
    /* named: what the file and --set give, never the defaults or a preset's fields */
    CHECK(load(&d, "{\"model\": {\"preset\": \"tiny\", \"d_model\": 96}, \"train\": {\"lr\": 0.01}}", "train.steps=3",
               NULL, NULL) == 0,
          "load: %s", loom_error());
    int named = 0;
    for (int j = 0; j < n; j++) named += d.named[j];
    CHECK(named == 4 && config_named(&d, "model.preset") && config_named(&d, "model.d_model") &&
              config_named(&d, "train.lr") && config_named(&d, "train.steps") && !config_named(&d, "model.n_layer"),
          "named: %d fields", named);
}

static void test_presets(void)
{
    const char *want[] = {"tiny", "gpt2-124m", "llama-small", "gpt2-small6"};
    for (int w = 0; w < 4; w++) {
        int found = 0;
        for (const char *const *p = config_preset_names(); *p; p++) found |= !strcmp(*p, want[w]);
        CHECK(found, "preset %s missing", want[w]);
    }
    for (const char *const *p = config_preset_names(); *p; p++) {
        char set[128];
        job_config c;
        snprintf(set, sizeof set, "model.preset=%s", *p);
        CHECK(load(&c, NULL, set, NULL, NULL) == 0 && !strcmp(c.model.preset, *p), "%s", *p);
    }
    model_config m;
    CHECK(config_apply_preset(&m, "gpt2-124m") == 0 && m.d_model == 768 && m.n_layer == 12 &&
          m.vocab == 50304 && m.tied_embeddings && m.bias, "gpt2-124m");
    CHECK(config_apply_preset(&m, "llama-small") == 0 && !strcmp(m.norm, "rmsnorm") &&
          !strcmp(m.mlp, "swiglu") && !strcmp(m.positions, "rope") && m.n_kv_head == 4 &&
          !m.bias && !m.tied_embeddings, "llama-small");
    CHECK(config_apply_preset(&m, "gpt2-small6") == 0 && m.d_model == 384 && m.n_layer == 6 &&
          m.n_head == 6 && m.d_ff == 1536 && m.vocab == 50304 && !strcmp(m.mlp, "gelu"),
          "gpt2-small6");
    CHECK(config_apply_preset(&m, "gpt3") == -1 && strstr(loom_error(), "'gpt3'") &&
          strstr(loom_error(), "tiny") && strstr(loom_error(), "gpt2-124m"), "%s", loom_error());
}

static void test_order(void)
{
    job_config c;
    const char *file = "{\"model\": {\"preset\": \"gpt2-124m\", \"n_layer\": 4},"
                       " \"train\": {\"lr\": 1e-3, \"steps\": 50}}";
    /* preset, then the file's fields over it, then --set over both. */
    CHECK(load(&c, file, "train.lr=2e-3", NULL, NULL) == 0, "load");
    CHECK(c.model.d_model == 768 && c.model.n_layer == 4 && c.train.lr == 2e-3f &&
          c.train.steps == 50 && !strcmp(c.model.preset, "gpt2-124m"), "file over preset");
    /* --set model.preset replaces the file's preset, yet the file's fields still apply, and it
     * comes first even when written after other overrides. */
    CHECK(load(&c, file, "model.n_head=8", "model.preset=llama-small", NULL) == 0, "load2");
    CHECK(!strcmp(c.model.preset, "llama-small") && c.model.d_model == 512 &&
          c.model.n_layer == 4 && c.model.n_head == 8 && !strcmp(c.model.norm, "rmsnorm"),
          "preset override: %s d=%d L=%d", c.model.preset, c.model.d_model, c.model.n_layer);
    CHECK(load(&c, "{\"model\": \"llama-small\"}", NULL, NULL, NULL) == 0 &&
          c.model.d_model == 512, "string form");
    CHECK(load(&c, NULL, "model=gpt2-small6", NULL, NULL) == 0 && c.model.d_model == 384,
          "model= alias");
    CHECK(load(&c, "{\"model\": {\"n_layer\": 3}}", NULL, NULL, NULL) == 0 &&
          c.model.n_layer == 3 && c.model.d_model == 64 && !strcmp(c.model.preset, "tiny"),
          "fields over the default preset");
    CHECK(load(&c, NULL, "train.lr=1e-3", "train.lr=5e-4", NULL) == 0 && c.train.lr == 5e-4f,
          "last --set wins");
    /* config_set of a preset on its own resets the model to that preset. */
    config_defaults(&c);
    c.model.n_layer = 9;
    CHECK(config_set(&c, "model.preset=gpt2-124m") == 0 && c.model.n_layer == 12, "config_set");
}

static void test_set_values(void)
{
    job_config c;
    config_defaults(&c);
    CHECK(config_set(&c, "train.recompute=true") == 0 && c.train.recompute == 1, "bool");
    CHECK(config_set(&c, "name=123") == 0 && !strcmp(c.name, "123"), "digits stay a string");
    CHECK(config_set(&c, "name=\"q\\\"x\"") == 0 && !strcmp(c.name, "q\"x"), "%s", c.name);
    CHECK(config_set(&c, "data.train=/tmp/a b.bin") == 0 && !strcmp(c.data.train, "/tmp/a b.bin"),
          "bare string");
    CHECK(config_set(&c, "finetune.lora_targets=q,v") == 0 &&
          !strcmp(c.finetune.lora_targets, "q,v"), "comma list");
    CHECK(config_set(&c, "out=") == 0 && !c.out[0], "empty string");
    CHECK(config_set(&c, "train.lr=1e-3") == 0 && c.train.lr == 1e-3f, "float");
    CHECK(config_set(&c, "train.seed=\"18446744073709551615\"") == 0 &&
          c.train.seed == UINT64_MAX, "u64 as string");
    CHECK(config_set(&c, "train.seed=18446744073709551615") == -1 &&
          strstr(loom_error(), "train.seed"), "u64 above 2^53 as a number: %s", loom_error());
}

/* One failing load: -1, one line, starting with the source, naming the field; and the config
 * passed in is left exactly as it was. */
static void expect_fail(const char *json, const char *set, const char *want, const char *want2)
{
    job_config c, before;
    config_defaults(&c);
    c.train.steps = 777;
    before = c;
    loom_error_clear();
    int rc = load(&c, json, set, NULL, NULL);
    const char *msg = loom_error();
    const char *src = json ? "job.json: " : "--set";
    CHECK(rc == -1, "accepted: json=%s set=%s", json ? json : "-", set ? set : "-");
    CHECK(strstr(msg, want) && (!want2 || strstr(msg, want2)), "message '%s' lacks '%s' / '%s'",
          msg, want, want2 ? want2 : "");
    CHECK(!strchr(msg, '\n') && strncmp(msg, src, strlen(src)) == 0, "not one line from %s: %s",
          src, msg);
    CHECK(!fields_differ(&c, &before), "failed load changed %s", fields_differ(&c, &before));
}

static void test_errors(void)
{
    /* a message that wraps the previous one (loom_fail("...: %s", loom_error())) keeps it */
    loom_fail("inner %d", 7);
    loom_fail("outer: %s", loom_error());
    CHECK(strcmp(loom_error(), "outer: inner 7") == 0, "wrapped message '%s'", loom_error());

    /* Exact texts users will see. */
    job_config c;
    CHECK(load(&c, "{\"train\": {\"lrr\": 1}}", NULL, NULL, NULL) == -1 &&
          !strcmp(loom_error(), "job.json: unknown field 'train.lrr' (did you mean 'train.lr'?)"),
          "%s", loom_error());
    CHECK(load(&c, "{\"train\": {\"steps\": \"ten\"}}", NULL, NULL, NULL) == -1 &&
          !strcmp(loom_error(), "job.json: field 'train.steps' must be an integer, got \"ten\""),
          "%s", loom_error());
    CHECK(load(&c, "{\"xyzzy\": 1}", NULL, NULL, NULL) == -1 &&
          !strcmp(loom_error(), "job.json: unknown field 'xyzzy'"), "%s", loom_error());
    CHECK(load(&c, NULL, "train.lr=abc", NULL, NULL) == -1 &&
          !strcmp(loom_error(), "--set train.lr: field 'train.lr' must be a number, got \"abc\""),
          "%s", loom_error());

    expect_fail("{\n  \"name\": \"x\",\n  \"train\": {\"steps\": 10,}\n}", NULL,
                "job.json: line 3: invalid JSON: a trailing comma before '}' (JSON allows none), near '",
                "\"steps\": 10,}'");
    /* the comma's line, not the closing bracket's */
    expect_fail("{\n  \"train\": {\n    \"steps\": 10,\n  }\n}", NULL,
                "job.json: line 3: invalid JSON: a trailing comma before '}'", "near '    \"steps\": 10,'");
    expect_fail("{\"a\": [1, 2,\n]}", NULL, "job.json: line 1: invalid JSON: a trailing comma before ']'", NULL);
    expect_fail("{\"a\": 1,\n \"b\": tru}", NULL, "job.json: line 2: invalid JSON near ' \"b\": tru}'",
                NULL);
    expect_fail("{\"name\": \"x\"", NULL, "line 1", "end of input");
    expect_fail("{} trailing", NULL, "line 1: invalid JSON near '", "trailing'");
    expect_fail("[1, 2]", NULL, "top level must be a JSON object", "an array");
    expect_fail("", NULL, "line 1: invalid JSON: the text is empty", NULL);
    expect_fail(NULL, "train.lrr=1", "--set: unknown field 'train.lrr' (did you mean 'train.lr'?)",
                NULL);
    expect_fail(NULL, "noequals", "--set: expected a.b=value", "noequals");
    expect_fail(NULL, "model.preset=gpt3", "--set model.preset: unknown model preset 'gpt3'",
                "known: ");
    expect_fail("{\"model\": \"gpt3\"}", NULL, "unknown model preset 'gpt3'", "llama-small");
    /* Typos: nearest name, also across sections and for section names. */
    expect_fail("{\"lr\": 1}", NULL, "'lr' (did you mean 'train.lr'?)", NULL);
    expect_fail("{\"trian\": {}}", NULL, "'trian' (did you mean 'train'?)", NULL);
    expect_fail("{\"model\": {\"n_layers\": 4}}", NULL, "(did you mean 'model.n_layer'?)", NULL);
    expect_fail("{\"train\": {\"steps\": 1, \"steps\": 2}}", NULL, "'train.steps' appears twice",
                NULL);
    /* Types. */
    expect_fail("{\"train\": {\"recompute\": \"yes\"}}", NULL, "'train.recompute' must be true", NULL);
    expect_fail("{\"train\": {\"batch_size\": 2.5}}", NULL, "'train.batch_size' must be an integer",
                "2.5");
    expect_fail("{\"train\": {\"lr\": \"fast\"}}", NULL, "'train.lr' must be a number", NULL);
    expect_fail("{\"name\": 7}", NULL, "'name' must be a string, got 7", NULL);
    expect_fail("{\"train\": 5}", NULL, "'train' must be an object, got 5", NULL);
    expect_fail("{\"model\": 5}", NULL, "'model' must be a preset name or an object", NULL);
    expect_fail("{\"model\": {\"preset\": 3}}", NULL, "'model.preset' must be a string", NULL);
    expect_fail("{\"train\": {\"seed\": -1}}", NULL, "'train.seed' must be a non-negative", NULL);
    expect_fail("{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123\"}",
                NULL, "'name' is too long", NULL);
    /* Ranges and allowed sets. */
    expect_fail("{\"train\": {\"steps\": 0}}", NULL, "'train.steps' must be > 0, got 0", NULL);
    expect_fail(NULL, "train.batch_size=-8", "'train.batch_size' must be > 0", NULL);
    expect_fail("{\"train\": {\"seq_len\": 0}}", NULL, "'train.seq_len' must be > 0", NULL);
    expect_fail("{\"train\": {\"lr\": -0.1}}", NULL, "'train.lr' must be >= 0", NULL);
    expect_fail("{\"train\": {\"beta2\": 1}}", NULL, "'train.beta2' must be in [0, 1)", NULL);
    expect_fail("{\"parallel\": {\"zero_stage\": 4}}", NULL, "'parallel.zero_stage' must be in [0, 3]",
                NULL);
    expect_fail("{\"model\": {\"norm\": \"batchnorm\"}}", NULL, "'model.norm' must be one of "
                "layernorm, rmsnorm, got \"batchnorm\"", NULL);
    expect_fail(NULL, "model.mlp=relu", "'model.mlp' must be one of gelu, swiglu", NULL);
    expect_fail(NULL, "model.positions=alibi", "'model.positions'", "learned, rope");
    expect_fail(NULL, "precision=fp16", "'precision' must be one of fp32, tf32, bf16", NULL);
    expect_fail(NULL, "finetune.method=qlora", "'finetune.method'", "lora, full");
    expect_fail(NULL, "checkpoint.on_error=ignore", "'checkpoint.on_error'", "stop, continue");
    expect_fail(NULL, "parallel.comm=gloo", "'parallel.comm'", "auto, self, mpi, nccl");
    /* Cross-field checks (prefixed with the file). */
    expect_fail("{\"model\": {\"d_model\": 66}}", NULL, "model.d_model (66)", "model.n_head (4)");
    expect_fail("{\"model\": {\"n_kv_head\": 3}}", NULL, "model.n_kv_head (3)", "model.n_head");
    expect_fail("{\"model\": {\"d_model\": 36, \"positions\": \"rope\"}}", NULL, "even head dim",
                "model.positions");
    expect_fail("{\"train\": {\"seq_len\": 256}}", NULL, "train.seq_len (256)", "model.max_seq");
    expect_fail(NULL, "train.micro_batch=3", "train.micro_batch (3)", "train.batch_size (8)");
    expect_fail("{\"train\": {\"lr\": 1e-5}}", NULL, "train.min_lr", "train.lr");
    expect_fail("{\"train\": {\"warmup\": 1.5}}", NULL, "train.warmup (1.5)", NULL);
    expect_fail("{\"train\": {\"warmup\": 100}}", NULL, "train.warmup (100 steps)", "train.steps");
    expect_fail(NULL, "finetune.lora_targets=q,x", "finetune.lora_targets", "'x'");
    expect_fail(NULL, "finetune.lora_targets=q,q", "finetune.lora_targets", "twice");
    expect_fail(NULL, "finetune.lora_targets=", "finetune.lora_targets", "empty");
    expect_fail("{\"backend\": \"cpu\", \"parallel\": {\"comm\": \"nccl\"}}", NULL,
                "parallel.comm", "backend");
    expect_fail("{\"name\": \"a/b\"}", NULL, "'name'", "a/b");

    /* Files: a missing one, and errors naming the file's path. */
    CHECK(config_load(&c, "/nonexistent/job.json", NULL, 0) == -1 &&
          strstr(loom_error(), "/nonexistent/job.json: cannot open"), "%s", loom_error());
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const char *text = "{\n  \"train\": {\"stepz\": 10}\n}\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
    char want[128];
    snprintf(want, sizeof want, "%s: unknown field 'train.stepz' (did you mean 'train.steps'?)",
             path);
    CHECK(config_load(&c, path, NULL, 0) == -1 && !strcmp(loom_error(), want), "%s",
          loom_error());
    unlink(path);
}

static void test_roundtrip(void)
{
    job_config c, d;
    const char *sets[] = {
        "name=rt", "out=/tmp/o", "model.preset=llama-small", "model.n_layer=3",
        "model.rope_theta=500000", "model.norm_eps=1e-6", "model.init_std=0.0173",
        "train.lr=6.1e-4", "train.min_lr=1.7e-5", "train.warmup=0.1",
        "train.seed=\"9223372036854775813\"", "train.recompute=true", "train.micro_batch=4",
        "data.train=a \"quoted\" path\twith tab", "data.skip_bad_lines=true",
        "parallel.zero_stage=2", "parallel.bucket_mb=12.5", "checkpoint.every=100",
        "finetune.lora_targets=q,v,gate", "precision=bf16", "backend=cuda",
    };
    config_defaults(&c);
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
        CHECK(config_set(&c, sets[k]) == 0, "%s: %s", sets[k], loom_error());
    c.train.beta2 = nextafterf(0.95f, 1.0f); /* a float with no short decimal */
    CHECK(config_validate(&c) == 0, "%s", loom_error());
    char *json = config_to_json(&c);
    CHECK(json && !strchr(json, '\t') && strstr(json, "\n  \"train\": {"), "pretty: %s", json ? json : "(null)");
    CHECK(json && config_load_string(&d, json, "rt", NULL, 0) == 0, "%s", loom_error());
    const char *diff = fields_differ(&c, &d);
    CHECK(diff == NULL, "round trip changed %s", diff);
    free(json);
}

static void test_model_json(void)
{
    model_config m, m2;
    CHECK(config_apply_preset(&m, "llama-small") == 0, "%s", loom_error());
    m.norm_eps = nextafterf(1e-5f, 1.0f);
    char *js = config_model_to_json(&m);
    CHECK(js && config_model_from_json(&m2, js) == 0, "%s", loom_error());
    CHECK(config_model_diff(&m, &m2) == NULL && !strcmp(m2.preset, "llama-small"), "model rt");
    free(js);
    m2 = m;
    m2.n_layer++;
    CHECK(config_model_diff(&m, &m2) && !strcmp(config_model_diff(&m, &m2), "model.n_layer"), "n_layer");
    m2 = m;
    m2.norm_eps = nextafterf(m.norm_eps, 1.0f);
    CHECK(config_model_diff(&m, &m2) && !strcmp(config_model_diff(&m, &m2), "model.norm_eps"),
          "one ulp must differ");
    m2 = m;
    strcpy(m2.norm, "layernorm");
    CHECK(config_model_diff(&m, &m2) && !strcmp(config_model_diff(&m, &m2), "model.norm"), "norm");
    m2 = m;
    strcpy(m2.preset, "other");
    CHECK(config_model_diff(&m, &m2) == NULL, "the preset label is not compared");
    /* Older checkpoints: missing fields keep defaults; unknown ones are errors. */
    CHECK(config_model_from_json(&m2, "{\"d_model\": 128}") == 0 && m2.d_model == 128 &&
          m2.n_layer == 2, "partial");
    CHECK(config_model_from_json(&m2, "{\"n_layers\": 3}") == -1 &&
          strstr(loom_error(), "'model.n_layers'"), "%s", loom_error());
    CHECK(config_model_from_json(&m2, "[1]") == -1, "array");
    CHECK(config_model_from_json(&m2, "{") == -1 && !strchr(loom_error(), '\n'), "truncated");
    CHECK(config_model_from_json(&m2, "{\"d_model\": 100, \"n_head\": 3}") == -1 &&
          strstr(loom_error(), "model.d_model"), "%s", loom_error());
}

static void test_markdown(void)
{
    char *md = config_markdown();
    CHECK(md != NULL, "%s", loom_error());
    if (!md) return;
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++) {
        char cell[160];
        snprintf(cell, sizeof cell, "| `%s` |", f[i].path);
        CHECK(strstr(md, cell), "docs lack %s", f[i].path);
    }
    CHECK(strstr(md, "## `train`") && strstr(md, "| `gpt2-small6` | 50304 | 384 | 6 |") &&
          strstr(md, "--set"), "docs sections/presets");
    /* The example job in the docs must load. */
    char *ex = strstr(md, "```json\n"), *ex_end = ex ? strstr(ex + 8, "```") : NULL;
    CHECK(ex && ex_end, "docs have no example");
    if (ex && ex_end) {
        job_config c;
        *ex_end = '\0';
        CHECK(config_load_string(&c, ex + 8, "docs example", NULL, 0) == 0, "%s", loom_error());
    }
    free(md);
}

int main(void)
{
    test_defaults();
    test_presets();
    test_order();
    test_set_values();
    test_errors();
    test_roundtrip();
    test_model_json();
    test_markdown();
    if (failures) {
        fprintf(stderr, "test_config: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_config: all checks passed\n");
    return 0;
}
