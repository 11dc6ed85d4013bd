/* test_generate.c: batched generation (model_gen) against the single-sequence KV-cache path and
 * against full forwards, on the CPU backend, for both architecture families and LoRA: prompts of
 * different lengths, rows finishing at different steps (dropped mid-batch), greedy tokens
 * identical, logits within float tolerance; the loss pass of an inference model (no training
 * activations) equals model_forward's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/rng.h"
#include "core/config/config.h"
#include "core/train/evaluate.h"
#include "core/model/model.h"

#include "tests/check.h"
#include "tests/core/model/model_variants.h"

enum { R = 5, T = 24, MAXNEW = 10 };

static backend *cpu(void) { return variants_cpu(2); }
static model_config variant(int llama) { return model_variant(llama, 40, 32, 48, T); }

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Weights for model m: seeded init (and, for LoRA, non-zero B so the adapters act). */
static void load_weights(model *m, const model *plain)
{
    backend *be = m->be;
    float *h = malloc((plain ? plain->nparams : m->nparams) * sizeof(float));
    if (plain) {
        model_init_values(plain, 7, h);
        model_load_base_range(m, h, 0, m->nbase_params);
        free(h);
        h = malloc(m->nparams * sizeof(float));
        for (size_t j = 0; j < m->nparams; j++) h[j] = 0.2f * rng_normal(5, j);
    } else {
        model_init_values(m, 7, h);
        /* qk_norm models: perturb everything so the biases and norm weights are not 0 and 1 */
        for (size_t j = 0; m->cfg.qk_norm && j < m->nparams; j++) h[j] += 0.1f * rng_normal(9, j);
    }
    backend_copy_h2d(be, m->params, h, m->nparams * sizeof(float));
    free(h);
}

typedef struct ref {
    int len[R], limit[R], tok[R][T];       /* prompt + greedy continuation */
    float logits[R][MAXNEW][64];           /* the logits each new token was picked from */
} ref;

/* The single-sequence path: prefill, then one model_decode per token; greedy. */
static void reference(model *m, ref *rf)
{
    int V = m->cfg.vocab;
    float *lg = malloc((size_t)V * sizeof(float));
    for (int r = 0; r < R; r++) {
        int n = rf->len[r];
        CHECK(model_prefill(m, rf->tok[r], n, lg) == 0, "prefill row %d", r);
        for (int k = 0; k < rf->limit[r]; k++) {
            memcpy(rf->logits[r][k], lg, (size_t)V * sizeof(float));
            rf->tok[r][n + k] = argmax(lg, V);
            if (k + 1 < rf->limit[r]) CHECK(model_decode(m, rf->tok[r][n + k], n + k, lg) == 0, "decode");
        }
    }
    free(lg);
}

/* The batched path on model m (which may have no activations): same tokens, close logits;
 * returns the worst logit difference. */
static double batched(model *m, const ref *rf, int rows, int fwd)
{
    int V = m->cfg.vocab, row[R], made[R] = {0};
    model_gen *g = model_gen_create(m, rows, T, fwd);
    CHECK(g != NULL, "model_gen_create: %s", loom_error());
    if (!g) return INFINITY;
    const int32_t *prompts[R];
    int32_t next[R];
    float *lg = malloc((size_t)rows * V * sizeof(float));
    for (int r = 0; r < rows; r++) prompts[r] = rf->tok[r], row[r] = r;
    CHECK(model_gen_prefill(g, prompts, rf->len, rows, lg) == 0, "batched prefill: %s", loom_error());
    double worst = 0;
    while (model_gen_live(g) > 0) {
        int live = model_gen_live(g);
        for (int i = 0; i < live; i++) {
            int r = row[i], k = made[r]++;
            for (int v = 0; v < V; v++) worst = fmax(worst, fabs(lg[(size_t)i * V + v] - rf->logits[r][k][v]));
            next[i] = argmax(lg + (size_t)i * V, V);
            CHECK(next[i] == rf->tok[r][rf->len[r] + k], "row %d token %d: batched %d, single %d", r, k,
                  next[i], rf->tok[r][rf->len[r] + k]);
            CHECK(model_gen_pos(g, i) == rf->len[r] + k, "row %d position %d", r, model_gen_pos(g, i));
        }
        for (int i = live - 1; i >= 0; i--) {
            if (made[row[i]] < rf->limit[row[i]]) continue;
            int last = model_gen_live(g) - 1;
            CHECK(model_gen_drop(g, i) == 0, "drop");
            row[i] = row[last];
            next[i] = next[last];
        }
        if (model_gen_live(g) > 0) CHECK(model_gen_step(g, next, lg) == 0, "step: %s", loom_error());
    }
    for (int r = 0; r < rows; r++) CHECK(made[r] == rf->limit[r], "row %d made %d tokens", r, made[r]);
    free(lg);
    model_gen_destroy(g);
    return worst;
}

