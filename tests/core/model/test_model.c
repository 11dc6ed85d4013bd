/* test_model.c: the whole model against finite differences, on the real CPU backend: for each
 * architecture variant (LayerNorm/GELU/learned/tied, RMSNorm/SwiGLU/RoPE/GQA/untied), the analytic
 * gradient of sampled parameters of every tensor vs a central difference of the loss; then an
 * overfit run that must drive the loss on one fixed batch near zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/config/config.h"
#include "base/error.h"
#include "core/model/model.h"
#include "core/train/optim.h"
#include "base/rng.h"

#include "tests/check.h"
#include "tests/core/model/model_variants.h"

static backend *cpu(void) { return variants_cpu(1); }
static model_config variant(int llama) { return model_variant(llama, 48, 16, 24, 8); }

static void make_batch(int B, int T, int V, int32_t *tok, int32_t *tgt, uint64_t seed)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(rng_u64(seed, (uint64_t)i) % (uint64_t)V);
        tgt[i] = (int32_t)(rng_u64(seed + 1, (uint64_t)i) % (uint64_t)V);
    }
    tgt[1] = -1; /* one masked position */
}

/* The loss SUM of one forward (grad_scale as model_forward); NaN when the pass failed. */
static double fwd(model *m, float grad_scale)
{
    double loss = 0.0;
    return model_forward(m, grad_scale, &loss) == 0 ? loss : NAN;
}

static double loss_of(model *m) { return fwd(m, 0.0f); }

static float get1(model *m, float *p) { float v; backend_copy_d2h(m->be, &v, p, sizeof v); return v; }
static void set1(model *m, float *p, float v) { backend_copy_h2d(m->be, p, &v, sizeof v); }

/* Central differences of the fp32 model's loss sum L (h = 1e-2) against the analytic gradient,
 * element-wise (tests/check.h). The difference quotient is off by
 *  - the loss's own fp32 rounding, which does not cancel between L(x+h) and L(x-h): the final sum
 *    of B*T = 16 per-position losses of about ln V = 3.9 (|L| ~ 60) rounds at u|L| and each
 *    position's log-sum-exp at ~10u * 4, so |dL| ~ lambda sqrt(16) 40u + u|L| ~ 5e-5, over 2h:
 *    FD_NOISE = 2.5e-3 absolute;
 *  - truncation h^2/6 |f'''|: with init_std 0.3 weights the loss is far from quadratic (|f'''| up
 *    to ~300 along one weight), 1.7e-5 * 300 = 5e-3, growing with the gradient's size: rtol 1e-2;
 * the analytic side's fp32 error (~1e-6 relative) is below both. */
#define FD_NOISE 2.5e-3
#define FD_RTOL 1e-2

/* Analytic `grad` (of the loss sum, on the trainable array) vs central differences at `samples`
 * sampled elements of every tensor; one element-wise check per tensor. Returns the worst
 * |err| / bound over all samples and names its tensor. */
static double fd_check(model *m, const float *grad, int samples, uint64_t seed, const char *what,
                       const char **worst_name)
{
    double worst = 0.0;
    const check_tol fd_tol = {FD_NOISE, FD_RTOL};
    float *got = malloc(samples * sizeof(float));
    double *want = malloc(samples * sizeof(double));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *t = &m->tensors[i];
        for (int s = 0; s < samples; s++) {
            size_t j = t->offset + rng_u64(seed + (uint64_t)i, (uint64_t)s) % t->numel;
            float *p = m->params + j, x = get1(m, p), h = 1e-2f;
            set1(m, p, x + h);
            double lp = loss_of(m);
            set1(m, p, x - h);
            double lm = loss_of(m);
            set1(m, p, x);
            want[s] = (lp - lm) / (2.0 * h);
            got[s] = grad[j];
            double r = fabs(want[s] - got[s]) / (fd_tol.atol + fd_tol.rtol * fabs(want[s]));
            if (!(r <= worst)) {
                worst = r;
                if (worst_name) *worst_name = t->name;
            }
        }
        char name[96];
        snprintf(name, sizeof name, "%s %s", what, t->name);
        check_allclose_v(name, got, want, (size_t)samples, fd_tol, 0);
    }
    free(got);
    free(want);
    return worst;
}

