/* test_needle_net: the needle family's passes against Needle's own (JAX, cactus-needle 3.2.8;
 * tests/fixtures/needle/make_model_fixtures.py): the fixture's base and adapter loaded and run on
 * its batch on the CPU backend; logits, the per-layer hidden states, the loss and every LoRA
 * gradient in float, and logits, loss and gradients under the fine-tune numerics (W4 + A8 + KV8);
 * greedy decoding token for token with run.generate's, float and with W4 weights. Arguments: the
 * fixtures folder and the fixture's prefix: "model" (the small config, 4 layers of d 96) or
 * "model_d768" (the default config's widths on one layer, weights in bf16; its greedy decode only
 * repeats the prompt's last token, as a random tied model at these widths does, so decoding is
 * really checked on the small one).
 *
 * Tolerances. Float: the logits and hidden states are 4 layers deep through matmuls, norms and
 * attention of a few hundred terms; each op's fp32 error is sqrt(K) u relative to its inputs'
 * magnitudes (check_tol_sum), but layer on layer the errors feed each other through the norms'
 * 1/rms and the mHC Sinkhorn exponent, so the bound is set from the fixture's own scale: atol
 * 64 eps max|ref| + rtol 1e-5, the rule test_hf applies to transformers' logits, with a factor of
 * the depth (L + 1) for the stacked layers.
 * QAT: A8 and KV8 round each activation to one of 255 levels of its row (W4 a weight to one of 16
 * codes). Where a value lies within an ulp of a half-way point, an ulp of difference in the sums
 * before it (XLA's summation order against the BLAS's) picks the other level: the value moves by
 * absmax / 127 of its row, and through attention every later position of that sequence moves with
 * it. Such a flip happens with probability ~ ulp / level per rounding: rare, but not avoidable by
 * any implementation whose sums are not XLA's own, Needle's included (its fixture script rerun on
 * an AMD EPYC gives QAT loss 6.5090437 against the committed 6.5090542, and 3 positions' logits
 * off by up to 0.0077, while its float logits agree to 1.2e-6), and how many flips loom meets
 * depends on its build (an -fsanitize build, with other code generation, meets two here where the
 * Release build meets one: 46 and 49 of 64 positions within the float rule; the default-width
 * fixture, model_d768, meets one in each sequence early: 20 of 64). So the check is: an eighth of
 * all positions within the float rule (a missing or misplaced fake-quant moves every
 * position: none is, as removing the A8 before out_proj or the KV8 of v shows), and every logit
 * within a tenth of the QAT numerics' own effect on the logits (Needle's QAT logits against its
 * float ones), the reach of a flipped level. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backends/backend.h"
#include "base/error.h"
#include "checkpoints/needle.h"
#include "checkpoints/safetensors.h"
#include "core/model/model.h"
#include "tests/check.h"

static float *ref_read(st_file *f, const char *name, size_t *n)
{
    int i = st_find(f, name);
    if (i < 0) {
        fprintf(stderr, "FAIL fixture has no %s\n", name);
        exit(1);
    }
    *n = f->t[i].numel;
    float *x = malloc(*n * sizeof(float));
    if (!x || st_read_f32(f, i, x, *n)) {
        fprintf(stderr, "FAIL reading %s: %s\n", name, loom_error());
        exit(1);
    }
    return x;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* got against want (float) under t, the check line printed. */
static void compare(const char *what, const float *got, const float *want, size_t n, check_tol t)
{
    double *w = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    check_allclose_v(what, got, w, n, t, 1);
    free(w);
}

/* The QAT rule of the file comment: got against Needle's QAT logits want, with Needle's float
 * logits flt giving the QAT effect; rows of V, sequences of T. */
static void check_qat(const float *got, const float *want, const float *flt, int B, int T, int V,
                      check_tol t)
{
    double effect = 0, worst = 0;
    for (size_t i = 0; i < (size_t)B * T * V; i++) effect = fmax(effect, fabs(flt[i] - want[i]));
    int exact = 0;
    for (int b = 0; b < B; b++) {
        int flipped = 0;
        for (int i = 0; i < T; i++) {
            const size_t r = ((size_t)b * T + i) * V;
            int ok = 1;
            for (int v = 0; v < V; v++) {
                double e = fabs(got[r + v] - want[r + v]);
                ok &= e <= t.atol + t.rtol * fabs(want[r + v]);
                worst = fmax(worst, e);
            }
            exact += ok;
            if (!ok && !flipped) printf("     sequence %d: first position off the float rule: %d\n", b, i);
            flipped |= !ok;
        }
    }
    CHECK(exact * 8 >= B * T, "QAT logits: %d of %d positions within the float rule", exact, B * T);
    CHECK(worst <= 0.1 * effect, "QAT logits: worst difference %.3g above a tenth of QAT's effect %.3g", worst, effect);
    printf("%s needle QAT logits vs Needle: %d of %d positions within the float rule (atol %.2g + rtol %.2g), "
           "worst elsewhere %.3g = %.3f of QAT's own effect %.3g\n",
           exact * 8 >= B * T && worst <= 0.1 * effect ? "ok  " : "FAIL", exact, B * T, t.atol, t.rtol,
           worst, worst / effect, effect);
}

static const char *const targets[5] = {"q_proj", "k_proj", "v_proj", "gate_proj", "out_proj"};

/* Loss and every LoRA gradient (mode "float" or "qat") against Needle's jax.value_and_grad. */
/* The fixture's PREFIX_ref.json float.loss and qat.loss: the loss Needle's step reports (read in main). */
static double needle_float_loss, needle_qat_loss;

/* |got - want|_2 / |want|_2 */
static double rel_l2(const float *got, const float *want, size_t n)
{
    double e2 = 0, w2 = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        e2 += e * e, w2 += (double)want[i] * want[i];
    }
    return sqrt(e2 / (w2 > 0 ? w2 : 1));
}

