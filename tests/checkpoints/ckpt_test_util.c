/* ckpt_test_util.c: the checkpoint tests' fixture (deterministic tensors and state), temp
 * directories under the build tree, and bitwise comparison of a loaded checkpoint.
 * Must never touch paths outside CKPT_TEST_TMP. */
#include "ckpt_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int tc_failures;

/* Odd shapes on purpose: 3-D, 4-D with a 1, a scalar, an empty tensor, and gaps between
 * offsets so a reader that ignores `offset` is caught. */
static const ckpt_tensor model_tensors[] = {
    {"wte.weight", 2, {257, 64}, 0},
    {"h.0.attn.q.weight", 2, {64, 64}, 16451},
    {"h.0.ln_1.bias", 1, {64}, 20550},
    {"odd.3d", 3, {3, 5, 7}, 20617},
    {"odd.4d", 4, {2, 1, 3, 5}, 20725},
    {"scalar", 0, {0}, 20758},
    {"h.1.empty", 2, {0, 3}, 20762},
};
#define MODEL_FLOATS 20765

static const ckpt_tensor lora_tensors[] = {
    {"h.0.attn.q.lora_a", 2, {64, 4}, 0},
    {"h.0.attn.q.lora_b", 2, {4, 64}, 256},
    /* tc_big only: tensors over CKPT_PIECE_BYTES (1 MB) so data moves in several pieces: an
     * uneven last piece, rows bigger than a piece, and a long 1-D tensor. */
    {"big.2d", 2, {700, 1000}, 512},
    {"big.rows", 2, {2, 300000}, 700512},
    {"big.1d", 1, {300001}, 1300512},
};
#define LORA_FLOATS 512
#define LORA_BIG_FLOATS 1600513

int tc_big;

static const char *group_paths[TC_NGROUPS] = {"model", "optimizer/m", "optimizer/v", "lora"};

void tc_check_fails(const char *file, int line, int failed, const char *want)
{
    if (!failed) {
        fprintf(stderr, "%s:%d: FAIL: expected an error containing \"%s\", got success\n", file, line, want);
        tc_failures++;
    } else if (!strstr(loom_error(), want)) {
        fprintf(stderr, "%s:%d: FAIL: error \"%s\" does not contain \"%s\"\n", file, line, loom_error(), want);
        tc_failures++;
    } else {
        printf("  ok: %s\n", loom_error());
    }
}

static void setup_tables(test_ckpt *c)
{
    memset(c, 0, sizeof *c);
    for (int g = 0; g < TC_NGROUPS; g++) {
        int lora = g == 3;
        c->groups[g].path = group_paths[g];
        c->groups[g].tensors = lora ? lora_tensors : model_tensors;
        c->groups[g].ntensors = lora ? (tc_big ? 5 : 2) : (int)(sizeof model_tensors / sizeof model_tensors[0]);
        c->sizes[g] = lora ? (tc_big ? LORA_BIG_FLOATS : LORA_FLOATS) : MODEL_FLOATS;
        c->groups[g].data = calloc(c->sizes[g], sizeof(float));
    }
}

static char *dup_str(const char *s)
{
    char *d = malloc(strlen(s) + 1);
    strcpy(d, s);
    return d;
}

void tc_make(test_ckpt *c, unsigned seed, long long step)
{
    setup_tables(c);
    for (int g = 0; g < TC_NGROUPS; g++) {
        /* xorshift64*: raw 32-bit patterns cover NaN payloads, +-Inf, -0 and denormals. */
        uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1) ^ (uint64_t)(step * 1315423911ll + g + 1);
        uint32_t *bits = (uint32_t *)c->groups[g].data;
        for (size_t i = 0; i < c->sizes[g]; i++) {
            x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
            bits[i] = (uint32_t)((x * 0x2545F4914F6CDD1Dull) >> 32);
        }
    }
    ckpt_state *s = &c->state;
    s->step = step;
    s->tokens_seen = step * 1000 + 7;
    s->sample_cursor = step * 8 + 3;
    s->epoch = step / 3;
    s->seed = 0xDEADBEEFCAFEF00Dull + seed;
    s->rng_counter = (uint64_t)s->sample_cursor; /* loom's data-order RNG position */
    s->adam_step = step - step / 5;               /* some steps skipped (non-finite) */
    s->base_digest = 0x0123456789ABCDEFull ^ (uint64_t)seed;
    s->lr = 3e-4 / (double)(step + 1);
    s->model_config_json = dup_str("{\"vocab\": 257, \"d_model\": 64, \"n_layer\": 2, \"name\": \"t\\u00e9st\"}");
    /* > 64 KB: an attribute that size needs HDF5's dense attribute storage. */
    size_t n = 70000;
    char *job = malloc(n + 1);
    memset(job, 'x', n);
    memcpy(job, "{\"pad\": \"", 9);
    memcpy(job + n - 2, "\"}", 2);
    job[n] = '\0';
    s->job_config_json = job;
    s->world_size = 4;
    s->zero_stage = 2;
    s->backend = dup_str("cpu");
    /* two ranks' lines, as session_save joins them */
    s->tuning = dup_str("cpu GenuineIntel-6-143-8/SkylakeX | chosen=openblas rival=onednn forced=0 "
                        "shapes=576,576,9,0,1,0,2=onednn\n-");
    s->source = dup_str("{\"format\": \"test\", \"file\": \"t\\u00e9st.safetensors\"}");
}