/* Analytic vs central-difference gradient of sampled elements of every tensor. */
static void check_gradients(int llama)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    int B = 2, T = 8;
    model *m = model_create(&mc, be, B, T, 1, 1, 0, NULL);
    CHECK(m != NULL, "model_create");
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 7, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 11);
    model_set_batch(m, tok, tgt);

    backend_fill(be, m->grads, 0.0f, m->nparams);
    double base = fwd(m, 1.0f); /* grad of the loss SUM */
    model_backward(m);
    float *grad = malloc(m->nparams * sizeof(float));
    backend_copy_d2h(be, grad, m->grads, m->nparams * sizeof(float));
    CHECK(isfinite(base) && base > 0, "loss %g", base);

    const char *worst_name = "";
    double worst = fd_check(m, grad, 6, 99, llama ? "llama" : "gpt2", &worst_name);
    printf("gradient check (%s): %d tensors, worst error %.2f of its bound in %s\n",
           llama == 2 ? "qkv_bias/qk_norm/llama3 rope/head_dim 8" : llama ? "rmsnorm/swiglu/rope/gqa/untied" : "layernorm/gelu/learned/tied", m->ntensors,
           worst, worst_name);
    free(grad);
    free(host);
    model_destroy(m);
    backend_destroy(be);
}

/* AdamW on one fixed batch must memorise it. */
static void check_overfit(int llama)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    mc.init_std = 0.02f;
    int B = 2, T = 8;
    model *m = model_create(&mc, be, B, T, 1, 1, 0, NULL);
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 3, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    optim_piece piece = {0, m->nparams, 0};
    optim *o = optim_create(be, m, &piece, 1, m->nparams);
    job_config cfg;
    config_defaults(&cfg);
    train_config tc = cfg.train;
    tc.weight_decay = 0.0f;
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 5);
    model_set_batch(m, tok, tgt);
    double first = 0, loss = 0;
    float *pa[1] = {m->params}, *ga[1] = {m->grads};
    for (int step = 0; step < 300; step++) {
        backend_fill(be, m->grads, 0.0f, m->nparams);
        loss = fwd(m, 1.0f / 15.0f) / 15.0; /* 15 unmasked targets */
        model_backward(m);
        if (step == 0) first = loss;
        optim_step(o, &tc, pa, ga, 1e-2f, 1.0f);
    }
    printf("overfit (%s): loss %.4f -> %.4f\n", llama ? "llama" : "gpt2", first, loss);
    CHECK(loss < 0.05, "overfit loss %.4f did not approach zero (from %.4f)", loss, first);
    optim_destroy(o);
    free(host);
    model_destroy(m);
    backend_destroy(be);
}

/* LoRA: B = 0 reproduces the base model exactly; adapter gradients match finite differences;
 * merging s B A into the base gives the adapted model's loss; training leaves the base untouched. */
