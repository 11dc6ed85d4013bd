/* config.h: the job configuration: one struct, filled from defaults, a JSON job file, a model
 * preset and `--set a.b=v` overrides, in that order. Every field is described once in a table
 * (config_fields()) that drives parsing, validation, `loom config show` and docs/config.md, so
 * they cannot drift. Unknown fields are an error naming the field and suggesting the nearest. */
#ifndef LOOM_CONFIG_H
#define LOOM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_STR 256

typedef struct model_config {
    char preset[64];     /* name of the preset the fields started from ("" = none) */
    int vocab;           /* embedding rows (may be padded, e.g. 50304) */
    int d_model;
    int n_layer;
    int layers;          /* a Needle base's ladder rung (0 = its full depth) */
    int n_head;
    int n_kv_head;       /* grouped-query attention: n_head % n_kv_head == 0 */
    int head_dim;        /* per-head width; 0 = d_model / n_head (Qwen3-0.6B: 128 at d_model 1024) */
    int d_ff;
    char norm[16];       /* "layernorm" | "rmsnorm" */
    char mlp[16];        /* "gelu" | "swiglu" */
    char positions[16];  /* "learned" | "rope" */
    float rope_theta;
    char rope_scaling[16];   /* "none" | "llama3" */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_seq;
    int qkv_bias;        /* q, k, v biases without the others (Qwen2) */
    int qk_norm;         /* per-head RMSNorm on q and k before rope (Qwen3) */
    int tied_embeddings; /* lm head shares the token embedding */
    int bias;            /* linear layers and norms carry biases (GPT-2) */
    int max_seq;
    float norm_eps;
    float init_std;      /* N(0, init_std) for matrices; output projections scaled 1/sqrt(2 L) */
    char tokenizer[CONFIG_STR]; /* "byte" or a tokenizer.json / model folder */
} model_config;

typedef struct train_config {
    int steps;           /* optimizer steps */
    int batch_size;      /* global batch, in sequences, per optimizer step */
    int micro_batch;     /* sequences per forward/backward on one rank (0 = batch/world) */
    int seq_len;
    float lr;
    float min_lr;        /* cosine decays to this */
    float warmup;        /* warmup steps if >= 1, else a fraction of steps */
    float weight_decay;
    float beta1, beta2, eps;
    float grad_clip;     /* global-norm clip, 0 = off */
    uint64_t seed;
    int recompute;       /* recompute activations per layer in backward */
    int log_every;
    int max_bad_steps;   /* consecutive non-finite steps before stopping */
    int allow_change;    /* resume even if the schedule / data order fields differ (resume_check) */
} train_config;

typedef struct data_config {
    char train[CONFIG_STR];  /* token file (any name), text (*.txt, byte-tokenized), or JSONL (finetune) */
    char val[CONFIG_STR];    /* optional separate validation file */
    float val_split;         /* held-out fraction when val is empty (finetune) */
    int max_len;             /* finetune: cap on padded example length */
    int skip_bad_lines;
    char chat_format[32];    /* finetune: "" = from the model (its template, Needle's tokenizer), else loom */
    char date_string[32];    /* llama3 format's "Today Date"; "" = the job's start date (resolved
                                and saved with the checkpoint by core/train) */
    int bucket;              /* finetune: global batches of similar lengths, each at its own length */
    int pack;                /* finetune: micro-batches packed without padding (ragged passes) */
} data_config;

typedef struct parallel_config {
    char comm[16];           /* "auto" | "self" | "mpi" | "nccl" */
    int zero_stage;          /* 0..3 */
    float bucket_mb;         /* gradient bucket size */
    float timeout_s;
    int threads;             /* CPU threads per rank, 0 = cores / local ranks */
} parallel_config;

typedef struct checkpoint_config {
    char dir[CONFIG_STR];    /* "" = <out>/ckpt */
    int every;               /* steps between saves, 0 = only at the end */
    int keep;
    char on_error[16];       /* "stop" | "continue" */
} checkpoint_config;

