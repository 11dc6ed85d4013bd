/* test_sft_bucket.c: batches by length (data.bucket): every example once per epoch, batches that
 * depend on (seed, epoch, k) only and split over ranks into the same rows, each batch's length
 * and the padding share against a hand count; and the model run at T' < T on a bucketed batch
 * gives the loss and gradients of the same rows run at the allocated T. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/rng.h"
#include "core/text/chat.h"
#include "core/model/model.h"
#include "core/text/sft_data.h"
#include "core/text/tokenizer.h"

#include "tests/check.h"

static chat_template g_ct; /* loom's format on the byte tokenizer */

#define TOOL_F "{\"name\":\"f\",\"parameters\":{\"x\":\"int\"}}"
enum { N_EX = 203, GB = 8 }; /* 26 global batches, the last one of 3 examples */

/* N_EX examples whose queries run from 0 to ~900 bytes, in a scrambled order. */
static void write_varied(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(1); }
    static char q[1024];
    for (int i = 0; i < N_EX; i++) {
        int len = (int)(rng_u64(77, (uint64_t)i) % 900);
        memset(q, 'a' + i % 26, (size_t)len);
        q[len] = '\0';
        fprintf(f, "{\"query\":\"%s\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\",\"arguments\":{\"x\":%d}}]}\n",
                q, i);
    }
    fclose(f);
}

static int load(sft_data *d, int bucket)
{
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "sft_bucket.jsonl");
    c.max_len = 1024;
    if (sft_data_load(d, &c, &g_ct, 5) != 0) { CHECK(0, "load: %s", loom_error()); return -1; }
    if (sft_data_batching(d, GB, bucket, 11) != 0) { CHECK(0, "batching: %s", loom_error()); return -1; }
    return 0;
}

static int round_len(int n) { return (n + SFT_LEN_MULTIPLE - 1) / SFT_LEN_MULTIPLE * SFT_LEN_MULTIPLE; }

/* Once per epoch, the empty rows only in the one short batch, and one chunk (26 batches < 32)
 * sorted: the length ranges of two batches never overlap. */
static void check_epoch(sft_data *d, int epoch, int *order)
{
    int nb = (int)sft_steps_per_epoch(d, GB), seen[N_EX] = {0}, empty = 0, lo[32], hi[32];
    CHECK(nb == 26, "%d batches", nb);
    for (int k = 0; k < nb; k++) {
        lo[k] = 1 << 30, hi[k] = 0;
        int e_in = 0;
        for (int i = 0; i < GB; i++) {
            int idx = order[k * GB + i] = sft_sample_index(d, 11, epoch, (uint64_t)(k * GB + i));
            if (idx < 0) { e_in++; continue; }
            seen[idx]++;
            int len = d->train.len[idx];
            if (len < lo[k]) lo[k] = len;
            if (len > hi[k]) hi[k] = len;
        }
        CHECK(e_in == 0 || e_in == GB * nb - N_EX, "batch %d: %d empty rows", k, e_in);
        empty += e_in;
    }
    CHECK(empty == GB * nb - N_EX, "epoch %d: %d empty rows", epoch, empty);
    for (int i = 0; i < N_EX; i++) CHECK(seen[i] == 1, "epoch %d: example %d seen %d times", epoch, i, seen[i]);
    int overlap = 0;
    for (int a = 0; a < nb; a++)
        for (int b = 0; b < nb; b++) overlap += a != b && lo[a] < hi[b] && lo[b] < hi[a];
    CHECK(overlap == 0, "epoch %d: %d pairs of batches with overlapping lengths", epoch, overlap);
}

