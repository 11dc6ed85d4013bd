/* train.c: the training loop (see train.h) for pretraining (token windows) and fine-tuning
 * (rendered tool-calling chats). Everything it needs is allocated before the first step; the loop
 * only moves data, calls the model, dp and the optimizer, and logs. Never calls MPI or a device
 * directly: comm.h, backend.h and ckpt.h are its only doors. */
#include "core/train/train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/text/text.h"
#include "base/error.h"
#include "core/train/evaluate.h"
#include "core/train/fault.h"
#include "core/train/finetune_needle.h"
#include "core/train/interrupt.h"
#include "base/log.h"
#include "core/train/metrics.h"
#include "core/model/model.h"
#include "core/train/optim.h"
#include "core/train/session.h"
#include "core/train/dp.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one training run holds. */
typedef struct trainer {
    job_config cfg;            /* a copy: fine-tunes derive train.steps from the epochs */
    int finetune;
    session *s;                /* backend, comm, model, dp, optimizer */
    token_data data;           /* pretraining */
    sft_data sft;              /* fine-tuning */
    tokenizer *tok;            /* model.tokenizer */
    chat_template chat;        /* how sft renders its examples (fine-tuning) */
    int T;
    int32_t *tokens, *targets; /* host, micro-batch */
    int *lens;                 /* host, micro-batch: packed examples' lengths (data.pack) */
    int accum;                 /* micro-batches per step on each rank */
    long steps_per_epoch;
    metrics *log;
    double timeout_s;          /* the comm's collective timeout as the caller set it */
    fault_plan fault;          /* tests only: LOOM_FAULT_*, read once in trainer_open */
    const volatile sig_atomic_t *stop; /* train_options.stop: this rank's signal flag, or NULL */
    int stopped;               /* the signal every rank agreed to stop on after this step, or 0 */
    size_t rss_before;         /* resident bytes before the session allocated anything (plan_rss) */
} trainer;

/* Two waits are long in a healthy job: ranks reaching the first collectives at different times
 * (data loading, init, resume reads, the sgemm reference: 70 s measured for gpt2-124m on a loaded
 * 2-core machine) and every rank waiting while rank 0 writes a checkpoint. Until the first step
 * of this run is done, collectives wait this many times the timeout; a save adds its own
 * expected time to the timeout (session_maybe_checkpoint). */
#define TRAIN_SLOW_WAITS 4.0

static void trainer_slow_waits(trainer *t, comm *c, int slow)
{
    c->timeout_s = t->timeout_s * (slow ? TRAIN_SLOW_WAITS : 1.0);
}

/* The global sample index of the first sequence of micro-step k of `step` on this rank. */
static uint64_t trainer_first_sample(const trainer *t, int step, int k)
{
    int mb = t->s->micro_batch, W = t->s->comm->size, r = t->s->comm->rank;
    return (uint64_t)step * t->cfg.train.batch_size + ((uint64_t)k * W + r) * mb;
}

/* The row length of every micro-batch of `step`: the whole global batch's sft_batch_len
 * (fine-tunes, bucketed), so every rank runs the same shape; else the allocated length. */
static int trainer_step_len(trainer *t, int step)
{
    const train_config *tc = &t->cfg.train;
    if (!t->finetune) return t->T;
    return sft_batch_len(&t->sft, tc->seed, 0, (uint64_t)step * tc->batch_size, tc->batch_size);
}

/* Fill the host micro-batch as rows of T; returns the tokens it holds that are not padding. */
static long trainer_fill_batch(trainer *t, int step, int k, int T)
{
    int mb = t->s->micro_batch;
    uint64_t g = trainer_first_sample(t, step, k), seed = t->cfg.train.seed;
    if (!t->finetune) {
        for (int j = 0; j < mb; j++)
            token_data_sample(&t->data, seed, g + j, T, t->tokens + (size_t)j * T, t->targets + (size_t)j * T);
        return (long)mb * T;
    }
    sft_batch(&t->sft, seed, 0, g, mb, T, t->tokens, t->targets);
    long real = 0;
    for (size_t i = 0; i < (size_t)mb * T; i++) real += t->tokens[i] != t->chat.pad;
    return real;
}

/* data.pack: the micro-batch's rows (right-padded to T) moved one after another without their
 * padding (model_pack_rows), and the next passes run ragged over them. */
static int trainer_pack(trainer *t, int T)
{
    int n = model_pack_rows(t->tokens, t->targets, t->s->micro_batch, T, t->lens);
    return model_set_ragged(t->s->model, t->lens, n);
}

