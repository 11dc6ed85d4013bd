/* plan.h: a training job's memory on one rank, computed before anything is allocated, from the
 * size functions the allocations use themselves (model_plan, dp_plan_sizes, optim_state_bytes),
 * and the memory the device has. `loom plan` prints it; train and finetune refuse a job that
 * cannot fit before they allocate its model (plan_check, from session_open). Never allocates a
 * device buffer and never opens a data file. */
#ifndef LOOM_PLAN_H
#define LOOM_PLAN_H

#include <stddef.h>

#include "backends/backend.h"
#include "core/config/config.h"
#include "parallel/comm.h"

/* The parts of a rank's memory, in the order `loom plan` prints them. */
enum {
    PLAN_PARAMS,    /* trainable parameters: all, or this rank's slices (ZeRO-3) */
    PLAN_BASE,      /* LoRA: the frozen base, fp32, whole on every rank (a Needle base: as its net holds it) */
    PLAN_GRADS,     /* gradients: all, or this rank's slices (ZeRO-2/3) */
    PLAN_OPTIM,     /* AdamW's two moments of the slices this rank updates */
    PLAN_BF16,      /* bf16 copies of the weights the matmuls read (a bf16 backend only) */
    PLAN_ACTS,      /* the activation arena: every layer's, or one shared set (train.recompute) */
    PLAN_DP,        /* ZeRO staging (all-gather, reduce-scatter, gather) and the transport's temporaries */
    PLAN_WORKSPACE, /* the backend's scratch and the job's transient buffers at their peak */
    PLAN_NPARTS
};

/* How the job runs, beyond its config. */
typedef struct plan_shape {
    int ranks;       /* world size */
    int local_ranks; /* of them on one node: on a CPU backend they share its memory */
    int T;           /* tokens per row the model is sized for: train.seq_len, a fine-tune's from its data */
    int finetune;    /* finetune.method applies (LoRA adapters, or every weight) */
    int bf16;        /* the backend computes bf16 (backend_cfg): it keeps bf16 weight copies */
    int cpu;         /* the backend is the CPU's: its memory is the node's RAM */
    int threads;     /* the backend's threads (CPU scratch is per thread) */
} plan_shape;

typedef struct train_plan {
    plan_shape shape;
    int micro_batch, zero_stage, recompute, lora_rank;
    size_t nparams, nbase_params; /* elements: trainable, and LoRA's frozen base */
    size_t part[PLAN_NPARTS];     /* bytes on rank 0 (the most: it also stages the checkpoint) */
    size_t acts_other;            /* the activation arena with train.recompute the other way */
    size_t total;                 /* the sum of part[] */
    int largest;                  /* the biggest part */
} train_plan;

/* A part's name as printed ("activations"). */
const char *plan_part_name(int part);

/* The plan of job cfg as rank 0 runs it. 0, or -1 + loom_fail (a micro-batch that does not divide
 * the batch, a bad LoRA target: what session_open would refuse). */
int plan_compute(const job_config *cfg, const plan_shape *sh, train_plan *p);

/* The switch that would shrink part `part` of p (e.g. "train.recompute=true (activations -> 1.2 GB)"),
 * or what to do when none does, into buf. */
void plan_hint(const job_config *cfg, const train_plan *p, int part, char *buf, size_t len);

/* Bytes the device offers the job: $LOOM_DEVICE_MEM where set (bytes, or with a K/M/G/T suffix),
 * else on a CPU backend (cpu 1) the node's available RAM (MemAvailable, less where the cgroup's
 * limit leaves less), else what backend be reports free (backend_memory: CUDA); 0 = unknown (a
 * backend that does not say). `what` receives where it came from. */
size_t plan_device_memory(backend *be, int cpu, char *what, size_t len);

/* This process's resident bytes now and at their peak (VmRSS, VmHWM; 0 where unreadable), and a
 * restart of the peak from now (Linux's clear_refs; 0 done, -1 not possible). */
void plan_rss(size_t *rss, size_t *peak);
int plan_reset_peak(void);

/* The shape a job runs at on backend be, rows of T tokens, over comm c. */
void plan_shape_of(comm *c, backend *be, int T, int finetune, plan_shape *sh);

/* train/finetune, before the model is allocated (session_open): every rank computes the plan
 * and reads its node's memory before any rank allocates; when (plan x ranks on a node) exceeds
 * the smallest node's, -1 + one line naming the need, the memory, the largest part and the
 * switch that shrinks it. LOOM_NO_FIT_CHECK=1 skips the refusal. Collective. */
int plan_check(const job_config *cfg, comm *c, backend *be, int T, int finetune);

/* Each rank's peak resident growth since rss_before (plan_reset_peak, then plan_rss, before the
 * job allocated its model), against the plan of the job: one info line of rank 0's, every rank's
 * growth in bytes (tests/core/train/plan_peak.sh reads it). Collective; silent where
 * /proc/self/status is not there. */
void plan_log_peak(const job_config *cfg, comm *c, backend *be, int T, int finetune, size_t rss_before);

/* "1.25 GB" (powers of 1024: KiB, MiB, GiB) into buf; returns buf. */
const char *plan_bytes(size_t bytes, char *buf, size_t len);

#endif