static void test_order(void)
{
    sft_data d, d2;
    if (load(&d, 1) || load(&d2, 1)) return;
    int o0[26 * GB], o1[26 * GB], again[26 * GB];
    CHECK(d.sorted && d.share_sorted < 0.5 * d.share_unsorted, "varied lengths: sorted %d (%.3f vs %.3f unsorted)",
          d.sorted, d.share_sorted, d.share_unsorted);
    check_epoch(&d, 0, o0);
    check_epoch(&d, 1, o1);
    CHECK(memcmp(o0, o1, sizeof o0) != 0, "epochs 0 and 1 in the same order");
    /* the cache walked epochs 0, 1: a fresh load (other state) and epoch 1 of the running index agree */
    check_epoch(&d2, 0, again);
    CHECK(memcmp(o0, again, sizeof o0) == 0, "a second load orders epoch 0 differently");
    for (int g = 0; g < 26 * GB; g++)
        CHECK(sft_sample_index(&d2, 11, 0, (uint64_t)(26 * GB + g)) == o1[g], "running index %d into epoch 1", g);
    int diff = 0;
    for (int g = 0; g < 26 * GB; g++) diff += sft_sample_index(&d, 12, 0, (uint64_t)g) != o0[g];
    CHECK(diff > 0, "seed 12 gives the order of seed 11");
    sft_data_free(&d);
    sft_data_free(&d2);

    /* plain (data.bucket false): the unbatched order, every row at d.T */
    sft_data p, q;
    if (load(&p, 0)) return;
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "sft_bucket.jsonl");
    c.max_len = 1024;
    if (sft_data_load(&q, &c, &g_ct, 5)) { CHECK(0, "load"); sft_data_free(&p); return; }
    diff = 0;
    for (int g = 0; g < 3 * N_EX; g++) diff += sft_sample_index(&p, 11, 0, (uint64_t)g) != sft_sample_index(&q, 11, 0, (uint64_t)g);
    CHECK(diff == 0, "bucket false changed the plain order (%d samples)", diff);
    CHECK(sft_batch_len(&p, 11, 0, 0, GB) == p.T && p.T == 1024, "plain batch length %d", sft_batch_len(&p, 11, 0, 0, GB));
    sft_data_free(&p);
    sft_data_free(&q);
}

/* Each global batch at its length: any split over ranks gives the rows of the whole batch, no
 * target is lost against the full length, and the padding share is the hand count. */
static void test_batches(void)
{
    sft_data d, p;
    if (load(&d, 1) || load(&p, 0)) return;
    int T = d.T, nb = (int)sft_steps_per_epoch(&d, GB);
    int32_t *tok = malloc((size_t)GB * T * sizeof *tok), *tgt = malloc((size_t)GB * T * sizeof *tgt);
    int32_t *tok2 = malloc((size_t)GB * T * sizeof *tok), *tgt2 = malloc((size_t)GB * T * sizeof *tgt);
    double rows = 0, real = 0, rows_plain = 0;
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < nb; k++) {
            uint64_t g0 = (uint64_t)(e * nb + k) * GB;
            int longest = 0, Tk = sft_batch_len(&d, 11, 0, g0, GB);
            for (int i = 0; i < GB; i++) {
                int idx = sft_sample_index(&d, 11, 0, g0 + (uint64_t)i);
                if (idx >= 0 && d.train.len[idx] > longest) longest = d.train.len[idx];
                if (idx >= 0) real += d.train.len[idx];
            }
            CHECK(Tk == round_len(longest) && Tk <= T, "batch %d: length %d for a longest row of %d", k, Tk, longest);
            rows += (double)GB * Tk;
            rows_plain += (double)GB * T;
            long count = sft_batch(&d, 11, 0, g0, GB, Tk, tok, tgt);
            CHECK(count == sft_batch_loss_tokens(&d, 11, 0, g0, GB, T) && count > 0,
                  "batch %d: %ld targets at %d, %ld at %d", k, count, Tk, sft_batch_loss_tokens(&d, 11, 0, g0, GB, T), T);
            int splits[][4] = {{4, 4, 0, 0}, {2, 2, 2, 2}, {1, 7, 0, 0}};
            for (size_t s = 0; s < 3; s++) {
                long sum = 0;
                for (int r = 3, at = GB; r >= 0; r--) { /* ranks filled out of turn */
                    if (!splits[s][r]) continue;
                    at -= splits[s][r];
                    sum += sft_batch(&d, 11, 0, g0 + (uint64_t)at, splits[s][r], Tk, tok2 + (size_t)at * Tk,
                                     tgt2 + (size_t)at * Tk);
                }
                CHECK(sum == count && !memcmp(tok, tok2, (size_t)GB * Tk * sizeof *tok) &&
                      !memcmp(tgt, tgt2, (size_t)GB * Tk * sizeof *tgt), "batch %d: split %zu differs", k, s);
            }
        }
    /* two epochs' batches, as the trainer logs one epoch */
    double want = 1.0 - real / rows, got = sft_padding_share(&d, 11, 0, 2L * nb * GB);
    CHECK(fabs(got - want) < 1e-12, "padding share %.6f, hand count %.6f", got, want);
    double plain = sft_padding_share(&p, 11, 0, 2L * nb * GB);
    double real_plain = 0;
    for (long g = 0; g < 2L * nb * GB; g++) real_plain += p.train.len[sft_sample_index(&p, 11, 0, (uint64_t)g)];
    CHECK(fabs(plain - (1.0 - real_plain / rows_plain)) < 1e-12, "plain padding share %.6f", plain);
    printf("padding share: %.1f%% bucketed, %.1f%% at one length %d (%d examples, batch %d)\n", 100 * got,
           100 * plain, T, N_EX, GB);
    CHECK(got < 0.5 * plain, "bucketing saved little: %.3f vs %.3f", got, plain);
    free(tok); free(tgt); free(tok2); free(tgt2);
    sft_data_free(&d);
    sft_data_free(&p);
}

