/* test_optim_decay.c: the weight-decay mask (issue 42), on real MPI ranks (mpirun -np N). One
 * AdamW step with zero gradients from random parameters must move exactly the decaying tensors
 * (matrices: embeddings, projections, the head) to p - lr (wd p), bitwise, and leave the others
 * (norm weights, biases, LoRA adapters: docs/config.md, train.weight_decay) bit-identical, for ZeRO
 * stages 0-3; with N >= 2 ranks the test asserts that shard boundaries fall inside tensors of both
 * kinds (the sizes below are chosen so they do for N = 2 and 3), so a cut tensor is covered. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "core/config/config.h"
#include "core/train/train.h"
#include "parallel/comm.h"
#include "tests/check.h"

typedef struct variant {
    const char *name;
    int finetune; /* LoRA session: the table is the adapters */
    const char *sets[16];
} variant;

/* d_ff 37 puts the 2-rank cut of each gpt2 layer inside ln_2.weight and a 3-rank cut inside
 * attn.v.bias; the tied head region (ln_f weight + bias) is cut inside both by 3 ranks. */
static const variant variants[] = {
    {"gpt2", 0, {"model.vocab=50", "model.d_model=24", "model.n_head=4", "model.n_kv_head=2",
                 "model.d_ff=37", "model.max_seq=16", NULL}},
    {"llama", 0, {"model.vocab=50", "model.d_model=24", "model.n_head=4", "model.n_kv_head=2",
                  "model.d_ff=37", "model.max_seq=16", "model.norm=rmsnorm", "model.mlp=swiglu",
                  "model.positions=rope", "model.tied_embeddings=false", "model.bias=false",
                  "model.qkv_bias=true", "model.qk_norm=true", NULL}},
    {"lora", 1, {"model.vocab=50", "model.d_model=24", "model.n_head=4", "model.n_kv_head=2",
                 "model.d_ff=37", "model.max_seq=16", "finetune.method=lora", "finetune.lora_rank=3",
                 "finetune.lora_targets=q,k,v,o,fc,proj", NULL}},
};
#define NVARIANTS (int)(sizeof variants / sizeof variants[0])

/* The convention, written here independently of the model's flags: 2-D tensors decay, except
 * LoRA adapters; 1-D ones (norm weights, biases) never do. */
static int should_decay(const model_tensor *t)
{
    return t->ndim == 2 && !strstr(t->name, ".lora_");
}

/* Random parameters: nonzero (a zero stays zero under decay, hiding a wrong mask), normal
 * (no denormals), both signs, exponents -8..8, the same on every rank. */
static void random_params(float *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        float mant = 1.0f + (float)(x >> 40) / (float)(1u << 24); /* [1, 2) */
        int e = (int)((x >> 8) % 17) - 8;
        p[i] = ldexpf((x & 1) ? -mant : mant, e);
    }
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* A decayed element: backend.h's AdamW at g = 0 (m = v = 0, so the adaptive term is 0 / (0 +
 * eps) = +0) is p -= lr * (0 + wd p). Float arithmetic, each operation rounded; the CPU kernel is
 * compiled with FMA contraction, so p - lr (wd p) may also be one fused op. Either is bitwise
 * what the formula gives; volatile keeps this file's compiler from fusing the first. */
static int decayed_ok(float p0, float got, float lr, float wd, float *want)
{
    volatile float wp = wd * p0;
    volatile float step = lr * wp;
    volatile float unfused = p0 - step;
    float fused = fmaf(-lr, wp, p0);
    *want = unfused;
    return same_bits(got, unfused) || same_bits(got, fused);
}

/* This rank's shard boundaries strictly inside a tensor, by kind (decaying, not decaying). */
static void count_cuts(const session *s, double cuts[2])
{
    int np;
    size_t se;
    const optim_piece *pc = dp_pieces(s->dp, &np, &se);
    const model *m = s->model;
    for (int i = 0; i < np; i++) {
        size_t x[2] = {pc[i].lo, pc[i].hi};
        for (int e = 0; e < 2; e++)
            for (int j = 0; j < m->ntensors; j++) {
                const model_tensor *t = &m->tensors[j];
                if (t->offset < x[e] && x[e] < t->offset + t->numel) cuts[should_decay(t) ? 0 : 1] += 1;
            }
    }
}

/* Each tensor after the step against p0: decayed or bit-identical. A line per wrong tensor, and
 * a summary when verbose (rank 0: every rank gathers and checks the same logical array). */
