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

typedef struct frame { double x0, x1, y0, y1; } frame;

enum { W = 800, H = 420, ML = 70, MR = 80, MT = 40, MB = 50 };

static double px(const frame *f, double x) { return ML + (x - f->x0) / (f->x1 - f->x0) * (W - ML - MR); }
static double py(const frame *f, double y) { return H - MB - (y - f->y0) / (f->y1 - f->y0) * (H - MT - MB); }

static void plot_range(const plot_series *a, const plot_series *b, frame *f)
{
    f->x0 = 1e300; f->x1 = -1e300; f->y0 = 1e300; f->y1 = -1e300;
    const plot_series *ss[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; ss[k] && i < ss[k]->n; i++) {
            f->x0 = fmin(f->x0, ss[k]->x[i]); f->x1 = fmax(f->x1, ss[k]->x[i]);
            f->y0 = fmin(f->y0, ss[k]->y[i]); f->y1 = fmax(f->y1, ss[k]->y[i]);
        }
    if (f->x1 <= f->x0) { f->x0 -= 1; f->x1 += 1; }
    if (f->y1 <= f->y0) { f->y0 -= 1; f->y1 += 1; }
    double pad = 0.05 * (f->y1 - f->y0);
    f->y0 -= pad; f->y1 += pad;
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

int plot_write_svg(const char *path, const plot_series *loss, const plot_series *val,
                   const plot_series *tps)
{
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) return loom_fail("%s: cannot write the loss curve", tmp);
    frame f, ft;
    plot_range(loss, val, &f);
    plot_range(tps, NULL, &ft);
    ft.x0 = f.x0; ft.x1 = f.x1;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(out, "<text x=\"%d\" y=\"22\" font-size=\"15\">loom: loss and throughput</text>\n", ML);
    for (int i = 0; i <= 4; i++) { /* grid and both axes' labels */
        double y = f.y0 + (f.y1 - f.y0) * i / 4, yt = ft.y0 + (ft.y1 - ft.y0) * i / 4;
        fprintf(out, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, W - MR, py(&f, y), py(&f, y));
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", ML - 6, py(&f, y) + 4, y);
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" fill=\"#999\">%.3g</text>\n", W - MR + 6, py(&f, y) + 4, yt);
        double x = f.x0 + (f.x1 - f.x0) * i / 4;
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", px(&f, x), H - MB + 18, x);
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (W + ML - MR) / 2, H - 12);
    plot_line(out, tps, &ft, "#bbb", "tokens");
    plot_line(out, loss, &f, "#1f77b4", "train");
    if (val) plot_line(out, val, &f, "#d62728", "val");
    fprintf(out, "<text x=\"%d\" y=\"%d\" fill=\"#1f77b4\">train loss</text>"
            "<text x=\"%d\" y=\"%d\" fill=\"#d62728\">val loss</text>"
            "<text x=\"%d\" y=\"%d\" fill=\"#999\">tokens/s (right axis)</text>\n",
            W - MR - 330, 22, W - MR - 240, 22, W - MR - 160, 22);
    fprintf(out, "</svg>\n");
    if (fclose(out) != 0) return loom_fail("%s: write failed", tmp);
    if (rename(tmp, path) != 0) return loom_fail("%s: cannot rename into place", path);
    return 0;
}