/* Lengths within a few tokens of each other: sorting would save little, so the batches stay
 * unsorted (random examples), each still at its own longest row; once per epoch all the same. */
static void test_unsorted(void)
{
    FILE *f = fopen("sft_bucket_even.jsonl", "wb");
    if (!f) { CHECK(0, "write"); return; }
    char q[256];
    memset(q, 'q', sizeof q);
    for (int i = 0; i < N_EX; i++) /* 200 .. 204 bytes */
        fprintf(f, "{\"query\":\"%.*s\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\",\"arguments\":{\"x\":1}}]}\n",
                200 + i % 5, q);
    fclose(f);
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "sft_bucket_even.jsonl");
    c.max_len = 1024;
    sft_data d, p;
    if (sft_data_load(&d, &c, &g_ct, 5) || sft_data_load(&p, &c, &g_ct, 5)) { CHECK(0, "load: %s", loom_error()); return; }
    CHECK(sft_data_batching(&d, GB, 1, 11) == 0 && d.bucket && !d.sorted, "even lengths sorted (%.3f vs %.3f)",
          d.share_sorted, d.share_unsorted);
    int nb = (int)sft_steps_per_epoch(&d, GB), seen[N_EX] = {0}, plain_same = 0;
    for (int g = 0; g < nb * GB; g++) {
        int idx = sft_sample_index(&d, 11, 0, (uint64_t)g);
        if (idx >= 0) seen[idx]++;
        plain_same += g < N_EX && idx == sft_sample_index(&p, 11, 0, (uint64_t)g);
    }
    for (int i = 0; i < N_EX; i++) CHECK(seen[i] == 1, "unsorted: example %d seen %d times", i, seen[i]);
    CHECK(plain_same < N_EX, "unsorted order is the plain one: its batches are shuffled too");
    for (int k = 0; k < nb; k++) {
        int longest = 0;
        for (int i = 0; i < GB; i++) {
            int idx = sft_sample_index(&d, 11, 0, (uint64_t)(k * GB + i));
            if (idx >= 0 && d.train.len[idx] > longest) longest = d.train.len[idx];
        }
        CHECK(sft_batch_len(&d, 11, 0, (uint64_t)(k * GB), GB) == round_len(longest), "unsorted batch %d length", k);
    }
    CHECK(fabs(sft_padding_share(&d, 11, 0, (long)nb * GB) - d.share_unsorted) < 1e-12, "logged share is epoch 0's");
    sft_data_free(&d);
    sft_data_free(&p);
    remove("sft_bucket_even.jsonl");
}

static backend *cpu(void)
{
    backend_config bc = {.threads = 1};
    backend *be = backend_select("cpu", &bc, NULL, 0);
    if (!be) { printf("FAIL: no cpu backend\n"); exit(1); }
    return be;
}

/* Forward (grad of the loss sum scaled by 1/targets) + backward at shape B x T on rows of Tr
 * (tok/tgt): loss sum into *loss, gradients into grad. */
static void run(model *m, int B, int T, const int32_t *tok, const int32_t *tgt, long targets, double *loss,
                float *grad)
{
    backend *be = m->be;
    CHECK(model_set_shape(m, B, T) == 0, "shape %d x %d: %s", B, T, loom_error());
    model_set_batch(m, tok, tgt);
    backend_fill(be, m->grads, 0.0f, m->nparams);
    CHECK(model_forward(m, 1.0f / (float)targets, NULL) == 0 && model_backward(m) == 0, "pass at T %d", T);
    *loss = model_take_loss(m);
    backend_copy_d2h(be, grad, m->grads, m->nparams * sizeof(float));
}

/* Rows of lengths 9, 23 and 14 of a bucketed batch: at T' = 32 (their batch length) and at the
 * allocated 64. Causal attention: the padding after a row cannot reach its earlier positions,
 * and padding carries no targets, so its positions add no loss and (dlogits 0) no gradient. */
