/* test_traj.c: loom's training step against PyTorch's (issue 42). The fixtures of
 * tests/fixtures/traj (make_traj.py: torch.optim.AdamW in loom's two decay groups, accumulation
 * over 2 micro-batches, clip_grad_norm_ active, loom's warmup + cosine at a fractional and a whole
 * warmup, a fine-tune's loss mask) hold 5 steps of 4 jobs, GPT-2 and Llama, full and LoRA, run in
 * float64 from the HF fixtures' weights. Each job runs here through finetune_run, the path `loom
 * finetune` takes, and its per-step losses, gradient norms, learning rates and final weights must
 * match element-wise (check_allclose). No Python at test time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "core/config/config.h"
#include "core/text/sft_data.h"
#include "core/train/optim.h"
#include "core/train/train.h"
#include "parallel/comm.h"

#include "tests/check.h"

#define STEPS 5
#define OUT "test_traj_out"

static char g_fix[1100]; /* tests/fixtures/traj */
static char g_src[1024]; /* the source tree */

/* ---- the tolerances (check.h's rule: |loom - PyTorch| <= atol + rtol |PyTorch|) ----
 * The reference is float64 with loom's fp32 start and constants, so every bound is loom's fp32
 * arithmetic (u = 2^-24) alone; lambda = 6 and the sqrt(K) growth of independent roundings are
 * check.h's.
 * - loss: the forward is 2 L + 1 = 5 sums deep (attention and MLP of each layer, the head), the
 *   longest of V = 272 terms (the softmax's), each lambda sqrt(V) u relative, the errors adding
 *   along the depth; the mean over the targets only averages them. Later steps add the first-order
 *   effect of the weights' own differences (below): measured far under it (worst 2e-8 relative).
 * - gradient norm: the backward runs the depth twice (10 sums), and metrics.jsonl prints %.6g: half
 *   a unit of the 6th digit, 5e-6 relative.
 * - learning rate: metrics.jsonl's %.6g (5e-6); optim_lr itself is the reference's double rounded to
 *   float, one rounding (u) apart at most.
 * - weights: AdamW moves each weight by lr_s r_s a step, r = m^ / (sqrt(v^) + eps). By Cauchy-Schwarz
 *   |r| <= sqrt(sum_i a_i^2 / b_i) sqrt(bc2) / bc1 for the moment weights a_i = (1 - b1) b1^(t-i),
 *   b_i = (1 - b2) b2^(t-i): 1.00 at t = 1, 1.003 at t = 5 (b1 0.9, b2 0.95). r is homogeneous of
 *   degree 0 in the gradients, so a relative gradient error eps_g moves it by at most 2 eps_g |r|
 *   through m and again through v: |dr| <= 4 eps_g. A weight's gradient adds K = 128 terms (4 rows of
 *   at most 32 tokens); cancelling to 1 / kappa of their magnitudes it has eps_g = lambda sqrt(K) u
 *   kappa (4.1e-6 kappa). kappa = 1000 admits every gradient element whose terms cancel to 0.1% (the
 *   worst elements measured: kappa ~ 30 for GPT-2's h.0.mlp.fc.weight in the Release build, ~ 270
 *   for Llama's h.1.mlp.down.weight in the -fsanitize build, whose other instruction selection
 *   rounds otherwise). So atol = 4 lambda sqrt(K) u kappa sum_s lr_s = 1.6e-2 sum_s lr_s, and
 *   rtol = 2 u a step for the weight's own roundings
 *   (the update and the decay product).
 *   A weight whose exact gradient is 0 by symmetry is the exception: GPT-2's key bias (softmax over
 *   the keys does not see q . b_k, the same for every key). PyTorch's float64 gradient there is
 *   1e-17 and moves nothing; loom's fp32 one is rounding noise near eps, which Adam's division scales
 *   up to a step of any size |r| <= 1.003: those tensors get atol = 1.003 sum_s lr_s, the most Adam
 *   can move them (measured: 0.015 of it).
 * What plausible bugs cost against these (each was planted in a scratch copy and failed here): weight
 * decay on a norm weight (~1) moves it by wd sum lr = 0.1 sum lr, 6 times the weights' atol (7x
 * measured on GPT-2's h.0.ln_1.weight); clipping by the squared norm reweights the steps in Adam's
 * moments (11x on GPT-2's wpe); a warmup off by one step, or floored instead of ceiled at a
 * fractional warmup, changes a rate far past 5e-6; an accumulation that also divides by the
 * micro-batch count halves the logged gradient norm (AdamW's scale-free update hides it in the
 * weights: the norm is what catches it). */
