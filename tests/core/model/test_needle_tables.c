/* test_needle_tables.c: Needle's fixed tables computed by core/model/needle_tables.c against what
 * Needle's own code computed (tests/fixtures/needle/model_ref.safetensors and .json, written by
 * make_model_fixtures.py): the Hadamard permutations (n 128, 1024, plain and split), the Lloyd-Max
 * centres and CQ W4 codebook (bitwise), the engram hash at the default and the fixture geometry;
 * plus numpy values taken by hand (RandomState draws, another permutation, 2- and 3-bit centres).
 * Argument: the fixtures folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "checkpoints/safetensors.h"
#include "core/model/needle_tables.h"
#define CHECK_CONTEXT loom_error
#include "tests/check.h"

static char fixtures[2048];

/* Tensor `name` of the reference file as f32, numel checked; NULL (and a failed check) if absent. */
static float *ref_tensor(st_file *r, const char *name, size_t numel)
{
    int i = st_find(r, name);
    CHECK(i >= 0 && r->t[i].numel == numel, "%s: missing or %zu values, want %zu", name,
          i >= 0 ? r->t[i].numel : 0, numel);
    if (i < 0 || r->t[i].numel != numel) return NULL;
    float *v = malloc(numel * sizeof *v);
    if (v && st_read_f32(r, i, v, numel) == 0) return v;
    free(v);
    CHECK(0, "%s: read", name);
    return NULL;
}

/* The integer table in the f32 tensor `name` equals got[0 .. n). */
static void same_ints(st_file *r, const char *name, const int32_t *got, size_t n)
{
    float *want = ref_tensor(r, name, n);
    if (!want) return;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if ((float)got[i] != want[i] && bad++ == 0) first = i;
    CHECK(bad == 0, "%s: %zu of %zu differ, first at %zu: %d, Needle %.0f", name, bad, n, first, got[first],
          want[first]);
    free(want);
}

static void check_perms(st_file *r)
{
    static const int sizes[2] = {128, 1024};
    for (int s = 0; s < 2; s++)
        for (int split = 0; split < 2; split++) {
            int n = sizes[s];
            int32_t *p1 = malloc(2 * (size_t)n * sizeof *p1), *p2 = p1 + n;
            needle_hada_perms(n, split, p1, p2);
            char name[64];
            snprintf(name, sizeof name, "perm/n%d%s/p1", n, split ? "_split" : "");
            same_ints(r, name, p1, (size_t)n);
            snprintf(name, sizeof name, "perm/n%d%s/p2", n, split ? "_split" : "");
            same_ints(r, name, p2, (size_t)n);
            free(p1);
        }
    /* by hand from numpy 2.4.6: RandomState(11).permutation(10); RandomState(7).permutation(70000)[:5]
     * (a 17-bit mask: the redraw loop over a wide interval) */
    static const int32_t want10[10] = {7, 8, 2, 6, 4, 5, 1, 3, 0, 9}, want7[5] = {7653, 66274, 9119, 10760, 43166};
    int32_t p[10], *big = malloc(70000 * sizeof *big);
    needle_permutation(11, 10, p);
    CHECK(memcmp(p, want10, sizeof p) == 0, "RandomState(11).permutation(10) starts %d %d", p[0], p[1]);
    needle_permutation(7, 70000, big);
    CHECK(memcmp(big, want7, sizeof want7) == 0, "RandomState(7).permutation(70000) starts %d %d", big[0], big[1]);
    free(big);
}

static void check_generator(void)
{
    needle_mt mt;
    needle_mt_seed(&mt, 5489);  /* the reference MT19937's first output */
    CHECK(needle_mt_u32(&mt) == 3499211612u, "MT19937(5489) first output");
    needle_mt_seed(&mt, 0);     /* RandomState(0).randn(3): both values of a pair, then a new pair */
    double g0 = needle_mt_gauss(&mt), g1 = needle_mt_gauss(&mt), g2 = needle_mt_gauss(&mt);
    CHECK(g0 == 1.764052345967664 && g1 == 0.4001572083672233 && g2 == 0.9787379841057392,
          "RandomState(0).randn(3) = %.17g %.17g %.17g", g0, g1, g2);
}

