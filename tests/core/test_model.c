/* test_model.c: the whole model against finite differences, on the real CPU backend: for each
 * architecture variant (LayerNorm/GELU/learned/tied, RMSNorm/SwiGLU/RoPE/GQA/untied), the analytic
 * gradient of sampled parameters of every tensor vs a central difference of the loss; then an
 * overfit run that must drive the loss on one fixed batch near zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/config.h"
#include "base/error.h"
#include "core/model.h"
#include "core/optim.h"
#include "base/rng.h"

#include "tests/check.h"

static backend *cpu(void)
{
    backend_config bc = {.threads = 1};
    backend *be = backend_select("cpu", &bc, NULL, 0);
    if (!be) { printf("FAIL: no cpu backend\n"); exit(1); }
    return be;
}

static model_config variant(int llama)
{
    job_config cfg;
    config_defaults(&cfg);
    model_config m = cfg.model;
    config_apply_preset(&m, "tiny");
    m.vocab = 48; m.d_model = 16; m.n_layer = 2; m.n_head = 4; m.d_ff = 24; m.max_seq = 8;
    m.n_kv_head = llama ? 2 : 4;
    if (llama) {
        strcpy(m.norm, "rmsnorm"); strcpy(m.mlp, "swiglu"); strcpy(m.positions, "rope");
        m.tied_embeddings = 0; m.bias = 0;
    }
    if (llama == 2) { /* Qwen-style: q/k/v biases, per-head q/k RMSNorm, Llama 3 rope scaling */
        m.qkv_bias = 1; m.qk_norm = 1; m.tied_embeddings = 1;
        strcpy(m.rope_scaling, "llama3");
        m.head_dim = 8;               /* queries 32 wide on a 16-wide residual (Qwen3-0.6B's shape) */
        m.rope_original_max_seq = 16; /* head dim 8: smoothed and fully scaled bands */
    }
    m.init_std = 0.3f; /* large weights so every path carries signal */
    return m;
}

static void make_batch(int B, int T, int V, int32_t *tok, int32_t *tgt, uint64_t seed)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(rng_u64(seed, (uint64_t)i) % (uint64_t)V);
        tgt[i] = (int32_t)(rng_u64(seed + 1, (uint64_t)i) % (uint64_t)V);
    }
    tgt[1] = -1; /* one masked position */
}

static double loss_of(model *m)
{
    return model_forward(m, 0.0f);
}

static float get1(model *m, float *p) { float v; m->be->ops->copy_d2h(m->be, &v, p, sizeof v); return v; }
static void set1(model *m, float *p, float v) { m->be->ops->copy_h2d(m->be, p, &v, sizeof v); }

/* Compare the analytic gradient `grad` (of the loss sum, on the trainable array) with central
 * differences at `samples` sampled elements of every tensor. Returns the worst error, measured
 * relative to the tensor's largest gradient (fp32 noise scales with it); the floor covers tensors
 * whose true gradient is 0, e.g. the key bias (softmax is shift-invariant). */