static void check_tensors(const model *m, const float *p0, const float *got, float lr, float wd,
                          const char *tag, int verbose)
{
    size_t nd = 0, nk = 0, ed = 0, ek = 0;
    for (int j = 0; j < m->ntensors; j++) {
        const model_tensor *t = &m->tensors[j];
        int d = should_decay(t);
        CHECK(t->decay == d, "%s: %s has decay flag %d, the convention says %d", tag, t->name, t->decay, d);
        size_t bad = 0, first = 0;
        float want = 0.0f, want_first = 0.0f;
        for (size_t i = t->offset; i < t->offset + t->numel; i++) {
            int ok = d ? decayed_ok(p0[i], got[i], lr, wd, &want) : same_bits(got[i], p0[i]);
            if (!d) want = p0[i];
            if (!ok && !bad++) { first = i; want_first = want; }
        }
        if (d) { nd++; ed += t->numel; } else { nk++; ek += t->numel; }
        CHECK(bad == 0, "%s: %s (%s): %zu of %zu elements wrong; first [%zu] got %.9g want %.9g (was %.9g)",
              tag, t->name, d ? "decays" : "must not decay", bad, t->numel, first - t->offset,
              (double)got[first], (double)want_first, (double)p0[first]);
    }
    if (verbose)
        printf("ok   %s: %zu decaying tensors (%zu elements) at p - lr wd p, %zu others (%zu) unchanged\n", tag,
           nd, ed, nk, ek);
}

static session *open_case(comm *c, const variant *v, int stage, job_config *cfg)
{
    config_defaults(cfg);
    for (int i = 0; v->sets[i]; i++)
        if (config_set(cfg, v->sets[i])) { printf("FAIL %s: %s\n", v->sets[i], loom_error()); return NULL; }
    cfg->parallel.zero_stage = stage;
    cfg->parallel.threads = 1;
    cfg->train.batch_size = c->size;
    cfg->train.seq_len = 8;
    cfg->train.weight_decay = 0.1f;
    cfg->checkpoint.every = -1;
    snprintf(cfg->out, sizeof cfg->out, "test_optim_decay_out/np%d", c->size);
    if (config_validate(cfg)) { printf("FAIL %s: %s\n", v->name, loom_error()); return NULL; }
    session *s = session_open(cfg, c, v->finetune ? SESSION_FINETUNE : SESSION_TRAIN, v->finetune, 8);
    if (!s) printf("FAIL %s zero %d: %s\n", v->name, stage, loom_error());
    return s;
}

/* One zero-gradient step of variant v at ZeRO `stage`; cuts[] += this rank's cut counts. */
static int run_case(comm *c, const variant *v, int stage, double cuts[2])
{
    job_config cfg;
    session *s = open_case(c, v, stage, &cfg);
    if (!s) return -1;
    model *m = s->model;
    size_t n = m->nparams;
    float *p0 = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    if (!p0 || !got) return -1;
    random_params(p0, n, 42 + (uint64_t)stage);
    const float lr = 3e-3f;
    int rc = dp_load_params_range(s->dp, p0, 0, n) || dp_begin_step(s->dp) ? -1 : 0;
    if (rc == 0) {
        optim_step(s->opt, &cfg.train, dp_param_ptrs(s->dp), dp_grad_ptrs(s->dp), lr, 1.0f);
        rc = dp_finish_params(s->dp);
    }
    for (int r = 0; rc == 0 && r < m->nregions; r++)
        rc = dp_gather_region(s->dp, NULL, r, got + m->region_offset[r]);
    if (rc) printf("FAIL %s zero %d: %s\n", v->name, stage, loom_error());
    char tag[64];
    snprintf(tag, sizeof tag, "%s zero %d np %d rank %d", v->name, stage, c->size, c->rank);
    if (rc == 0) check_tensors(m, p0, got, lr, cfg.train.weight_decay, tag, c->rank == 0);
    if (stage >= 1) count_cuts(s, cuts);
    free(p0);
    free(got);
    session_close(s);
    return rc;
}

int main(int argc, char **argv)
{
    log_set_quiet(1);
    comm *c = comm_init(NULL, &argc, &argv, NULL);
    if (!c) { printf("FAIL: %s\n", loom_error()); return 1; }
    c->timeout_s = 120;
    char cmd[128]; /* one folder per world size: ctest -j may run np 2 and np 3 at once */
    snprintf(cmd, sizeof cmd, "rm -rf test_optim_decay_out/np%d && mkdir -p test_optim_decay_out", c->size);
    if (c->rank == 0 && system(cmd) != 0) return 1;
    double cuts[2] = {0.0, 0.0}, lora_cuts[2] = {0.0, 0.0}; /* the mixed models' cuts, LoRA's */
    for (int v = 0; v < NVARIANTS; v++)
        for (int stage = 0; stage <= 3; stage++)
            if (run_case(c, &variants[v], stage, variants[v].finetune ? lora_cuts : cuts)) comm_abort(c, 1);
    comm_allreduce_host(c, cuts, 2);
    comm_allreduce_host(c, lora_cuts, 2);
    if (c->rank == 0)
        printf("np %d: ZeRO 1-3 shard boundaries inside tensors: gpt2 + llama %.0f in decaying ones, %.0f in "
               "others (norms, biases); LoRA %.0f in adapters\n", c->size, cuts[0], cuts[1], lora_cuts[1]);
    if (c->size > 1)
        CHECK(cuts[0] > 0 && cuts[1] > 0 && lora_cuts[1] > 0, "np %d: no shard boundary inside a %s tensor: the cut case is not covered",
              c->size, cuts[0] > 0 ? "non-decaying" : "decaying");
    double f = failures;
    comm_allreduce_host(c, &f, 1);
    failures = (int)f;
    int rc = c->rank == 0 ? check_exit_code("test_optim_decay") : (f > 0);
    comm_destroy(c);
    return rc;
}
