/* test_grad_norm.c: the gradient norm train_run logs and clips with (issue 42), on real MPI ranks
 * (mpirun -np N) at ZeRO stages 0-3. One step with beta1 = 0 leaves the first moment m equal to
 * the (clip-scaled) reduced gradient, bitwise (m = 0 m + 1 g), and the checkpoint holds m as full
 * logical tensors however it was sharded. So, read back independently of the run:
 *   - metrics.jsonl's grad_norm of the step = sqrt(sum g^2) of the whole logical gradient (not a
 *     rank's shard), summed here in double;
 *   - rerun with train.grad_clip = norm / 4: m = g * clip / norm element-wise (the scale is fed
 *     the norm, not its square), and the logged norm is still the unclipped one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "core/config/config.h"
#include "core/train/train.h"
#include "parallel/comm.h"
#include "tests/check.h"

static void job(job_config *cfg, int stage, float clip, int np)
{
    const char *src = getenv("LOOM_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/tiny-train.json", src ? src : ".");
    if (config_load(cfg, path, NULL, 0)) { printf("FAIL: %s\n", loom_error()); exit(1); }
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s/configs/data/corpus.txt", src ? src : ".");
    snprintf(cfg->out, sizeof cfg->out, "test_grad_norm_out/np%d/z%d_%s", np, stage, clip > 0 ? "clip" : "noclip");
    cfg->train.steps = 1;
    cfg->train.batch_size = 6; /* 1, 2 and 3 ranks */
    cfg->train.seq_len = 32;
    cfg->train.beta1 = 0.0f;   /* m after one step = the gradient the optimizer was given */
    cfg->train.weight_decay = 0.0f;
    cfg->train.grad_clip = clip;
    cfg->parallel.zero_stage = stage;
    cfg->parallel.bucket_mb = 0.05f;
    cfg->parallel.threads = 1;
    cfg->checkpoint.every = 0; /* one save, at the end */
}

/* The grad_norm of the first line of out/metrics.jsonl (NaN if absent). */
static double logged_norm(const char *out)
{
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    size_t n;
    char *text = check_read_file(path, &n);
    const char *k = text ? strstr(text, "\"grad_norm\": ") : NULL;
    double v = k ? strtod(k + strlen("\"grad_norm\": "), NULL) : NAN;
    free(text);
    return v;
}

/* optimizer/m of the checkpoint in out/ckpt as the flat logical array (malloc'd), or NULL. */
static float *read_m(const job_config *cfg, size_t *n)
{
    model *lay = calloc(1, sizeof *lay);
    char dir[700], file[800];
    snprintf(dir, sizeof dir, "%s/ckpt", cfg->out);
    float *m = NULL;
    if (lay && model_layout(lay, &cfg->model) == 0 && ckpt_resolve(dir, file, sizeof file) == 0) {
        ckpt_tensor *table = session_ckpt_table_of(lay->tensors, lay->ntensors);
        ckpt_reader *r = ckpt_open(file);
        m = malloc(lay->nparams * sizeof(float));
        ckpt_group g = {"optimizer/m", table, lay->ntensors, m, NULL, NULL};
        if (!table || !r || !m || ckpt_read_group(r, &g)) { free(m); m = NULL; }
        *n = lay->nparams;
        if (r) ckpt_close(r);
        free(table);
    }
    if (!m) printf("FAIL reading %s: %s\n", dir, loom_error());
    if (lay) { free(lay->tensors); free(lay->region_offset); }
    free(lay);
    return m;
}

static double norm_of(const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return sqrt(s);
}

/* Tolerances. The code and this test both sum the same n squares, each exact in double (a float
 * squared has 48 significant bits), in different orders: each sum is within n 2^-53 relative of
 * the exact one (positive terms: Higham 3.1), the square root adds 2^-53. The log prints %.6g: 5e-6
 * relative. The scale is clip / norm rounded to float once (u = 2^-24) and g * scale rounds once
 * more: 2u plus the norms' difference. */
static double norm_rtol(size_t n) { return 2.0 * ((double)n + 1.0) * ldexp(1.0, -53); }

/* Stage `stage`: the unclipped run, then the clipped one; rank 0 checks. */
static void check_stage(comm *c, int stage)
{
    job_config cfg;
    train_options opt = {.quiet = 1};
    train_report rep;
    float *g = NULL, *gc = NULL;
    size_t n = 0, nc = 0;
    double norm = 0.0;
    char tag[32];
    snprintf(tag, sizeof tag, "np %d zero %d", c->size, stage);

    job(&cfg, stage, 0.0f, c->size);
    if (train_run(&cfg, c, &opt, &rep)) { printf("FAIL %s: %s\n", tag, loom_error()); comm_abort(c, 1); }
    if (c->rank == 0 && (g = read_m(&cfg, &n))) {
        norm = norm_of(g, n);
        double got = logged_norm(cfg.out), rt = 5e-6 + norm_rtol(n);
        CHECK(fabs(got - norm) <= rt * norm, "%s: logged grad_norm %.9g, sqrt(sum g^2) of the gradient %.9g "
              "(rel diff %.2e, bound %.2e)", tag, got, norm, fabs(got - norm) / norm, rt);
        printf("ok   %s: logged grad_norm %.6g = sqrt(sum g^2) %.9g over %zu gradients\n", tag, got, norm, n);
    }
    double share = norm; /* rank 0's to every rank: the clip of the second run */
    if (c->rank != 0) share = 0.0;
    if (comm_allreduce_host(c, &share, 1)) comm_abort(c, 1);
    float clip = (float)(share / 4.0); /* the norm well above the clip */

    job(&cfg, stage, clip, c->size);
    if (train_run(&cfg, c, &opt, &rep)) { printf("FAIL %s clip: %s\n", tag, loom_error()); comm_abort(c, 1); }
    if (c->rank == 0 && g && (gc = read_m(&cfg, &nc)) && nc == n) {
        double got = logged_norm(cfg.out), rt = 5e-6 + norm_rtol(n);
        CHECK(fabs(got - norm) <= rt * norm, "%s clip %g: logged grad_norm %.9g, want the unclipped %.9g", tag,
              (double)clip, got, norm);
        double *want = malloc(n * sizeof(double)), scale = (double)clip / norm;
        for (size_t i = 0; want && i < n; i++) want[i] = (double)g[i] * scale;
        char what[64];
        snprintf(what, sizeof what, "%s: clipped g = g clip / norm", tag);
        /* the same computation as the unclipped run up to the scale (a rerun is bitwise) */
        if (want) check_allclose(what, gc, want, n, (check_tol){0.0, 2.0 * CHECK_U_FP32 + norm_rtol(n)});
        free(want);
    }
    free(g);
    free(gc);
}

int main(int argc, char **argv)
{
    log_set_quiet(1);
    comm *c = comm_init(NULL, &argc, &argv, NULL);
    if (!c) { printf("FAIL: %s\n", loom_error()); return 1; }
    c->timeout_s = 120;
    char cmd[128]; /* one folder per world size: ctest -j may run np 2 and np 3 at once */
    snprintf(cmd, sizeof cmd, "rm -rf test_grad_norm_out/np%d && mkdir -p test_grad_norm_out/np%d", c->size, c->size);
    if (c->rank == 0 && system(cmd) != 0) return 1;
    for (int stage = 0; stage <= 3; stage++) check_stage(c, stage);
    double f = failures;
    comm_allreduce_host(c, &f, 1);
    failures = (int)f;
    int rc = c->rank == 0 ? check_exit_code("test_grad_norm") : (f > 0);
    comm_destroy(c);
    return rc;
}