static void check_lora(void)
{
    backend *be = cpu();
    model_config mc = variant(1);
    int B = 2, T = 8;
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_O) | (1u << LORA_PROJ)};
    model *plain = model_create(&mc, be, B, T, 1, 1, 0, NULL);
    model *m = model_create(&mc, be, B, T, 1, 1, 0, &ls);
    float *base = malloc(plain->nparams * sizeof(float));
    model_init_values(plain, 7, base);
    backend_copy_h2d(be, plain->params, base, plain->nparams * sizeof(float));
    CHECK(model_load_base_range(m, base, 0, m->nbase_params) == 0, "load base: %s", loom_error());
    float *ad = malloc(m->nparams * sizeof(float));
    model_init_values(m, 9, ad);
    backend_copy_h2d(be, m->params, ad, m->nparams * sizeof(float));
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 11);
    model_set_batch(plain, tok, tgt);
    model_set_batch(m, tok, tgt);
    double lb = loss_of(plain), la = loss_of(m);
    CHECK(lb == la, "LoRA with B = 0 changed the loss: %.9g vs base %.9g", la, lb);

    /* give B values so every adapter path carries gradient, then check A and B against FD */
    for (int i = 0; i < m->ntensors; i++)
        if (strstr(m->tensors[i].name, "lora_B"))
            for (size_t j = 0; j < m->tensors[i].numel; j++) ad[m->tensors[i].offset + j] = 0.2f * rng_normal(5, j + 100 * (size_t)i);
    backend_copy_h2d(be, m->params, ad, m->nparams * sizeof(float));
    backend_fill(be, m->grads, 0.0f, m->nparams);
    fwd(m, 1.0f);
    model_backward(m);
    float *grad = malloc(m->nparams * sizeof(float));
    backend_copy_d2h(be, grad, m->grads, m->nparams * sizeof(float));
    double worst = fd_check(m, grad, 4, 3, "LoRA", NULL);
    printf("LoRA: B = 0 equals base bitwise; adapter gradients worst error %.2f of its bound\n", worst);

    /* merge: the base with s B A folded in gives the adapted model's loss */
    double adapted = loss_of(m);
    float *merged = malloc(plain->nparams * sizeof(float));
    memcpy(merged, base, plain->nparams * sizeof(float));
    CHECK(model_lora_merge(m, merged, ad) == 0, "merge failed");
    backend_copy_h2d(be, plain->params, merged, plain->nparams * sizeof(float));
    double folded = loss_of(plain);
    CHECK(fabs(folded - adapted) < 1e-4 * fabs(adapted), "merged loss %.7g != adapted loss %.7g", folded, adapted);
    printf("LoRA merge: merged model loss %.7f, adapted %.7f\n", folded, adapted);

    /* a few AdamW steps on the adapters: the frozen base buffer must stay bit-identical */
    optim_piece piece = {0, m->nparams, 0};
    optim *o = optim_create(be, m, &piece, 1, m->nparams);
    job_config cfg;
    config_defaults(&cfg);
    float *pa[1] = {m->params}, *ga[1] = {m->grads};
    for (int step = 0; step < 5; step++) {
        backend_fill(be, m->grads, 0.0f, m->nparams);
        fwd(m, 1.0f / 15.0f);
        model_backward(m);
        optim_step(o, &cfg.train, pa, ga, 1e-2f, 1.0f);
    }
    float *after = malloc(m->nbase_params * sizeof(float));
    backend_copy_d2h(be, after, m->base, m->nbase_params * sizeof(float));
    CHECK(memcmp(after, base, m->nbase_params * sizeof(float)) == 0, "LoRA training changed the frozen base weights");
    optim_destroy(o);
    free(after); free(merged); free(grad); free(ad); free(base);
    model_destroy(m);
    model_destroy(plain);
    backend_destroy(be);
}

/* KV-cache decoding must give the logits a full forward over the same prefix gives. */
static void check_decode(int llama)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    int T = 8;
    model *m = model_create(&mc, be, 2, T, 1, 0, 0, NULL);
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 7, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tok[8];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)(rng_u64(21, (uint64_t)i) % (uint64_t)mc.vocab);
    float *full = malloc((size_t)mc.vocab * sizeof(float)), *inc = malloc((size_t)mc.vocab * sizeof(float));
    /* Both are fp32 forwards of the same prefix that differ only in summation order (attention
     * over a cache vs blocks, matmuls of 1 row vs n): each logit is a d_model-term dot of a
     * normalised state and weights (|h w| < 1 per term), after n_layer layers whose own d_ff-
     * and d_model-term sums each carry their rounding forward: the accumulation bound of
     * K = d_ff terms adding up to S = d_model per layer, for both sides. */
    check_tol t = check_tol_sum(mc.d_ff, mc.d_model, 4, CHECK_U_FP32);
    t.atol *= 2 * (mc.n_layer + 1), t.rtol *= 2 * (mc.n_layer + 1);
    double *want = malloc((size_t)mc.vocab * sizeof(double));
    for (int n = 2; n <= T; n++) {
        CHECK(model_prefill(m, tok, n, full) == 0, "prefill %d", n);
        CHECK(model_prefill(m, tok, 1, inc) == 0, "prefill 1");
        for (int t = 1; t < n; t++) CHECK(model_decode(m, tok[t], t, inc) == 0, "decode %d", t);
        for (int v = 0; v < mc.vocab; v++) want[v] = full[v];
        char name[80];
        snprintf(name, sizeof name, "KV-cache decode (%s) of %d tokens vs full forward",
                 llama ? "llama" : "gpt2", n);
        check_allclose_v(name, inc, want, (size_t)mc.vocab, t, n == T);
    }
    free(want);
    free(full); free(inc); free(host);
    model_destroy(m);
    backend_destroy(be);
}