#define TRAJ_V 272.0
#define TRAJ_K 128.0
#define TRAJ_KAPPA 1000.0
#define TRAJ_R_MAX 1.003

static check_tol tol_loss(void)
{
    check_tol t = {0.0, 5.0 * CHECK_LAMBDA * sqrt(TRAJ_V) * CHECK_U_FP32};
    return t;
}

static check_tol tol_norm(void)
{
    check_tol t = {0.0, 10.0 * CHECK_LAMBDA * sqrt(TRAJ_V) * CHECK_U_FP32 + 5e-6};
    return t;
}

static check_tol tol_weight(const char *name, double lr_sum)
{
    double a = strstr(name, "attn.k.bias") ? TRAJ_R_MAX : 4.0 * CHECK_LAMBDA * sqrt(TRAJ_K) * CHECK_U_FP32 * TRAJ_KAPPA;
    check_tol t = {a * lr_sum, 2.0 * STEPS * CHECK_U_FP32};
    return t;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static cJSON *read_json(const char *path)
{
    char *s = read_text(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    CHECK(j != NULL, "cannot read %s", path);
    return j;
}

static double *json_doubles(const cJSON *a, int n)
{
    double *x = calloc((size_t)n, sizeof *x);
    for (int i = 0; i < n && i < cJSON_GetArraySize(a); i++) x[i] = cJSON_GetArrayItem(a, i)->valuedouble;
    return x;
}

/* The data: loom's rendering of chats.jsonl (the train split, file order) is the fixture's rows,
 * token for token and mask for mask, so the trajectories below start from the same batches. */
static void check_rows(const job_config *cfg)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/rows.json", g_fix);
    cJSON *rows = read_json(path);
    tokenizer *tok = tokenizer_open("byte");
    chat_template ct;
    sft_data d;
    data_config dc = cfg->data;
    CHECK(tok && chat_template_init(&ct, tok, "") == 0 && sft_data_load(&d, &dc, &ct, cfg->train.seed) == 0,
          "load %s: %s", dc.train, loom_error());
    CHECK(d.train.n == cJSON_GetArraySize(rows), "%d rows rendered, fixture %d", d.train.n, cJSON_GetArraySize(rows));
    int bad = 0;
    for (int i = 0; i < d.train.n && i < cJSON_GetArraySize(rows); i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i), *tk = cJSON_GetObjectItem(r, "tokens");
        const cJSON *mk = cJSON_GetObjectItem(r, "mask");
        int n = cJSON_GetArraySize(tk);
        if (d.train.len[i] != n) { bad++; continue; }
        for (int t = 0; t < n; t++)
            bad += d.train.tokens[(size_t)i * d.T + t] != cJSON_GetArrayItem(tk, t)->valueint ||
                   d.train.loss_mask[(size_t)i * d.T + t] != cJSON_GetArrayItem(mk, t)->valueint;
    }
    CHECK(bad == 0, "%d row(s) or tokens differ from the fixture's rendering (make_traj.py render)", bad);
    sft_data_free(&d);
    tokenizer_free(tok);
    cJSON_Delete(rows);
}

/* metrics.jsonl's lr and grad_norm of each step (printed %.6g). */
static void read_metrics(const char *dir, double *lr, double *norm)
{
    char path[1200], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no %s", path);
    for (int i = 0; i < STEPS; i++) lr[i] = norm[i] = NAN;
    while (f && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItem(j, "step"), *l = cJSON_GetObjectItem(j, "lr");
        const cJSON *g = cJSON_GetObjectItem(j, "grad_norm");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(l) && cJSON_IsNumber(g) && s->valueint >= 1 && s->valueint <= STEPS) {
            lr[s->valueint - 1] = l->valuedouble;
            norm[s->valueint - 1] = g->valuedouble;
        }
        cJSON_Delete(j);
    }
    if (f) fclose(f);
}

