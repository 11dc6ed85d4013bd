/* plot.h: a dependency-free SVG line chart of a run: train and validation loss on the left axis,
 * tokens/s on the right, one point (circle) per logged step so it can be checked and hovered. */
#ifndef LOOM_PLOT_H
#define LOOM_PLOT_H

typedef struct plot_series {
    const char *label;
    double *x, *y;
    int n, cap;
} plot_series;

int plot_series_init(plot_series *s, int cap, const char *label);
void plot_series_add(plot_series *s, double x, double y); /* ignored when full */
void plot_series_free(plot_series *s);

/* Write (temp file + rename, so a viewer never sees half a picture), titled with the job's name:
 * tick labels at round values (1, 2 or 5 times a power of ten), axes from 0 where the values are
 * non-negative, a legend of the series drawn. 0 or -1 + loom_fail. */
int plot_write_svg(const char *path, const char *title, const plot_series *loss, const plot_series *val,
                   const plot_series *tps);

#endif
