/* sft_data.h: fine-tuning data: a JSONL file of tool-calling examples (docs/finetune-data.md)
 * parsed, split into train/val, rendered once into padded token rows with loss masks, and
 * deterministic batches: sample g of epoch e depends on (seed, e, g) only, never on rank state. */
#ifndef LOOM_SFT_DATA_H
#define LOOM_SFT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat.h"
#include "core/config.h"

#define SFT_MIN_LEN 128        /* the padded length is a power of two >= this ... */
#define SFT_FILE_MAX (1ull << 30) /* a JSONL file is read whole: at most this many bytes */
#define SFT_BAD_LINES_KEPT 8   /* line numbers of the first bad lines kept for the report */

/* Bad lines of one file skipped under data.skip_bad_lines. */
typedef struct sft_bad_lines {
    int count;
    int line[SFT_BAD_LINES_KEPT];  /* the first min(count, SFT_BAD_LINES_KEPT), 1-based */
    char first[512];               /* the first message, "file:line: problem" ("" if none) */
} sft_bad_lines;

/* One split, rendered: row i is tokens[i*T .. i*T+T), padded with the template's pad id (mask 0). */
typedef struct sft_set {
    int n;
    int32_t *tokens;     /* n x T */
    uint8_t *loss_mask;  /* n x T: 1 where the token belongs to the assistant turn (a target) */
    int *len;            /* rendered tokens in the row: min(full length, T) */
    int *prompt_len;     /* tokens through <|assistant|> (the generation prompt); > T if cut */
    sft_example *ex;     /* the parsed examples (ex[i].answers for evaluation) */
} sft_set;

typedef struct sft_data {
    const chat_template *chat; /* what the rows were rendered with (not owned; outlives d) */
    int T;               /* padded length of every row (train and val) */
    int longest;         /* longest full rendering seen, before the cap */
    int n_truncated;     /* examples longer than T, cut at T (the caller logs it) */
    sft_set train, val;
    sft_bad_lines bad, bad_val; /* skipped lines of cfg->train and cfg->val */
    struct sft_perm_cache *perm; /* private: the last epoch's order (see sft_batch) */
} sft_data;

/* Load cfg->train (JSONL). Validation examples: the whole of cfg->val when it is set, else the
 * lines with u(seed, line number) < cfg->val_split, a split that stays put when lines are added.
 * T = the smallest power of two >= max(SFT_MIN_LEN, longest rendering), capped at cfg->max_len
 * (pass a copy with max_len lowered to the model's max_seq if that is smaller).
 * Errors (-1 + loom_fail, d left empty): "FILE:LINE: problem" for the first bad line unless
 * cfg->skip_bad_lines (then d->bad / d->bad_val count them), "FILE: no examples" for a file with
 * none, no training examples left after the split. d is owned by the caller: sft_data_free. */
int sft_data_load(sft_data *d, const data_config *cfg, const chat_template *ct, uint64_t seed);
void sft_data_free(sft_data *d);

/* The training example index that global sample g of epoch `epoch` reads: perm_e[g % n_train]
 * with e = epoch + g / n_train, perm_e a Fisher-Yates shuffle keyed by (seed, e). So (e, g) and
 * (e + 1, g - n_train) name the same sample, and a running global index with epoch 0 walks the
 * epochs in turn. The last epoch's permutation is cached in d->perm: not thread-safe. */
int sft_sample_index(const sft_data *d, uint64_t seed, int epoch, uint64_t g);

/* Fill n rows of T: row i is sample first_global_index + i (see sft_sample_index);
 * tokens[t] = row[t] (the pad id past the row), targets[t] = row[t+1] where loss_mask[t+1] else -1.
 * Any split of a global batch over ranks gives the same rows. Returns the number of targets >= 0. */
long sft_batch(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index, int n,
               int T, int32_t *tokens, int32_t *targets);

/* The number of targets >= 0 that sft_batch would produce, without writing a batch: every rank
 * can compute the loss-token count of the whole global batch and scale its gradients by it. */
long sft_batch_loss_tokens(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index,
                           int n, int T);

/* Validation rows first .. first+n-1 in file order, same filling as sft_batch; rows past the
 * end of the val set are all padding / -1 (so a fixed batch size can cover it). */
long sft_val_batch(const sft_data *d, int first, int n, int T, int32_t *tokens, int32_t *targets);

/* Optimizer steps for one pass over the training examples: ceil(n_train / global_batch). */
long sft_steps_per_epoch(const sft_data *d, int global_batch);

/* The share of padding in the rows of global samples first_global_index .. + n - 1 (epoch 0
 * numbering, as the trainer's running index): what one epoch's batches spend on nothing. */
double sft_padding_share(const sft_data *d, uint64_t seed, uint64_t first_global_index, long n);

/* Count targets >= 0 in n entries. */
long sft_count_loss_tokens(const int32_t *targets, size_t n);

#endif