static void check_model_shape(int llama)
{
    backend *be = cpu();
    job_config cfg;
    config_defaults(&cfg);
    model_config mc = cfg.model;
    config_apply_preset(&mc, "tiny");
    mc.vocab = 64; mc.d_model = 32; mc.n_layer = 2; mc.n_head = 4; mc.n_kv_head = llama ? 2 : 4;
    mc.d_ff = 48; mc.max_seq = 64;
    if (llama) {
        strcpy(mc.norm, "rmsnorm"); strcpy(mc.mlp, "swiglu"); strcpy(mc.positions, "rope");
        mc.tied_embeddings = 0; mc.bias = 0;
    }
    mc.init_std = 0.2f;
    enum { B = 3, TF = 64, TS = 32 };
    const int len[B] = {9, 23, 14};
    model *m = model_create(&mc, be, B, TF, 1, 1, 0, NULL);
    if (!m) { CHECK(0, "model_create: %s", loom_error()); backend_destroy(be); return; }
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 7, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tf[B * TF], gf[B * TF], ts[B * TS], gs[B * TS];
    long targets = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < TF; t++) {
            int32_t v = t < len[b] ? (int32_t)(1 + rng_u64(3, (uint64_t)(b * TF + t)) % 63) : 0; /* 0 = pad */
            int32_t y = t + 1 < len[b] && t >= len[b] / 3 ? (int32_t)(1 + rng_u64(3, (uint64_t)(b * TF + t + 1)) % 63) : -1;
            tf[b * TF + t] = v, gf[b * TF + t] = y;
            if (t < TS) ts[b * TS + t] = v, gs[b * TS + t] = y;
            targets += y >= 0;
        }
    float *g_full = malloc(m->nparams * sizeof(float)), *g_short = malloc(m->nparams * sizeof(float));
    double l_full, l_short;
    run(m, B, TS, ts, gs, targets, &l_short, g_short); /* short first: the full run overwrites all */
    run(m, B, TF, tf, gf, targets, &l_full, g_full);
    const char *what = llama ? "rmsnorm/swiglu/rope/gqa" : "layernorm/gelu/learned";
    printf("%s: loss sum at T'=%d %.9g, at T=%d %.9g\n", what, TS, l_short, TF, l_full);
    /* the loss: each position's loss is the same computation on the same rows (row-wise ops;
     * measured bitwise equal on OpenBLAS), summed in the same order with zeros in between; a BLAS
     * may still block a matmul of B*T' rows differently: fp32 rounding of each position's
     * log-sum-exp over d_model-long dot products, summed over the positions */
    double lt = check_tol_sum((double)mc.d_model, (double)mc.d_model, 2, CHECK_U_FP32).rtol * l_full;
    CHECK(fabs(l_short - l_full) <= lt, "%s: loss sum %.17g at T' vs %.17g at T", what, l_short, l_full);
    printf("%s: loss sums %s\n", what, l_short == l_full ? "bitwise equal" : "equal within fp32 rounding");
    /* gradients: weight gradients sum over B*T rows, the padding rows adding exact zeros but
     * moving the BLAS blocking of that sum: K = B*T terms of size ~|g|, fp32 */
    double *want = malloc(m->nparams * sizeof(double));
    double gmax = 0;
    for (size_t i = 0; i < m->nparams; i++) {
        want[i] = g_full[i];
        if (fabs(want[i]) > gmax) gmax = fabs(want[i]);
    }
    check_tol tol = check_tol_sum((double)B * TF, gmax, 2, CHECK_U_FP32);
    char name[96];
    snprintf(name, sizeof name, "%s gradients at T' vs T", what);
    check_allclose(name, g_short, want, m->nparams, tol);
    size_t same = 0;
    for (size_t i = 0; i < m->nparams; i++) same += g_short[i] == g_full[i];
    printf("%s: %zu of %zu gradient elements bitwise equal\n", what, same, m->nparams);
    CHECK(model_set_shape(m, B, TF + 1) != 0 && model_set_shape(m, B + 1, TS) != 0, "a shape over the allocation accepted");
    free(want); free(g_full); free(g_short); free(host);
    model_destroy(m);
    backend_destroy(be);
}

int main(void)
{
    tokenizer *tok = tokenizer_open("byte");
    if (!tok || chat_template_init(&g_ct, tok, "loom")) { printf("template: %s\n", loom_error()); return 1; }
    write_varied("sft_bucket.jsonl");
    test_order();
    test_batches();
    test_unsorted();
    check_model_shape(0);
    check_model_shape(1);
    remove("sft_bucket.jsonl");
    tokenizer_free(tok);
    if (failures) { printf("%d checks failed\n", failures); return 1; }
    printf("test_sft_bucket: all checks passed\n");
    return 0;
}
