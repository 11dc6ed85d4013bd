/* test_needle.c: Needle's own files (checkpoints/needle.h) against the fixtures Needle's code wrote
 * (tests/fixtures/needle/make_model_fixtures.py): the base's config and every tensor placed, the
 * adapter's pairs, the config JSON and float repr as Python writes them, mtp_ tensors dropped, and a
 * bitwise round trip (read -> write -> the same bytes), and the ladder: a rung loom cuts equal to the
 * one Needle's `rung` cut (make_rung_fixture.py), tensor for tensor and byte for byte. Arguments: the fixtures folder, a scratch folder. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "checkpoints/needle.h"
#include "checkpoints/safetensors.h"
#define CHECK_CONTEXT loom_error
#include "tests/check.h"

static char fixtures[2048], scratch[2048];

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void check_config(const needle_file *f)
{
    const needle_config *c = needle_file_config(f);
    CHECK(c->vocab_size == 512 && c->d_model == 96 && c->num_heads == 4 && c->num_kv_heads == 2 && c->num_layers == 4,
          "sizes %d %d %d %d %d", c->vocab_size, c->d_model, c->num_heads, c->num_kv_heads, c->num_layers);
    CHECK(c->qk_head_dim == 16 && c->v_head_dim == 20 && c->sliding_window == 8 && c->engram_slots == 101, "dims");
    CHECK(c->engram_layers.n == 2 && c->engram_layers.v[1] == 3 && c->global_layers.n == 2 && c->global_layers.v[0] == 1,
          "layer lists");
    CHECK(c->rope_theta == 100000.0 && strcmp(c->dtype, "bfloat16") == 0 && c->flash && c->remat, "defaults");
    needle_geometry g;
    needle_geometry_of(c, &g);
    CHECK(g.hada_n == 128 && g.hada_a == 8 && g.hada_b == 16, "hada %d %d %d", g.hada_n, g.hada_a, g.hada_b);
    CHECK(g.engram_tables == 4 && g.engram_sub_dim == 24 && g.engram_dilation == 3, "engram %d %d", g.engram_tables,
          g.engram_sub_dim);
    CHECK(g.q_dim == 64 && g.k_dim == 32 && g.v_dim == 40 && g.attn_dim == 80, "attention dims");
    /* the config JSON as json.dumps(asdict(config)) wrote it, byte for byte */
    char *js = needle_config_json(c);
    const char *meta = needle_file_meta(f, "config");
    CHECK(js && meta && strcmp(js, meta) == 0, "config JSON differs:\n%s\n%s", js ? js : "", meta ? meta : "");
    free(js);
    CHECK(strcmp(needle_file_meta(f, "step"), "1234") == 0, "step");
    /* the default config: 127,849,762 parameters with the heads (NEEDLE.md section 1) */
    needle_config d;
    needle_config_default(&d);
    needle_shape *ex;
    int n;
    CHECK(needle_expected(&d, &ex, &n) == 0, "expected shapes of the default");
    double total = 0, heads = 0;
    for (int i = 0; i < n; i++) {
        double e = 1;
        for (int k = 0; k < ex[i].ndim; k++) e *= (double)ex[i].shape[k];
        if (ex[i].optional != 2) total += e;
        if (ex[i].optional == 1) heads += e;
    }
    CHECK(total == 127849762.0 && heads == 609522.0, "default config: %.0f parameters, heads %.0f", total, heads);
    free(ex);
}

static void check_py_float(void)
{
    static const struct { double x; const char *s; } t[] = {
        {1.5, "1.5"}, {2.0, "2.0"}, {100000.0, "100000.0"}, {1e-4, "0.0001"}, {1e-5, "1e-05"}, {1e16, "1e+16"},
        {1e15, "1000000000000000.0"}, {0.1, "0.1"}, {-0.25, "-0.25"}, {1.0 / 3, "0.3333333333333333"},
        {123456789.125, "123456789.125"}, {6.02e23, "6.02e+23"}, {0.0, "0.0"}, {5e-324, "5e-324"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        needle_py_float(t[i].x, buf, sizeof buf);
        CHECK(strcmp(buf, t[i].s) == 0, "repr(%.17g): %s, want %s", t[i].x, buf, t[i].s);
    }
    char *s = needle_py_str("a\"b\\c\n\x01\x7f\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(s && strcmp(s, "\"a\\\"b\\\\c\\n\\u0001\\u007f\\u00e9\\ud83d\\ude00\"") == 0, "json.dumps(str): %s", s ? s : "");
    free(s);
}

