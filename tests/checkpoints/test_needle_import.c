/* test_needle_import.c: a Needle base as a loom checkpoint (needle_ckpt_save, and needle_open of
 * the checkpoint; checkpoints/needle.h) on a variant of the fixture base holding all three dtypes:
 * every value through fp32 and back bitwise (BF16 and F16 NaN payloads, -0, subnormals,
 * infinities), the metadata and tensor order kept, mtp_ tensors dropped, the digest the file's, the
 * file written back byte for byte, a rung cut from the checkpoint equal to one cut from the file;
 * and a checkpoint that is not an import's, or whose record or values lie, refused in one line.
 * Arguments: the fixtures folder, a scratch folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle.h"
#include "checkpoints/safetensors.h"
#define CHECK_CONTEXT loom_error
#include "tests/check.h"

static char fixtures[2048], scratch[2048];

static int same_file(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y, ca = 0, cb = 0;
    while (same && (ca = fgetc(x)) == (cb = fgetc(y)) && ca != EOF) {}
    same = same && ca == cb;
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

/* Values no rounding makes: NaNs with payloads (quiet and signalling), -0, the smallest
 * subnormal, -inf, and a normal; put over the first elements of a BF16 or F16 tensor. */
static const uint16_t special_bf16[] = {0x7fc1, 0xff81, 0x8000, 0x0001, 0xff80, 0x3f81};
static const uint16_t special_f16[] = {0x7e01, 0xfc3f, 0x8000, 0x0001, 0xfc00, 0x3c01};

/* The fixture base with tensor i in F32, BF16 or F16 by i % 3, the specials in the first BF16 and
 * F16 tensors, the metadata in another order, and (mtp) an mtp_ tensor: written to `path`. */
static void write_mixed(const char *path, int mtp)
{
    char src[2300];
    snprintf(src, sizeof src, "%s/train_base.safetensors", fixtures);
    needle_file *f = needle_open(src);
    CHECK(f != NULL, "open %s", src);
    if (!f) return;
    const int n = needle_file_count(f);
    needle_wtensor *w = calloc((size_t)n + 1, sizeof *w);
    void **data = calloc((size_t)n + 1, sizeof *data);
    int put_bf16 = 0, put_f16 = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = needle_file_tensor(f, i);
        const st_dtype dt = i % 3 == 0 ? ST_F32 : i % 3 == 1 ? ST_BF16 : ST_F16;
        float *x = malloc(t->numel * sizeof(float) + 4);
        uint16_t *h = malloc(t->numel * 2 + 2);
        CHECK(needle_file_read(f, i, x, t->numel) == 0, "read %s", t->name);
        for (size_t e = 0; e < t->numel; e++) h[e] = dt == ST_BF16 ? st_f32_to_bf16(x[e]) : st_f32_to_f16(x[e]);
        const uint16_t *sp = dt == ST_BF16 && !put_bf16++ ? special_bf16 : dt == ST_F16 && !put_f16++ ? special_f16 : NULL;
        for (size_t e = 0; sp && e < 6 && e < t->numel; e++) h[e] = sp[e];
        if (dt == ST_F32) free(h), data[i] = x;
        else free(x), data[i] = h;
        w[i] = (needle_wtensor){t->name, dt, t->ndim, {0}, data[i]};
        for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
    }
    static const float mtp_data[6] = {1, 2, 3, 4, 5, 6};
    needle_wtensor all[128];
    memcpy(all, w, (size_t)n * sizeof *w);
    all[n] = (needle_wtensor){"mtp_head/kernel", ST_F32, 2, {2, 3}, mtp_data};
    const char *keys[4] = {"run", "step", "config", "format_version"};
    needle_meta m[4];
    for (int k = 0; k < 4; k++) m[k] = (needle_meta){keys[k], needle_file_meta(f, keys[k])};
    m[0].value = "{\"note\": \"caf\xc3\xa9 \\\"x\\\"\\n\"}";
    CHECK(needle_write(path, all, n + (mtp != 0), m, 4) == 0, "write %s", path);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(w);
    needle_close(f);
}