/* The loss and every LoRA gradient against Needle's jax.value_and_grad: float under the float
 * rule element by element; QAT (whose forward may hold flipped roundings, file comment) each
 * gradient tensor within a tenth of QAT's own effect on it (|g_float - g_qat| of Needle's) in the
 * 2-norm, and the loss, a mean over 62 positions each moved by a flip, within a quarter of it
 * (0.03 and 0.11 of it with one and two flips here). The backward reads the very buffers the fake-quants rounded in place,
 * so it uses the quantised values wherever Needle's STE does (checked exactly by the float case,
 * which is the same code). */
static void check_grads(needle_net *n, st_file *rf, int qat, const int32_t *tok, const float *mask,
                        int B, int T)
{
    double loss = 0;
    int rc = needle_net_grad(n, tok, mask, B, T, 0, 0, &loss);
    CHECK(rc == 0, "needle_net_grad: %s", loom_error());
    if (rc) return;
    const int L = needle_net_config(n)->num_layers;
    const double lq = needle_qat_loss, lf = needle_float_loss;
    if (qat)
        CHECK(fabs(loss - lq) <= 0.25 * fabs(lf - lq), "QAT loss %.9g vs Needle's %.9g (QAT's effect %.3g)", loss, lq, lf - lq);
    else
        CHECK(fabs(loss - lf) <= 1e-5 * (L + 1) * lf, "float loss %.9g vs Needle's %.9g", loss, lf);
    printf("     needle %s loss %.9g, Needle's %.9g\n", qat ? "QAT" : "float", loss, qat ? lq : lf);
    for (int t = 0; t < 5; t++) {
        char path[200], flax[120], name[200];
        snprintf(flax, sizeof flax, "stack/layers/block/self_attn/%s/kernel", targets[t]);
        size_t nw[2][2];
        float *want[2][2]; /* [float, qat][A, B] */
        for (int m = 0; m < 2; m++)
            for (int ab = 0; ab < 2; ab++) {
                snprintf(path, sizeof path, "%s/grad/%s/%s", m ? "qat" : "float", flax, ab ? "B" : "A");
                want[m][ab] = ref_read(rf, path, &nw[m][ab]);
            }
        float *got[2] = {malloc(nw[0][0] * sizeof(float)), malloc(nw[0][1] * sizeof(float))};
        rc = needle_net_lora_grad(n, flax, got[0], got[1]);
        CHECK(rc == 0, "lora grad %s: %s", flax, loom_error());
        for (int ab = 0; rc == 0 && ab < 2; ab++) {
            const float *w = want[qat][ab];
            const size_t k = nw[qat][ab];
            snprintf(name, sizeof name, "needle %s d%s/%s vs Needle", qat ? "QAT" : "float", targets[t], ab ? "B" : "A");
            if (!qat) {
                check_tol tl = {64 * FLT_EPSILON * max_abs(w, k) * (L + 1), 1e-5 * (L + 1)};
                compare(name, got[ab], w, k, tl);
            } else {
                const double err = rel_l2(got[ab], w, k), effect = rel_l2(want[0][ab], w, k);
                CHECK(err <= 0.1 * effect, "%s: relative 2-norm error %.4f above a tenth of QAT's effect %.4f", name, err, effect);
                printf("%s %-40s relative 2-norm error %.4f = %.3f of QAT's own effect %.3f\n",
                       err <= 0.1 * effect ? "ok  " : "FAIL", name, err, err / effect, effect);
            }
        }
        for (int m = 0; m < 4; m++) free(want[m / 2][m % 2]);
        free(got[0]), free(got[1]);
    }
}

/* Every adapter gradient (the 10 tensors one after another) of the last needle_net_grad; NULL
 * on failure. */
static float *all_grads(needle_net *n, size_t *count)
{
    size_t total = 0, off = 0;
    int in, out, r;
    for (int t = 0; needle_net_lora_info(n, t, &in, &out, &r, NULL); t++)
        total += (size_t)needle_net_config(n)->num_layers * r * (in + out);
    float *g = malloc(total * sizeof(float));
    for (int t = 0; g && needle_net_lora_info(n, t, &in, &out, &r, NULL); t++) {
        const size_t na = (size_t)needle_net_config(n)->num_layers * in * r;
        const size_t nb = (size_t)needle_net_config(n)->num_layers * r * out;
        if (needle_net_lora_grad(n, needle_net_lora_info(n, t, NULL, NULL, NULL, NULL), g + off, g + off + na))
            return free(g), NULL;
        off += na + nb;
    }
    *count = total;
    return g;
}

/* train.recompute: the backward that recomputes every layer whole (Needle's remat) and the one
 * that keeps each layer's q, k, v and gate projections from the forward give the same loss and
 * the same gradients, bit for bit (the same operations on the same values). */
