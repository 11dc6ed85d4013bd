/* session.h: what every job (train, finetune, eval) sets up the same way: the backend chosen for
 * this rank, the model on it, data parallelism, the optimizer, and checkpoint save/resume.
 * One place for that wiring so the jobs differ only in their data and loop. */
#ifndef LOOM_SESSION_H
#define LOOM_SESSION_H

#include <stdint.h>

#include "backends/backend.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/train/optim.h"
#include "parallel/comm.h"
#include "core/train/dp.h"

typedef enum {
    SESSION_TRAIN,    /* pretraining: every weight trainable, seeded init */
    SESSION_FINETUNE, /* starts from finetune.base; LoRA adapters or full */
    SESSION_INFER     /* no gradients, no optimizer (eval, sample) */
} session_mode;

typedef struct session {
    const job_config *cfg;
    comm *comm;           /* borrowed */
    backend *be;
    model *model;
    dp *dp;
    optim *opt;           /* NULL for inference-only sessions */
    session_mode mode;
    int finetune;         /* mode is SESSION_FINETUNE, or an inference on a fine-tuned job */
    int init_from_base;   /* train --init: start a pretraining job from finetune.base's weights */
    int overwrite;        /* a new training job may replace the run its folder holds (--overwrite) */
    int micro_batch;      /* sequences per forward on this rank */
    int seq_len;          /* tokens per sequence the model was sized for */
    int64_t step;         /* optimizer steps completed */
    int64_t sample_cursor;/* global sample index of the next batch */
    uint64_t base_digest; /* LoRA: identity of the base loaded (ckpt_group_digest), saved with the
                           * adapters and checked on resume; 0 = none loaded */
    uint64_t tok_hash;    /* tokenizer_hash_of(model.tokenizer), saved in checkpoints; 0 = unreadable */
    int ckpt_lock_fd;     /* rank 0 of a training job: the checkpoint folder's lock (ckpt_lock), -1 */
    double save_rate;     /* rank 0: the slowest checkpoint write rate seen in this job, bytes/s (a
                           * probe when the folder is locked, then every save); 0 = none yet */
    const struct fault_plan *fault; /* tests: LOOM_FAULT_* (stall_save acts inside a save); NULL */
    int save_broken;      /* a save's collective failed: the comm is unusable, the job must end */
    char out_dir[512];
} session;

/* The backend this rank runs on (cfg->backend, cfg->precision, threads: parallel.threads or the
 * node's cores split between its ranks), its line printed. NULL + loom_fail. */
backend *session_backend_open(const job_config *cfg, const comm *c);

/* Pick the backend, create the model for sequences of T tokens (gradients and optimizer unless
 * SESSION_INFER), attach dp. `finetune`: the job is a fine-tune (LoRA adapters when
 * finetune.method says so). Prints the backend line. NULL + loom_fail. */
session *session_open(const job_config *cfg, comm *c, session_mode mode, int finetune, int T);

/* Start state: load `resume` (a checkpoint file or directory) when non-NULL; else for a
 * fine-tune the base checkpoint (plus fresh adapters), else a seeded init. A training session
 * then locks its checkpoint folder and, when not resuming, claims its run folder
 * (session_claim_run with s->overwrite). */
int session_init_or_resume(session *s, const char *resume);

/* What a resume of the checkpoint at `path` (file or directory) would refuse before reading a
 * tensor, for `loom ckpt info`'s verdict: its state against the job config it stores
 * (sample_cursor, tokens_seen, rng_counter, seed) and its model_config against the shapes of the
 * stored /model tensors (and, past step 0, of the AdamW moments; a tensor missing from a file
 * whose `tensors` manifest is gone too is found here). Files whose model_config is not a loom model's (Needle's) are left to
 * their own loader. 0, or -1 + loom_fail naming the file and the attribute. */
int session_check_file(const char *path);

/* data.date_string when the job leaves it "": on a resume (`resume` a checkpoint file or
 * directory) the checkpoint's (resume_saved_date), else today's (chat_date_today). Written into
 * cfg, whose JSON the checkpoints keep, so a resume renders the same bytes. -1 + loom_fail when
 * the resume's checkpoint does not open. */