/* Init in windows (how a session does it, to bound host memory) = init in one piece, bitwise,
 * with window edges that cut tensors in the middle. */
static void check_init_windows(void)
{
    backend *be = cpu();
    model_config mc = variant(1);
    model *m = model_create(&mc, be, 1, 8, 1, 1, 0, NULL);
    CHECK(m != NULL, "model_create");
    size_t n = m->nparams, win = 1000;
    float *whole = malloc(n * sizeof(float)), *part = malloc(win * sizeof(float));
    model_init_values(m, 5, whole);
    size_t bad = 0;
    for (size_t lo = 0; lo < n; lo += win) {
        size_t hi = lo + win < n ? lo + win : n;
        model_init_range(m, 5, part, lo, hi);
        bad += memcmp(part, whole + lo, (hi - lo) * sizeof(float)) != 0;
    }
    CHECK(bad == 0, "%zu windows of %zu differ from the one-piece init", bad, win);
    free(whole);
    free(part);
    model_destroy(m);
    backend_destroy(be);
}

static int hook_fail_at = -1, hook_calls;
static int failing_begin(void *ctx, int region, int backward)
{
    (void)ctx, (void)backward;
    hook_calls++;
    return region == hook_fail_at ? loom_fail("test hook: region %d refuses", region) : 0;
}

/* A failing region hook is an error code, never a number added to the loss; the loss summed on
 * the device over micro-batches equals the per-pass sums and is read once. */
static void check_forward_errors(void)
{
    backend *be = cpu();
    model_config mc = variant(0);
    model *m = model_create(&mc, be, 2, 8, 1, 1, 0, NULL);
    CHECK(m != NULL, "model_create: %s", loom_error());
    if (!m) { backend_destroy(be); return; }
    float *host = malloc(m->nparams * sizeof(float));
    model_init_values(m, 3, host);
    backend_copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tok[16], tgt[16];
    make_batch(2, 8, mc.vocab, tok, tgt, 21);
    model_set_batch(m, tok, tgt);
    double one = fwd(m, 0.0f);
    CHECK(model_take_loss(m) == 0.0, "passes with loss_out add nothing to the device sum");
    CHECK(model_forward(m, 0.0f, NULL) == 0 && model_forward(m, 0.0f, NULL) == 0, "forward failed");
    double two = model_take_loss(m);
    CHECK(fabs(two - 2.0 * one) <= 1e-6 * fabs(one), "device sum of 2 passes %.9g, 2 x one %.9g", two, 2.0 * one);
    CHECK(model_take_loss(m) == 0.0, "model_take_loss starts the next sum at 0");
    m->hooks.region_begin = failing_begin;
    for (int r = 0; r < m->nregions; r++) {
        hook_fail_at = r;
        hook_calls = 0;
        double loss = 12345.0;
        loom_error_clear();
        int rc = model_forward(m, 0.0f, &loss);
        CHECK(rc == -1 && loss == 12345.0 && strstr(loom_error(), "refuses"),
              "hook failing at region %d: rc %d, loss %g (must stay untouched), error \"%s\"", r, rc,
              loss, loom_error());
        CHECK(hook_calls == r + 1, "region %d failed but the pass went on (%d hook calls)", r, hook_calls);
        CHECK(model_forward(m, 0.0f, NULL) == -1 && model_take_loss(m) == 0.0,
              "a failed pass must add nothing to the device loss sum (region %d)", r);
    }
    memset(&m->hooks, 0, sizeof m->hooks);
    CHECK(fwd(m, 0.0f) == one, "after the hooks are gone the pass gives the same loss");
    free(host);
    model_destroy(m);
    backend_destroy(be);
}

/* ZeRO-3's binding: every region bound on its own (reverse order, one buffer each) gives the
 * views a whole parameter buffer gives: same loss bitwise; LoRA adapters and a tied head too. */