/* a and b hold the same tensors (names, dtypes, shapes, bytes, fp32 reads) and metadata. */
static void check_same(needle_file *a, needle_file *b, const char *what)
{
    CHECK(needle_file_count(a) == needle_file_count(b), "%s: %d vs %d tensors", what, needle_file_count(a),
          needle_file_count(b));
    CHECK(needle_file_digest(a) == needle_file_digest(b), "%s: digest %016llx vs %016llx", what,
          (unsigned long long)needle_file_digest(a), (unsigned long long)needle_file_digest(b));
    CHECK(needle_file_meta_count(a) == needle_file_meta_count(b), "%s: metadata count", what);
    for (int k = 0; k < needle_file_meta_count(a) && k < needle_file_meta_count(b); k++) {
        const char *va, *vb, *ka = needle_file_meta_at(a, k, &va), *kb = needle_file_meta_at(b, k, &vb);
        CHECK(strcmp(ka, kb) == 0 && strcmp(va, vb) == 0, "%s: metadata %d: %s vs %s", what, k, ka, kb);
    }
    for (int i = 0; i < needle_file_count(a) && i < needle_file_count(b); i++) {
        const st_tensor *x = needle_file_tensor(a, i), *y = needle_file_tensor(b, i);
        int same = strcmp(x->name, y->name) == 0 && x->dtype == y->dtype && x->ndim == y->ndim && x->numel == y->numel;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        CHECK(same, "%s: tensor %d: %s vs %s", what, i, x->name, y->name);
        if (!same) continue;
        size_t na, nb;
        const void *pa = needle_file_bytes(a, i, &na), *pb = needle_file_bytes(b, i, &nb);
        CHECK(pa && pb && na == nb && memcmp(pa, pb, na) == 0, "%s: tensor %s: stored bytes", what, x->name);
        float *fa = malloc(x->numel * 4 + 4), *fb = malloc(x->numel * 4 + 4), piece[7];
        CHECK(needle_file_read(a, i, fa, x->numel) == 0 && needle_file_read(b, i, fb, x->numel) == 0 &&
                  memcmp(fa, fb, x->numel * 4) == 0, "%s: tensor %s: fp32 values", what, x->name);
        size_t e0 = x->numel > 7 ? x->numel - 7 : 0, k = x->numel - e0; /* the last piece ends the tensor */
        CHECK(needle_file_read_range(b, i, e0, k, piece) == 0 && memcmp(piece, fb + e0, k * 4) == 0,
              "%s: tensor %s: read_range", what, x->name);
        free(fa), free(fb);
    }
}

/* The checkpoint back as a file: what `loom export needle` of an import writes. */
static void write_back(needle_file *g, const char *path)
{
    const int n = needle_file_count(g), nm = needle_file_meta_count(g);
    needle_wtensor *w = calloc((size_t)n + 1, sizeof *w);
    needle_meta *m = calloc((size_t)nm + 1, sizeof *m);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = needle_file_tensor(g, i);
        size_t nb;
        w[i] = (needle_wtensor){t->name, t->dtype, t->ndim, {0}, needle_file_bytes(g, i, &nb)};
        for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
    }
    for (int k = 0; k < nm; k++) m[k].key = needle_file_meta_at(g, k, &m[k].value);
    CHECK(needle_write_ordered(path, w, n, m, nm) == 0, "write back %s", path);
    free(w), free(m);
}

static void check_round_trip(void)
{
    char mixed[2300], plain[2300], dir[2300], back[2300];
    snprintf(mixed, sizeof mixed, "%s/mixed.safetensors", scratch);
    snprintf(plain, sizeof plain, "%s/mixed_nomtp.safetensors", scratch);
    snprintf(dir, sizeof dir, "%s/imported", scratch);
    snprintf(back, sizeof back, "%s/back.safetensors", scratch);
    write_mixed(mixed, 1);
    write_mixed(plain, 0);
    needle_file *f = needle_open(mixed), *p = needle_open(plain);
    CHECK(f && p, "open the mixed files");
    if (!f || !p) return;
    CHECK(needle_ckpt_save(f, mixed, dir) == 0, "import %s", mixed);
    needle_file *g = needle_open(dir);
    CHECK(g != NULL, "open the imported checkpoint");
    if (g) {
        check_same(f, g, "file vs its import");
        write_back(g, back);
        /* mtp_ dropped (as needle_open drops it): the file without it, byte for byte */
        CHECK(same_file(back, plain), "%s: not %s byte for byte", back, plain);
        CHECK(needle_ckpt_save(g, dir, dir) != 0 && strstr(loom_error(), "already a loom checkpoint"),
              "an import of an import refused");
    }
    CHECK(needle_is_base(dir) && needle_is_base(mixed) && !needle_is_base(scratch) && !needle_is_base(fixtures),
          "needle_is_base: the import and the file are bases, plain folders are not");
    /* the rung of 2 layers: from the checkpoint as from the file */
    needle_file *rf = needle_open_rung(mixed, 2), *rg = needle_open_rung(dir, 2);
    CHECK(rf && rg, "open the rungs");
    if (rf && rg) check_same(rf, rg, "rung 2 of the file vs of its import");
    needle_close(rf), needle_close(rg), needle_close(g), needle_close(f), needle_close(p);
}