static void check_recompute(needle_net *n, const int32_t *tok, const float *mask, int B, int T, int qat)
{
    double loss[2];
    float *g[2] = {NULL, NULL};
    size_t count[2] = {0, 0};
    for (int whole = 0; whole < 2; whole++) {
        needle_net_set_recompute(n, whole);
        CHECK(needle_net_grad(n, tok, mask, B, T, 0, 0, &loss[whole]) == 0, "grad: %s", loom_error());
        g[whole] = all_grads(n, &count[whole]);
    }
    needle_net_set_recompute(n, 0);
    CHECK(g[0] && g[1] && count[0] == count[1] && count[0] > 0, "gradients: %s", loom_error());
    /* the head in blocks of 7 rows (a short last one) against one block of every row with a target
     * (about half of the fixture's rows: the others are gathered out): the same
     * loss and gradients but for the products' summation order over blocks of other heights */
    double loss7 = 0;
    size_t count7 = 0;
    needle_net_set_head_rows(n, 7);
    CHECK(needle_net_grad(n, tok, mask, B, T, 0, 0, &loss7) == 0, "grad: %s", loom_error());
    needle_net_set_head_rows(n, 0);
    float *g7 = all_grads(n, &count7);
    const int L = needle_net_config(n)->num_layers;
    int with = 0; /* the rows the head runs on: those with a target */
    for (int b = 0; b < B; b++)
        for (int i = 0; i + 1 < T; i++) with += mask[b * T + i + 1] != 0.0f;
    CHECK(with > 7 && with % 7 != 0 && with < B * T, "%d of %d rows with a target: not several blocks of 7 and "
          "a short one, or none without", with, B * T);
    CHECK(fabs(loss7 - loss[0]) <= 1e-6 * fabs(loss[0]), "%s: head in blocks of 7: loss %.9g vs %.9g",
          qat ? "QAT" : "float", loss7, loss[0]);
    if (g7 && g[0] && count7 == count[0]) {
        check_tol tl = {64 * FLT_EPSILON * max_abs(g[0], count[0]) * (L + 1), 1e-5 * (L + 1)};
        compare(qat ? "needle QAT head in blocks of 7 rows" : "needle float head in blocks of 7 rows", g7, g[0],
                count[0], tl);
    }
    free(g7);
    if (g[0] && g[1]) {
        size_t diff = 0;
        for (size_t i = 0; i < count[0]; i++) diff += memcmp(&g[0][i], &g[1][i], sizeof(float)) != 0;
        CHECK(loss[0] == loss[1] && diff == 0, "%s: whole-layer recompute: loss %.9g vs %.9g, %zu of %zu gradient "
              "elements differ", qat ? "QAT" : "float", loss[1], loss[0], diff, count[0]);
        printf("%s needle %s: whole-layer recompute equal bitwise to the kept blocks (%zu gradient elements)\n",
               loss[0] == loss[1] && diff == 0 ? "ok  " : "FAIL", qat ? "QAT" : "float", count[0]);
    }
    /* the kept streams every 2nd and 3rd layer instead of every 4th: on L = 3 or 4 layers the
     * default's one group is the last, never rebuilt; these rebuild one and two streams in a row */
    for (int span = 2; span <= 3 && g[1]; span++) {
        double ls = 0;
        size_t cs = 0, diff = 0;
        needle_net_set_stream_span(n, span);
        CHECK(needle_net_grad(n, tok, mask, B, T, 0, 0, &ls) == 0, "grad: %s", loom_error());
        float *gs = all_grads(n, &cs);
        CHECK(gs && cs == count[1], "gradients at span %d: %s", span, loom_error());
        for (size_t i = 0; gs && i < cs && cs == count[1]; i++) diff += memcmp(&gs[i], &g[1][i], sizeof(float)) != 0;
        CHECK(ls == loss[1] && diff == 0, "%s: streams kept every %d layers: loss %.9g vs %.9g, %zu of %zu "
              "gradient elements differ", qat ? "QAT" : "float", span, ls, loss[1], diff, cs);
        free(gs);
    }
    needle_net_set_stream_span(n, 4);
    free(g[0]), free(g[1]);
}

/* One optimiser step against Needle's (optax.chain(clip_by_global_norm(1), adamw(schedule)) from
 * the fixture's given state: opt/mu, opt/nu at count 3, model_ref.json "optimizer"), after the
 * gradients of check_grads: the adapter's change and both moments. In float under the gradients'
 * rule, and
 * again with the gradients times 8 so that the clip acts (the fixture's clip set); under QAT each change of a
 * tensor (new minus old) within a tenth of QAT's own effect on it in the 2-norm. The adapter and
 * moments are put back after each step. */