/* Loss-carrying tokens of the whole global batch of `step` (the same on every rank). */
static double trainer_global_targets(const trainer *t, int step)
{
    const train_config *tc = &t->cfg.train;
    if (!t->finetune) return (double)tc->batch_size * t->T;
    return (double)sft_batch_loss_tokens(&t->sft, tc->seed, 0, (uint64_t)step * tc->batch_size,
                                         tc->batch_size, t->T);
}

/* One optimizer step: 0 done, 1 skipped (non-finite), -1 error. */
static int trainer_step(trainer *t, int step, double *loss, double *norm, float *lr_out, double *tokens,
                        double *flops)
{
    session *s = t->s;
    const train_config *tc = &t->cfg.train;
    double targets = trainer_global_targets(t, step);
    double stats[2 + INTERRUPT_SLOTS] = {0.0, 0.0}; /* loss sum, real tokens, the stop agreement */
    if (dp_begin_step(s->dp)) return -1;
    fault_poison_step(&t->fault, s, step + 1, &stats[0]); /* tests only: LOOM_FAULT_ACTION=nan|inf|nan_grad */
    model_weights_bf16(s->model, 1); /* the weights changed last step: cast them once */
    int T = trainer_step_len(t, step);
    if (model_set_shape(s->model, s->micro_batch, T)) return -1;
    for (int k = 0; k < t->accum; k++) {
        stats[1] += (double)trainer_fill_batch(t, step, k, T);
        if (t->finetune && t->cfg.data.pack && trainer_pack(t, T)) return -1;
        model_set_batch(s->model, t->tokens, t->targets);
        if (dp_begin_micro(s->dp, k == t->accum - 1)) return -1;
        if (model_forward(s->model, targets > 0 ? (float)(1.0 / targets) : 0.0f, NULL)) return -1;
        if (model_backward(s->model)) return -1;
    }
    model_weights_bf16(s->model, 0); /* the optimizer changes them next */
    stats[0] += model_take_loss(s->model); /* the one read of the device in the step */
    if (model_set_shape(s->model, s->micro_batch, t->T)) return -1; /* evaluation expects it */
    if (dp_finish_grads(s->dp)) return -1;
    interrupt_put(t->stop, stats + 2); /* read as late as can be: the sum below carries it */
    if (comm_allreduce_host(s->comm, stats, 2 + INTERRUPT_SLOTS)) return -1;
    t->stopped = interrupt_agreed(stats + 2);
    *loss = targets > 0 ? stats[0] / targets : 0.0;
    *tokens = stats[1];
    *flops = model_step_flops(s->model, T, stats[1], targets); /* this step's row length, its head rows */
    *norm = sqrt(dp_grad_sumsq(s->dp));
    *lr_out = optim_lr(tc, step);
    if (!isfinite(*loss) || !isfinite(*norm)) return 1; /* every rank sees the same sums */
    optim_step(s->opt, tc, dp_param_ptrs(s->dp), dp_grad_ptrs(s->dp), *lr_out, optim_clip_scale(tc, *norm));
    return dp_finish_params(s->dp) ? -1 : 0;
}

static int trainer_load_data(trainer *t)
{
    job_config *cfg = &t->cfg;
    if (!(t->tok = tokenizer_open(cfg->model.tokenizer))) return -1;
    if (!t->finetune) { /* every id is checked against model.vocab as it loads */
        t->T = cfg->train.seq_len;
        if (token_data_load(&t->data, cfg->data.train, t->tok, cfg->model.vocab)) return -1;
        if (t->data.n <= (size_t)t->T)
            return loom_fail("%s: %zu tokens, need more than train.seq_len %d", cfg->data.train, t->data.n, t->T);
        return 0;
    }
    data_config dc = cfg->data;
    if (dc.max_len > cfg->model.max_seq) dc.max_len = cfg->model.max_seq;
    if (tokenizer_vocab(t->tok) > cfg->model.vocab) /* the chat markers may be any of its ids */
        return loom_fail("model.vocab %d is smaller than the tokenizer's %d ids (%s)", cfg->model.vocab,
                         tokenizer_vocab(t->tok), tokenizer_describe(t->tok));
    if (chat_template_init(&t->chat, t->tok, dc.chat_format) || chat_template_date(&t->chat, dc.date_string) ||
        sft_data_load(&t->sft, &dc, &t->chat, cfg->train.seed))
        return -1;
    t->T = t->sft.T;
    if (sft_data_batching(&t->sft, cfg->train.batch_size, dc.bucket, cfg->train.seed)) return -1;
    if (t->sft.bucket)
        log_info("data: batches by length (data.bucket): padding %.1f%% sorted in chunks of 32 batches, "
                 "%.1f%% unsorted: %s", 100.0 * t->sft.share_sorted, 100.0 * t->sft.share_unsorted,
                 t->sft.sorted ? "sorted" : "unsorted (sorting saves under 10% of the tokens)");
    t->steps_per_epoch = sft_steps_per_epoch(&t->sft, cfg->train.batch_size);
    if (session_finetune_steps(cfg, t->steps_per_epoch)) return -1;
    /* the held-out evaluation decodes at most its examples together: eval.batch clipped to them,
     * so that the plan counts what it runs (plan.c) */
    const int nsel = cfg->eval.max_examples > 0 && cfg->eval.max_examples < t->sft.val.n ? cfg->eval.max_examples : t->sft.val.n;
    if (nsel > 0 && cfg->eval.batch > nsel) cfg->eval.batch = nsel;
    log_info("data %s: %d train / %d val examples, rows of %s%d tokens (longest %d, %d truncated), "
             "%ld steps per epoch", dc.train, t->sft.train.n, t->sft.val.n, dc.bucket ? "at most " : "",
             t->T, t->sft.longest, t->sft.n_truncated, t->steps_per_epoch);
    if (t->sft.bad.count)
        log_warn("%s: skipped %d bad line(s) (data.skip_bad_lines); first: %s", dc.train,
                 t->sft.bad.count, t->sft.bad.first);
    return 0;
}