/* Every kept tensor as a needle_wtensor over the file's bytes; the file's metadata in its order. */
static int collect(needle_file *f, needle_wtensor *w, needle_meta *m, int *nm)
{
    int n = needle_file_count(f);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = needle_file_tensor(f, i);
        size_t nb;
        w[i].name = t->name, w[i].dtype = t->dtype, w[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
        w[i].data = needle_file_bytes(f, i, &nb);
    }
    *nm = needle_file_meta_count(f);
    for (int i = 0; i < *nm; i++) m[i].key = needle_file_meta_at(f, i, &m[i].value);
    return n;
}

static void check_base(void)
{
    char path[4096], out[4096];
    snprintf(path, sizeof path, "%s/model_base.safetensors", fixtures);
    needle_file *f = needle_open(path);
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    check_config(f);
    int n = needle_file_count(f);
    CHECK(n == 65, "%d tensors", n);
    int q = needle_file_find(f, "stack/layers/block/self_attn/q_proj/kernel");
    CHECK(q >= 0 && needle_file_tensor(f, q)->shape[2] == 64, "q_proj");
    float *x = q >= 0 ? malloc(4 * 96 * 64 * sizeof *x) : NULL;
    size_t nb = 0;
    const void *raw = q >= 0 ? needle_file_bytes(f, q, &nb) : NULL;
    CHECK(x && needle_file_read(f, q, x, 4 * 96 * 64) == 0 && nb == sizeof(float) * 4 * 96 * 64 &&
          memcmp(raw, x, nb) == 0, "q_proj read");
    free(x);
    /* bitwise round trip: the same tensors and metadata (in the file's order) give the same file */
    static needle_wtensor w[256];
    static needle_meta m[16];
    int nm;
    collect(f, w, m, &nm);
    snprintf(out, sizeof out, "%s/base_roundtrip.safetensors", scratch);
    CHECK(needle_write(out, w, n, m, nm) == 0, "write %s", out);
    CHECK(same_file(path, out), "%s differs from %s", out, path);
    /* needle_write_base: Needle's metadata keys, the config from the struct, tensors kept bitwise */
    snprintf(out, sizeof out, "%s/base_written.safetensors", scratch);
    CHECK(needle_write_base(out, needle_file_config(f), NULL, 1234, needle_file_meta(f, "run"), w, n) == 0, "write base");
    needle_file *g = needle_open(out);
    CHECK(g && needle_file_count(g) == n, "reopen written base");
    for (int i = 0; g && i < n; i++) {
        size_t na, nc;
        const void *a = needle_file_bytes(f, i, &na), *c = needle_file_bytes(g, i, &nc);
        CHECK(na == nc && memcmp(a, c, na) == 0 && strcmp(needle_file_tensor(g, i)->name, w[i].name) == 0,
              "tensor %s", w[i].name);
    }
    for (int i = 0; g && i < nm; i++)
        CHECK(strcmp(needle_file_meta(g, m[i].key), m[i].value) == 0, "metadata %s", m[i].key);
    needle_close(g);
    /* mtp_ tensors are dropped (run.py:400) */
    w[n] = w[0];
    w[n].name = "mtp_head/kernel";
    snprintf(out, sizeof out, "%s/base_mtp.safetensors", scratch);
    CHECK(needle_write(out, w, n + 1, m, nm) == 0, "write mtp");
    g = needle_open(out);
    CHECK(g && needle_file_count(g) == n && needle_file_find(g, "mtp_head/kernel") < 0, "mtp_ kept");
    needle_close(g);
    needle_close(f);
}

