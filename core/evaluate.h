/* evaluate.h: what a fine-tune is judged by, on the held-out split: the validation loss (the
 * training objective on unseen examples) and tool-call accuracy (greedy generation of the
 * assistant turn, exact match of the parsed calls). Every rank takes a share; results are global. */
#ifndef LOOM_EVALUATE_H
#define LOOM_EVALUATE_H

#include "core/session.h"
#include "core/sft_data.h"

/* Mean loss per answer token over the validation set. Collective. */
int evaluate_loss(session *s, const sft_data *d, double *val_loss);

/* Fraction of validation examples whose greedy generation matches the answers exactly.
 * `names` (may be NULL) receives the fraction with the right tool names. Collective. */
int evaluate_accuracy(session *s, const sft_data *d, double *accuracy, double *names);

/* Greedy (temperature 0) or sampled continuation of prompt[0..n) until ct's end of turn, `max_new`
 * tokens or the model's length, over the tokenizer's ids only; writes the new tokens to out and
 * returns their count (-1 on error). Sampling: temperature > 0 with top_k (0 = all) is
 * deterministic in (seed). Local (one rank). */
int evaluate_generate(session *s, const chat_template *ct, const int32_t *prompt, int n, int max_new,
                      float temperature, int top_k, uint64_t seed, int32_t *out);

#endif