static double fd_check(model *m, const float *grad, int samples, uint64_t seed, const char *what,
                       const char **worst_name)
{
    double worst = 0.0;
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *t = &m->tensors[i];
        double gmax = 0.0;
        for (size_t j = 0; j < t->numel; j++) gmax = fmax(gmax, fabs(grad[t->offset + j]));
        for (int s = 0; s < samples; s++) {
            size_t j = t->offset + rng_u64(seed + (uint64_t)i, (uint64_t)s) % t->numel;
            float *p = m->params + j, x = get1(m, p), h = 1e-2f;
            set1(m, p, x + h);
            double lp = loss_of(m);
            set1(m, p, x - h);
            double lm = loss_of(m);
            set1(m, p, x);
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - grad[j]) / fmax(gmax, 1e-2);
            if (err > worst) { worst = err; if (worst_name) *worst_name = t->name; }
            CHECK(err < 2e-2, "%s %s[%zu]: analytic %.6g vs finite difference %.6g (err %.3g)", what,
                  t->name, j - t->offset, grad[j], fd, err);
        }
    }
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
    be->ops->copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tok[16], tgt[16];
    make_batch(B, T, mc.vocab, tok, tgt, 11);
    model_set_batch(m, tok, tgt);

    be->ops->fill(be, m->grads, 0.0f, m->nparams);
    double base = model_forward(m, 1.0f); /* grad of the loss SUM */
    model_backward(m);
    float *grad = malloc(m->nparams * sizeof(float));
    be->ops->copy_d2h(be, grad, m->grads, m->nparams * sizeof(float));
    CHECK(isfinite(base) && base > 0, "loss %g", base);

    const char *worst_name = "";
    double worst = fd_check(m, grad, 6, 99, llama ? "llama" : "gpt2", &worst_name);
    printf("gradient check (%s): %d tensors, worst relative error %.2e in %s\n",
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
    be->ops->copy_h2d(be, m->params, host, m->nparams * sizeof(float));
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
        be->ops->fill(be, m->grads, 0.0f, m->nparams);
        loss = model_forward(m, 1.0f / 15.0f) / 15.0; /* 15 unmasked targets */
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
    be->ops->copy_h2d(be, plain->params, base, plain->nparams * sizeof(float));
    CHECK(model_load_base_range(m, base, 0, m->nbase_params) == 0, "load base: %s", loom_error());
    float *ad = malloc(m->nparams * sizeof(float));
    model_init_values(m, 9, ad);
    be->ops->copy_h2d(be, m->params, ad, m->nparams * sizeof(float));
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
    be->ops->copy_h2d(be, m->params, ad, m->nparams * sizeof(float));
    be->ops->fill(be, m->grads, 0.0f, m->nparams);
    model_forward(m, 1.0f);
    model_backward(m);
    float *grad = malloc(m->nparams * sizeof(float));
    be->ops->copy_d2h(be, grad, m->grads, m->nparams * sizeof(float));
    double worst = fd_check(m, grad, 4, 3, "LoRA", NULL);
    printf("LoRA: B = 0 equals base bitwise; adapter gradients worst relative error %.2e\n", worst);

    /* merge: the base with s B A folded in gives the adapted model's loss */
    double adapted = loss_of(m);
    float *merged = malloc(plain->nparams * sizeof(float));
    memcpy(merged, base, plain->nparams * sizeof(float));
    CHECK(model_lora_merge(m, merged, ad) == 0, "merge failed");
    be->ops->copy_h2d(be, plain->params, merged, plain->nparams * sizeof(float));
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
        be->ops->fill(be, m->grads, 0.0f, m->nparams);
        model_forward(m, 1.0f / 15.0f);
        model_backward(m);
        optim_step(o, &cfg.train, pa, ga, 1e-2f, 1.0f);
    }
    float *after = malloc(m->nbase_params * sizeof(float));
    be->ops->copy_d2h(be, after, m->base, m->nbase_params * sizeof(float));
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
    be->ops->copy_h2d(be, m->params, host, m->nparams * sizeof(float));
    int32_t tok[8];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)(rng_u64(21, (uint64_t)i) % (uint64_t)mc.vocab);
    float *full = malloc((size_t)mc.vocab * sizeof(float)), *inc = malloc((size_t)mc.vocab * sizeof(float));
    double worst = 0;
    for (int n = 2; n <= T; n++) {
        CHECK(model_prefill(m, tok, n, full) == 0, "prefill %d", n);
        CHECK(model_prefill(m, tok, 1, inc) == 0, "prefill 1");
        for (int t = 1; t < n; t++) CHECK(model_decode(m, tok[t], t, inc) == 0, "decode %d", t);
        for (int v = 0; v < mc.vocab; v++) worst = fmax(worst, fabs(full[v] - inc[v]));
    }
    printf("KV-cache decode (%s): max |logit difference| vs full forward %.2e\n", llama == 2 ? "qwen-style" : llama ? "llama" : "gpt2", worst);
    CHECK(worst < 1e-4, "decoding with the KV cache differs from a full forward by %.3g", worst);
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

int main(void)
{
    check_init_windows();
    check_decode(0);
    check_decode(1);
    check_decode(2);
    check_lora();
    check_gradients(0);
    check_gradients(1);
    check_gradients(2);
    check_overfit(0);
    check_overfit(1);
    if (failures) printf("%d check(s) failed\n", failures);
    else printf("all model checks passed\n");
    return failures ? 1 : 0;
}