static void check_adapter(void)
{
    char path[4096], base[4096], out[4096];
    snprintf(path, sizeof path, "%s/model_lora.safetensors", fixtures);
    snprintf(base, sizeof base, "%s/model_base.safetensors", fixtures);
    needle_adapter *a = needle_adapter_open(path);
    needle_file *f = needle_open(base);
    CHECK(a && f, "open adapter and base");
    if (!a || !f) { needle_adapter_close(a); needle_close(f); return; }
    CHECK(a->n == 5 && a->rank == 4 && a->scale == 1.5, "adapter: %d paths, rank %d, scale %g", a->n, a->rank, a->scale);
    CHECK(a->meta[1] && strcmp(a->meta[1], "\"model_base.safetensors\"") == 0, "base metadata");
    CHECK(a->meta[4] && strcmp(a->meta[4], "null") == 0, "pieces null");
    CHECK(needle_adapter_check(a, f) == 0, "adapter fits its base");
    /* write_adapter's form from the parsed fields: every tensor and metadata value the same */
    const char *paths[8];
    needle_wtensor w[16];
    for (int k = 0; k < a->n; k++) {
        paths[k] = a->lora[k].path;
        for (int ab = 0; ab < 2; ab++) {
            const st_tensor *t = &a->st->t[ab ? a->lora[k].b : a->lora[k].a];
            needle_wtensor *x = &w[2 * k + ab];
            x->name = NULL, x->dtype = t->dtype, x->ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) x->shape[d] = t->shape[d];
            x->data = a->st->map + a->st->data_start + t->begin;
        }
    }
    snprintf(out, sizeof out, "%s/adapter_written.safetensors", scratch);
    CHECK(needle_write_adapter(out, paths, w, a->n, a->scale, "model_base.safetensors", a->rank, 0) == 0, "write adapter");
    needle_adapter *b = needle_adapter_open(out);
    CHECK(b && b->n == a->n, "reopen adapter");
    for (int k = 0; b && k < 6; k++)
        CHECK(a->meta[k] && b->meta[k] && strcmp(a->meta[k], b->meta[k]) == 0, "metadata %s", needle_adapter_keys[k]);
    for (int k = 0; b && k < b->n; k++) {
        const st_tensor *x = &a->st->t[a->lora[k].a], *y = &b->st->t[b->lora[k].a];
        const st_tensor *u = &a->st->t[a->lora[k].b], *v = &b->st->t[b->lora[k].b];
        CHECK(strcmp(a->lora[k].path, b->lora[k].path) == 0 && x->end - x->begin == y->end - y->begin &&
              memcmp(a->st->map + a->st->data_start + x->begin, b->st->map + b->st->data_start + y->begin, x->end - x->begin) == 0 &&
              memcmp(a->st->map + a->st->data_start + u->begin, b->st->map + b->st->data_start + v->begin, u->end - u->begin) == 0,
              "lora %s", a->lora[k].path);
    }
    needle_adapter_close(b);
    needle_adapter_close(a);
    needle_close(f);
}