/* A checkpoint of the import's tensors (element 10 of tensor bad_value changed to a value no
 * 16-bit float holds, unless -1) with this source and model_config. */
static void write_ckpt(const char *dir, needle_file *g, const char *source, const char *model_config, int bad_value)
{
    const int n = needle_file_count(g);
    ckpt_tensor *t = calloc((size_t)n + 1, sizeof *t);
    char (*names)[128] = calloc((size_t)n + 1, sizeof *names);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *x = needle_file_tensor(g, i);
        needle_ckpt_name(x->name, names[i], sizeof names[i]);
        t[i] = (ckpt_tensor){names[i], x->ndim, {0}, total};
        for (int d = 0; d < x->ndim; d++) t[i].shape[d] = x->shape[d];
        total += x->numel;
    }
    float *data = malloc(total * 4 + 4);
    for (int i = 0; i < n; i++)
        CHECK(needle_file_read(g, i, data + t[i].offset, needle_file_tensor(g, i)->numel) == 0, "read %d", i);
    if (bad_value >= 0) data[t[bad_value].offset + 10] = 1.0000001f;
    ckpt_state st = {0};
    st.model_config_json = model_config;
    st.job_config_json = "";
    st.world_size = 1;
    st.source = source;
    ckpt_group grp = {"model", t, n, data, NULL, NULL};
    CHECK(ckpt_save(dir, &st, &grp, 1, 0) == 0, "save %s", dir);
    free(data), free(names), free(t);
}

static void check_refusals(void)
{
    char dir[2300], bad[2300], file[2400];
    snprintf(dir, sizeof dir, "%s/imported", scratch);
    needle_file *g = needle_open(dir);
    CHECK(g != NULL, "open the import");
    if (!g) return;
    ckpt_reader *r = NULL;
    ckpt_state st = {0};
    CHECK(ckpt_resolve(dir, file, sizeof file) == 0 && (r = ckpt_open(file)) && ckpt_read_state(r, &st) == 0, "state");
    ckpt_close(r);
    const char *cfg = needle_file_meta(g, "config");
    int bf16 = 0;
    while (bf16 < needle_file_count(g) - 1 && needle_file_tensor(g, bf16)->dtype != ST_BF16) bf16++;
    struct {
        const char *name, *source, *config, *want;
        int bad_value;
    } cases[] = {
        {"plain", "", cfg, "not a Needle base's", -1},
        {"nodigest", "{\"format\": \"needle\"}", cfg, "digest is not 16 hex digits", -1},
        {"otherconfig", st.source, "{}", "model_config is not the config", -1},
        {"value", st.source, cfg, "is not a BF16 value", bf16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(bad, sizeof bad, "%s/bad_%s", scratch, cases[c].name);
        write_ckpt(bad, g, cases[c].source, cases[c].config, cases[c].bad_value);
        needle_file *b = needle_open(bad);
        size_t nb;
        if (b && cases[c].bad_value >= 0) { /* the lie shows where the value is asked for */
            CHECK(needle_file_tensor(b, bf16)->dtype == ST_BF16, "tensor %d is BF16", bf16);
            CHECK(!needle_file_bytes(b, cases[c].bad_value, &nb), "%s: bytes given", cases[c].name);
        } else {
            CHECK(!b, "%s: opened", cases[c].name);
        }
        CHECK(strstr(loom_error(), cases[c].want) && strstr(loom_error(), "bad_") && !strchr(loom_error(), '\n'),
              "%s: want one line with '%s' naming the checkpoint", cases[c].name, cases[c].want);
        CHECK(needle_is_base(bad) == (c != 0), "%s: needle_is_base (the source's format says)", cases[c].name);
        needle_close(b);
    }
    ckpt_state_free(&st);
    needle_close(g);
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: test_needle_import FIXTURES SCRATCH\n"); return 2; }
    snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    snprintf(scratch, sizeof scratch, "%s", argv[2]);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0) return 2;
    mkdir(scratch, 0755);
    check_round_trip();
    check_refusals();
    return check_exit_code("test_needle_import");
}