static void check_bind_regions(int llama, int lora)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    int B = 2, T = 8;
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_PROJ)};
    model *whole = model_create(&mc, be, B, T, 1, 0, 0, lora ? &ls : NULL);
    model *parts = model_create(&mc, be, B, T, 0, 0, 0, lora ? &ls : NULL);
    CHECK(whole && parts, "model_create");
    float *host = malloc(whole->nparams * sizeof(float)), *base = NULL;
    model_init_values(whole, 3, host);
    for (size_t j = 0; lora && j < whole->nparams; j++) host[j] = 0.1f * rng_normal(9, j); /* B != 0 */
    backend_copy_h2d(be, whole->params, host, whole->nparams * sizeof(float));
    if (lora) {
        base = calloc(whole->nbase_params, sizeof(float));
        for (size_t j = 0; j < whole->nbase_params; j++) base[j] = 0.3f * rng_normal(8, j);
        model_load_base_range(whole, base, 0, whole->nbase_params);
        model_load_base_range(parts, base, 0, parts->nbase_params);
    }
    float **buf = calloc((size_t)parts->nregions, sizeof(float *));
    for (int r = parts->nregions - 1; r >= 0; r--) {
        size_t lo = parts->region_offset[r], n = parts->region_offset[r + 1] - lo;
        buf[r] = backend_alloc(be, (n ? n : 1) * sizeof(float));
        if (n) backend_copy_h2d(be, buf[r], host + lo, n * sizeof(float));
        model_bind_region(parts, r, buf[r], NULL);
    }
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 13);
    model_set_batch(whole, tok, tgt);
    model_set_batch(parts, tok, tgt);
    double a = loss_of(whole), b = loss_of(parts);
    CHECK(a == b, "region-bound model loss %.9g != whole-buffer loss %.9g (%s%s)", b, a,
          llama ? "llama" : "gpt2", lora ? " + LoRA" : "");
    for (int r = 0; r < parts->nregions; r++) backend_free(be, buf[r]);
    free(buf); free(host); free(base);
    model_destroy(whole);
    model_destroy(parts);
    backend_destroy(be);
}

/* The head on the positions with a target only (model_forward's compact path) against the head on
 * every position (full_head, the path pretraining takes): the same loss sum and gradients, for a
 * batch with half its positions masked, on every variant, full training and LoRA. The masked rows'
 * dlogits are exact zeros, so the two differ only in how the BLAS groups the head's sums: the
 * logits' and dx's C-term dots (a kernel may take another code path for an 8-row than a 16-row
 * matrix: valgrind's CPU gets other kernels than this one, which happen to give equal bits) and
 * dW's N instead of N/2 terms. Each is within 6 sqrt(K) u of its terms' magnitudes, K = N >= C;
 * the perturbation then passes through 2 (L + 1) products of the forward and backward, each adding
 * that relative error again, with the gradient tensor's largest magnitude standing in for S. */
/* The same seeded weights in two models of one config: with LoRA a base from the plain layout,
 * then adapters with B != 0 so they act. */
static void same_weights(model *a, model *b, int lora)
{
    backend *be = b->be;
    size_t n = b->nparams;
    float *host = malloc((lora ? b->nbase_params : n) * sizeof(float));
    if (lora) {
        model *plain = model_create(&b->cfg, be, 1, 1, 0, 0, MODEL_ACTS_NONE, NULL);
        model_init_values(plain, 7, host);
        model_destroy(plain);
        model_load_base_range(a, host, 0, a->nbase_params);
        model_load_base_range(b, host, 0, b->nbase_params);
        for (size_t j = 0; j < n; j++) host[j] = 0.2f * rng_normal(5, j);
    } else {
        model_init_values(b, 7, host);
    }
    backend_copy_h2d(be, a->params, host, n * sizeof(float));
    backend_copy_h2d(be, b->params, host, n * sizeof(float));
    free(host);
}

/* One training pass (forward + backward, gradients from zero) of ref and of m, which must compute
 * the same loss and gradients with the sums of up to `rows` positions in another order: each
 * gradient within that bound through the layers' 2 (L + 1) hops, the loss within a d_model-term
 * sum. Returns the largest gradient difference; the losses go to *lr, *lm. */