/* Centres bitwise equal to want[0 .. 2^bits). */
static void same_centres(int bits, const double *want, const char *what)
{
    double c[16];
    CHECK(needle_lloyd_max(bits, c) == 0, "lloyd_max(%d)", bits);
    for (int k = 0; k < (1 << bits); k++)
        CHECK(memcmp(&c[k], &want[k], sizeof c[k]) == 0, "%s centre %d: %a, Needle %a", what, k, c[k], want[k]);
}

static void check_codebook(st_file *r, const cJSON *js)
{
    const cJSON *lm = cJSON_GetObjectItemCaseSensitive(js, "cq_lloyd_max_f64");
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(js, "cq_codebook_f32_hex");
    CHECK(cJSON_GetArraySize(lm) == 16 && cJSON_GetArraySize(hex) == 16, "model_ref.json: 16 centres and codes");
    if (cJSON_GetArraySize(lm) != 16 || cJSON_GetArraySize(hex) != 16) return;
    double want[16];  /* Python's repr, read back by strtod: the same doubles */
    for (int k = 0; k < 16; k++) want[k] = cJSON_GetArrayItem(lm, k)->valuedouble;
    same_centres(4, want, "W4 Lloyd-Max");

    float cb[16], *ref = ref_tensor(r, "cq/codebook", 16);
    CHECK(needle_cq_codebook(4, 128, cb) == 0, "codebook");
    for (int k = 0; ref && k < 16; k++) {
        uint32_t u;
        memcpy(&u, &cb[k], 4);
        char mine[16];
        snprintf(mine, sizeof mine, "%08x", u);
        const char *h = cJSON_GetArrayItem(hex, k)->valuestring;
        CHECK(memcmp(&cb[k], &ref[k], 4) == 0 && h && strcmp(h, mine) == 0, "codebook %d: %s, Needle %s", k, mine,
              h ? h : "?");
    }
    free(ref);
    /* by hand from numpy 2.4.6 (quantize._lloyd_max_gaussian(3), (2)): other level counts */
    static const double c3[8] = {-0x1.121468f3c6b81p+1, -0x1.556e7125deacap+0, -0x1.7f2e0f9d592abp-1,
                                 -0x1.e6e4509e1aa2cp-3, 0x1.000bb25e4dfa5p-2,  0x1.82dc469b936a5p-1,
                                 0x1.568607ac227c5p+0,  0x1.12e5beccc8fdap+1};
    static const double c2[4] = {-0x1.81b52e4028034p+0, -0x1.ce467275b97c2p-2, 0x1.cfd177c54d348p-2,
                                 0x1.828af1c856640p+0};
    same_centres(3, c3, "3-bit");
    same_centres(2, c2, "2-bit");
    CHECK(needle_lloyd_max(9, (double[2]){0}) != 0, "bits 9 refused");
}

static void check_hash(st_file *r)
{
    static const int orders[2] = {2, 3};
    float *tok = ref_tensor(r, "hash/tokens", 64);
    if (tok) {
        int32_t t[64], idx[64 * 6];
        for (int i = 0; i < 64; i++) t[i] = (int32_t)tok[i];
        needle_engram_indices(t, 64, orders, 2, 3, 0, 18432, idx);  /* the default geometry */
        same_ints(r, "hash/default_indices", idx, 64 * 6);
        free(tok);
    }
    /* the fixture model's geometry (2 heads, 101 slots) on its batch rows [2, 32] */
    float *bt = ref_tensor(r, "batch/tokens", 64);
    if (bt) {
        int32_t t[64], idx[64 * 4];
        for (int i = 0; i < 64; i++) t[i] = (int32_t)bt[i];
        for (int b = 0; b < 2; b++) needle_engram_indices(t + 32 * b, 32, orders, 2, 2, 0, 101, idx + 32 * 4 * b);
        same_ints(r, "batch/engram_indices", idx, 64 * 4);
        free(bt);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: test_needle_tables FIXTURES\n"); return 2; }
    snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    char path[2100];
    snprintf(path, sizeof path, "%s/model_ref.safetensors", fixtures);
    st_file *r = st_open(path);
    CHECK(r, "open %s", path);
    snprintf(path, sizeof path, "%s/model_ref.json", fixtures);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = calloc((size_t)len + 1, 1)) && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    if (f) fclose(f);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    CHECK(js, "read %s", path);
    free(text);

    check_generator();
    if (r) check_perms(r);
    if (r && js) check_codebook(r, js);
    if (r) check_hash(r);
    cJSON_Delete(js);
    if (r) st_close(r);
    return check_exit_code("test_needle_tables");
}
