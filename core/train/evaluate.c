/* evaluate.c: validation loss, batched greedy generation with per-row KV caches, tool-call
 * accuracy (see evaluate.h). Ranks split the evaluated examples round-robin and sum their counts.
 * Generation goes through model_gen, never the training activations. */
#include "core/train/evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "core/text/text.h"


static double eval_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The validation loss's progress line on stderr (rank 0, every 2 s, and when done; log_info, so
 * --quiet silences it). */
static void eval_loss_progress(const session *s, int done, int rounds, double t0, double *last)
{
    double now = eval_now(), dt = now - t0;
    if (s->comm->rank != 0 || (done < rounds && now - *last < 2.0)) return;
    *last = now;
    if (done < rounds)
        log_info("eval val loss: %d/%d batches, ETA %.0f s", done, rounds,
                done > 0 ? dt * (rounds - done) / done : 0.0);
    else
        log_info("eval val loss: %d batches, done in %.1f s", rounds, dt);
}

/* Where a row's turn ends: the chat format's end-of-turn token (the one place that knows it). */
static int evaluate_is_stop(const chat_template *ct, int32_t tok) { return tok == ct->eot; }

/* Models without activations (inference sessions): the same loss through a generation context. */
static int evaluate_loss_gen(session *s, const sft_data *d, int rounds, double *stats)
{
    int mb = s->micro_batch, T = s->seq_len, W = s->comm->size, r = s->comm->rank;
    size_t n = (size_t)mb * T;
    int fwd = (int)n < EVALUATE_FWD_TOKENS ? (int)n : EVALUATE_FWD_TOKENS;
    model_gen *g = model_gen_create(s->model, 1, T, fwd);
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    int rc = g && tokens && targets ? 0 : -1;
    if (g && rc) loom_fail("eval: out of host memory");
    double t0 = eval_now(), last = t0;
    for (int i = 0; rc == 0 && i < rounds; i++) {
        int first = (i * W + r) * mb, Ti = sft_val_batch_len(d, first, mb); /* T when not bucketed */
        stats[1] += (double)sft_val_batch(d, first, mb, Ti, tokens, targets);
        double sum = 0.0;
        rc = model_gen_loss(g, tokens, targets, mb, Ti, &sum);
        stats[0] += sum;
        eval_loss_progress(s, i + 1, rounds, t0, &last);
    }
    model_gen_destroy(g);
    free(tokens);
    free(targets);
    return rc;
}

int evaluate_loss(session *s, const sft_data *d, double *val_loss)
{
    int mb = s->micro_batch, T = s->seq_len, W = s->comm->size, r = s->comm->rank;
    /* every rank runs the same number of forwards (ZeRO-3 gathers parameters in them) */
    int rounds = (d->val.n + mb * W - 1) / (mb * W);
    double stats[2] = {0.0, 0.0}; /* loss sum, loss tokens */
    if (!s->model->acts[0].x) {
        if (evaluate_loss_gen(s, d, rounds, stats)) return -1;
    } else {
        size_t n = (size_t)mb * T;
        int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
        int *lens = malloc((size_t)mb * sizeof(int));
        if (!tokens || !targets || !lens) {
            free(tokens), free(targets), free(lens);
            return loom_fail("eval: out of host memory");
        }
        int rc = 0, pack = s->cfg->data.pack;
        double t0 = eval_now(), last = t0;
        for (int i = 0; rc == 0 && i < rounds; i++) {
            /* each rank's rows at their own length: forwards do not depend on each other's shape */
            int first = (i * W + r) * mb, Ti = sft_val_batch_len(d, first, mb);
            stats[1] += (double)sft_val_batch(d, first, mb, Ti, tokens, targets);
            double loss = 0.0;
            rc = model_set_shape(s->model, mb, Ti);
            /* data.pack: as the training steps, no padding computed */
            if (rc == 0 && pack) rc = model_set_ragged(s->model, lens, model_pack_rows(tokens, targets, mb, Ti, lens));
            if (rc == 0) model_set_batch(s->model, tokens, targets);
            if (rc == 0) rc = model_forward(s->model, 0.0f, &loss);
            stats[0] += loss;
            eval_loss_progress(s, i + 1, rounds, t0, &last);
        }
        free(tokens), free(targets), free(lens);
        if (model_set_shape(s->model, mb, T) || rc) return -1;
    }
    if (comm_allreduce_host(s->comm, stats, 2)) return -1;
    *val_loss = stats[1] > 0 ? stats[0] / stats[1] : NAN;
    return 0;
}