static double same_pass(model *ref, model *m, int rows, const char *what, double *lr, double *lm)
{
    backend *be = m->be;
    size_t n = m->nparams;
    backend_fill(be, ref->grads, 0.0f, n);
    backend_fill(be, m->grads, 0.0f, n);
    CHECK(model_forward(ref, 1.0f, lr) == 0 && model_backward(ref) == 0, "%s: reference pass", what);
    CHECK(model_forward(m, 1.0f, lm) == 0 && model_backward(m) == 0, "%s: pass", what);
    float *gr = malloc(n * sizeof(float)), *gm = malloc(n * sizeof(float));
    double gmax = 0, worst = 0, *want = malloc(n * sizeof(double));
    backend_copy_d2h(be, gr, ref->grads, n * sizeof(float));
    backend_copy_d2h(be, gm, m->grads, n * sizeof(float));
    for (size_t j = 0; j < n; j++) {
        want[j] = gr[j];
        gmax = fabs(gr[j]) > gmax ? fabs(gr[j]) : gmax;
    }
    double hops = 2.0 * (m->cfg.n_layer + 1);
    check_tol tg = check_tol_sum(rows, gmax, 4, CHECK_U_FP32), tl = check_tol_sum(m->cfg.d_model, fabs(*lr), 2, CHECK_U_FP32);
    tg.atol *= hops, tg.rtol *= hops;
    CHECK(fabs(*lm - *lr) <= tl.atol + tl.rtol * fabs(*lr), "%s loss %.9g vs reference %.9g", what, *lm, *lr);
    char label[64];
    snprintf(label, sizeof label, "%s gradients", what);
    check_allclose(label, gm, want, n, tg);
    for (size_t j = 0; j < n; j++) worst = fmax(worst, fabs(gm[j] - want[j]));
    free(gr), free(gm), free(want);
    return worst;
}

static void check_compact_head(int llama, int lora)
{
    backend *be = cpu();
    model_config mc = variant(llama);
    int B = 2, T = 8, N = B * T;
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_O)};
    model *ref = model_create(&mc, be, B, T, 1, 1, 0, lora ? &ls : NULL);
    model *m = model_create(&mc, be, B, T, 1, 1, 0, lora ? &ls : NULL);
    CHECK(ref && m, "model_create: %s", loom_error());
    ref->full_head = 1;
    same_weights(ref, m, lora);
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 21);
    for (int i = 0; i < N; i++)
        if (i % T < T / 2) tgt[i] = -1; /* a prompt half, an answer half */
    model_set_batch(ref, tok, tgt);
    model_set_batch(m, tok, tgt);
    CHECK(ref->head_rows_n == N && m->head_rows_n == N / 2, "head rows %d, %d", ref->head_rows_n, m->head_rows_n);
    double lr = 0, lm = 0;
    same_pass(ref, m, N, "compact head", &lr, &lm);
    /* the device loss sum (model_take_loss) puts each loss back at its position: the same sum as
     * the host's for the same path, bit for bit */
    CHECK(model_forward(ref, 0.0f, NULL) == 0 && model_forward(m, 0.0f, NULL) == 0, "loss-only passes");
    double tr = model_take_loss(ref), tm = model_take_loss(m);
    CHECK(tr == lr && tm == lm, "take_loss %.9g / %.9g vs %.9g / %.9g", tm, tr, lm, lr);
    printf("compact head (%s%s): %d of %d rows, loss and %zu gradients match the full head\n",
           llama ? "llama" : "gpt2", lora ? " + LoRA" : "", m->head_rows_n, N, m->nparams);
    model_destroy(ref);
    model_destroy(m);
    backend_destroy(be);
}

/* The head in chunks of rows (model_forward: model_head_chunks) against the head in one piece: a
 * model whose head_chunk is 3 rows (its 16 rows in 6 chunks, the last one short; the compact
 * head's 8 in 3) and one whose chunk holds every row give the same loss and gradients, with every
 * position's target or half of them (the compact head), tied and untied, full training and LoRA
 * (a frozen head). Each logits row is the same C-term dot either way; the head's weight gradient
 * adds the chunks' partial sums of the N rows into dW one after another, another order of the same
 * N terms: same_pass's bound (the compact head's own test's). Then a forward with grad_scale 0
 * followed by backward (a step whose global batch has no target) leaves every gradient at zero,
 * as its all-zero dlogits did when backward multiplied them. */