int train_seq_len(job_config *cfg, int finetune, int *T)
{
    *T = cfg->train.seq_len;
    if (!finetune) return 0;
    if (finetune_needle_base(cfg->finetune.base)) return finetune_needle_seq_len(cfg, T);
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = *cfg;
    t.finetune = 1;
    int rc = session_resolve_date(&t.cfg, NULL) ? -1 : trainer_load_data(&t); /* the rows as the job renders them */
    *T = t.T;
    cfg->eval.batch = t.cfg.eval.batch;
    sft_data_free(&t.sft);
    tokenizer_free(t.tok);
    return rc;
}

static int trainer_open(trainer *t, const job_config *cfg, comm *c, const train_options *opt, int finetune)
{
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->finetune = finetune;
    t->timeout_s = c->timeout_s;
    t->stop = opt ? opt->stop : NULL;
    fault_setup(&t->fault);
    trainer_slow_waits(t, c, 1); /* until step 1 is done */
    if (trainer_load_data(t)) return -1;
    size_t peak;
    plan_reset_peak(); /* the peak from here on is the session's (plan_log_peak) */
    plan_rss(&t->rss_before, &peak);
    t->s = session_open(&t->cfg, c, SESSION_TRAIN, finetune, t->T);
    if (!t->s) return -1;
    t->s->fault = &t->fault;
    t->accum = t->cfg.train.batch_size / (t->s->micro_batch * c->size);
    size_t n = (size_t)t->s->micro_batch * t->T;
    t->tokens = malloc(n * sizeof(int32_t));
    t->targets = malloc(n * sizeof(int32_t));
    t->lens = malloc((size_t)t->s->micro_batch * sizeof(int));
    if (!t->tokens || !t->targets || !t->lens) return loom_fail("train: out of host memory");
    t->s->init_from_base = !finetune && opt && opt->init;
    t->s->overwrite = opt && opt->overwrite;
    const char *resume = opt && opt->resume && opt->resume[0] ? opt->resume : NULL;
    if (session_init_or_resume(t->s, resume)) return -1;
    t->log = metrics_open(&t->cfg, c->rank, opt && opt->quiet, resume ? t->s->step : -1);
    backend_peak_flops(t->s->be); /* the MFU reference is measured now, not inside step 1 */
    return t->log ? 0 : -1;
}

static void trainer_close(trainer *t)
{
    metrics_close(t->log);
    free(t->tokens);
    free(t->targets);
    free(t->lens);
    token_data_free(&t->data);
    if (t->finetune) sft_data_free(&t->sft);
    session_close(t->s);
    tokenizer_free(t->tok);
}

/* Fine-tunes: validation loss at each epoch's end and at the end of the run. */
static int trainer_maybe_validate(trainer *t, int step, train_report *rep)
{
    if (!t->finetune || t->sft.val.n == 0) return 0;
    if (step % t->steps_per_epoch != 0 && step != t->cfg.train.steps) return 0;
    const train_config *tc = &t->cfg.train;
    long epoch = (step - 1) / t->steps_per_epoch, n = t->steps_per_epoch * tc->batch_size;
    if (t->s->comm->rank == 0)
        log_info("epoch %ld: padding is %.1f%% of its batches' rows (%s)%s", epoch + 1,
                 100.0 * sft_padding_share(&t->sft, tc->seed, (uint64_t)(epoch * n), n),
                 t->sft.bucket ? "bucketed by length, data.bucket" : "every row at the longest",
                 t->cfg.data.pack ? "; packed away, none of it computed (data.pack)" : "");
    double val;
    if (evaluate_loss(t->s, &t->sft, &val)) return -1;
    metrics_val(t->log, step, val);
    rep->val_loss = val;
    return 0;
}