int32_t evaluate_pick(const float *logits, int V, float temperature, int top_k, uint64_t seed,
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

/* Progress of one evaluation: examples done, tokens generated, rate and ETA, on stderr. */
typedef struct eval_meter {
    const char *what;
    int rank0, W, total, done;
    long tokens;
    double t0, last;
} eval_meter;

/* partial: examples of the running batch counted by how far they are (made / limit). */
static void eval_meter_show(eval_meter *mt, double partial, int final)
{
    double now = eval_now(), dt = now - mt->t0;
    if (!mt || !mt->rank0 || (!final && now - mt->last < 2.0)) return;
    mt->last = now;
    double f = mt->total > 0 ? ((double)mt->done + partial) / mt->total : 1.0;
    char eta[48] = "ETA ?";
    if (final) snprintf(eta, sizeof eta, "done in %.1f s", dt);
    else if (f > 0) snprintf(eta, sizeof eta, "ETA %.0f s", dt * (1.0 - f) / f);
    log_info("eval %s: %d/%d examples%s, %ld tokens, %.1f tokens/s, %s", mt->what,
            mt->done, mt->total, mt->W > 1 ? " (rank 0's share)" : "", mt->tokens,
            dt > 0 ? (double)mt->tokens / dt : 0.0, eta);
}

/* Decode R prompts on context g until every row has stopped (see evaluate_generate_batch);
 * limit[r] (>= 1) caps row r's new tokens. */
static int eval_decode(session *s, const chat_template *ct, model_gen *g, int R,
                       const int32_t *const *prompts, const int *lens, const int *limit,
                       float temperature, int top_k, uint64_t seed, int32_t *const *out, int *made,
                       eval_meter *mt)
{
    /* pick among the tokenizer's ids only (a padded vocab's extra rows are never tokens) */
    int V = s->model->cfg.vocab, tv = tokenizer_vocab(ct->tok), Vpick = V < tv ? V : tv;
    float *logits = malloc((size_t)R * V * sizeof(float));
    int *row = malloc((size_t)R * sizeof(int));
    int32_t *next = malloc((size_t)R * sizeof(int32_t));
    int rc = logits && row && next ? 0 : loom_fail("generate: out of host memory");
    if (rc == 0) rc = model_gen_prefill(g, prompts, lens, R, logits);
    for (int r = 0; r < R; r++) row[r] = r, made[r] = 0;
    while (rc == 0 && model_gen_live(g) > 0) {
        int live = model_gen_live(g);
        for (int i = 0; i < live; i++) { /* live row i carries sequence row[i] */
            int r = row[i];
            next[i] = evaluate_pick(logits + (size_t)i * V, Vpick, temperature, top_k, seed + (uint64_t)r,
                                    (uint64_t)(lens[r] + made[r]));
            out[r][made[r]++] = next[i];
        }
        if (mt) mt->tokens += live;
        /* from the top down: the row that moves into a dropped slot has been checked already */
        for (int i = live - 1; rc == 0 && i >= 0; i--) {
            if (!evaluate_is_stop(ct, next[i]) && made[row[i]] < limit[row[i]]) continue;
            int last = model_gen_live(g) - 1;
            rc = model_gen_drop(g, i);
            row[i] = row[last];
            next[i] = next[last];
        }
        if (rc == 0 && model_gen_live(g) > 0) rc = model_gen_step(g, next, logits);
        if (mt) {
            double partial = 0.0;
            for (int i = 0; i < model_gen_live(g); i++) partial += (double)made[row[i]] / limit[row[i]];
            eval_meter_show(mt, (double)(R - model_gen_live(g)) + partial, 0);
        }
    }
    free(logits);
    free(row);
    free(next);
    return rc;
}

/* Row limits: max_new capped by the model's length; the cache is as long as the longest row. */
static int eval_limits(const session *s, int R, const int *lens, const int *max_new, int *limit)
{
    int cap = 1;
    for (int r = 0; r < R; r++) {
        if (lens[r] < 1 || lens[r] >= s->seq_len)
            return loom_fail("generate: prompt of %d tokens does not fit the model's %d", lens[r], s->seq_len);
        limit[r] = max_new[r] < s->seq_len - lens[r] ? max_new[r] : s->seq_len - lens[r];
        if (limit[r] < 1) limit[r] = 1;
        if (lens[r] + limit[r] > cap) cap = lens[r] + limit[r];
    }
    return cap;
}

static int eval_fwd_tokens(int R, const int *lens)
{
    int longest = 1;
    for (int r = 0; r < R; r++)
        if (lens[r] > longest) longest = lens[r];
    long want = (long)R * longest;
    return want < EVALUATE_FWD_TOKENS ? (int)want : EVALUATE_FWD_TOKENS;
}

int evaluate_generate_batch(session *s, const chat_template *ct, int R,
                            const int32_t *const *prompts, const int *lens, const int *max_new,
                            float temperature, int top_k, uint64_t seed, int32_t *const *out,
                            int *made)
{
    int *limit = malloc((size_t)(R > 0 ? R : 1) * sizeof(int));
    if (!limit) return loom_fail("generate: out of host memory");
    int cap = eval_limits(s, R, lens, max_new, limit);
    model_gen *g = cap > 0 ? model_gen_create(s->model, R, cap, eval_fwd_tokens(R, lens)) : NULL;
    int rc = g ? eval_decode(s, ct, g, R, prompts, lens, limit, temperature, top_k, seed, out, made,
                             NULL)
               : -1;
    model_gen_destroy(g);
    free(limit);
    return rc;
}

int evaluate_generate(session *s, const chat_template *ct, const int32_t *prompt, int n, int max_new,
                      float temperature, int top_k, uint64_t seed, int32_t *out)
{
    int made = 0;
    if (evaluate_generate_batch(s, ct, 1, &prompt, &n, &max_new, temperature, top_k, seed, &out,
                                &made))
        return -1;
    return made;
}

int evaluate_select(int nval, int max_examples, int *idx)
{
    int n = max_examples > 0 && max_examples < nval ? max_examples : nval;
    /* evenly spread: example floor(k * nval / n), so a sample spans the whole split */
    for (int k = 0; k < n; k++) idx[k] = (int)((long long)k * nval / n);
    return n;
}

/* This rank's examples that fit (a prompt filling the window is a miss without generating). */
typedef struct eval_work {
    int n, *ex, *lens, *max_new, *made;
    const int32_t **prompts;
    int32_t **out, *outs; /* outs: every row's new tokens, T each */
} eval_work;

static void eval_work_free(eval_work *w)
{
    free(w->outs);
    free(w->ex), free(w->lens), free(w->max_new), free(w->made), free(w->prompts), free(w->out);
}

static int eval_work_plan(session *s, const sft_data *d, const int *sel, int nsel, eval_work *w)
{
    int T = s->seq_len, W = s->comm->size, r = s->comm->rank, cnt = nsel / W + 1, longest = 0;
    for (int i = 0; i < d->val.n; i++)
        if (d->val.len[i] - d->val.prompt_len[i] > longest) longest = d->val.len[i] - d->val.prompt_len[i];
    memset(w, 0, sizeof *w);
    w->ex = malloc((size_t)cnt * sizeof(int)), w->lens = malloc((size_t)cnt * sizeof(int));
    w->max_new = malloc((size_t)cnt * sizeof(int)), w->made = malloc((size_t)cnt * sizeof(int));
    w->prompts = malloc((size_t)cnt * sizeof *w->prompts), w->out = malloc((size_t)cnt * sizeof *w->out);
    w->outs = malloc((size_t)cnt * T * sizeof(int32_t));
    if (!w->ex || !w->lens || !w->max_new || !w->made || !w->prompts || !w->out || !w->outs)
        return loom_fail("eval: out of host memory");
    for (int k = r; k < nsel; k += W) {
        int i = sel[k], plen = d->val.prompt_len[i];
        if (plen >= T) continue;
        int j = w->n++;
        w->ex[j] = i;
        w->lens[j] = plen;
        /* an answer longer than the longest reference answer (plus slack) is already wrong */
        w->max_new[j] = T - plen < longest + 16 ? T - plen : longest + 16;
        w->prompts[j] = d->val.tokens + (size_t)i * T;
        w->out[j] = w->outs + (size_t)j * T;
    }
    return 0;
}

/* Decode the planned examples eval.batch at a time on one context, grading each batch. */
static int eval_run(session *s, const sft_data *d, eval_work *w, eval_meter *mt, double *stats)
{
    int B = s->cfg->eval.batch > 0 ? s->cfg->eval.batch : 1, T = s->seq_len, rc = 0;
    if (w->n == 0) return 0;
    if (B > w->n) B = w->n;
    int *limit = malloc((size_t)w->n * sizeof(int));
    char *text = malloc((size_t)T * 8 + 16);
    int cap = limit && text ? eval_limits(s, w->n, w->lens, w->max_new, limit) : loom_fail("eval: out of host memory");
    int fwd = EVALUATE_FWD_TOKENS < B * T ? EVALUATE_FWD_TOKENS : B * T;
    model_gen *g = cap > 0 ? model_gen_create(s->model, B, cap, fwd < cap ? cap : fwd) : NULL;
    if (!g) rc = -1;
    for (int j0 = 0; rc == 0 && j0 < w->n; j0 += B) {
        int R = w->n - j0 < B ? w->n - j0 : B;
        rc = eval_decode(s, d->chat, g, R, w->prompts + j0, w->lens + j0, limit + j0, 0.0f, 0, 0,
                         w->out + j0, w->made + j0, mt);
        for (int j = j0; rc == 0 && j < j0 + R; j++) {
            const sft_example *ex = &d->val.ex[w->ex[j]];
            int got = toolcall_extract(d->chat, w->out[j], w->made[j], text, (size_t)T * 8 + 16);
            stats[4] += toolcall_needle_match(got < 0 ? NULL : text, ex->answers_json); /* none: [] */
            stats[5] += got < 0;
            if (got < 0) continue;
            toolcall_grade gr = toolcall_grade_text(text, ex->answers);
            stats[0] += gr.exact;
            stats[1] += gr.names;
        }
        mt->done += R;
    }
    model_gen_destroy(g);
    free(limit);
    free(text);
    return rc;
}

int evaluate_accuracy(session *s, const sft_data *d, const char *what, eval_result *res)
{
    /* exact, names, examples, tokens, Needle's exact call, no call block, empty answers */
    double t0 = eval_now(), stats[7] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    memset(res, 0, sizeof *res);
    res->accuracy = res->names = res->needle = res->empty = res->no_call = NAN;
    if (s->cfg->parallel.zero_stage == 3 && s->mode != SESSION_INFER) {
        log_warn("eval: tool-call accuracy needs whole parameters on each rank; not measured under ZeRO-3");
        return 0;
    }
    int *sel = malloc((size_t)(d->val.n > 0 ? d->val.n : 1) * sizeof(int));
    if (!sel) return loom_fail("eval: out of host memory");
    int nsel = evaluate_select(d->val.n, s->cfg->eval.max_examples, sel);
    eval_work w;
    int rc = eval_work_plan(s, d, sel, nsel, &w);
    eval_meter mt = {what ? what : "model", s->comm->rank == 0, s->comm->size, 0, 0, 0, t0, t0};
    for (int k = s->comm->rank; k < nsel; k += s->comm->size) {
        mt.total++;
        stats[6] += toolcall_needle_match(NULL, d->val.ex[sel[k]].answers_json);
    }
    mt.done = mt.total - w.n; /* prompts that fill the window are misses, done at once */
    if (rc == 0) rc = eval_run(s, d, &w, &mt, stats);
    eval_meter_show(&mt, 0.0, 1);
    stats[2] = mt.total;
    stats[3] = (double)mt.tokens;
    eval_work_free(&w);
    free(sel);
    if (rc) return -1;
    if (comm_allreduce_host(s->comm, stats, 7)) return -1;
    res->examples = (int)stats[2];
    res->tokens = (long)stats[3];
    res->accuracy = stats[2] > 0 ? stats[0] / stats[2] : NAN;
    res->names = stats[2] > 0 ? stats[1] / stats[2] : NAN;
    res->needle = stats[2] > 0 ? stats[4] / stats[2] : NAN;
    res->no_call = stats[2] > 0 ? stats[5] / stats[2] : NAN;
    res->empty = stats[2] > 0 ? stats[6] / stats[2] : NAN;
    res->seconds = eval_now() - t0;
    return 0;
}