static void check_head_chunks(int family, int compact, int lora)
{
    backend *be = cpu();
    model_config mc = variant(family);
    int B = 2, T = 8, N = B * T;
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_V)};
    model *ref = model_create(&mc, be, B, T, 1, 1, 0, lora ? &ls : NULL);
    model *m = model_create(&mc, be, B, T, 1, 1, 0, lora ? &ls : NULL);
    CHECK(ref && m, "model_create: %s", loom_error());
    CHECK(ref->head_chunk == N, "a %d-float vocabulary's chunk is %d rows, not all %d", mc.vocab, ref->head_chunk, N);
    m->head_chunk = 3;
    same_weights(ref, m, lora);
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 41);
    tgt[1] = 5; /* every position a target: the head on all N rows */
    for (int i = 0; compact && i < N; i++)
        if (i % T < T / 2) tgt[i] = -1;
    model_set_batch(ref, tok, tgt);
    model_set_batch(m, tok, tgt);
    int rows = m->head_rows_n;
    CHECK(rows == (compact ? N / 2 : N) && (rows + 2) / 3 >= 3, "%d head rows", rows);
    const char *name = family == 2 ? "qwen, tied" : family ? "llama, untied" : "gpt2, tied";
    char what[96];
    snprintf(what, sizeof what, "head chunks (%s%s%s)", name, compact ? ", compact" : "", lora ? ", LoRA" : "");
    double lr = 0, lm = 0;
    double worst = same_pass(ref, m, N, what, &lr, &lm);
    /* losses only (evaluation), read on the host and summed on the device */
    double er = 0, em = 0;
    CHECK(model_forward(ref, 0.0f, &er) == 0 && model_forward(m, 0.0f, &em) == 0, "%s: loss-only passes", what);
    CHECK(er == lr && em == lm, "%s: loss-only %.9g / %.9g vs training forward %.9g / %.9g", what, em, er, lm, lr);
    CHECK(model_forward(m, 0.0f, NULL) == 0 && model_take_loss(m) == lm, "%s: device loss sum", what);
    /* grad_scale 0, then backward: nothing added */
    backend_fill(be, m->grads, 0.0f, m->nparams);
    CHECK(model_forward(m, 0.0f, NULL) == 0 && model_backward(m) == 0, "%s: pass at grad_scale 0", what);
    model_take_loss(m);
    float *g = malloc(m->nparams * sizeof(float));
    backend_copy_d2h(be, g, m->grads, m->nparams * sizeof(float));
    size_t nonzero = 0;
    for (size_t j = 0; j < m->nparams; j++) nonzero += g[j] != 0.0f;
    CHECK(nonzero == 0, "%s: %zu gradients non-zero after a grad_scale 0 pass", what, nonzero);
    free(g);
    printf("%s: %d rows in chunks of 3, loss %.9g vs %.9g in one piece (%s), max |grad diff| %.2e of %zu\n",
           what, rows, lm, lr, lm == lr ? "bitwise" : "within the bound", worst, m->nparams);
    model_destroy(ref);
    model_destroy(m);
    backend_destroy(be);
}

/* A ragged pass (model_set_ragged) over sequences packed without padding = the padded pass over
 * the same sequences right-padded to T (causal attention never lets padding reach a real
 * position, and padding carries no loss): loss and every gradient within the tolerance of two
 * summation orders, for each family, LoRA and recompute; then model_set_shape ends it. */
