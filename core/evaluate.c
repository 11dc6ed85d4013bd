/* evaluate.c: validation loss, greedy generation with the KV cache, tool-call accuracy
 * (see evaluate.h). Ranks split the validation examples round-robin and sum their counts. */
#include "evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "core/toolcall.h"

int evaluate_loss(session *s, const sft_data *d, double *val_loss)
{
    int mb = s->micro_batch, T = s->seq_len, W = s->comm->size, r = s->comm->rank;
    size_t n = (size_t)mb * T;
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    if (!tokens || !targets) {
        free(tokens);
        free(targets);
        return loom_fail("eval: out of host memory");
    }
    /* every rank runs the same number of forwards (ZeRO-3 gathers parameters in them) */
    int rounds = (d->val.n + mb * W - 1) / (mb * W);
    double stats[2] = {0.0, 0.0}; /* loss sum, loss tokens */
    for (int i = 0; i < rounds; i++) {
        stats[1] += (double)sft_val_batch(d, (i * W + r) * mb, mb, T, tokens, targets);
        model_set_batch(s->model, tokens, targets);
        stats[0] += model_forward(s->model, 0.0f);
    }
    free(tokens);
    free(targets);
    if (comm_allreduce_host(s->comm, stats, 2)) return -1;
    *val_loss = stats[1] > 0 ? stats[0] / stats[1] : NAN;
    return 0;
}

/* The next token from logits: argmax over the tokenizer's ids, or a seeded top-k sample. */
static int32_t evaluate_pick(const float *logits, int V, float temperature, int top_k, uint64_t seed,
                             uint64_t counter)
{
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0.0f) return best;
    /* threshold = the k-th largest logit (k small: a partial selection by repeated scans) */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float prev = INFINITY;
        for (int k = 0; k < top_k; k++) {
            float cur = -INFINITY;
            for (int v = 0; v < V; v++)
                if (logits[v] < prev && logits[v] > cur) cur = logits[v];
            prev = cur;
        }
        thresh = prev;
    }
    double total = 0.0;
    for (int v = 0; v < V; v++)
        if (logits[v] >= thresh) total += exp((logits[v] - logits[best]) / temperature);
    double u = rng_uniform(seed, counter) * total, acc = 0.0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < thresh) continue;
        acc += exp((logits[v] - logits[best]) / temperature);
        if (acc >= u) return v;
    }
    return best;
}

int evaluate_generate(session *s, const chat_template *ct, const int32_t *prompt, int n, int max_new,
                      float temperature, int top_k, uint64_t seed, int32_t *out)
{
    model *m = s->model;
    int V = m->cfg.vocab < tokenizer_vocab(ct->tok) ? m->cfg.vocab : tokenizer_vocab(ct->tok);
    float *logits = malloc((size_t)m->cfg.vocab * sizeof(float));
    if (!logits) return loom_fail("generate: out of host memory");
    if (n < 1 || n >= m->T) {
        free(logits);
        return loom_fail("generate: prompt of %d tokens does not fit the model's %d", n, m->T);
    }
    int made = 0, rc = model_prefill(m, prompt, n, logits);
    for (int pos = n; rc == 0 && made < max_new; pos++) {
        int32_t next = evaluate_pick(logits, V, temperature, top_k, seed, (uint64_t)pos);
        out[made++] = next;
        if (next == ct->eot || pos + 1 >= m->T) break;
        rc = model_decode(m, next, pos, logits);
    }
    free(logits);
    return rc ? loom_fail("generate: decoding failed") : made;
}

int evaluate_accuracy(session *s, const sft_data *d, double *accuracy, double *names)
{
    int T = s->seq_len, W = s->comm->size, r = s->comm->rank;
    double stats[3] = {0.0, 0.0, 0.0}; /* exact, names, examples */
    if (s->cfg->parallel.zero_stage == 3 && s->mode != SESSION_INFER) {
        log_warn("eval: tool-call accuracy needs whole parameters on each rank; not measured under ZeRO-3");
        *accuracy = NAN;
        return 0;
    }
    int32_t *gen = malloc((size_t)T * sizeof(int32_t));
    char *text = malloc((size_t)T * 8 + 16);
    if (!gen || !text) {
        free(gen);
        free(text);
        return loom_fail("eval: out of host memory");
    }
    /* an answer longer than the longest reference answer (plus slack) is already wrong */
    int longest = 0;
    for (int i = 0; i < d->val.n; i++)
        if (d->val.len[i] - d->val.prompt_len[i] > longest) longest = d->val.len[i] - d->val.prompt_len[i];
    for (int i = r; i < d->val.n; i += W) {
        stats[2] += 1.0;
        int plen = d->val.prompt_len[i];
        if (plen >= T) continue; /* the prompt alone fills the window: a miss */
        int room = T - plen < longest + 16 ? T - plen : longest + 16;
        int made = evaluate_generate(s, d->chat, d->val.tokens + (size_t)i * T, plen, room, 0.0f, 0, 0, gen);
        if (made < 0) {
            free(gen);
            free(text);
            return -1;
        }
        if (toolcall_extract(d->chat, gen, made, text, (size_t)T * 8 + 16) < 0) continue;
        toolcall_grade g = toolcall_grade_text(text, d->val.ex[i].answers);
        stats[0] += g.exact;
        stats[1] += g.names;
    }
    free(gen);
    free(text);
    if (comm_allreduce_host(s->comm, stats, 3)) return -1;
    *accuracy = stats[2] > 0 ? stats[0] / stats[2] : NAN;
    if (names) *names = stats[2] > 0 ? stats[1] / stats[2] : NAN;
    return 0;
}