static void check_step(needle_net *n, st_file *rf, int qat)
{
    const needle_adamw o = {.lr = 0.0008830222068354487f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .weight_decay = 1e-4f, .clip = 1.0f, .grad_mult = 1.0f, .count = 4};
    const int L = needle_net_config(n)->num_layers;
    for (int clip = 0; clip < (qat ? 1 : 2); clip++) {
        /* the given state in, the step, the results out; [t][0..5] = A B mA vA mB vB */
        float *old[5][6], *got[5][6];
        size_t cnt[5][6];
        for (int t = 0; t < 5; t++) {
            char path[200], flax[120];
            snprintf(flax, sizeof flax, "stack/layers/block/self_attn/%s/kernel", targets[t]);
            for (int i = 0; i < 6; i++) {
                const char *m = i < 2 ? "float/step/lora" : i % 2 == 0 ? "opt/mu" : "opt/nu";
                snprintf(path, sizeof path, "%s/%s/%s", m, flax, i == 1 || i >= 4 ? "B" : "A");
                float *x = ref_read(rf, path, &cnt[t][i]);
                got[t][i] = malloc(cnt[t][i] * sizeof(float));
                old[t][i] = i < 2 ? malloc(cnt[t][i] * sizeof(float)) : x;
                if (i < 2) free(x);
            }
            CHECK(needle_net_lora_state(n, flax, 0, old[t][0], old[t][1], NULL, NULL, NULL, NULL) == 0 &&
                  needle_net_lora_state(n, flax, 1, NULL, NULL, old[t][2], old[t][3], old[t][4], old[t][5]) == 0,
                  "lora state %s: %s", flax, loom_error());
        }
        needle_adamw oc = o;
        oc.grad_mult = clip ? 8.0f : 1.0f;
        double norm = 0;
        CHECK(needle_net_step(n, &oc, &norm) == 0, "needle_net_step: %s", loom_error());
        printf("     %s step: gradient norm %.7g (Needle's %s)\n", qat ? "QAT" : clip ? "clipped" : "float", norm,
               qat ? "0.5508257" : clip ? "4.209144" : "0.5261430");
        for (int t = 0; t < 5; t++) {
            char path[200], flax[120], name[200];
            snprintf(flax, sizeof flax, "stack/layers/block/self_attn/%s/kernel", targets[t]);
            CHECK(needle_net_lora_state(n, flax, 0, got[t][0], got[t][1], got[t][2], got[t][3], got[t][4], got[t][5]) == 0,
                  "lora state %s: %s", flax, loom_error());
            for (int i = 0; i < 6; i++) {
                static const char *const what[6] = {"A", "B", "mu A", "nu A", "mu B", "nu B"};
                const char *mode = qat ? "qat/step" : clip ? "clip" : "float/step";
                const char *part = i < 2 ? "lora" : i % 2 == 0 ? "mu" : "nu";
                const char *ab = i == 1 || i >= 4 ? "B" : "A";
                size_t k;
                snprintf(path, sizeof path, "%s/%s/%s/%s", mode, part, flax, ab);
                float *want = ref_read(rf, path, &k);
                snprintf(name, sizeof name, "needle %s step %s %s vs Needle", qat ? "QAT" : clip ? "clipped" : "float",
                         targets[t], what[i]);
                if (!qat && i >= 2) {
                    check_tol tl = {64 * FLT_EPSILON * max_abs(want, k) * (L + 1), 1e-5 * (L + 1)};
                    compare(name, got[t][i], want, k, tl);
                } else if (!qat) {
                    /* the change itself (the step is ~1e-3 of the adapter): its relative error
                     * the gradients', plus the two roundings of old + change (an ulp of each) */
                    check_tol tl = {2 * FLT_EPSILON * max_abs(want, k), 1e-5 * (L + 1)};
                    for (size_t e = 0; e < k; e++) got[t][i][e] -= old[t][i][e], want[e] -= old[t][i][e];
                    strncat(name, " (change)", sizeof name - strlen(name) - 1);
                    compare(name, got[t][i], want, k, tl);
                } else { /* the changes: loom's, Needle's under QAT, Needle's in float */
                    snprintf(path, sizeof path, "float/step/%s/%s/%s", part, flax, ab);
                    float *flt = ref_read(rf, path, &k);
                    for (size_t e = 0; e < k; e++)
                        got[t][i][e] -= old[t][i][e], want[e] -= old[t][i][e], flt[e] -= old[t][i][e];
                    const double err = rel_l2(got[t][i], want, k), effect = rel_l2(flt, want, k);
                    CHECK(err <= 0.1 * effect, "%s: relative 2-norm error of the change %.4f above a tenth of QAT's effect %.4f", name, err, effect);
                    printf("%s %-44s change's relative 2-norm error %.4f = %.3f of QAT's effect\n",
                           err <= 0.1 * effect ? "ok  " : "FAIL", name, err, err / effect);
                    free(flt);
                }
                free(want);
            }
            needle_net_lora_state(n, flax, 1, old[t][0], old[t][1], NULL, NULL, NULL, NULL);
            for (int i = 0; i < 6; i++) free(old[t][i]), free(got[t][i]);
        }
    }
}

/* A fresh adapter (needle_net_lora_init) on the base alone: B = 0 leaves the logits exactly the
 * base's; A has Needle's N(0, 1) / r spread (the sample std within 10% of 1/r: 1536 draws and
 * more per target, 5 standard errors); dA is 0 at B = 0; and ten steps on the fixture batch
 * lower the loss (float, lr 1e-2, no schedule). */
/* An odd layer count (a 3-layer rung): the kept blocks' thin pass rebuilds the odd streams (X[1]) and
 * leaves the last one (X[L] in X[0]'s memory) where an even count does not; the selective recompute
 * must still give the whole-layer recompute's bits. The adapter is fresh, then one step, so that B
 * and every gradient are non-zero. */
static void check_odd_rung(backend *be, const char *base, const int32_t *tok, const float *mask, int B, int T)
{
    needle_net *full = needle_net_open(be, base, 0, NULL, 0);
    const int L = full ? needle_net_config(full)->num_layers : 0;
    needle_net_close(full);
    if (L < 4) return; /* the d768 fixture's 2 layers have no 3-layer rung; the small fixture's 4 do */
    needle_net *n = needle_net_open(be, base, 3, NULL, NEEDLE_NUM_QAT);
    CHECK(n != NULL, "open %s at 3 layers: %s", base, loom_error());
    if (!n) return;
    double loss = 0;
    needle_adamw o = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-4f,
                      .clip = 1.0f, .grad_mult = 1.0f, .count = 1};
    CHECK(needle_net_lora_init(n, 4, 8.0f, 7) == 0 && needle_net_grad(n, tok, mask, B, T, 0, 0, &loss) == 0 &&
          needle_net_step(n, &o, NULL) == 0, "3-layer rung: %s", loom_error());
    check_recompute(n, tok, mask, B, T, 1);
    needle_net_close(n);
}

/* needle_net_plan against real nets, to the byte: what a net holds after opening (float and QAT,
 * the base's depth and a rung) and after needle_net_lora_init, a training pass's arena with the
 * blocks kept and with train.recompute, and a fresh net's decode prefill. */