int session_resolve_date(job_config *cfg, const char *resume);

/* Load a checkpoint (file or directory): parameters, optimizer state, step and data cursor.
 * Any world size and ZeRO stage; the model config must match. */
int session_resume(session *s, const char *path);

/* The checkpoint's view of a tensor table (malloc'd; names borrowed from mt). NULL if out of
 * memory. */
struct ckpt_tensor;
struct ckpt_tensor *session_ckpt_table_of(const model_tensor *mt, int n);

/* Fine-tunes: the base weights from finetune.base (into the frozen buffer for LoRA). */
int session_load_base(session *s);

/* A base's model config (an HF folder's or a checkpoint's) src becomes the job's *m. The fields
 * the job set itself (explicit[i] for config field i; NULL = none) must agree with src, else -1
 * + one line naming the field, both values and src_name; run-time fields stay the job's
 * (model.tokenizer, model.init_std) and model.max_seq may be lowered for RoPE models. */
int session_model_adopt(model_config *m, const model_config *src, const char *src_name,
                        const unsigned char *explicit);
/* Whether the job names config field `path` itself (explicit: one byte per config field, as
 * session_model_adopt takes them; NULL = none). */
int session_model_explicit(const unsigned char *explicit, const char *path);
/* Whether folder dir holds a tokenizer loom reads as the folder (tokenizer.json or tokenizer.model). */
int session_dir_tokenizer(const char *dir);

/* Hugging Face folders (core/train/session_hf.c): the folder's model config into *m as
 * session_model_adopt does, model.tokenizer = the folder when it holds a tokenizer.json and the
 * job names none; and the folder's weights as the base (into the frozen buffer for LoRA, else
 * the parameters). */
int session_model_from_hf(model_config *m, const char *dir, const unsigned char *explicit);
int session_load_hf(session *s, const char *dir, const model_tensor *bt, int nb);

/* The job's output folder (out, else runs/<name>) and its checkpoint folder (checkpoint.dir, else
 * <out>/ckpt). */
void session_out_dir(const job_config *cfg, char *dir, size_t len);
void session_ckpt_dir_of(const job_config *cfg, const char *out_dir, char *dir, size_t len);
/* The one-writer lock on checkpoint folder dir (rank 0 takes it into *fd, every rank learns the
 * outcome; nothing to lock when checkpoint.every is -1). -1 + loom_fail. */
int session_lock_dir(comm *c, const job_config *cfg, const char *dir, int *fd);

/* A training job's one-writer lock on its checkpoint folder (rank 0 takes it, every rank learns
 * the outcome; nothing to lock when checkpoint.every is -1). -1 + loom_fail naming the other
 * job's pid and host. */
int session_lock_ckpt_dir(session *s);
/* A new (not resumed) training job's claim on its run folder out_dir and checkpoint folder
 * ckpt_dir: when they hold a run (a metrics.jsonl with a line, or a checkpoint), -1 + one line
 * naming the folder, --resume and --overwrite; with overwrite, that run's metrics.jsonl, loss.svg
 * and checkpoints are removed instead (nothing else). Rank 0 looks, every rank learns the outcome. */
int session_claim_run(comm *c, const char *out_dir, const char *ckpt_dir, int overwrite);
void session_unlock_ckpt_dir(session *s);

/* Save a checkpoint when checkpoint.every divides the step, or when `final`. A failed final save
 * is an error even with checkpoint.on_error = continue: the run's end state is not on disk; so is
 * a save whose collective failed (a rank dead or stalled: the job cannot go on). While it saves,
 * every collective waits comm->timeout_s plus the save's expected time (session_save_wait). */
int session_maybe_checkpoint(session *s, int final);

void session_close(session *s);

/* mkdir -p */
int session_mkdirs(const char *path);

/* A fine-tune's length into cfg->train.steps: train.steps when the job names it (it wins over
 * finetune.epochs, as max_steps over num_train_epochs in transformers; the data cycle on past an
 * epoch's end), else finetune.epochs passes of steps_per_epoch steps. 0, or -1 + loom_fail. */
int session_finetune_steps(job_config *cfg, long steps_per_epoch);

#endif
