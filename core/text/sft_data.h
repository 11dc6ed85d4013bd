/* sft_data.h: fine-tuning data: a JSONL file of tool-calling examples (docs/finetune-data.md)
 * parsed, split into train/val, rendered once into padded token rows with loss masks, and
 * deterministic batches (bucketed by length): sample g of epoch e depends on (seed, e, g) only. */
#ifndef LOOM_SFT_DATA_H
#define LOOM_SFT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/text/chat.h"
#include "core/config/config.h"

#define SFT_MIN_LEN 128        /* the padded length is a power of two >= this ... */
#define SFT_FILE_MAX (1ull << 30) /* a JSONL file is read whole: at most this many bytes */
#define SFT_BAD_LINES_KEPT 8   /* line numbers of the first bad lines kept for the report */
/* Bucketed batches run at their longest row rounded up to this: at most 7 tokens a row wasted,
 * shapes kept to multiples of 8 (GPU tiles) and few distinct. On the demo's rows (<= 80 tokens)
 * 16 left 13.2% padding, 8 left 6.9%, 1 left 1.5% (measured, configs/finetune-demo.json). */
#define SFT_LEN_MULTIPLE 8
/* Sorting by length makes batches of similar examples (in a small set, the same batches every
 * epoch, and lengths often follow the kind of example): done only when it cuts the tokens
 * computed to under this share of unsorted batches (each still at its own length). Measured:
 * the demo (configs/finetune-demo.json) 0.875 (padding 6.9% sorted, 18.5% not), exact match 41.4%
 * as with one length; finetune_e2e's two-kind set 0.957 (9.3%, 13.2%), where sorting dropped
 * exact match from 76.2% (one length) to 23.8% (unsorted: 61.9%, 21 held-out examples). */
#define SFT_SORT_GAIN 0.9

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
    int T;               /* padded length of every stored row (train and val): the longest batch */
    int batch;           /* global batch the order is cut into (sft_data_batching; 0 = not set) */
    int bucket;          /* 1: batches by length (sft_data_batching) ... */
    int sorted;          /* ... and chunks sorted by length (it saves enough: SFT_SORT_GAIN) */
    double share_sorted, share_unsorted; /* bucketed: epoch 0's padding share either way (the run's seed) */
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

/* The training example index that global sample g of epoch `epoch` reads: order_e[g % n_e]
 * with e = epoch + g / n_e. So (e, g) and (e + 1, g - n_e) name the same sample, and a running
 * global index with epoch 0 walks the epochs in turn. The last epoch's order is cached in
 * d->perm: not thread-safe.
 * Plain (the default until sft_data_batching): n_e = n_train, order_e a Fisher-Yates shuffle
 * keyed by (seed, e).
 * Bucketed (sft_data_batching(d, B, 1, seed)): n_e = ceil(n_train / B) * B, whole global
 * batches. The same shuffle is cut into chunks of 32 global batches (32 B examples); each chunk
 * is sorted by rendered length (longest first, ties in shuffle order; only when d->sorted) and
 * cut into global batches of B; the epoch's batches are then put in an order shuffled by
 * (seed, e). Every example is read once per epoch; the epoch's last batch (n_train % B
 * examples) is filled with empty rows: index -1, all padding, no targets. Global batch k of
 * epoch e is samples e*n_e + k*B .. + B - 1: it depends on (seed, e, k) and the data only, so
 * any split over ranks reads the same rows. */
int sft_sample_index(const sft_data *d, uint64_t seed, int epoch, uint64_t g);

/* Cut the order into global batches of global_batch and (bucket != 0) bucket them by length as
 * sft_sample_index describes, sorting the chunks only when epoch 0 of `seed` shows it pays
 * (SFT_SORT_GAIN; d->sorted, d->share_sorted / share_unsorted say how it went: the same on every
 * rank). Resets the order cache. -1 + loom_fail (then plain) on error. */
int sft_data_batching(sft_data *d, int global_batch, int bucket, uint64_t seed);

/* The row length to run rows first_global_index .. + n - 1 at (pass one whole global batch, so
 * every rank agrees): bucketed, their longest rendering rounded up to SFT_LEN_MULTIPLE, capped
 * at d->T; plain, d->T. Every target of the rows fits: sft_batch at this T loses none. */
int sft_batch_len(const sft_data *d, uint64_t seed, int epoch, uint64_t first_global_index, int n);

/* The same for validation rows first .. first + n - 1 (rows past the set count as empty). */
int sft_val_batch_len(const sft_data *d, int first, int n);

/* The longest row any batch of d runs at: d->T, or bucketed the longest example's length rounded
 * as sft_batch_len rounds it. */
int sft_pass_len(const sft_data *d);

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

/* The share of padding in the rows computed for global samples first_global_index .. + n - 1
 * (epoch 0 numbering, as the trainer's running index), taken in global batches of d->batch, each
 * at its sft_batch_len (empty rows count as padding): what one epoch's batches spend on nothing. */
double sft_padding_share(const sft_data *d, uint64_t seed, uint64_t first_global_index, long n);

/* Count targets >= 0 in n entries. */
long sft_count_loss_tokens(const int32_t *targets, size_t n);

#endif
