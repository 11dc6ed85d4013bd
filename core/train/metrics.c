/* metrics.c: progress lines, metrics.jsonl and the loss-curve SVG (see metrics.h).
 * The SVG is rewritten every few steps so a person can watch the run in a browser; it is drawn
 * from the in-memory history, which a resumed run first fills from the JSONL it appends to. */
#include "core/train/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/log.h"
#include "core/train/plot.h"

struct metrics {
    int active;          /* rank 0 */
    int quiet;
    int tty;             /* stderr (where progress goes) is a terminal: draw a bar */
    int total;
    int every;           /* train.log_every: a progress line each `every` steps, the first and last */
    int shown;           /* progress lines printed by this run */
    FILE *jsonl;
    char svg_path[600];
    char name[128];      /* the job's, the plot's title */
    double elapsed;
    int n;               /* steps recorded */
    plot_series loss, val, tps;
    double *tps_hist, *mfu_hist;
};

/* One kept line of an earlier metrics.jsonl back into the plot's series (and the elapsed time). */
static void metrics_replay(metrics *mt, const cJSON *line, double step)
{
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(line, "val_loss");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(line, "loss");
    const cJSON *tps = cJSON_GetObjectItemCaseSensitive(line, "tokens_per_s");
    const cJSON *el = cJSON_GetObjectItemCaseSensitive(line, "elapsed_s");
    if (cJSON_IsNumber(val)) plot_series_add(&mt->val, step, val->valuedouble);
    if (cJSON_IsNumber(loss)) plot_series_add(&mt->loss, step, loss->valuedouble);
    if (cJSON_IsNumber(tps)) plot_series_add(&mt->tps, step, tps->valuedouble);
    if (cJSON_IsNumber(el)) mt->elapsed = el->valuedouble;
}

/* A --resume after step `upto`: the lines of path for steps 1..upto, in the plot and rewritten
 * (temp + rename: a crash here loses nothing); later steps and unreadable lines are dropped. A
 * missing file is a run that starts its log here. -1 + loom_fail. */
static int metrics_reload(metrics *mt, const char *path, long upto)
{
    FILE *in = fopen(path, "r");
    if (!in) return 0;
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return loom_fail("%s: cannot write (metrics.jsonl of the resumed run)", tmp);
    }
    char *buf = NULL;
    size_t cap = 0;
    long kept = 0, dropped = 0;
    while (getline(&buf, &cap, in) > 0) {
        cJSON *line = cJSON_Parse(buf);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(line, "step");
        int keep = cJSON_IsNumber(step) && step->valuedouble >= 1 && step->valuedouble <= (double)upto;
        size_t n = strlen(buf);
        if (keep) { /* a whole line may lack its newline (a kill between the two): add it */
            metrics_replay(mt, line, step->valuedouble);
            fprintf(out, "%s%s", buf, n && buf[n - 1] == '\n' ? "" : "\n");
            kept++;
        } else {
            dropped++;
        }
        cJSON_Delete(line);
    }
    free(buf);
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, path) != 0) return loom_fail("%s: cannot rewrite the metrics file", path);
    log_info("%s: %ld line(s) of steps 1..%ld kept, appending%s", path, kept, upto,
             dropped ? " (lines of later steps, run again now, dropped)" : "");
    return 0;
}

metrics *metrics_open(const job_config *cfg, int rank, int quiet, long resume_step)
{
    metrics *mt = calloc(1, sizeof *mt);
    if (!mt) { loom_fail("out of host memory"); return NULL; }
    mt->total = cfg->train.steps;
    mt->every = cfg->train.log_every > 0 ? cfg->train.log_every : 1;
    mt->tps_hist = calloc((size_t)mt->total + 1, sizeof(double));
    mt->mfu_hist = calloc((size_t)mt->total + 1, sizeof(double));
    if (!mt->tps_hist || !mt->mfu_hist || plot_series_init(&mt->loss, mt->total, "train loss") ||
        plot_series_init(&mt->val, mt->total, "val loss") ||
        plot_series_init(&mt->tps, mt->total, "tokens/s")) {
        metrics_close(mt);
        loom_fail("out of host memory");
        return NULL;
    }
    if (rank != 0) return mt;
    mt->active = 1;
    mt->quiet = quiet;
    mt->tty = isatty(STDERR_FILENO);
    char dir[512], path[600];
    if (cfg->out[0]) snprintf(dir, sizeof dir, "%s", cfg->out);
    else snprintf(dir, sizeof dir, "runs/%s", cfg->name);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(mt->svg_path, sizeof mt->svg_path, "%s/loss.svg", dir);
    snprintf(mt->name, sizeof mt->name, "%s", cfg->name);
    if (resume_step >= 0 && metrics_reload(mt, path, resume_step)) {
        metrics_close(mt);
        return NULL;
    }
    mt->jsonl = fopen(path, resume_step >= 0 ? "a" : "w");
    if (!mt->jsonl) {
        metrics_close(mt);
        loom_fail("%s: cannot create the metrics file", path);
        return NULL;
    }
    return mt;
}

