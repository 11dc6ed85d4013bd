/* evaluate.h: what a fine-tune is judged by, on the held-out split: the validation loss (the
 * training objective on unseen examples) and tool-call accuracy (greedy generation of the
 * assistant turn, exact match of the parsed calls). Every rank takes a share; results are global. */
#ifndef LOOM_EVALUATE_H
#define LOOM_EVALUATE_H

#include "core/train/session.h"
#include "core/text/text.h"

/* Largest forward (token rows) a generation prefill or loss pass runs at once: bounds the one
 * layer's activations the context holds (~36 KB per row for a 576-wide, 1536-ff model). The
 * accuracy's context: eval.batch rows of up to the row length T, min(this, rows T) a forward. */
enum { EVALUATE_FWD_TOKENS = 8192 };

/* Mean loss per answer token over the validation set. Collective. */
int evaluate_loss(session *s, const sft_data *d, double *val_loss);

/* What a tool-call evaluation measured. */
typedef struct eval_result {
    double accuracy;   /* fraction of the evaluated examples whose calls match exactly */
    double names;      /* fraction with the right tool names in the right order */
    double needle;     /* Needle's exact-call figure (toolcall_needle_match): an output with no
                          call block counts as the empty answer [], keys compared sorted, 1 != 1.0 */
    double empty;      /* fraction of the evaluated examples whose answer is [] (under Needle's
                          rule: what a model that never opens a call block scores there) */
    double no_call;    /* fraction whose output had no call block (a miss for `accuracy`) */
    int examples;      /* evaluated (all ranks; eval.max_examples caps it) */
    long tokens;       /* generated (all ranks) */
    double seconds;    /* wall time */
} eval_result;

/* Greedy generation of every evaluated validation example, eval.batch sequences at a time, graded
 * against its answers. `what` names the model in the progress line ("base model", "fine-tuned")
 * that rank 0 prints on stderr while it runs. Collective. */
int evaluate_accuracy(session *s, const sft_data *d, const char *what, eval_result *res);

/* The examples an evaluation covers: the first n of idx (cap d->val.n) are set; every example
 * when max_examples is 0, else max_examples of them spread evenly (deterministic). */
int evaluate_select(int nval, int max_examples, int *idx);

/* Batched continuation of R prompts (prompts[r][0..lens[r])) together, over the tokenizer's ids
 * only: row r stops at ct's end-of-turn token, after max_new[r] tokens or at the model's length;
 * out[r] receives its new tokens and made[r] their count. Greedy at temperature 0, else seeded
 * top-k (0 = all) sampling, row r from seed + r (so row 0 of a batch is what a batch of one
 * gives). Local (one rank). */
int evaluate_generate_batch(session *s, const chat_template *ct, int R,
                            const int32_t *const *prompts, const int *lens, const int *max_new,
                            float temperature, int top_k, uint64_t seed, int32_t *const *out,
                            int *made);

/* The next token from logits over ids [0, V): argmax at temperature 0 (the first on a tie), else
 * a sample at that temperature among the top_k (0 = all) largest, drawn with rng_uniform(seed,
 * counter) (evaluate_generate_batch's counter is the token's position). */
int32_t evaluate_pick(const float *logits, int V, float temperature, int top_k, uint64_t seed, uint64_t counter);

/* One prompt: the batch of one above; returns the count of new tokens (-1 on error). */
int evaluate_generate(session *s, const chat_template *ct, const int32_t *prompt, int n, int max_new,
                      float temperature, int top_k, uint64_t seed, int32_t *out);

#endif
