/* plot.c: the SVG writer of plot.h. Plain text SVG 1.1: opens in any browser. */
#include "core/train/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

int plot_series_init(plot_series *s, int cap, const char *label)
{
    s->label = label;
    s->n = 0;
    s->cap = cap > 0 ? cap : 1;
    s->x = calloc((size_t)s->cap, sizeof(double));
    s->y = calloc((size_t)s->cap, sizeof(double));
    return s->x && s->y ? 0 : -1;
}

void plot_series_add(plot_series *s, double x, double y)
{
    if (s->n >= s->cap || !isfinite(y)) return;
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

void plot_series_free(plot_series *s)
{
    free(s->x);
    free(s->y);
    s->x = s->y = NULL;
    s->n = 0;
}

typedef struct frame { double x0, x1, y0, y1, step; } frame; /* step: between ticks */

enum { W = 800, H = 420, ML = 70, MR = 80, MT = 40, MB = 50 };

static double px(const frame *f, double x) { return ML + (x - f->x0) / (f->x1 - f->x0) * (W - ML - MR); }
static double py(const frame *f, double y) { return H - MB - (y - f->y0) / (f->y1 - f->y0) * (H - MT - MB); }

/* The tick spacing for about `ticks` intervals over span: 1, 2 or 5 times a power of ten, so
 * labels read 0.5, 1, 1.5 or 200, 400 (integral when whole is set: steps). */
static double plot_nice_step(double span, int ticks, int whole)
{
    double raw = span / ticks, p = pow(10.0, floor(log10(raw))), m = raw / p;
    double step = (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * p;
    return whole && step < 1.0 ? 1.0 : step;
}

/* The data's range snapped outwards to whole ticks; a non-negative series (loss, tokens/s, steps)
 * never gets an axis below zero. */
static void plot_range(const plot_series *a, const plot_series *b, frame *f)
{
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    const plot_series *ss[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; ss[k] && i < ss[k]->n; i++) {
            x0 = fmin(x0, ss[k]->x[i]); x1 = fmax(x1, ss[k]->x[i]);
            y0 = fmin(y0, ss[k]->y[i]); y1 = fmax(y1, ss[k]->y[i]);
        }
    if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1; /* nothing logged yet */
    if (x1 <= x0) x0 -= 1, x1 += 1;
    if (y1 <= y0) y0 = y0 > 1 ? y0 - 1 : 0, y1 += 1;
    f->x0 = x0, f->x1 = x1;
    f->step = plot_nice_step(y1 - y0, 4, 0);
    f->y0 = floor(y0 / f->step) * f->step, f->y1 = ceil(y1 / f->step) * f->step;
    if (y0 >= 0 && f->y0 < 0) f->y0 = 0;
    if (f->y1 <= f->y0) f->y1 = f->y0 + f->step;
}

static void plot_line(FILE *out, const plot_series *s, const frame *f, const char *color, const char *cls)
{
    if (s->n == 0) return;
    fprintf(out, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", cls, color);
    for (int i = 0; i < s->n; i++) fprintf(out, "%.1f,%.1f ", px(f, s->x[i]), py(f, s->y[i]));
    fprintf(out, "\"/>\n");
    for (int i = 0; i < s->n; i++)
        fprintf(out, "<circle class=\"%s-point\" cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"%s\">"
                "<title>step %g: %g</title></circle>\n", cls, px(f, s->x[i]), py(f, s->y[i]), color,
                s->x[i], s->y[i]);
}

/* A tick's label: at most 4 significant digits, no float noise (0.30000000000000004). */
static void plot_label(char *buf, size_t len, double v, double step)
{
    if (fabs(v) < step * 1e-9) v = 0.0;
    if (fabs(v) >= 1e4 && fabs(v) < 1e15 && v == floor(v)) snprintf(buf, len, "%.0f", v); /* 20000, not 2e+04 */
    else snprintf(buf, len, "%.4g", v);
}

/* The text of str for SVG (& < > escaped). */
static void plot_text(FILE *out, const char *str)
{
    for (; *str; str++)
        if (*str == '&') fputs("&amp;", out);
        else if (*str == '<') fputs("&lt;", out);
        else if (*str == '>') fputs("&gt;", out);
        else fputc(*str, out);
}

int plot_write_svg(const char *path, const char *title, const plot_series *loss, const plot_series *val,
                   const plot_series *tps)
{
    char tmp[700], lab[32];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) return loom_fail("%s: cannot write the loss curve", tmp);
    frame f, ft;
    plot_range(loss, val, &f);
    plot_range(tps, NULL, &ft);
    ft.x0 = f.x0, ft.x1 = f.x1;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(out, "<text x=\"%d\" y=\"22\" font-size=\"15\">", ML);
    plot_text(out, title && title[0] ? title : "loom");
    fprintf(out, ": loss and throughput</text>\n");
    for (double y = f.y0; y <= f.y1 + 0.5 * f.step; y += f.step) { /* the loss axis: grid and labels */
        plot_label(lab, sizeof lab, y, f.step);
        fprintf(out, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, W - MR, py(&f, y), py(&f, y));
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 6, py(&f, y) + 4, lab);
    }
    for (double y = ft.y0; tps && tps->n && y <= ft.y1 + 0.5 * ft.step; y += ft.step) { /* tokens/s, right */
        plot_label(lab, sizeof lab, y, ft.step);
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" fill=\"#999\">%s</text>\n", W - MR + 6, py(&ft, y) + 4, lab);
    }
    double xs = plot_nice_step(f.x1 - f.x0, 5, 1);
    for (double x = ceil(f.x0 / xs) * xs; x <= f.x1 + 1e-9; x += xs) /* steps: whole, round */
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", px(&f, x), H - MB + 18, x);
    fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (W + ML - MR) / 2, H - 12);
    plot_line(out, tps, &ft, "#bbb", "tokens");
    plot_line(out, loss, &f, "#1f77b4", "train");
    if (val) plot_line(out, val, &f, "#d62728", "val");
    /* the legend names the series drawn, right to left from the plot's right edge */
    int x = W - MR;
    if (tps && tps->n) fprintf(out, "<text x=\"%d\" y=\"22\" text-anchor=\"end\" fill=\"#999\">tokens/s (right axis)</text>\n", x), x -= 150;
    if (val && val->n) fprintf(out, "<text x=\"%d\" y=\"22\" text-anchor=\"end\" fill=\"#d62728\">val loss</text>\n", x), x -= 70;
    if (loss && loss->n) fprintf(out, "<text x=\"%d\" y=\"22\" text-anchor=\"end\" fill=\"#1f77b4\">train loss</text>\n", x);
    fprintf(out, "</svg>\n");
    if (fclose(out) != 0) return loom_fail("%s: write failed", tmp);
    if (rename(tmp, path) != 0) return loom_fail("%s: cannot rename into place", path);
    return 0;
}
