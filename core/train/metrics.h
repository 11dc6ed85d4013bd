/* metrics.h: what a run reports: a progress line on rank 0 every train.log_every steps, and for
 * the run's first and last step (step/total, loss, lr,
 * grad norm, tokens/s, MFU, elapsed, ETA), metrics.jsonl in the output folder, and the
 * loss-curve picture next to it. Other ranks get a handle that records nothing. */
#ifndef LOOM_METRICS_H
#define LOOM_METRICS_H

#include "core/config/config.h"

typedef struct metrics metrics;

/* resume_step: -1 for a new run (metrics.jsonl created); else the step a --resume starts after:
 * the run's metrics.jsonl keeps its lines for steps 1..resume_step (later ones were logged by a run
 * that died after its checkpoint: they are run again), is appended to, and the plot shows them. */
metrics *metrics_open(const job_config *cfg, int rank, int quiet, long resume_step);
/* peak: the FLOP/s every rank together could do (the MFU's reference; 0 = MFU not known). */
void metrics_step(metrics *mt, double peak, int step, double loss, float lr, double grad_norm,
                  double tokens, double flops, double seconds);
/* The non-finite guard of a training loop: st 1 (a skipped step: non-finite loss or gradient) is
 * logged and counted in *bad_steps and *in_row; anything else resets *in_row. -1 + loom_fail once
 * max_bad skipped steps came in a row (train.max_bad_steps), else 0. */
int metrics_bad_step(int st, int step, double loss, double grad_norm, int max_bad, int *in_row, int *bad_steps);
void metrics_val(metrics *mt, int step, double val_loss);
/* Median tokens/s and MFU over the steps after the first (which pays warm-up costs). */
void metrics_summary(const metrics *mt, double *tokens_per_s, double *mfu);
void metrics_close(metrics *mt);

#endif
