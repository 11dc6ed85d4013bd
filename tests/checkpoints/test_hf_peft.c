/* test_hf_peft.c: GPT-2 LoRA adapters as a PEFT adapter, against tests/fixtures/hf/gpt2-peft (made
 * by make_fixtures.py with PEFT, independently of loom): loom's LoRA logits with the fixture's
 * adapter values equal PeftModel's, and `export peft` writes the fixture's tensors bit for bit
 * (q, v fused into c_attn, zero k rows) and its r / alpha / patterns. Args: FIXTURES_DIR TMP_DIR. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoints/hf.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "tests/check.h"

#define T_IDS 12
static const int ids[T_IDS] = {3, 17, 42, 5, 88, 261, 0, 271, 23, 7, 150, 34}; /* make_fixtures.py's IDS */
static const unsigned targets = 1u << LORA_Q | 1u << LORA_V | 1u << LORA_O | 1u << LORA_FC | 1u << LORA_PROJ;

/* make_fixtures.py's lora_value(): element i of h.<l>.<stem>.lora_A/B, exact in fp32. */
static void lora_values(const char *name, float *out, size_t n)
{
    static const char *const stems[LORA_NTARGETS] = {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc", "", "", "mlp.proj"};
    int l = atoi(name + 2), t = 0, b = strstr(name, ".lora_B") != NULL;
    const char *stem = strchr(name + 2, '.') + 1;
    while (t < LORA_NTARGETS && (!stems[t][0] || strncmp(stem, stems[t], strlen(stems[t])) != 0)) t++;
    CHECK(t < LORA_NTARGETS, "%s: unknown target", name);
    for (size_t i = 0; i < n; i++) out[i] = (float)((long)((7 * i + 13 * (size_t)l + 5 * (size_t)t + 3 * (size_t)b) % 17) - 8) / 64.0f;
}

static float *read_floats(const char *path, size_t n)
{
    float *x = malloc(n * sizeof(float));
    FILE *f = fopen(path, "rb");
    size_t got = f && x ? fread(x, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    CHECK(got == n, "%s: %zu of %zu floats", path, got, n);
    return x;
}

typedef struct { const model *m; const float *host; } get_ctx;
static const float *get_tensor(void *ctx, const char *name)
{
    const get_ctx *g = ctx;
    int i = model_find(g->m, name);
    return i < 0 ? NULL : g->host + g->m->tensors[i].offset;
}

/* Every tensor of dir a's adapter_model.safetensors in b's with the same dtype, shape and bytes,
 * and as many tensors in each. */
static void check_same_tensors(const char *a, const char *b)
{
    char pa[4300], pb[4300];
    snprintf(pa, sizeof pa, "%s/adapter_model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/adapter_model.safetensors", b);
    st_file *x = st_open(pa), *y = st_open(pb);
    CHECK(x && y, "open %s / %s: %s", pa, pb, loom_error());
    for (int k = 0; x && y && k < x->ntensors; k++) {
        const st_tensor *t = &x->t[k];
        int yk = st_find(y, t->name);
        if (yk < 0) { CHECK(0, "%s: no tensor %s", pb, t->name); continue; }
        const st_tensor *u = &y->t[yk];
        CHECK(t->dtype == u->dtype && t->ndim == u->ndim && t->shape[0] == u->shape[0] && t->shape[1] == u->shape[1] &&
                  t->end - t->begin == u->end - u->begin &&
                  memcmp(x->map + x->data_start + t->begin, y->map + y->data_start + u->begin, t->end - t->begin) == 0,
              "%s: tensor %s differs from PEFT's", pb, t->name);
    }
    CHECK(x && y && x->ntensors > 0 && x->ntensors == y->ntensors, "%s and %s: different tensor counts", pa, pb);
    if (x && y) printf("ok   %d adapter tensors (PEFT's names) bitwise equal to PEFT's\n", x->ntensors);
    st_close(x);
    st_close(y);
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    char buf[16384];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    cJSON *c = cJSON_Parse(buf);
    CHECK(cJSON_IsObject(c), "%s: not a JSON object", path);
    return c;
}

static double json_num(const cJSON *c, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsBool(v) ? cJSON_IsTrue(v) : NAN;
}

/* r, lora_alpha, the c_attn patterns, fan_in_fan_out, use_rslora and the target set agree. */
static void check_config(const char *want_path, const char *got_path)
{
    cJSON *w = read_json(want_path), *g = read_json(got_path);
    static const char *const keys[][2] = {{"r", NULL}, {"lora_alpha", NULL}, {"rank_pattern", "c_attn"},
                                          {"alpha_pattern", "c_attn"}, {"fan_in_fan_out", NULL}, {"use_rslora", NULL}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(json_num(w, keys[i][0], keys[i][1]) == json_num(g, keys[i][0], keys[i][1]), "adapter_config %s%s%s: %g, PEFT's %g",
              keys[i][0], keys[i][1] ? "." : "", keys[i][1] ? keys[i][1] : "", json_num(g, keys[i][0], keys[i][1]),
              json_num(w, keys[i][0], keys[i][1]));
    const cJSON *wt = cJSON_GetObjectItemCaseSensitive(w, "target_modules"), *gt = cJSON_GetObjectItemCaseSensitive(g, "target_modules");
    CHECK(cJSON_GetArraySize(wt) == cJSON_GetArraySize(gt), "target_modules: %d names, PEFT's %d", cJSON_GetArraySize(gt),
          cJSON_GetArraySize(wt));
    const cJSON *it;
    cJSON_ArrayForEach(it, wt) {
        int found = 0;
        const cJSON *jt;
        cJSON_ArrayForEach(jt, gt) found |= cJSON_IsString(jt) && strcmp(jt->valuestring, it->valuestring) == 0;
        CHECK(found, "target_modules lacks %s", it->valuestring);
    }
    cJSON_Delete(w);
    cJSON_Delete(g);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: test_hf_peft FIXTURES_DIR TMP_DIR\n"); return 2; }
    log_set_quiet(1);
    char dir[4096], path[4200], out[4096];
    snprintf(dir, sizeof dir, "%s/gpt2", argv[1]);
    backend_config bc = {.threads = 1};
    backend *be = backend_select("cpu", &bc, NULL, 0);
    hf_model *h = hf_open(dir);
    CHECK(h != NULL, "%s: %s", dir, loom_error());
    model_config mc;
    if (!h || config_model_from_json(&mc, hf_model_json(h))) { CHECK(0, "%s", loom_error()); return 1; }
    lora_spec ls = {2, 4.0f, targets};
    model *m = model_create(&mc, be, 1, T_IDS, 1, 1, 0, &ls);
    CHECK(m != NULL, "model_create: %s", loom_error());
    if (!m) return 1;
    const model_tensor *bt;
    int nb;
    size_t nbp;
    model_base_table(m, &bt, &nb, &nbp);
    float *buf = malloc(nbp * sizeof(float)), *host = malloc(m->nparams * sizeof(float));
    for (int i = 0; i < nb; i++) {
        CHECK(hf_read(h, bt[i].name, buf, bt[i].numel) == 0, "%s: %s", bt[i].name, loom_error());
        CHECK(model_load_base_range(m, buf, bt[i].offset, bt[i].offset + bt[i].numel) == 0, "%s", loom_error());
    }
    for (int i = 0; i < m->ntensors; i++) lora_values(m->tensors[i].name, host + m->tensors[i].offset, m->tensors[i].numel);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));

    /* loom's LoRA logits, row by row through prefill, against PeftModel's */
    int V = mc.vocab;
    snprintf(path, sizeof path, "%s/gpt2-peft/logits.bin", argv[1]);
    float *want = read_floats(path, (size_t)T_IDS * V), *got = malloc((size_t)T_IDS * V * sizeof(float));
    double amax = 0, *wd = malloc((size_t)T_IDS * V * sizeof(double));
    for (int i = 0; i < T_IDS * V; i++) amax = fmax(amax, fabs(want[i])), wd[i] = want[i];
    for (int t = 0; t < T_IDS; t++) CHECK(model_prefill(m, ids, t + 1, got + (size_t)t * V) == 0, "prefill %d", t + 1);
    check_tol tol = {64 * FLT_EPSILON * amax, 1e-5}; /* test_hf's rule for fixture logits */
    check_allclose("LoRA logits vs PeftModel (gpt2-peft)", got, wd, (size_t)T_IDS * V, tol);

    /* export peft: PEFT's own tensors and config fields */
    mkdir(argv[2], 0755);
    snprintf(out, sizeof out, "%s/peft_gpt2", argv[2]);
    mkdir(out, 0755);
    get_ctx g = {m, host};
    char *mj = config_model_to_json(&mc);
    CHECK(hf_export_peft(out, mj, get_tensor, &g, ls.rank, ls.alpha, ls.targets, dir) == 0, "export peft: %s", loom_error());
    snprintf(path, sizeof path, "%s/gpt2-peft", argv[1]);
    check_same_tensors(path, out);
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/adapter_config.json", path);
    snprintf(b, sizeof b, "%s/adapter_config.json", out);
    check_config(a, b);
    free(mj);
    free(buf);
    free(host);
    free(want);
    free(got);
    free(wd);
    model_destroy(m);
    hf_close(h);
    backend_destroy(be);
    return failures != 0;
}