/* The last generated token's logits = a full forward over the whole sequence. */
static double against_full(model *m, const ref *rf)
{
    int V = m->cfg.vocab;
    float *lg = malloc((size_t)V * sizeof(float));
    double worst = 0;
    for (int r = 0; r < R; r++) {
        int n = rf->len[r] + rf->limit[r] - 1; /* the prefix the last token was picked after */
        CHECK(model_prefill(m, rf->tok[r], n, lg) == 0, "full forward");
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs(lg[v] - rf->logits[r][rf->limit[r] - 1][v]));
    }
    free(lg);
    return worst;
}

static void check_family(int llama, int lora)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    /* every projection: the attention ones and the MLP's (decoder_mlp_forward's adapter terms) */
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V) | (1u << LORA_O) |
                    (1u << LORA_PROJ) | (llama ? (1u << LORA_GATE) | (1u << LORA_UP) : 1u << LORA_FC)};
    const lora_spec *lp = lora ? &ls : NULL;
    model *plain = lora ? model_create(&mc, be, 1, T, 1, 0, 0, NULL) : NULL;
    model *m = model_create(&mc, be, 1, T, 1, 0, MODEL_ACTS_KEEP, lp);
    model *inf = model_create(&mc, be, 1, T, 1, 0, MODEL_ACTS_NONE, lp);
    CHECK(m && inf, "model_create: %s", loom_error());
    CHECK(inf->activation_bytes == 0, "an inference model allocated %zu activation bytes", inf->activation_bytes);
    load_weights(m, plain);
    load_weights(inf, plain);
    ref *rf = calloc(1, sizeof *rf);
    for (int r = 0; r < R; r++) {
        rf->len[r] = 2 + 3 * r % 11;                       /* 2, 5, 8, 11, 3 */
        rf->limit[r] = 1 + (r * 7) % MAXNEW;               /* 1, 8, 5, 2, 9: rows drop at different steps */
        for (int t = 0; t < rf->len[r]; t++) rf->tok[r][t] = (int32_t)(rng_u64(21 + r, (uint64_t)t) % (uint64_t)mc.vocab);
    }
    reference(m, rf);
    double one = batched(m, rf, 1, T), all = batched(m, rf, R, R * T), none = batched(inf, rf, R, R * T);
    /* one sequence's rows per forward: prefill in groups, the scaled rope of a step in chunks */
    double narrow = batched(inf, rf, R, T);
    CHECK(narrow < 1e-4, "batched logits with %d-row forwards differ by %.3g", T, narrow);
    double full = against_full(m, rf);
    /* a training model with a larger arena lends it to the context (no new device memory) */
    model *big = model_create(&mc, be, 8, T, 1, 0, MODEL_ACTS_KEEP, lp);
    load_weights(big, plain);
    model_gen *lent = model_gen_create(big, R, T, R * T);
    CHECK(lent && model_gen_bytes(lent) == 0, "a context that fits the arena allocated %zu bytes",
          lent ? model_gen_bytes(lent) : 0);
    model_gen_destroy(lent);
    double borrowed = batched(big, rf, R, R * T);
    CHECK(borrowed < 1e-4, "a context in the model's arena differs by %.3g", borrowed);
    /* the model's own state in that arena (its rope frequency table) survives the contexts */
    double after = against_full(big, rf);
    CHECK(after < 1e-4, "after lending its arena the model's forward differs by %.3g", after);
    model_destroy(big);
    printf("batched decode (%s%s): max |logit diff| vs single path: batch 1 %.2e, batch %d %.2e, "
           "no-activation model %.2e; vs full forward %.2e\n", llama == 2 ? "qwen" : llama ? "llama" : "gpt2", lora ? " + LoRA" : "",
           one, R, all, none, full);
    CHECK(one < 1e-4 && all < 1e-4 && none < 1e-4, "batched logits differ from the single path");
    CHECK(full < 1e-4, "decoded logits differ from a full forward by %.3g", full);
    CHECK(model_prefill(inf, rf->tok[0], 3, rf->logits[0][0]) != 0, "an inference model ran the training forward");

    /* loss through the generation buffers = model_forward's on the padded (3, T) batch: row 1's
     * last third and row 2 without targets (model_gen_loss packs the rows and cuts them after
     * their last target), one row per forward and all three in one */
    model *tr = model_create(&mc, be, 3, T, 1, 0, MODEL_ACTS_KEEP, lp);
    load_weights(tr, plain);
    int32_t tok[3 * T], tgt[3 * T];
    for (int i = 0; i < 3 * T; i++) {
        tok[i] = (int32_t)(rng_u64(3, (uint64_t)i) % (uint64_t)mc.vocab);
        tgt[i] = i % 7 == 3 || (i >= T && i % T >= 2 * T / 3) ? -1 : (int32_t)(rng_u64(4, (uint64_t)i) % (uint64_t)mc.vocab);
    }
    model_set_batch(tr, tok, tgt);
    double want = -1.0;
    CHECK(model_forward(tr, 0.0f, &want) == 0, "model_forward: %s", loom_error());
    for (int fwd = T; fwd <= 3 * T; fwd += 2 * T) {
        double got = -1.0;
        model_gen *g = model_gen_create(inf, 1, T, fwd);
        CHECK(g && model_gen_loss(g, tok, tgt, 3, T, &got) == 0, "model_gen_loss: %s", loom_error());
        CHECK(fabs(got - want) <= 1e-5 * fabs(want), "generation-buffer loss (forwards of %d) %.9g != model_forward %.9g",
              fwd, got, want);
        printf("loss without activations, forwards of %d tokens: %.7f, model_forward %.7f\n", fwd, got, want);
        model_gen_destroy(g);
    }
    model_destroy(tr);
    free(rf);
    model_destroy(inf);
    model_destroy(m);
    model_destroy(plain);
    backend_destroy(be);
}

/* eval.max_examples: an even, deterministic spread over the split; 0 or more than there are = all. */
static void check_select(void)
{
    int idx[16], want4[] = {0, 2, 5, 7};
    CHECK(evaluate_select(10, 4, idx) == 4 && memcmp(idx, want4, sizeof want4) == 0,
          "select 4 of 10: %d %d %d %d", idx[0], idx[1], idx[2], idx[3]);
    CHECK(evaluate_select(10, 0, idx) == 10 && idx[9] == 9, "select all of 10");
    CHECK(evaluate_select(3, 5, idx) == 3 && idx[2] == 2, "select 5 of 3");
    CHECK(evaluate_select(0, 5, idx) == 0, "select from an empty split");
}

int main(void)
{
    check_select();
    check_family(0, 0);
    check_family(1, 0);
    check_family(1, 1);
    check_family(2, 0); /* head_dim != d_model / n_head, qk_norm, qkv biases, llama3 rope scaling */
    check_family(2, 1);
    if (failures) printf("%d check(s) failed\n", failures);
    else printf("all generation checks passed\n");
    return failures ? 1 : 0;
}