/* ---- the final weights ---- */

typedef struct tensor_list {
    int n, overflow;
    char name[64][128];  /* "model/h.0.attn.q.weight", "lora/h.0.attn.q.lora_A" */
    int ndim[64];
    int64_t shape[64][CKPT_MAX_DIMS];
} tensor_list;

static void list_tensor(void *ctx, const ckpt_tensor_report *t)
{
    tensor_list *l = ctx;
    if (strncmp(t->name, "model/", 6) && strncmp(t->name, "lora/", 5)) return; /* not optimizer/ */
    if (l->n == 64 || t->ndim < 1 || t->ndim > CKPT_MAX_DIMS) { l->overflow = 1; return; }
    snprintf(l->name[l->n], sizeof l->name[0], "%s", t->name);
    l->ndim[l->n] = t->ndim;
    for (int d = 0; d < t->ndim; d++) l->shape[l->n][d] = t->shape[d];
    l->n++;
}

typedef struct sink {
    float *x;
    size_t n;
} sink;

static int sink_put(void *ctx, const float *x, size_t n)
{
    sink *s = ctx;
    memcpy(s->x + s->n, x, n * sizeof *x);
    s->n += n;
    return 0;
}

/* Tensor "GROUP/NAME" of an open checkpoint into a malloc'd array (NULL + CHECK on failure). */
static float *read_tensor(ckpt_reader *r, const tensor_list *l, int i, size_t *numel)
{
    const char *slash = strchr(l->name[i], '/');
    char group[16];
    snprintf(group, sizeof group, "%.*s", (int)(slash - l->name[i]), l->name[i]);
    ckpt_tensor t = {slash + 1, l->ndim[i], {0}, 0};
    size_t n = 1;
    for (int d = 0; d < t.ndim; d++) n *= (size_t)(t.shape[d] = l->shape[i][d]);
    float *buf = malloc(ckpt_piece_size(&t) * sizeof *buf);
    sink s = {malloc(n * sizeof(float)), 0};
    int rc = ckpt_read_pieces(r, group, &t, buf, sink_put, &s);
    free(buf);
    CHECK(rc == 0 && s.n == n, "%s: %s", l->name[i], loom_error());
    if (rc) { free(s.x); return NULL; }
    *numel = n;
    return s.x;
}

/* Every weight of the run's final checkpoint against the reference: full fine-tunes against the
 * fixture's final/ HF folder through loom's own import (the mapping tests/checkpoints checks),
 * LoRA adapters against lora.bin in ref.json's order. */