static void check_ragged(int family, int lora, int recompute)
{
    backend *be = cpu();
    model_config mc = variant(family);
    enum { B = 3, T = 8 };
    const int lens[B] = {T, 3, 6};
    int N = 0;
    lora_spec ls = {.rank = 2, .alpha = 4.0f, .targets = (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_PROJ)};
    const lora_spec *lp = lora ? &ls : NULL;
    model *ref = model_create(&mc, be, B, T, 1, 1, recompute, lp);
    model *m = model_create(&mc, be, B, T, 1, 1, recompute, lp);
    CHECK(ref && m, "model_create: %s", loom_error());
    size_t n = m->nparams;
    same_weights(ref, m, lora);
    int32_t tok[B * T], tgt[B * T], ptok[B * T], ptgt[B * T];
    make_batch(B, T, mc.vocab, tok, tgt, 31);
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            int i = r * T + t;
            if (t >= lens[r]) tok[i] = 0, tgt[i] = -1; /* padding */
            else ptok[N] = tok[i], ptgt[N++] = tgt[i];
        }
    CHECK(model_set_ragged(m, lens, B) == 0 && m->B * m->T == N, "model_set_ragged: %s", loom_error());
    model_set_batch(ref, tok, tgt);
    model_set_batch(m, ptok, ptgt);
    double lr = 0, lm = 0;
    /* the same sums in another order (per-sequence calls, fewer rows) */
    double worst = same_pass(ref, m, B * T, "ragged", &lr, &lm);
    const char *name = family == 2 ? "qwen" : family ? "llama" : "gpt2";
    /* model_set_shape ends the ragged passes: the padded batch again gives the padded loss */
    double again = 0;
    CHECK(model_set_shape(m, B, T) == 0 && m->nseg == 0, "model_set_shape after ragged");
    model_set_batch(m, tok, tgt);
    CHECK(model_forward(m, 0.0f, &again) == 0 && again == fwd(ref, 0.0f), "padded loss after ragged %.9g vs %.9g",
          again, lr);
    /* bad shapes are refused, one line each */
    int longer[2] = {T + 1, 2}, many[4] = {T, T, T, 1}, empty[1] = {0};
    CHECK(model_set_ragged(m, longer, 2) != 0 && strstr(loom_error(), "sequence 0 has 9 tokens"), "%s", loom_error());
    CHECK(model_set_ragged(m, many, 4) != 0 && strstr(loom_error(), "exceed"), "%s", loom_error());
    CHECK(model_set_ragged(m, empty, 1) != 0 && model_set_ragged(m, lens, 0) != 0, "empty ragged passes accepted");
    printf("ragged pass (%s%s%s): %d packed tokens for %d padded, loss %.7f vs %.7f, max |grad diff| %.2e of %zu\n",
           name, lora ? " + LoRA" : "", recompute ? ", recompute" : "", N, B * T, lm, lr, worst, n);
    model_destroy(ref);
    model_destroy(m);
    backend_destroy(be);
}

/* model_pack_rows: rows cut after their last target, target-less rows dropped, the rest moved
 * together in order; a batch without targets keeps one target-less token. */
static void check_pack_rows(void)
{
    enum { B = 4, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    /* row 0: targets to the end; row 1: last target at 2; row 2: none; row 3: only at 0 */
    const int last[B] = {4, 2, -1, 0};
    for (int i = 0; i < B * T; i++) tok[i] = 100 + i, tgt[i] = i % T <= last[i / T] && i % T != 1 ? 200 + i : -1;
    int lens[B], n = model_pack_rows(tok, tgt, B, T, lens);
    const int want_lens[] = {5, 3, 1}, want_rows[] = {0, 1, 3};
    CHECK(n == 3 && memcmp(lens, want_lens, sizeof want_lens) == 0, "pack: %d sequences, lens %d %d %d", n,
          lens[0], lens[1], lens[2]);
    for (int s = 0, off = 0; s < 3 && n == 3; off += want_lens[s++])
        for (int t = 0; t < want_lens[s]; t++) {
            int i = want_rows[s] * T + t;
            CHECK(tok[off + t] == 100 + i && tgt[off + t] == (t <= last[want_rows[s]] && t != 1 ? 200 + i : -1),
                  "pack: sequence %d position %d holds %d / %d", s, t, tok[off + t], tgt[off + t]);
        }
    for (int i = 0; i < B * T; i++) tgt[i] = -1;
    n = model_pack_rows(tok, tgt, B, T, lens);
    CHECK(n == 1 && lens[0] == 1 && tgt[0] == -1, "pack of a batch without targets: %d sequences", n);
}

int main(void)
{
    check_pack_rows();
    check_forward_errors();
    check_bind_regions(0, 0);
    check_bind_regions(1, 0);
    check_bind_regions(1, 1);
    check_init_windows();
    check_decode(0);
    check_decode(1);
    check_decode(2);
    check_lora();
    for (int v = 0; v < 3; v++) check_compact_head(v, 0);
    check_compact_head(1, 1);
    check_compact_head(2, 1);
    for (int v = 0; v < 3; v++) check_head_chunks(v, 0, 0), check_head_chunks(v, 1, 0);
    check_head_chunks(1, 1, 1);
    check_head_chunks(0, 0, 1);
    for (int v = 0; v < 3; v++) check_ragged(v, 0, 0);
    check_ragged(1, 1, 0);
    check_ragged(2, 1, 1);
    check_ragged(0, 0, 1);
    check_gradients(0);
    check_gradients(1);
    check_gradients(2);
    check_overfit(0);
    check_overfit(1);
    if (failures) printf("%d check(s) failed\n", failures);
    else printf("all model checks passed\n");
    return failures ? 1 : 0;
}
