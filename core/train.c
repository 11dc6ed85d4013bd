/* train.c: the training loop (see train.h). Everything it needs is allocated before the first
 * step; the loop itself only moves data, calls the model, dp and the optimizer, and logs.
 * Never calls MPI or a device directly: comm.h, backend.h and ckpt.h are its only doors. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/data.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/model.h"
#include "core/optim.h"
#include "core/session.h"
#include "parallel/dp.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one training run holds. */
typedef struct trainer {
    const job_config *cfg;
    session *s;               /* backend, comm, model, dp, optimizer */
    token_data data;
    int32_t *tokens, *targets; /* host, micro-batch */
    int accum;                /* micro-batches per step on each rank */
    metrics *log;
} trainer;

/* Fill the host batch for micro-step k of `step` from the global sample indices this rank owns. */
static void trainer_fill_batch(trainer *t, int step, int k)
{
    const job_config *cfg = t->cfg;
    int mb = t->s->micro_batch, T = cfg->train.seq_len, W = t->s->comm->size, r = t->s->comm->rank;
    uint64_t base = (uint64_t)step * cfg->train.batch_size + ((uint64_t)k * W + r) * mb;
    for (int j = 0; j < mb; j++)
        token_data_sample(&t->data, cfg->train.seed, base + j, T, t->tokens + (size_t)j * T,
                          t->targets + (size_t)j * T);
}

/* One optimizer step. Returns the global mean loss (NaN if non-finite) and the grad norm. */
static int trainer_step(trainer *t, int step, double *loss, double *norm, float *lr_out)
{
    session *s = t->s;
    const train_config *tc = &t->cfg->train;
    double global_tokens = (double)tc->batch_size * tc->seq_len;
    double loss_sum = 0.0;

    if (dp_begin_step(s->dp)) return -1;
    for (int k = 0; k < t->accum; k++) {
        trainer_fill_batch(t, step, k);
        model_set_batch(s->model, t->tokens, t->targets);
        if (dp_begin_micro(s->dp, k == t->accum - 1)) return -1;
        loss_sum += model_forward(s->model, (float)(1.0 / global_tokens));
        if (model_backward(s->model)) return -1;
    }
    if (dp_finish_grads(s->dp)) return -1;
    double stats[1] = {loss_sum};
    if (comm_allreduce_host(s->comm, stats, 1)) return -1;
    *loss = stats[0] / global_tokens;
    *norm = sqrt(dp_grad_sumsq(s->dp));
    *lr_out = optim_lr(tc, step);
    if (!isfinite(*loss) || !isfinite(*norm)) return 1; /* skip: every rank sees the same sums */
    optim_step(s->opt, tc, dp_param_ptrs(s->dp), dp_grad_ptrs(s->dp), *lr_out,
               optim_clip_scale(tc, *norm));
    if (dp_finish_params(s->dp)) return -1;
    return 0;
}

static int trainer_open(trainer *t, const job_config *cfg, comm *c, const train_options *opt)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    const train_config *tc = &cfg->train;
    t->s = session_open(cfg, c, SESSION_TRAIN, 0, tc->seq_len);
    if (!t->s) return -1;
    t->accum = tc->batch_size / (t->s->micro_batch * c->size);
    if (token_data_load(&t->data, cfg->data.train, cfg->model.vocab)) return -1;
    if (t->data.n <= (size_t)tc->seq_len)
        return loom_fail("%s: %zu tokens, need more than seq_len %d", cfg->data.train, t->data.n,
                         tc->seq_len);
    size_t n = (size_t)t->s->micro_batch * tc->seq_len;
    t->tokens = malloc(n * sizeof(int32_t));
    t->targets = malloc(n * sizeof(int32_t));
    if (!t->tokens || !t->targets) return loom_fail("train: out of host memory");
    if (session_init_or_resume(t->s, opt ? opt->resume : NULL)) return -1;
    t->log = metrics_open(cfg, c->rank, opt && opt->quiet);
    return t->log ? 0 : -1;
}

static void trainer_close(trainer *t)
{
    metrics_close(t->log);
    free(t->tokens);
    free(t->targets);
    token_data_free(&t->data);
    session_close(t->s);
}

int train_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report)
{
    trainer t;
    train_report rep = {0};
    int rc = trainer_open(&t, cfg, c, opt);
    const train_config *tc = &cfg->train;
    int bad_in_row = 0;
    double tokens_per_step = (double)tc->batch_size * tc->seq_len;
    for (int step = rc ? tc->steps : (int)t.s->step; step < tc->steps; step++) {
        fault_at_step(c->rank, step + 1);
        double t0 = now_s(), loss = 0, norm = 0;
        float lr = 0;
        int st = trainer_step(&t, step, &loss, &norm, &lr);
        if (st < 0) { rc = -1; break; }
        double dt = now_s() - t0;
        if (st == 1) {
            rep.bad_steps++;
            log_warn("step %d: non-finite loss or gradient (loss %g, norm %g): step skipped", step + 1, loss, norm);
            if (++bad_in_row >= tc->max_bad_steps) {
                rc = loom_fail("train: %d non-finite steps in a row (train.max_bad_steps): stopping", bad_in_row);
                break;
            }
        } else {
            bad_in_row = 0;
        }
        t.s->step = step + 1;
        if (opt && opt->losses_out) opt->losses_out[step] = loss;
        metrics_step(t.log, t.s, step + 1, loss, lr, norm, tokens_per_step, dt);
        rep.last_loss = loss;
        rep.steps_done = step + 1;
        if (session_maybe_checkpoint(t.s, 0)) { rc = -1; break; }
    }
    if (rc == 0 && session_maybe_checkpoint(t.s, 1)) rc = -1;
    if (t.s && t.log) {
        metrics_summary(t.log, &rep.tokens_per_s, &rep.mfu);
        rep.state_bytes = dp_state_bytes(t.s->dp);
        rep.activation_bytes = t.s->model->activation_bytes;
    }
    if (report) *report = rep;
    trainer_close(&t);
    return rc;
}