void tc_make_empty(test_ckpt *c)
{
    setup_tables(c);
}

void tc_free(test_ckpt *c)
{
    for (int g = 0; g < TC_NGROUPS; g++) free(c->groups[g].data);
    ckpt_state_free(&c->state);
}

static int compare(const test_ckpt *got, const test_ckpt *want)
{
    const ckpt_state *a = &got->state, *b = &want->state;
    int bad = a->step != b->step || a->tokens_seen != b->tokens_seen || a->sample_cursor != b->sample_cursor ||
              a->epoch != b->epoch || a->seed != b->seed || a->rng_counter != b->rng_counter || a->lr != b->lr ||
              a->adam_step != b->adam_step || a->base_digest != b->base_digest ||
              a->format_version != CKPT_FORMAT_VERSION ||
              a->world_size != b->world_size || a->zero_stage != b->zero_stage ||
              strcmp(a->model_config_json, b->model_config_json) || strcmp(a->job_config_json, b->job_config_json) ||
              strcmp(a->backend, b->backend) || strcmp(a->tuning, b->tuning) || strcmp(a->source, b->source);
    if (bad) fprintf(stderr, "state differs (step %lld vs %lld)\n", (long long)a->step, (long long)b->step);
    for (int g = 0; g < TC_NGROUPS; g++) {
        for (int k = 0; k < want->groups[g].ntensors; k++) {
            const ckpt_tensor *t = &want->groups[g].tensors[k];
            size_t n = 1;
            for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
            if (memcmp(got->groups[g].data + t->offset, want->groups[g].data + t->offset, n * 4) != 0) {
                fprintf(stderr, "tensor /%s/%s differs\n", want->groups[g].path, t->name);
                bad = 1;
            }
        }
    }
    return bad ? -1 : 0;
}

int tc_load_check(const char *dir_or_file, const test_ckpt *want)
{
    char path[4096];
    if (ckpt_resolve(dir_or_file, path, sizeof path)) {
        fprintf(stderr, "resolve: %s\n", loom_error());
        return -1;
    }
    ckpt_reader *r = ckpt_open(path);
    if (!r) {
        fprintf(stderr, "open: %s\n", loom_error());
        return -1;
    }
    test_ckpt got;
    tc_make_empty(&got);
    int rc = ckpt_read_state(r, &got.state);
    for (int g = 0; g < TC_NGROUPS && !rc; g++) rc = ckpt_read_group(r, &got.groups[g]);
    ckpt_close(r);
    if (rc) fprintf(stderr, "read: %s\n", loom_error());
    else rc = compare(&got, want);
    tc_free(&got);
    return rc;
}

void tc_rmrf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        chmod(path, 0700);
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            tc_rmrf(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

void tc_dir(char *buf, size_t len, const char *name)
{
    /* LOOM_TEST_TAG (the valgrind runs': vg) keeps a second run of the same test, which ctest -j
     * may start beside the first, out of its folder */
    const char *tag = getenv("LOOM_TEST_TAG");
    mkdir(CKPT_TEST_TMP, 0777);
    snprintf(buf, len, "%s/%s%s%s", CKPT_TEST_TMP, name, tag ? "." : "", tag ? tag : "");
    tc_rmrf(buf);
    if (mkdir(buf, 0777) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", buf, strerror(errno));
        exit(2);
    }
}

int tc_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int tc_copy(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char buf[65536];
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) n = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return in >= 0 && out >= 0 && n == 0 ? 0 : -1;
}

void tc_latest(const char *dir, char *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", dir);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)len, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

int tc_finish(const char *test)
{
    if (tc_failures) {
        fprintf(stderr, "%s: %d check(s) FAILED\n", test, tc_failures);
        return 1;
    }
    printf("%s: PASS\n", test);
    return 0;
}
