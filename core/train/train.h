/* train.h: the door to core/train/, what a job runs, and the training loop itself: batches ->
 * forward -> backward -> gradient reduction -> AdamW -> progress line + metrics.jsonl (->
 * checkpoint). Runs identically on 1 or N ranks; the global batch at step s is the same set of
 * samples for every world size. The room owns sessions (backend + model + dp + optimizer +
 * checkpoint save/resume), data parallelism, the optimizer, evaluation, metrics and the plot,
 * resume checks, import and export. It is the top of core/: launch/ includes this header, never
 * the ones behind it, and nothing in core/ includes it. */
#ifndef LOOM_TRAIN_H
#define LOOM_TRAIN_H

#include <signal.h>

#include "core/config/config.h"
#include "core/train/session.h"  /* backend, model, dp, optimizer and checkpoints of one job */
#include "core/train/evaluate.h" /* validation loss and tool-call accuracy */
#include "core/train/export.h"   /* LoRA merged into a plain checkpoint; HF and PEFT export */
#include "core/train/import.h"   /* other projects' model files in as loom checkpoints */
#include "core/train/plan.h"     /* a job's memory per rank before it allocates, and the fit check */
#include "parallel/comm.h"

typedef struct train_options {
    const char *resume;   /* checkpoint file or directory to resume from, or NULL */
    int init;             /* train: start from finetune.base's weights (loom --init) */
    double *losses_out;   /* optional: receives the mean loss of each step ... */
    int losses_cap;       /* ... for the first losses_cap steps */
    int quiet;            /* no progress lines */
    int eval_accuracy;    /* fine-tunes: tool-call accuracy of the start and of the result */
    int overwrite;        /* a run folder that already holds a run (metrics.jsonl with a line, or a
                           * checkpoint) is refused unless resuming; with this, that run's metrics,
                           * plot and checkpoints are removed first (loom --overwrite) */
    const volatile sig_atomic_t *stop; /* NULL, or a flag the caller's SIGINT/SIGTERM handler sets to
                           * the signal's number: the loop finishes the step, saves a checkpoint
                           * and returns 0 with report->stopped set (core/train/interrupt.h) */
} train_options;

typedef struct train_report {
    int steps_done;
    double last_loss;
    double tokens_per_s;  /* median over the timed steps */
    double mfu;           /* same, against the backend's peak */
    size_t state_bytes;   /* params + grads + optimizer state this rank allocated */
    size_t activation_bytes;
    int bad_steps;        /* skipped non-finite steps */
    double val_loss;      /* fine-tunes: the last validation loss (NaN if none) */
    double base_accuracy; /* fine-tunes with eval_accuracy: before training ... */
    double accuracy;      /* ... and after */
    double base_names, names; /* the same for "right tool names in the right order" */
    double base_eval_s, eval_s; /* wall time of the two evaluations (0 = not run) */
    int eval_examples;    /* held-out examples each evaluation covered */
    int total_steps;      /* the job's train.steps (fine-tunes: from the epochs) */
    int stopped;          /* 0, or the signal (SIGINT, SIGTERM) after which every rank stopped
                           * at step steps_done; its checkpoint saved unless checkpoint.every = -1 */
} train_report;

/* Pretrain/continue training as `cfg` says. 0 on success, -1 + loom_fail. */
int train_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report);

/* Fine-tune from finetune.base on the JSONL tool-calling data in data.train for finetune.epochs
 * (or train.steps when the job names it: session_finetune_steps); LoRA or full per finetune.method. */
int finetune_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report);

/* The tokens per row a job sizes its model for: train.seq_len, or for a fine-tune (finetune 1)
 * the longest row its data renders to (at most data.max_len; the data and tokenizer are read, the
 * model is not; a Needle base's rows as its fine-tune renders them, and its eval.batch clipped as
 * finetune_needle_seq_len says). For `loom plan`. 0, or -1 + loom_fail. */
int train_seq_len(job_config *cfg, int finetune, int *T);

/* Needle bases (finetune.base a Needle .safetensors or its `loom import`; core/train/finetune_needle.c):
 * 1 when path is one (finetune_run hands those jobs over by itself); and `loom eval` of one: the validation
 * loss and the held-out tool-call accuracy of the base with the adapters of checkpoint ckpt (NULL:
 * none), as Needle scores a fine-tune. 0, or -1 + loom_fail. */
int finetune_needle_base(const char *path);
int finetune_needle_eval(const job_config *cfg, comm *c, const char *ckpt, double *val_loss, eval_result *res);
/* `loom sample` on a Needle base: R continuations of prompt (n tokens, BOS first) with the adapters
 * of checkpoint ckpt (NULL or "": the base alone), decoded together with the KV cache on W4 weights
 * as Needle deploys them (float weights with finetune.qat=false): greedy at temperature 0, else
 * seeded top-k (0 = all) sampling over ct's tokenizer ids, row r from seed + r; each row stops
 * after ct's end of turn, max_new tokens or the model's max_seq_len. out (R, max_new), made[R]. */
int finetune_needle_sample(const job_config *cfg, comm *c, const char *ckpt, const chat_template *ct,
                           const int32_t *prompt, int n, int R, int max_new, float temperature, int top_k,
                           uint64_t seed, int32_t *out, int *made);

#endif