static int trainer_loop(trainer *t, train_report *rep, const train_options *opt)
{
    const train_config *tc = &t->cfg.train;
    int bad_in_row = 0;
    for (int step = (int)t->s->step; step < tc->steps; step++) {
        fault_at_step(&t->fault, t->s->comm->rank, step + 1);
        double t0 = now_s(), loss = 0, norm = 0, tokens = 0, flops = 0;
        float lr = 0;
        int st = trainer_step(t, step, &loss, &norm, &lr, &tokens, &flops);
        if (st < 0) return -1;
        const char *broken = backend_failure(t->s->be); /* before the NaN it caused counts as bad */
        if (broken) return loom_fail("train: step %d: %s", step + 1, broken);
        double dt = now_s() - t0;
        if (metrics_bad_step(st, step + 1, loss, norm, tc->max_bad_steps, &bad_in_row, &rep->bad_steps)) return -1;
        t->s->step = step + 1;
        trainer_slow_waits(t, t->s->comm, 0);
        if (opt && opt->losses_out && step < opt->losses_cap) opt->losses_out[step] = loss;
        metrics_step(t->log, backend_peak_flops(t->s->be) * t->s->comm->size, step + 1, loss, lr, norm, tokens, flops, dt);
        rep->last_loss = loss;
        rep->steps_done = step + 1;
        if (trainer_maybe_validate(t, step + 1, rep)) return -1;
        /* a signal on any rank: this step's state saved whatever checkpoint.every says, then out */
        if (session_maybe_checkpoint(t->s, t->stopped != 0)) return -1;
        if (t->stopped) {
            rep->stopped = t->stopped;
            return 0;
        }
    }
    return session_maybe_checkpoint(t->s, 1);
}

static int train_job(const job_config *cfg, comm *c, const train_options *opt, train_report *report,
                     int finetune)
{
    trainer t;
    train_report rep = {0};
    rep.val_loss = rep.accuracy = rep.base_accuracy = rep.names = rep.base_names = NAN;
    int rc = trainer_open(&t, cfg, c, opt, finetune);
    eval_result ev;
    int eval = rc == 0 && finetune && opt && opt->eval_accuracy;
    if (eval && cfg->finetune.eval_base && !(opt->resume && opt->resume[0])) {
        rc = evaluate_accuracy(t.s, &t.sft, "base model", &ev);
        rep.base_accuracy = ev.accuracy, rep.base_names = ev.names, rep.base_eval_s = ev.seconds;
    }
    if (rc == 0) rc = trainer_loop(&t, &rep, opt);
    rep.total_steps = t.cfg.train.steps;
    if (rc == 0 && eval && !rep.stopped) {
        rc = evaluate_accuracy(t.s, &t.sft, "fine-tuned", &ev);
        rep.accuracy = ev.accuracy, rep.names = ev.names, rep.eval_s = ev.seconds;
        rep.eval_examples = ev.examples;
    }
    if (t.s && t.log) {
        if (rc == 0) plan_log_peak(&t.cfg, t.s->comm, t.s->be, t.T, t.finetune, t.rss_before);
        metrics_summary(t.log, &rep.tokens_per_s, &rep.mfu);
        rep.state_bytes = dp_state_bytes(t.s->dp);
        rep.activation_bytes = t.s->model->activation_bytes;
    }
    if (report) *report = rep;
    c->timeout_s = t.timeout_s; /* as the caller set it, on every path */
    trainer_close(&t);
    return rc;
}

/* data.date_string for this job (session_resolve_date), rank 0's on every rank: ranks may start on
 * either side of midnight. */
static int train_date(job_config *job, comm *c, const train_options *opt)
{
    if (session_resolve_date(job, opt ? opt->resume : NULL)) return -1;
    if (c->size == 1) return 0;
    double v[sizeof job->data.date_string];
    int n = (int)(sizeof v / sizeof *v);
    for (int i = 0; i < n; i++) v[i] = c->rank == 0 ? (unsigned char)job->data.date_string[i] : 0;
    if (comm_allreduce_host(c, v, n)) return -1;
    for (int i = 0; i < n; i++) job->data.date_string[i] = (char)(int)v[i];
    job->data.date_string[n - 1] = '\0';
    return 0;
}

int train_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report)
{
    job_config job = *cfg;
    return train_date(&job, c, opt) ? -1 : train_job(&job, c, opt, report, 0);
}

int finetune_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report)
{
    job_config job = *cfg;
    if (train_date(&job, c, opt)) return -1;
    if (finetune_needle_base(job.finetune.base)) return finetune_needle_run(&job, c, opt, report);
    return train_job(&job, c, opt, report, 1);
}