static void check_plan(backend *be, const char *base, const int32_t *tok, const float *mask, int B, int T)
{
    int n_ok = 0;
    size_t real[8] = {0}, other[8] = {0};
    for (int k = 0; k < 8; k++) {
        const int layers = k & 1 ? 3 : 0, qat = k & 2 ? NEEDLE_NUM_QAT : 0, whole = k >> 2 & 1;
        needle_net *n = needle_net_open(be, base, layers, NULL, qat);
        if (!n && layers) continue; /* no 3-layer rung of a 2-layer fixture */
        CHECK(n != NULL, "open %s: %s", base, loom_error());
        if (!n) return;
        needle_net_ask ask = {base, layers, qat, 0, whole, B, T, 0, 0};
        needle_net_size s0, s4;
        CHECK(needle_net_plan(&ask, &s0) == 0, "plan: %s", loom_error());
        ask.lora_rank = 4;
        CHECK(needle_net_plan(&ask, &s4) == 0, "plan: %s", loom_error());
        size_t held, acts, held4, acts4;
        needle_net_bytes(n, &held, &acts);
        needle_net_set_recompute(n, whole);
        double loss = 0;
        CHECK(needle_net_lora_init(n, 4, 8.0f, 7) == 0 && needle_net_grad(n, tok, mask, B, T, 0, 0, &loss) == 0,
              "lora + grad: %s", loom_error());
        needle_net_bytes(n, &held4, &acts4);
        CHECK(held == s0.held && held4 == s4.held && acts4 == s4.train_pass,
              "plan (layers %d, qat %d, recompute %d): held %zu / %zu with rank 4, pass %zu; the net %zu / %zu, %zu",
              layers, qat, whole, s0.held, s4.held, s4.train_pass, held, held4, acts4);
        CHECK(s4.lora > 0 && held4 - held == 4 * s4.lora, "plan: adapters %zu bytes, held grew %zu", s4.lora, held4 - held);
        real[k] = acts4, other[k] = s4.other_pass;
        needle_net_close(n);
        n_ok++;
    }
    for (int k = 0; k < 4; k++) /* the pass with recompute the other way: the other net's */
        CHECK(real[k] == other[k + 4] && real[k + 4] == other[k], "plan, recompute the other way: %zu and %zu, the nets %zu and %zu",
              other[k + 4], other[k], real[k], real[k + 4]);
    needle_net *g = needle_net_open(be, base, 0, NULL, NEEDLE_NUM_W4);
    const int cap = T + 8;
    int32_t *rows = malloc((size_t)B * cap * sizeof(int32_t));
    int *lens = malloc(3 * (size_t)B * sizeof(int)), *max_new = lens + B, *made = lens + 2 * B;
    for (int b = 0; b < B; b++) {
        lens[b] = T - b % 2, max_new[b] = 8;
        memcpy(rows + (size_t)b * cap, tok + (size_t)b * T, (size_t)T * sizeof(int32_t));
    }
    needle_net_ask ask = {base, 0, NEEDLE_NUM_W4, 4, 0, B, T, B, cap};
    needle_net_size s;
    size_t held, acts;
    CHECK(g && needle_net_plan(&ask, &s) == 0 && needle_net_lora_init(g, 4, 8.0f, 7) == 0 &&
          needle_net_generate(g, rows, B, cap, lens, max_new, -1, made) == 0, "generate: %s", loom_error());
    if (g) needle_net_bytes(g, &held, &acts);
    CHECK(g && held == s.held && acts == s.gen_pass && s.gen_caches > 0,
          "plan of a decode: held %zu, prefill %zu; the net %zu, %zu", s.held, s.gen_pass, g ? held : 0, g ? acts : 0);
    needle_net_close(g);
    free(rows), free(lens);
    printf("ok   needle plan: held and pass bytes equal the nets' in %d configurations and a decode's prefill\n", n_ok);
}

/* A QAT net after a step, decoded with A8 off (needle_net_set_a8), against a W4 net given the same
 * adapters: the fine-tune's evaluation on its training net, the same tokens as a net of its own. */
static void check_eval_on_qat_net(backend *be, const char *base, const int32_t *tok, const float *mask, int B, int T)
{
    needle_net *q = needle_net_open(be, base, 0, NULL, NEEDLE_NUM_QAT), *w = needle_net_open(be, base, 0, NULL, NEEDLE_NUM_W4);
    double loss = 0;
    needle_adamw o = {.lr = 5e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-4f,
                      .clip = 1.0f, .grad_mult = 1.0f, .count = 1};
    int ok = q && w && needle_net_lora_init(q, 4, 8.0f, 7) == 0 && needle_net_lora_init(w, 4, 8.0f, 9) == 0;
    for (int s = 0; ok && s < 3; s++, o.count++)
        ok = needle_net_grad(q, tok, mask, B, T, 0, 0, &loss) == 0 && needle_net_step(q, &o, NULL) == 0;
    for (int t = 0; ok && t < 5; t++) { /* q's stepped adapters into w */
        int in, out, r;
        const char *path = needle_net_lora_info(q, t, &in, &out, &r, NULL);
        float *A = malloc((size_t)needle_net_config(q)->num_layers * in * r * sizeof(float));
        float *Bm = malloc((size_t)needle_net_config(q)->num_layers * r * out * sizeof(float));
        ok = A && Bm && needle_net_lora_state(q, path, 0, A, Bm, NULL, NULL, NULL, NULL) == 0 &&
             needle_net_lora_state(w, path, 1, A, Bm, NULL, NULL, NULL, NULL) == 0;
        free(A), free(Bm);
    }
    CHECK(ok, "QAT net, three steps, adapters into a W4 net: %s", loom_error());
    const int cap = T + 16;
    int32_t *rq = malloc((size_t)B * cap * sizeof(int32_t)), *rw = malloc((size_t)B * cap * sizeof(int32_t));
    int *lens = malloc(4 * (size_t)B * sizeof(int)), *max_new = lens + B, *mq = lens + 2 * B, *mw = lens + 3 * B;
    for (int b = 0; b < B; b++) {
        lens[b] = T / 2 + b % 3, max_new[b] = 16;
        memcpy(rq + (size_t)b * cap, tok + (size_t)b * T, (size_t)T * sizeof(int32_t));
        memcpy(rw + (size_t)b * cap, tok + (size_t)b * T, (size_t)T * sizeof(int32_t));
    }
    if (ok) {
        needle_net_set_a8(q, 0);
        ok = needle_net_generate(q, rq, B, cap, lens, max_new, -1, mq) == 0 &&
             needle_net_generate(w, rw, B, cap, lens, max_new, -1, mw) == 0;
        CHECK(ok, "generate: %s", loom_error());
        needle_net_set_a8(q, 1);
    }
    int same = ok, differs = 0;
    for (int b = 0; ok && b < B; b++) {
        same = same && mq[b] == mw[b] && !memcmp(rq + (size_t)b * cap, rw + (size_t)b * cap, (size_t)(lens[b] + mq[b]) * sizeof(int32_t));
        const int over = mq[b] < T - lens[b] ? mq[b] : T - lens[b]; /* the data's row has T tokens */
        differs += over > 0 && memcmp(rq + (size_t)b * cap + lens[b], tok + (size_t)b * T + lens[b], (size_t)over * sizeof(int32_t)) != 0;
    }
    CHECK(same, "a QAT net with A8 off decodes otherwise than a W4 net with its adapters");
    double l8 = 0, l0 = 0; /* and A8 back on: the training loss again */
    CHECK(needle_net_loss(q, tok, mask, B, T, 0, &l8) == 0, "loss: %s", loom_error());
    needle_net_set_a8(q, 0);
    CHECK(needle_net_loss(q, tok, mask, B, T, 0, &l0) == 0 && l0 != l8, "A8 off: loss %.9g, on %.9g", l0, l8);
    needle_net_set_a8(q, 1);
    printf("ok   needle eval on the QAT net (A8 off): %d rows of %d new tokens are a W4 net's (%d off the data)\n", B, 16, differs);
    needle_net_close(q), needle_net_close(w);
    free(rq), free(rw), free(lens);
}

