/* fuzz_targets.c: the fuzz entry points of fuzz_targets.h over loom's real parsers. Scratch
 * files live in $LOOM_FUZZ_TMP (default /dev/shm or /tmp), named by pid, removed after each run.
 * Must never keep state between inputs (a crash must replay from its input alone). */
#include "fuzz_targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/safetensors.h"
#include "core/chat.h"
#include "core/config.h"
#include "core/sft_data.h"

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

/* Each line on its own through chat.h, as `loom sample` and the evaluator use it. */
static void fuzz_chat_lines(const char *s, int flags)
{
    int32_t tokens[512];
    uint8_t mask[512];
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        sft_example ex;
        if (chat_example_parse(p, len, &ex, flags) == 0) {
            if (ex.answers_json) chat_render(fuzz_chat(), &ex, tokens, mask, 512);
            chat_render_prompt(fuzz_chat(), &ex, tokens, 512);
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
    fuzz_chat_lines(s, (data[0] & 2) ? CHAT_PARSE_PROMPT_ONLY : 0);
    data_config dc;
    memset(&dc, 0, sizeof dc);
    fuzz_scratch(dc.train, sizeof dc.train, "jsonl");
    dc.val_split = (data[0] & 4) ? 0.25f : 0.0f;
    dc.max_len = 256;
    dc.skip_bad_lines = data[0] & 1;
    if (fuzz_write(dc.train, data + 1, n - 1) == 0) {
        sft_data d;
        if (sft_data_load(&d, &dc, fuzz_chat(), 1234) == 0) {
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

int fuzz_ckpt(const uint8_t *data, size_t n)
{
    char path[512];
    fuzz_scratch(path, sizeof path, "h5");
    if (fuzz_write(path, data, n) != 0) return 0;
    ckpt_reader *r = ckpt_open(path);
    if (r) {
        ckpt_state st;
        if (ckpt_read_state(r, &st) == 0) ckpt_state_free(&st);
        float buf[2][FUZZ_NELEM];
        ckpt_group g[2] = {{"model", fuzz_table, FUZZ_NT, buf[0], NULL, NULL}, {"optimizer/m", fuzz_table, FUZZ_NT, buf[1], NULL, NULL}};
        for (int i = 0; i < 2; i++)
            if (ckpt_has_group(r, g[i].path)) ckpt_read_group(r, &g[i]);
        ckpt_close(r);
        ckpt_print_info(path);
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
    fuzz_scratch(path, sizeof path, "safetensors");
    if (fuzz_write(path, data, n) != 0) return 0;
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

fuzz_target_fn fuzz_target_by_name(const char *name)
{
    if (strcmp(name, "safetensors") == 0) return fuzz_safetensors;
    if (strcmp(name, "config") == 0) return fuzz_config;
    if (strcmp(name, "jsonl") == 0) return fuzz_jsonl;
    if (strcmp(name, "ckpt") == 0) return fuzz_ckpt;
    return NULL;
}