typedef struct finetune_config {
    char base[CONFIG_STR];   /* base checkpoint */
    char method[16];         /* "lora" | "full" */
    int lora_rank;
    float lora_alpha;
    char lora_targets[128];  /* comma list: q,k,v,o,up,down,gate,fc,proj (or HF q_proj..., all-linear) */
    int epochs;
    int allow_other_base;    /* resume/merge LoRA adapters on a base they were not trained on */
    int eval_base;           /* measure the base model's accuracy before training */
    int qat;                 /* Needle bases: Needle's fine-tune numerics (W4 STE, A8, KV8) */
} finetune_config;

typedef struct eval_config {
    int batch;               /* sequences generated together */
    int max_examples;        /* 0 = every held-out example */
} eval_config;

#define CONFIG_MAX_FIELDS 256 /* config_fields' count is at most this (test_config) */

typedef struct job_config {
    char name[64];
    char out[CONFIG_STR];    /* output folder; "" = runs/<name> */
    char backend[16];        /* "" = auto */
    char precision[16];      /* "fp32" | "tf32" | "bf16" */
    model_config model;
    train_config train;
    data_config data;
    parallel_config parallel;
    checkpoint_config checkpoint;
    finetune_config finetune;
    eval_config eval;
    /* named[i]: the job gave field i (config_fields' order) itself, in its file or a --set
     * (config_set); what a preset or the defaults set does not count */
    unsigned char named[CONFIG_MAX_FIELDS];
} job_config;

/* One field of the table. */
typedef enum { CFG_INT, CFG_FLOAT, CFG_BOOL, CFG_STRING, CFG_U64 } config_type;
typedef struct config_field {
    const char *path;        /* "train.lr" */
    config_type type;
    size_t offset;           /* into job_config */
    size_t size;             /* for strings: buffer size */
    const char *default_value; /* as JSON text */
    const char *doc;
} config_field;

const config_field *config_fields(int *count);

/* 1 when the job named field `path` itself (job_config.named), else 0. */
int config_named(const job_config *cfg, const char *path);

/* The per-head width: model.head_dim, or d_model / n_head when that is 0. */
static inline int config_head_dim(const model_config *m)
{
    return m->head_dim > 0 ? m->head_dim : m->d_model / m->n_head;
}

/* Defaults for every field. */
void config_defaults(job_config *cfg);

/* Apply a model preset by name ("tiny", "gpt2-124m", "llama-small", ...) to cfg->model. */
int config_apply_preset(model_config *m, const char *preset);
/* Names of the presets (NULL-terminated). */
const char *const *config_preset_names(void);

/* Load defaults + file + overrides ("a.b=v" strings). -1 + loom_fail naming file and field. */
int config_load(job_config *cfg, const char *path, const char *const *overrides, int noverrides);
/* Same from a JSON string (source names it in messages). */
int config_load_string(job_config *cfg, const char *json, const char *source,
                       const char *const *overrides, int noverrides);
/* Apply one "a.b=v" override. */
int config_set(job_config *cfg, const char *assignment);
/* The known field (or section) nearest to an unknown name, or another trainer's name for one
 * (learning_rate: train.lr), as an unknown field's error suggests it; NULL when none is near.
 * exact: only a field whose last part is name (steps: train.steps) or that other name. */
const char *config_suggest(const char *name, int exact);

/* Cross-field checks (n_head % n_kv_head, d_model % n_head, ...). */
int config_validate(const job_config *cfg);

/* The full effective config as JSON (malloc'd; caller frees). */
char *config_to_json(const job_config *cfg);
/* The model part alone as JSON (malloc'd): stored in checkpoints, compared on resume. */
char *config_model_to_json(const model_config *m);
/* Parse a model config JSON (from a checkpoint). */
int config_model_from_json(model_config *m, const char *json);
/* First differing model field name between a and b, or NULL if equal. */
const char *config_model_diff(const model_config *a, const model_config *b);

/* docs/config.md text generated from the table (malloc'd). */
char *config_markdown(void);

#endif