static void check_fresh_adapter(backend *be, const char *base, const int32_t *tok, const float *mask, int B, int T)
{
    needle_net *n = needle_net_open(be, base, 0, NULL, 0);
    CHECK(n != NULL, "open %s: %s", base, loom_error());
    if (!n) return;
    const needle_config *c = needle_net_config(n);
    const size_t nl = (size_t)B * T * c->vocab_size;
    float *l0 = malloc(nl * sizeof(float)), *l1 = malloc(nl * sizeof(float));
    CHECK(needle_net_forward(n, tok, B, T, l0, NULL) == 0, "forward: %s", loom_error());
    const int r = 4;
    CHECK(needle_net_lora_init(n, r, 8.0f, 7) == 0, "lora init: %s", loom_error());
    CHECK(needle_net_forward(n, tok, B, T, l1, NULL) == 0, "forward: %s", loom_error());
    CHECK(memcmp(l0, l1, nl * sizeof(float)) == 0, "a fresh adapter (B = 0) changed the logits");
    double first = 0, loss = 0;
    CHECK(needle_net_grad(n, tok, mask, B, T, 0, 0, &first) == 0, "grad: %s", loom_error());
    for (int t = 0; t < 5; t++) {
        char flax[120];
        snprintf(flax, sizeof flax, "stack/layers/block/self_attn/%s/kernel", targets[t]);
        needle_geometry g;
        needle_geometry_of(c, &g);
        const int in = t == 4 ? g.attn_dim : c->d_model;
        const int out[5] = {g.q_dim, g.k_dim, g.v_dim, g.attn_dim, c->d_model};
        const size_t na = (size_t)c->num_layers * in * r;
        float *A = malloc(na * sizeof(float)), *dA = malloc(na * sizeof(float));
        float *dB = malloc((size_t)c->num_layers * r * out[t] * sizeof(float));
        CHECK(needle_net_lora_state(n, flax, 0, A, NULL, NULL, NULL, NULL, NULL) == 0 &&
              needle_net_lora_grad(n, flax, dA, dB) == 0, "%s: %s", flax, loom_error());
        double m = 0, v = 0, gmax = 0;
        for (size_t e = 0; e < na; e++) m += A[e], v += (double)A[e] * A[e], gmax = fmax(gmax, fabs(dA[e]));
        const double sd = sqrt(v / na - (m / na) * (m / na));
        CHECK(fabs(sd * r - 1) < 0.1 && gmax == 0, "%s: A's std %.4f (want %.4f), max |dA| %g at B = 0", flax, sd, 1.0 / r, gmax);
        free(A), free(dA), free(dB);
    }
    const needle_adamw o = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-4f,
                            .clip = 1.0f, .grad_mult = 1.0f};
    for (int step = 1; step <= 10; step++) {
        needle_adamw os = o;
        os.count = step;
        CHECK(needle_net_step(n, &os, NULL) == 0 && needle_net_grad(n, tok, mask, B, T, 0, 0, &loss) == 0, "step %d: %s", step, loom_error());
    }
    CHECK(loss < first - 0.1, "ten steps: loss %.6f from %.6f", loss, first);
    printf("ok   needle fresh adapter: B = 0 keeps the logits, A ~ N(0, 1/r^2), ten steps take the loss %.4f -> %.4f\n", first, loss);
    free(l0), free(l1);
    needle_net_close(n);
}

/* The adapter written back (needle_net_save_adapter): straight after loading Needle's file, its
 * metadata and tensor bytes; after a step, a file that loads back to the stepped adapter bit for bit. */
