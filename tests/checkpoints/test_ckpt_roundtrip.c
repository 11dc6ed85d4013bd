/* test_ckpt_roundtrip.c: save then load a checkpoint with several groups and odd shapes and get
 * every bit back (NaN payloads included), the state exactly, and plain HDF5 readable by h5ls/h5dump.
 * Must never compare with a tolerance: checkpoints are bitwise. */
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"
#include "base/error.h"

/* Run a command and check its output contains each of the wanted strings. */
static void check_tool(const char *cmd, const char *const *want, int nwant)
{
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "popen %s", cmd);
    if (!p) return;
    size_t cap = 1 << 20, n = 0;
    char *out = malloc(cap);
    size_t got;
    while ((got = fread(out + n, 1, cap - 1 - n, p)) > 0) n += got;
    out[n] = '\0';
    int rc = pclose(p);
    CHECK(rc == 0, "%s exited with %d", cmd, rc);
    for (int i = 0; i < nwant; i++) CHECK(strstr(out, want[i]) != NULL, "%s: output lacks \"%s\"", cmd, want[i]);
    free(out);
}

static void check_readers(const char *dir, const char *file)
{
    char path[4096];
    CHECK(ckpt_resolve(dir, path, sizeof path) == 0 && strcmp(path, file) == 0, "resolve dir -> %s", path);
    CHECK(ckpt_resolve(file, path, sizeof path) == 0 && strcmp(path, file) == 0, "resolve file -> %s", path);
    ckpt_reader *r = ckpt_open(file);
    CHECK(r != NULL, "open: %s", loom_error());
    if (!r) return;
    CHECK(ckpt_has_group(r, "model") == 1, "has model");
    CHECK(ckpt_has_group(r, "optimizer/m") == 1, "has optimizer/m");
    CHECK(ckpt_has_group(r, "/optimizer") == 1, "has /optimizer");
    CHECK(ckpt_has_group(r, "optimizer/lora_m") == 0, "no optimizer/lora_m");
    CHECK(ckpt_has_group(r, "model/wte.weight") == 0, "a dataset is not a group");

    /* A reader whose table disagrees with the file: shape mismatch names both shapes. */
    test_ckpt c;
    tc_make_empty(&c);
    ckpt_tensor t[1] = {{"wte.weight", 2, {256, 64}, 0}};
    ckpt_group g = {"model", t, 1, c.groups[0].data, NULL, NULL};
    CHECK_FAILS(ckpt_read_group(r, &g) == -1, "shape mismatch for /model/wte.weight: file has [257, 64], expected [256, 64]");
    ckpt_tensor t2[1] = {{"h.0.attn.q.lora_c", 1, {4}, 0}};
    ckpt_group g2 = {"lora", t2, 1, c.groups[3].data, NULL, NULL};
    CHECK_FAILS(ckpt_read_group(r, &g2) == -1, "missing tensor /lora/h.0.attn.q.lora_c");
    ckpt_group g3 = {"optimizer/lora_m", t2, 1, c.groups[3].data, NULL, NULL};
    CHECK_FAILS(ckpt_read_group(r, &g3) == -1, "missing tensor /optimizer/lora_m/h.0.attn.q.lora_c");
    tc_free(&c);
    ckpt_close(r);
}

/* fetch hands over tensor k of the group in ctx straight from its buffer, and fails (NULL) at
 * the tensor named by fetch_fail_at of group fetch_fail_group. */
static int fetch_fail_group = -1, fetch_fail_at = -1, fetch_calls;
typedef struct {
    const ckpt_group *g;
    int index;
} fetch_ctx;

static const float *fetch_tensor(void *ctx, int k)
{
    fetch_ctx *f = ctx;
    fetch_calls++;
    if (f->index == fetch_fail_group && k == fetch_fail_at) {
        loom_fail("gather of tensor %d failed", k);
        return NULL;
    }
    return f->g->data + f->g->tensors[k].offset;
}

/* A save whose groups stream through fetch writes the same file; a fetch that fails aborts the
 * save with its reason and leaves the previous checkpoint as `latest`. */