static void metrics_format_time(char *buf, size_t len, double s)
{
    if (s < 60) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)s / 3600, ((int)s / 60) % 60);
}

void metrics_step(metrics *mt, double peak, int step, double loss, float lr, double grad_norm,
                  double tokens, double flops, double seconds)
{
    double tps = tokens / seconds;
    double mfu = peak > 0 ? flops / seconds / peak : 0.0;
    mt->elapsed += seconds;
    if (mt->n <= mt->total) {
        mt->tps_hist[mt->n] = tps;
        mt->mfu_hist[mt->n] = mfu;
    }
    mt->n++;
    if (!mt->active) return;
    plot_series_add(&mt->loss, step, loss);
    plot_series_add(&mt->tps, step, tps);
    /* JSON has no NaN: a skipped (non-finite) step logs null */
    char lbuf[32], nbuf[32];
    if (isfinite(loss)) snprintf(lbuf, sizeof lbuf, "%.6f", loss); else snprintf(lbuf, sizeof lbuf, "null");
    if (isfinite(grad_norm)) snprintf(nbuf, sizeof nbuf, "%.6g", grad_norm); else snprintf(nbuf, sizeof nbuf, "null");
    fprintf(mt->jsonl, "{\"step\": %d, \"loss\": %s, \"lr\": %.6g, \"grad_norm\": %s, "
            "\"tokens_per_s\": %.1f, \"mfu\": %.4f, \"step_s\": %.4f, \"elapsed_s\": %.3f}\n",
            step, lbuf, lr, nbuf, tps, mfu, seconds, mt->elapsed);
    fflush(mt->jsonl);
    if (step % 10 == 0 || step == mt->total) plot_write_svg(mt->svg_path, mt->name, &mt->loss, &mt->val, &mt->tps);
    if (mt->quiet || !(mt->shown == 0 || step % mt->every == 0 || step == mt->total)) return;
    mt->shown++;
    char el[32], eta[32];
    metrics_format_time(el, sizeof el, mt->elapsed);
    metrics_format_time(eta, sizeof eta, mt->elapsed / step * (mt->total - step));
    if (mt->tty) {
        int width = 20, fill = (int)((double)width * step / mt->total);
        fprintf(stderr, "\r[%.*s%*s] ", fill, "####################", width - fill, "");
    }
    fprintf(stderr, "step %*d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | MFU %.1f%% | %s | ETA %s%s",
           (int)(log10((double)mt->total) + 1), step, mt->total, loss, lr, grad_norm, tps,
           100.0 * mfu, el, eta, mt->tty ? "   " : "\n");
    if (mt->tty && step == mt->total) fputc('\n', stderr);
    fflush(stderr);
}

int metrics_bad_step(int st, int step, double loss, double grad_norm, int max_bad, int *in_row, int *bad_steps)
{
    if (st != 1) {
        *in_row = 0;
        return 0;
    }
    ++*bad_steps;
    log_warn("step %d: non-finite loss or gradient (loss %g, norm %g): step skipped", step, loss, grad_norm);
    if (++*in_row >= max_bad)
        return loom_fail("train: %d non-finite steps in a row (train.max_bad_steps): stopping", *in_row);
    return 0;
}

void metrics_val(metrics *mt, int step, double val_loss)
{
    if (!mt->active) return;
    plot_series_add(&mt->val, step, val_loss);
    fprintf(mt->jsonl, "{\"step\": %d, \"val_loss\": %.6f}\n", step, val_loss);
    fflush(mt->jsonl);
    plot_write_svg(mt->svg_path, mt->name, &mt->loss, &mt->val, &mt->tps);
    if (mt->tty) fputc('\n', stderr);
    log_info("step %d | val loss %.4f", step, val_loss);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_after_first(const double *v, int n)
{
    if (n <= 0) return 0.0;
    int first = n > 1 ? 1 : 0, k = n - first;
    double *tmp = malloc((size_t)k * sizeof *tmp);
    if (!tmp) return v[n - 1];
    memcpy(tmp, v + first, (size_t)k * sizeof *tmp);
    qsort(tmp, (size_t)k, sizeof *tmp, cmp_double);
    double m = k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
    free(tmp);
    return m;
}

void metrics_summary(const metrics *mt, double *tokens_per_s, double *mfu)
{
    int n = mt->n < mt->total + 1 ? mt->n : mt->total + 1;
    *tokens_per_s = median_after_first(mt->tps_hist, n);
    *mfu = median_after_first(mt->mfu_hist, n);
}

void metrics_close(metrics *mt)
{
    if (!mt) return;
    if (mt->active && mt->loss.n) plot_write_svg(mt->svg_path, mt->name, &mt->loss, &mt->val, &mt->tps);
    if (mt->jsonl) fclose(mt->jsonl);
    plot_series_free(&mt->loss);
    plot_series_free(&mt->val);
    plot_series_free(&mt->tps);
    free(mt->tps_hist);
    free(mt->mfu_hist);
    free(mt);
}