static void check_save(backend *be, const char *base, const char *lora, const int32_t *tok, const float *mask,
                       int B, int T)
{
    const char *slash = strrchr(base, '/'), *base_name = slash ? slash + 1 : base; /* as the adapter names it */
    char out[] = "/tmp/test_needle_net_XXXXXX";
    int fd = mkstemp(out);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    needle_net *n = needle_net_open(be, base, 0, lora, NEEDLE_NUM_QAT);
    CHECK(n && needle_net_save_adapter(n, out, base_name, 0) == 0, "save: %s", loom_error());
    /* the same metadata values and tensor bytes (the header's key order is Python's hash order,
     * which differs between two runs of Needle itself) */
    needle_adapter *a = needle_adapter_open(lora), *b = needle_adapter_open(out);
    int same = a && b && a->n == b->n;
    for (int k = 0; same && k < 6; k++)
        same = a->meta[k] && b->meta[k] && strcmp(a->meta[k], b->meta[k]) == 0;
    for (int k = 0; same && k < a->n; k++)
        for (int ab = 0; ab < 2; ab++) {
            const st_tensor *x = &a->st->t[ab ? a->lora[k].b : a->lora[k].a], *y = &b->st->t[ab ? b->lora[k].b : b->lora[k].a];
            same &= strcmp(a->lora[k].path, b->lora[k].path) == 0 && x->end - x->begin == y->end - y->begin &&
                    memcmp(a->st->map + a->st->data_start + x->begin, b->st->map + b->st->data_start + y->begin,
                           x->end - x->begin) == 0;
        }
    CHECK(same, "the adapter written back differs from Needle's file (metadata or tensor bytes)");
    printf("%s needle adapter written back: Needle's metadata and tensor bytes\n", same ? "ok  " : "FAIL");
    needle_adapter_close(a), needle_adapter_close(b);
    double loss;
    const needle_adamw o = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-4f,
                            .clip = 1.0f, .grad_mult = 1.0f, .count = 1};
    CHECK(n && needle_net_grad(n, tok, mask, B, T, 0, 0, &loss) == 0 && needle_net_step(n, &o, NULL) == 0 &&
          needle_net_save_adapter(n, out, base_name, -1) == 0, "step and save: %s", loom_error());
    needle_net *m = needle_net_open(be, base, 0, out, NEEDLE_NUM_QAT);
    CHECK(m != NULL, "reopen the saved adapter: %s", loom_error());
    for (int t = 0; n && m && t < 5; t++) {
        char flax[120];
        snprintf(flax, sizeof flax, "stack/layers/block/self_attn/%s/kernel", targets[t]);
        const size_t cap = 1 << 16;
        float *x[4] = {calloc(cap, 4), calloc(cap, 4), calloc(cap, 4), calloc(cap, 4)};
        CHECK(needle_net_lora_state(n, flax, 0, x[0], x[1], NULL, NULL, NULL, NULL) == 0 &&
              needle_net_lora_state(m, flax, 0, x[2], x[3], NULL, NULL, NULL, NULL) == 0, "state %s", flax);
        CHECK(memcmp(x[0], x[2], cap * 4) == 0 && memcmp(x[1], x[3], cap * 4) == 0, "%s: the stepped adapter did not load back bit for bit", flax);
        for (int i = 0; i < 4; i++) free(x[i]);
    }
    printf("     needle stepped adapter saved and loaded back (checked bit for bit above)\n");
    needle_net_close(m), needle_net_close(n);
    unlink(out);
}

/* Greedy decoding (needle_net_greedy) against run.generate's tokens for the fixture's prompt,
 * float and with W4 weights (model_ref.json "decode": base + adapter merged, 32 new tokens): token
 * for token. Every step's top-1 margin in Needle is >= 0.0128, far above float noise (1e-5), so a
 * difference is a bug, not rounding. Two rows (the prompt, and the prompt cut by 3 tokens) decode
 * together: the longer row's tokens must still be the fixture's (padding after a row's end is
 * never seen by it). */
static void check_decode(backend *be, const char *base, const char *lora, const char *json_path)
{
    FILE *f = fopen(json_path, "rb");
    CHECK(f != NULL, "open %s", json_path);
    if (!f) return;
    char *text = calloc(1 << 20, 1);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    cJSON *root = cJSON_ParseWithLength(text, len), *dec = cJSON_GetObjectItem(root, "decode");
    cJSON *prompt = cJSON_GetObjectItem(dec, "prompt");
    CHECK(dec && cJSON_IsArray(prompt), "%s: no decode.prompt", json_path);
    const char *cases[2] = {"float", "w4"};
    const int num[2] = {0, NEEDLE_NUM_W4};
    for (int c = 0; dec && c < 2; c++) {
        cJSON *want = cJSON_GetObjectItem(dec, cases[c]);
        const int np = cJSON_GetArraySize(prompt), nw = cJSON_GetArraySize(want), cap = np + nw + 4;
        needle_net *n = needle_net_open(be, base, 0, lora, num[c]);
        CHECK(n != NULL, "open %s + %s: %s", base, lora, loom_error());
        if (!n) continue;
        int32_t *tok = calloc((size_t)2 * cap, sizeof(int32_t));
        for (int i = 0; i < np; i++) tok[i] = tok[cap + i] = cJSON_GetArrayItem(prompt, i)->valueint;
        int32_t *kv = calloc((size_t)2 * cap, sizeof(int32_t));
        memcpy(kv, tok, (size_t)2 * cap * sizeof(int32_t));
        int lens[2] = {np, np - 3}, max_new[2] = {nw, nw}, made[2] = {0, 0}, made_kv[2] = {0, 0};
        CHECK(needle_net_greedy(n, tok, 2, cap, lens, max_new, -1, made) == 0, "greedy: %s", loom_error());
        CHECK(needle_net_generate(n, kv, 2, cap, lens, max_new, -1, made_kv) == 0, "generate: %s", loom_error());
        CHECK(made[0] == nw && made[1] == nw && made_kv[0] == nw && made_kv[1] == nw,
              "%s: made %d, %d tokens (KV cache: %d, %d), want %d", cases[c], made[0], made[1], made_kv[0], made_kv[1], nw);
        int same = 0, same_kv = 0, rows_kv = 0;
        for (int i = 0; i < nw; i++) {
            same += tok[np + i] == cJSON_GetArrayItem(want, i)->valueint;
            same_kv += kv[np + i] == cJSON_GetArrayItem(want, i)->valueint;
        }
        for (int i = 0; i < 2 * cap; i++) rows_kv += kv[i] == tok[i];
        CHECK(same == nw, "%s greedy: %d of %d tokens are run.generate's", cases[c], same, nw);
        CHECK(same_kv == nw, "%s KV-cached: %d of %d tokens are run.generate's", cases[c], same_kv, nw);
        CHECK(rows_kv == 2 * cap, "%s: the KV-cached rows differ from the uncached ones in %d places", cases[c], 2 * cap - rows_kv);
        printf("     needle greedy %s: %d of %d tokens are run.generate's, with the KV cache too\n", cases[c], same, nw);
        free(tok), free(kv);
        needle_net_close(n);
    }
    cJSON_Delete(root);
    free(text);
}