static void check_fetch(const char *dir, const test_ckpt *c)
{
    ckpt_group g[TC_NGROUPS];
    fetch_ctx ctx[TC_NGROUPS];
    int total = 0;
    for (int i = 0; i < TC_NGROUPS; i++) {
        ctx[i] = (fetch_ctx){&c->groups[i], i};
        g[i] = c->groups[i];
        g[i].data = NULL;
        g[i].fetch = fetch_tensor;
        g[i].fetch_ctx = &ctx[i];
        total += g[i].ntensors;
    }
    ckpt_state st = c->state;
    st.step = 43;
    fetch_calls = 0;
    CHECK(ckpt_save(dir, &st, g, TC_NGROUPS, 0) == 0, "fetch save: %s", loom_error());
    CHECK(fetch_calls == total, "fetch called %d times for %d tensors", fetch_calls, total);
    test_ckpt want = *c;
    want.state.step = 43;
    CHECK(tc_load_check(dir, &want) == 0, "bitwise round trip of a fetched save");
    fetch_fail_group = 1, fetch_fail_at = 1;
    st.step = 44;
    CHECK_FAILS(ckpt_save(dir, &st, g, TC_NGROUPS, 0) == -1, "gather of tensor 1 failed");
    char latest[256];
    tc_latest(dir, latest, sizeof latest);
    CHECK(strcmp(latest, "step_00000043.h5") == 0, "latest after a failed fetch = '%s'", latest);
    fetch_fail_group = fetch_fail_at = -1;
}

int main(void)
{
    char dir[4096], file[4200], latest[256];
    tc_big = 1;
    tc_dir(dir, sizeof dir, "roundtrip");
    /* A directory that does not exist yet: ckpt_save creates it (mkdir -p). */
    strcat(dir, "/nested/run1");
    test_ckpt c;
    tc_make(&c, 7, 42);
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 0) == 0, "save: %s", loom_error());
    snprintf(file, sizeof file, "%s/step_00000042.h5", dir);
    CHECK(tc_exists(file), "%s exists", file);
    tc_latest(dir, latest, sizeof latest);
    CHECK(strcmp(latest, "step_00000042.h5") == 0, "latest = '%s'", latest);
    CHECK(tc_load_check(dir, &c) == 0, "bitwise round trip");
    check_readers(dir, file);
    CHECK(ckpt_inspect(file, NULL, NULL) == 0, "info: %s", loom_error());

    /* Saving the same step again replaces the file atomically and still round-trips. */
    test_ckpt c2;
    tc_make(&c2, 8, 42);
    free((char *)c2.state.backend);
    free((char *)c2.state.tuning);
    c2.state.backend = c2.state.tuning = NULL; /* NULL strings are stored as "" */
    CHECK(ckpt_save(dir, &c2.state, c2.groups, TC_NGROUPS, 0) == 0, "re-save: %s", loom_error());
    c2.state.backend = strdup("");
    c2.state.tuning = strdup("");
    CHECK(tc_load_check(dir, &c2) == 0, "bitwise round trip after re-save");

    /* The file is plain HDF5: named float arrays and readable attributes. */
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "h5ls -r '%s' 2>&1", file);
    const char *ls_want[] = {"/model/wte.weight", "Dataset {257, 64}", "/optimizer/m/h.0.attn.q.weight",
                             "/optimizer/v/odd.4d", "Dataset {2, 1, 3, 5}", "/lora/h.0.attn.q.lora_b",
                             "Dataset {2, 300000}"};
    if (tc_exists("/usr/bin/h5ls")) check_tool(cmd, ls_want, 7);
    snprintf(cmd, sizeof cmd, "h5dump -A '%s' 2>&1", file);
    const char *dump_want[] = {"loom-checkpoint", "ATTRIBUTE \"complete\"", "ATTRIBUTE \"crc32\"", "H5T_IEEE_F32LE",
                               "ATTRIBUTE \"sample_cursor\""};
    if (tc_exists("/usr/bin/h5dump")) check_tool(cmd, dump_want, 5);
    else printf("note: h5ls/h5dump not installed, tool readability not checked\n");
    check_fetch(dir, &c2);
    tc_free(&c);
    tc_free(&c2);
    return tc_finish("test_ckpt_roundtrip");
}