/* The reference file holds what the model family's tests will need, with the shapes they expect. */
static void check_ref(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model_ref.safetensors", fixtures);
    st_file *r = st_open(path);
    CHECK(r != NULL, "open %s", path);
    if (!r) return;
    static const char *const names[] = {"batch/tokens", "batch/mask", "float/logits", "qat/logits", "float/token_loss",
                                        "qat/token_loss", "float/hidden", "cq/codebook", "perm/n1024/p1",
                                        "qat/grad/stack/layers/block/self_attn/q_proj/kernel/A",
                                        "qat/step/lora/stack/layers/block/self_attn/out_proj/kernel/B"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(st_find(r, names[i]) >= 0, "no %s", names[i]);
    int cb = st_find(r, "cq/codebook"), p = st_find(r, "perm/n1024/p1");
    float c[16], *perm = malloc(1024 * sizeof *perm);
    char seen[1024] = {0};
    int ok = cb >= 0 && st_read_f32(r, cb, c, 16) == 0 && p >= 0 && perm && st_read_f32(r, p, perm, 1024) == 0;
    CHECK(ok, "read codebook and permutation");
    for (int i = 0; ok && i < 16; i++) CHECK(i == 0 || c[i] > c[i - 1], "codebook not ascending at %d", i);
    for (int i = 0; ok && i < 1024; i++) {
        int v = (int)perm[i];
        CHECK(v >= 0 && v < 1024 && !seen[v] && (float)v == perm[i], "not a permutation at %d", i);
        if (v >= 0 && v < 1024) seen[v] = 1;
    }
    free(perm);
    st_close(r);
}

/* The rung view against the rung Needle cut: the same config string and, for every tensor of either,
 * one of the same name, dtype, shape and bytes in the other. */
static void check_same_tensors(const char *what, needle_file *a, needle_file *b)
{
    CHECK(strcmp(needle_file_meta(a, "config"), needle_file_meta(b, "config")) == 0, "%s: config %s vs %s", what,
          needle_file_meta(a, "config"), needle_file_meta(b, "config"));
    CHECK(needle_file_count(a) == needle_file_count(b), "%s: %d tensors vs %d", what, needle_file_count(a),
          needle_file_count(b));
    for (int i = 0; i < needle_file_count(a); i++) {
        const st_tensor *x = needle_file_tensor(a, i);
        int j = needle_file_find(b, x->name);
        CHECK(j >= 0, "%s: %s missing from the reference", what, x->name);
        if (j < 0) continue;
        const st_tensor *y = needle_file_tensor(b, j);
        int same = x->dtype == y->dtype && x->ndim == y->ndim && x->numel == y->numel;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        size_t na = 0, nb = 0;
        const void *pa = needle_file_bytes(a, i, &na), *pb = needle_file_bytes(b, j, &nb);
        CHECK(same && pa && pb && na == nb && memcmp(pa, pb, na) == 0, "%s: tensor %s differs", what, x->name);
        float *fa = malloc(x->numel * sizeof(float) + 4), *fb = malloc(x->numel * sizeof(float) + 4);
        CHECK(fa && fb && needle_file_read(a, i, fa, x->numel) == 0 && needle_file_read(b, j, fb, y->numel) == 0 &&
                  memcmp(fa, fb, x->numel * sizeof(float)) == 0, "%s: tensor %s read as floats differs", what, x->name);
        free(fa), free(fb);
    }
}

static void check_ladder(void)
{
    /* the bisection order of 20 layers as docs/needle.md section 5 lists it (architecture.py:131) */
    static const int order20[20] = {0, 19, 9, 14, 4, 6, 11, 16, 2, 7, 12, 17, 1, 3, 5, 8, 10, 13, 15, 18};
    needle_config c;
    needle_config_default(&c);
    c.num_layers = 20;
    for (int depth = 2; depth <= 20; depth++) {
        int sel[NEEDLE_MAX_LIST], want[20], k = 0;
        CHECK(needle_ladder_layers(&c, depth, sel) == 0, "rung %d of 20", depth);
        for (int l = 0; l < 20; l++) /* the first depth of the order, ascending */
            for (int j = 0; j < depth; j++)
                if (order20[j] == l) want[k++] = l;
        for (int j = 0; j < depth; j++) CHECK(sel[j] == want[j], "rung %d of 20: layer %d is %d, not %d", depth, j, sel[j], want[j]);
    }
    int sel[NEEDLE_MAX_LIST];
    CHECK(needle_ladder_layers(&c, 1, sel) != 0 && strstr(loom_error(), "2 to 20"), "rung 1 refused: %s", loom_error());
    CHECK(needle_ladder_layers(&c, 21, sel) != 0, "rung 21 refused");

    char base[2300], ref[2300];
    snprintf(base, sizeof base, "%s/model_base.safetensors", fixtures);
    snprintf(ref, sizeof ref, "%s/model_rung3.safetensors", fixtures);
    needle_file *r = needle_open_rung(base, 3), *n = needle_open(ref);
    CHECK(r && n, "open the rung: %s", loom_error());
    if (r && n) check_same_tensors("rung 3 of model_base", r, n);
    needle_file *whole = needle_open(base); /* a rung is known by its base (the digest) and depth */
    CHECK(r && whole && needle_file_digest(r) == needle_file_digest(whole), "a rung's digest is its file's");
    needle_close(whole);
    /* a rung of a rung nests (its saved ladder_order): rung 2 of Needle's rung 3 = rung 2 of the base */
    needle_file *r2 = needle_open_rung(base, 2), *n2 = needle_open_rung(ref, 2);
    CHECK(r2 && n2, "open rung 2: %s", loom_error());
    if (r2 && n2) check_same_tensors("rung 2 of rung 3", n2, r2);
    /* the full depth is the file itself; a depth outside [2, L] is refused naming the file */
    needle_file *full = needle_open_rung(base, 4);
    CHECK(full && needle_file_count(full) > needle_file_count(r ? r : full), "rung 4 of 4 is the base");
    CHECK(!needle_open_rung(base, 5) && strstr(loom_error(), "model_base.safetensors") && strstr(loom_error(), "2 to 4"),
          "rung 5 of 4 refused: %s", loom_error());
    needle_close(r), needle_close(n), needle_close(r2), needle_close(n2), needle_close(full);
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: test_needle FIXTURES SCRATCH\n"); return 2; }
    snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    snprintf(scratch, sizeof scratch, "%s", argv[2]);
    mkdir(scratch, 0755);
    check_py_float();
    check_base();
    check_adapter();
    check_ref();
    check_ladder();
    return check_exit_code("test_needle");
}