/* A number of the fixture's json, "float" / "qat" . "loss". */
static double json_loss(const char *json_path, const char *mode)
{
    FILE *f = fopen(json_path, "rb");
    char *text = f ? malloc(1 << 20) : NULL;
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f) fclose(f);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(root, mode), "loss");
    const double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    CHECK(isfinite(v), "%s: no %s.loss", json_path, mode);
    cJSON_Delete(root);
    free(text);
    return v;
}

int main(int argc, char **argv)
{
    /* the fixture: PREFIX_base / _lora / _ref.* ("model": the small config; "model_d768": the
     * default config's widths on one layer) */
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures/needle", *pre = argc > 2 ? argv[2] : "model";
    char base[512], lora[512], ref[512];
    snprintf(base, sizeof base, "%s/%s_base.safetensors", dir, pre);
    snprintf(lora, sizeof lora, "%s/%s_lora.safetensors", dir, pre);
    snprintf(ref, sizeof ref, "%s/%s_ref.safetensors", dir, pre);
    char json[512];
    snprintf(json, sizeof json, "%s/%s_ref.json", dir, pre);
    needle_float_loss = json_loss(json, "float"), needle_qat_loss = json_loss(json, "qat");
    backend *be = backend_select(argc > 3 ? argv[3] : "cpu", NULL, NULL, 0);
    st_file *rf = st_open(ref);
    CHECK(be && rf, "cpu backend and %s: %s", ref, loom_error());
    if (!be || !rf) return 1;
    size_t nt, nl, nh, nq, nm;
    float *tf = ref_read(rf, "batch/tokens", &nt);
    float *want = ref_read(rf, "float/logits", &nl), *want_h = ref_read(rf, "float/hidden", &nh);
    float *want_q = ref_read(rf, "qat/logits", &nq), *mask = ref_read(rf, "batch/mask", &nm);
    const int B = (int)rf->t[st_find(rf, "batch/tokens")].shape[0], T = (int)(nt / (size_t)B);
    int32_t *tok = malloc(nt * sizeof(int32_t));
    for (size_t i = 0; i < nt; i++) tok[i] = (int32_t)tf[i];

    for (int qat = 0; qat < 2; qat++) {
        needle_net *n = needle_net_open(be, base, 0, lora, qat ? NEEDLE_NUM_QAT : 0);
        CHECK(n != NULL, "needle_net_open(%s, qat %d): %s", base, qat, loom_error());
        if (!n) continue;
        const needle_config *c = needle_net_config(n);
        const int V = c->out_vocab > 0 ? c->out_vocab : c->vocab_size, L = c->num_layers;
        CHECK((size_t)B * T * V == nl, "logits of %d x %d x %d, fixture %zu", B, T, V, nl);
        float *logits = malloc(nl * sizeof(float)), *hidden = malloc(nh * sizeof(float));
        int rc = needle_net_forward(n, tok, B, T, logits, qat ? NULL : hidden);
        CHECK(rc == 0, "forward: %s", loom_error());
        const double depth = L + 1;
        if (rc == 0 && !qat) {
            check_tol t = {64 * FLT_EPSILON * max_abs(want, nl) * depth, 1e-5 * depth};
            compare("needle float logits vs Needle", logits, want, nl, t);
            check_tol th = {64 * FLT_EPSILON * max_abs(want_h, nh) * depth, 1e-5 * depth};
            compare("needle float hidden states vs Needle", hidden, want_h, nh, th);
        } else if (rc == 0) {
            check_tol t = {64 * FLT_EPSILON * max_abs(want_q, nq) * depth, 1e-5 * depth};
            CHECK(nq == nl, "QAT logits of %zu, float %zu", nq, nl);
            check_qat(logits, want_q, want, B, T, V, t);
        }
        check_grads(n, rf, qat, tok, mask, B, T);
        check_step(n, rf, qat);
        check_recompute(n, tok, mask, B, T, qat);
        free(logits), free(hidden);
        needle_net_close(n);
    }
    check_fresh_adapter(be, base, tok, mask, B, T);
    check_plan(be, base, tok, mask, B, T);
    check_eval_on_qat_net(be, base, tok, mask, B, T);
    check_odd_rung(be, base, tok, mask, B, T);
    check_save(be, base, lora, tok, mask, B, T);
    check_decode(be, base, lora, json);
    free(tf), free(want), free(want_h), free(want_q), free(mask), free(tok);
    st_close(rf);
    backend_destroy(be);
    return check_exit_code("test_needle_net");
}