static void check_weights(const char *name, const char *run_dir, const cJSON *ref, double lr_sum, double *worst)
{
    char path[1400], ckpt[1400], refck[1400];
    snprintf(path, sizeof path, "%s/ckpt", run_dir);
    CHECK(ckpt_resolve(path, ckpt, sizeof ckpt) == 0, "%s: %s", path, loom_error());
    tensor_list l = {0};
    ckpt_inspect_fns fns = {NULL, NULL, list_tensor};
    CHECK(ckpt_inspect(ckpt, &fns, &l) == 0 && l.n > 0 && !l.overflow, "%s: %s (%d tensors listed%s)", ckpt,
          loom_error(), l.n, l.overflow ? ", more not" : "");
    const cJSON *lora = cJSON_GetObjectItem(ref, "lora");
    float *lora_ref = NULL;
    ckpt_reader *rr = NULL;
    if (lora) {
        snprintf(path, sizeof path, "%s/%s/lora.bin", g_fix, name);
        lora_ref = (float *)read_text(path);
        CHECK(lora_ref != NULL, "no %s", path);
    } else {
        snprintf(path, sizeof path, "%s/%s/final", g_fix, name);
        snprintf(refck, sizeof refck, "%s/ref.h5", run_dir);
        remove(refck);
        CHECK(import_hf(path, refck) == 0 && (rr = ckpt_open(refck)), "import %s: %s", path, loom_error());
    }
    ckpt_reader *r = ckpt_open(ckpt);
    CHECK(r != NULL, "%s: %s", ckpt, loom_error());
    int compared = 0;
    for (int i = 0; r && i < l.n; i++) {
        size_t n = 0, m = 0;
        float *got = read_tensor(r, &l, i, &n), *want = NULL;
        if (lora && lora_ref) {
            size_t off = 0; /* the tensor's place in lora.bin */
            for (int k = 0; k < cJSON_GetArraySize(lora); k++) {
                const cJSON *e = cJSON_GetArrayItem(lora, k), *sh = cJSON_GetObjectItem(e, "shape");
                size_t ne = (size_t)cJSON_GetArrayItem(sh, 0)->valueint * (size_t)cJSON_GetArrayItem(sh, 1)->valueint;
                if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, l.name[i] + 5) == 0) {
                    want = malloc(ne * sizeof *want);
                    memcpy(want, lora_ref + off, ne * sizeof *want);
                    m = ne;
                }
                off += ne;
            }
        } else if (rr) {
            want = read_tensor(rr, &l, i, &m);
        }
        CHECK(got && want && n == m, "%s %s: no reference of the same size (%zu, %zu)", name, l.name[i], n, m);
        if (got && want && n == m) {
            double *w = malloc(n * sizeof *w);
            for (size_t k = 0; k < n; k++) w[k] = want[k];
            char what[200];
            snprintf(what, sizeof what, "%s %s", name, l.name[i]);
            check_tol tol = tol_weight(l.name[i], lr_sum);
            check_allclose_v(what, got, w, n, tol, getenv("TRAJ_VERBOSE") != NULL);
            for (size_t k = 0; k < n; k++) {
                double e = fabs(got[k] - w[k]) / (tol.atol + tol.rtol * fabs(w[k]));
                if (e > *worst) *worst = e;
            }
            free(w);
            compared++;
        }
        free(got);
        free(want);
    }
    CHECK(compared == (lora ? cJSON_GetArraySize(lora) : l.n), "%s: %d tensors compared", name, compared);
    if (r) ckpt_close(r);
    if (rr) ckpt_close(rr);
    free(lora_ref);
}

/* One per-step series against the reference; the worst error / bound goes to *worst. */
static void check_series(const char *what, const double *got, const double *want, check_tol tol, double *worst)
{
    /* doubles compared as doubles (check_allclose takes float: its cast would decide alone) */
    for (int i = 0; i < STEPS; i++) {
        double e = fabs(got[i] - want[i]), b = tol.atol + tol.rtol * fabs(want[i]);
        CHECK(e <= b, "%s step %d: loom %.9g, PyTorch %.9g, |err| %.3g > bound %.3g", what, i + 1, got[i],
              want[i], e, b);
        if (b > 0 && e / b > *worst) *worst = e / b;
        if (getenv("TRAJ_VERBOSE")) /* every value, not only failures */
            printf("  %s step %d: loom %.9g PyTorch %.9g rel err %.2e\n", what, i + 1, got[i], want[i],
                   e / fabs(want[i]));
    }
}

/* What `loom finetune` does with an HF base (launch/cli.c cli_load_config): the folder's config.json
 * decides the model, but for the field the job names itself (model.tokenizer: loom's byte ids). */
static int adopt_base(job_config *cfg)
{
    int n;
    const config_field *f = config_fields(&n);
    unsigned char *explicit = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) explicit[i] = strcmp(f[i].path, "model.tokenizer") == 0;
    int rc = session_model_from_hf(&cfg->model, cfg->finetune.base, explicit);
    free(explicit);
    return rc ? rc : config_validate(cfg);
}

static void run_case(comm *c, const char *name, int first)
{
    char job[1200], ov_data[1200], ov_base[1200], ov_out[1200], dir[600];
    snprintf(job, sizeof job, "%s/%s/job.json", g_fix, name);
    snprintf(dir, sizeof dir, OUT "/%s", name);
    snprintf(ov_data, sizeof ov_data, "data.train=%s/chats.jsonl", g_fix);
    snprintf(ov_base, sizeof ov_base, "finetune.base=%s/tests/fixtures/hf/%.*s", g_src,
             (int)(strchr(name, '-') - name), name);
    snprintf(ov_out, sizeof ov_out, "out=%s", dir);
    const char *ov[] = {ov_data, ov_base, ov_out};
    job_config cfg;
    if (config_load(&cfg, job, ov, 3) || adopt_base(&cfg)) { CHECK(0, "%s: %s", job, loom_error()); return; }
    if (first) check_rows(&cfg);
    double loss[STEPS], lr[STEPS], norm[STEPS], lr_fn[STEPS];
    train_options opt = {.losses_out = loss, .losses_cap = STEPS, .quiet = 1, .overwrite = 1};
    train_report rep;
    if (finetune_run(&cfg, c, &opt, &rep) || rep.steps_done != STEPS) {
        CHECK(0, "%s: finetune_run: %s (%d steps)", name, loom_error(), rep.steps_done);
        return;
    }
    read_metrics(dir, lr, norm);
    train_config tc = cfg.train;
    tc.steps = rep.total_steps;
    for (int i = 0; i < STEPS; i++) lr_fn[i] = optim_lr(&tc, i);
    snprintf(job, sizeof job, "%s/%s/ref.json", g_fix, name);
    cJSON *ref = read_json(job);
    if (!ref) return;
    double *want_loss = json_doubles(cJSON_GetObjectItem(ref, "loss"), STEPS);
    double *want_norm = json_doubles(cJSON_GetObjectItem(ref, "grad_norm"), STEPS);
    double *want_lr = json_doubles(cJSON_GetObjectItem(ref, "lr"), STEPS);
    double lr_sum = 0, w_loss = 0, w_norm = 0, w_lr = 0, w_lrfn = 0, w_wt = 0;
    for (int i = 0; i < STEPS; i++) lr_sum += want_lr[i];
    char what[100];
    snprintf(what, sizeof what, "%s loss", name);
    check_series(what, loss, want_loss, tol_loss(), &w_loss);
    snprintf(what, sizeof what, "%s grad_norm", name);
    check_series(what, norm, want_norm, tol_norm(), &w_norm);
    /* the rate: metrics.jsonl's print and optim_lr itself (see the tolerances) */
    check_tol t_print = {0.0, 5e-6}, t_fn = {0.0, CHECK_U_FP32};
    snprintf(what, sizeof what, "%s lr (metrics.jsonl)", name);
    check_series(what, lr, want_lr, t_print, &w_lr);
    snprintf(what, sizeof what, "%s lr (optim_lr)", name);
    check_series(what, lr_fn, want_lr, t_fn, &w_lrfn);
    check_weights(name, dir, ref, lr_sum, &w_wt);
    printf("%-10s worst |err| / bound: loss %.3f, grad norm %.3f, lr %.3f (optim_lr %.3f), weights %.3f\n",
           name, w_loss, w_norm, w_lr, w_lrfn, w_wt);
    free(want_loss);
    free(want_norm);
    free(want_lr);
    cJSON_Delete(ref);
}

int main(int argc, char **argv)
{
    log_set_quiet(1);
    const char *src = getenv("LOOM_SOURCE_DIR");
    snprintf(g_src, sizeof g_src, "%s", src ? src : ".");
    snprintf(g_fix, sizeof g_fix, "%s/tests/fixtures/traj", g_src);
    if (system("mkdir -p " OUT) != 0) return 1;
    comm *c = comm_init("self", &argc, &argv, NULL);
    if (!c) { printf("FAIL: %s\n", loom_error()); return 1; }
    const char *cases[] = {"gpt2-full", "gpt2-lora", "llama-full", "llama-lora"};
    for (int i = 0; i < 4; i++)
        if (argc < 2 || strcmp(argv[1], cases[i]) == 0) run_case(c, cases[i], i == 0 || argc >= 2);
    comm_destroy(c);
    printf(failures ? "%d check(s) failed\n" : "all trajectory checks passed\n", failures);
    return failures ? 1 : 0;
}
