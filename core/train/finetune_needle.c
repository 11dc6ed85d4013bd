/* finetune_needle.c: `loom finetune` from a Needle base checkpoint (finetune.base names a Needle
 * .safetensors): Needle's LoRA fine-tune (finetune.py:387-509; docs/needle.md) run on the needle
 * family's needle_net, with what Needle lacks: data parallelism over comm.h, checkpoints that
 * resume bitwise on any rank count, and a validation loss per epoch.
 *
 * The adapters (A, B on Needle's five targets, 1.5% of the model) and their AdamW moments are
 * replicated: every rank computes the gradients of its rows of the global batch, the gradients
 * are summed over ranks (in double, on the host), and every rank takes the same AdamW step. The
 * frozen base is read by every rank from the file (memory-mapped). parallel.zero_stage shards
 * nothing here: the state it would shard is the adapters' few MB.
 *
 * A step is the global batch of train.batch_size rows (sft_data's order: the same rows for any
 * world size), cut into micro-batches of train.micro_batch rows per rank; each micro-batch's loss
 * is divided by the whole batch's count of loss tokens, so the summed gradient is Needle's
 * per-token mean over the batch. The optimiser is Needle's: clip_by_global_norm(train.grad_clip)
 * then AdamW(train.beta1, beta2, eps, weight_decay) on every A and B, the rate loom's schedule
 * (optim_lr: warmup, cosine to train.min_lr). A checkpoint holds the adapters and moments in
 * Needle's layout (group "lora", "optimizer/lora_m", "optimizer/lora_v"), the step, the AdamW
 * count, the base file's digest and the tokenizer's hash. */
#include "core/train/finetune_needle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle.h"
#include "core/model/model.h"
#include "core/text/text.h"
#include "core/train/evaluate.h"
#include "core/train/fault.h"
#include "core/train/interrupt.h"
#include "core/train/metrics.h"
#include "core/train/optim.h"
#include "core/train/plan.h"
#include "core/train/resume_check.h"
#include "core/train/session.h"


typedef struct nf {
    job_config cfg;       /* a copy: train.steps is derived from the epochs (session_finetune_steps) */
    comm *c;
    backend *be;
    needle_net *net;
    int L, rank;
    double scale;
    int nad;              /* adapters: Needle's five targets, needle_lora_path's order */
    ckpt_tensor table[2 * NEEDLE_LORA_TARGETS]; /* A [L, in, r] then B [L, r, out] of each (finetune_needle_table) */
    char names[2 * NEEDLE_LORA_TARGETS][128];
    size_t state_elems;   /* floats of every A and B */
    tokenizer *tok;
    chat_template chat;
    sft_data sft;
    int T, mb, accum;
    int Tpass;            /* the longest row a pass runs at (sft_pass_len): what the passes are sized for */
    long steps_per_epoch;
    int32_t *tokens, *targets;
    float *weights;
    float *gbuf[2 * NEEDLE_LORA_TARGETS];
    size_t gcount[2 * NEEDLE_LORA_TARGETS];
    int ngbuf;
    double *gsum;         /* host, state_elems: the gradients summed over ranks ... */
    float *gflt;          /* ... and as floats, on their way to and from the device */
    int64_t step;
    int adam_count;       /* AdamW steps taken (skipped steps do not count) */
    uint64_t base_digest, tok_hash;
    int lock_fd;
    char out_dir[512], ckpt_dir[600];
    metrics *log;
    fault_plan fault;     /* tests only: LOOM_FAULT_* (a rank exits or hangs at a step) */
    const volatile sig_atomic_t *stop; /* train_options.stop, or NULL */
    int stopped;          /* the signal every rank agreed to stop on after this step, or 0 */
    size_t rss_before;    /* resident bytes before the net (plan_log_peak) */
} nf;

static double nf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A regular file named *.safetensors (an HF model is a folder), or a loom checkpoint `loom import`
 * made of one (needle_is_base opens a loom checkpoint to tell: a peek, so the load's open of it does
 * not read it all again). */
int finetune_needle_base(const char *path) { return needle_is_base(path); }

/* What a Needle fine-tune takes of the job config, checked before anything loads. */
static int nf_check_config(const job_config *cfg)
{
    const finetune_config *f = &cfg->finetune;
    if (strcmp(f->method, "lora") != 0)
        return loom_fail("finetune.method '%s': a Needle base fine-tunes LoRA adapters (Needle's finetune); "
                         "set finetune.method=lora", f->method);
    /* Needle's five targets, by Needle's or loom's short names, in any order */
    static const char *const names[5][2] = {{"q_proj", "q"}, {"k_proj", "k"}, {"v_proj", "v"},
                                            {"gate_proj", "gate"}, {"o_proj", "o"}};
    char list[sizeof f->lora_targets];
    snprintf(list, sizeof list, "%s", f->lora_targets);
    int seen = 0, count = 0;
    for (char *save = NULL, *tk = strtok_r(list, ",", &save); tk; tk = strtok_r(NULL, ",", &save)) {
        int hit = -1;
        for (int t = 0; t < 5; t++)
            if (!strcmp(tk, names[t][0]) || !strcmp(tk, names[t][1])) hit = t;
        if (hit < 0 || (seen & 1 << hit)) seen = -1;
        if (seen < 0) break;
        seen |= 1 << hit, count++;
    }
    if (seen != 31 || count != 5)
        return loom_fail("finetune.lora_targets '%s': a Needle base takes adapters on Needle's five targets: "
                         "set finetune.lora_targets=q_proj,k_proj,v_proj,gate_proj,o_proj (Needle's out_proj)", f->lora_targets);
    if (cfg->data.chat_format[0] && strcmp(cfg->data.chat_format, "needle") != 0)
        return loom_fail("data.chat_format '%s': a Needle base is fine-tuned on Needle's rendering; set "
                         "data.chat_format=needle (or \"\")", cfg->data.chat_format);
    if (!cfg->model.tokenizer[0] || !strcmp(cfg->model.tokenizer, "byte"))
        return loom_fail("model.tokenizer: a Needle base needs Needle's tokenizer.model (SentencePiece); "
                         "set model.tokenizer=PATH/tokenizer.model");
    return 0;
}

/* The checkpoint's name of target t's adapter A (is_b 0) or B: the flax path past "block/", '/'
 * as '.', "kernel" dropped: "self_attn.q_proj.A". */
static void nf_name(int t, int is_b, char *buf, size_t cap)
{
    const char *path = needle_lora_path(t), *p = strstr(path, "block/");
    char base[96];
    snprintf(base, sizeof base, "%s", p ? p + 6 : path);
    char *k = strstr(base, "/kernel");
    if (k) *k = 0;
    for (char *c = base; *c; c++)
        if (*c == '/') *c = '.';
    snprintf(buf, cap, "%s.%s", base, is_b ? "B" : "A");
}

size_t finetune_needle_table(const needle_config *c, int rank, ckpt_tensor *table, char names[][128])
{
    needle_geometry g;
    needle_geometry_of(c, &g);
    size_t off = 0;
    for (int t = 0; t < NEEDLE_LORA_TARGETS; t++) {
        int in, out;
        needle_lora_dims(&g, c->d_model, t, &in, &out);
        for (int ab = 0; ab < 2; ab++) {
            nf_name(t, ab, names[2 * t + ab], 128);
            table[2 * t + ab] = (ckpt_tensor){names[2 * t + ab], 3, {c->num_layers, ab ? rank : in, ab ? out : rank}, off};
            off += (size_t)c->num_layers * (ab ? (size_t)rank * out : (size_t)in * rank);
        }
    }
    return off;
}

/* The adapters' state to or from host arrays in the table's layout (A, B, or a moment). which:
 * 0 the adapters, 1 the first moments, 2 the second. */
static int nf_state(nf *t, int which, int set, float *host)
{
    for (int i = 0; i < t->nad; i++) {
        float *a = host + t->table[2 * i].offset, *b = host + t->table[2 * i + 1].offset;
        float *p[6] = {0};
        p[which == 0 ? 0 : which == 1 ? 2 : 3] = a;
        p[which == 0 ? 1 : which == 1 ? 4 : 5] = b;
        if (needle_net_lora_state(t->net, needle_lora_path(i), set, p[0], p[1], p[2], p[3], p[4], p[5])) return -1;
    }
    return 0;
}

/* The rows of data.train as Needle renders them, for base config nc (its vocabulary and length);
 * train.steps (session_finetune_steps). */
static int nf_load_data(nf *t, const needle_config *nc)
{
    job_config *cfg = &t->cfg;
    if (!(t->tok = tokenizer_open(cfg->model.tokenizer))) return -1;
    if (cfg->data.pack)
        log_info("data.pack: not for Needle bases yet: each step runs its rows padded to the batch's longest");
    if (tokenizer_vocab(t->tok) > nc->vocab_size)
        return loom_fail("%s: the tokenizer has %d ids, the Needle base %s only %d (config vocab_size)",
                         cfg->model.tokenizer, tokenizer_vocab(t->tok), cfg->finetune.base, nc->vocab_size);
    data_config dc = cfg->data;
    if (dc.max_len > nc->max_seq_len) dc.max_len = nc->max_seq_len;
    if (chat_template_init(&t->chat, t->tok, "needle") || sft_data_load(&t->sft, &dc, &t->chat, cfg->train.seed))
        return -1;
    t->T = t->sft.T;
    if (sft_data_batching(&t->sft, cfg->train.batch_size, dc.bucket, cfg->train.seed)) return -1;
    t->Tpass = sft_pass_len(&t->sft);
    t->steps_per_epoch = sft_steps_per_epoch(&t->sft, cfg->train.batch_size);
    if (session_finetune_steps(cfg, t->steps_per_epoch)) return -1;
    /* the held-out evaluation decodes at most eval.batch (64) rows together, at most its examples:
     * eval.batch clipped to what it runs, so that the plan counts those (plan.c) */
    const int nsel = cfg->eval.max_examples > 0 && cfg->eval.max_examples < t->sft.val.n ? cfg->eval.max_examples : t->sft.val.n;
    cfg->eval.batch = cfg->eval.batch < 1 ? 1 : cfg->eval.batch > 64 ? 64 : cfg->eval.batch;
    if (nsel > 0 && cfg->eval.batch > nsel) cfg->eval.batch = nsel;
    log_info("data %s: %d train / %d val examples, rows of %s%d tokens (longest %d, %d truncated), "
             "%ld steps per epoch", dc.train, t->sft.train.n, t->sft.val.n, dc.bucket ? "at most " : "", t->T,
             t->sft.longest, t->sft.n_truncated, t->steps_per_epoch);
    if (t->sft.bad.count)
        log_warn("%s: skipped %d bad line(s) (data.skip_bad_lines); first: %s", dc.train, t->sft.bad.count,
                 t->sft.bad.first);
    return 0;
}

int finetune_needle_seq_len(job_config *cfg, int *T)
{
    *T = 0;
    needle_file *f = nf_check_config(cfg) ? NULL : needle_open(cfg->finetune.base);
    nf *t = f ? calloc(1, sizeof *t) : NULL;
    if (f && !t) loom_fail("finetune: out of host memory");
    int rc = -1;
    if (t) {
        t->cfg = *cfg;
        rc = session_resolve_date(&t->cfg, NULL) ? -1 : nf_load_data(t, needle_file_config(f));
        *T = t->Tpass;
        cfg->eval.batch = t->cfg.eval.batch;
        if (t->tok) sft_data_free(&t->sft);
        tokenizer_free(t->tok);
        free(t);
    }
    needle_close(f);
    return rc;
}

/* needle_net_grad's weights from sft's targets: position i's loss counts where targets[i] >= 0,
 * which the net reads as weights[i + 1]. */
static void nf_weights(nf *t, int rows, int T)
{
    for (int b = 0; b < rows; b++)
        for (int i = 0; i < T; i++) {
            size_t r = (size_t)b * T + i;
            if (i == 0) t->weights[r] = 0.0f;
            if (i + 1 < T) t->weights[r + 1] = t->targets[r] >= 0;
        }
}

/* --- checkpoints --- */

static void nf_job_json_state(const nf *t, ckpt_state *st)
{
    const train_config *tc = &t->cfg.train;
    st->step = t->step;
    st->sample_cursor = t->step * (int64_t)tc->batch_size;
    st->tokens_seen = st->sample_cursor * t->T;
    st->seed = tc->seed;
    st->rng_counter = (uint64_t)st->sample_cursor;
    st->adam_step = t->adam_count;
    st->base_digest = t->base_digest;
    st->tokenizer_hash = t->tok_hash;
    st->lr = optim_lr(tc, (int)(t->step > 0 ? t->step - 1 : 0));
    st->world_size = t->c->size;
    st->zero_stage = t->cfg.parallel.zero_stage;
    st->backend = backend_name(t->be);
}

static int nf_save(nf *t)
{
    int rc = 0;
    if (t->c->rank == 0) {
        float *host = malloc(3 * t->state_elems * sizeof(float));
        char *job = config_to_json(&t->cfg), *model = needle_config_json(needle_net_config(t->net));
        rc = !host || !job || !model ? loom_fail("checkpoint: out of host memory") : 0;
        for (int w = 0; rc == 0 && w < 3; w++) rc = nf_state(t, w, 0, host + w * t->state_elems);
        if (rc == 0) {
            ckpt_group g[3] = {{"lora", t->table, 2 * t->nad, host, NULL, NULL},
                               {"optimizer/lora_m", t->table, 2 * t->nad, host + t->state_elems, NULL, NULL},
                               {"optimizer/lora_v", t->table, 2 * t->nad, host + 2 * t->state_elems, NULL, NULL}};
            ckpt_state st = {0};
            nf_job_json_state(t, &st);
            st.model_config_json = model;
            st.job_config_json = job;
            rc = ckpt_save(t->ckpt_dir, &st, g, 3, t->cfg.checkpoint.keep);
            if (rc == 0) log_info("checkpoint: step %lld saved in %s", (long long)t->step, t->ckpt_dir);
        }
        free(host), free(job), free(model);
        if (rc) log_warn("checkpoint: %s", loom_error());
    }
    int failed = comm_agree_failure(t->c, rc != 0); /* every rank learns whether rank 0's write worked */
    if (failed < 0) return -1;
    if (failed > 0 && rc == 0) return loom_fail("checkpoint: the save failed on rank 0");
    return failed > 0 ? -1 : 0;
}

static int nf_maybe_save(nf *t, int final)
{
    int every = t->cfg.checkpoint.every;
    int due = final ? every >= 0 : every > 0 && t->step % every == 0 && t->step < t->cfg.train.steps;
    if (!due || nf_save(t) == 0) return 0;
    if (final)
        return loom_fail("checkpoint: the last save (step %lld) failed, the end state is not saved: %s",
                         (long long)t->step, loom_error());
    if (strcmp(t->cfg.checkpoint.on_error, "continue") == 0) {
        log_warn("checkpoint failed, training continues (checkpoint.on_error): %s", loom_error());
        return 0;
    }
    return -1;
}

/* What a resume must agree on beyond resume_check_job's fields: the adapters' shape and scale,
 * the numerics, the base; an evaluation (train 0) only the adapters' shape and the base. */
static int nf_check_saved(const nf *t, const char *file, const ckpt_state *st, int train)
{
    job_config saved;
    if (config_load_string(&saved, st->job_config_json, file, NULL, 0))
        return loom_fail("%s: attribute job_config is unreadable: %s", file, loom_error());
    const finetune_config *a = &saved.finetune, *b = &t->cfg.finetune;
    if (a->lora_rank != b->lora_rank || a->lora_alpha != b->lora_alpha)
        return loom_fail("%s: adapters of rank %d alpha %g, the job asks rank %d alpha %g (finetune.lora_rank, "
                         "finetune.lora_alpha)", file, a->lora_rank, a->lora_alpha, b->lora_rank, b->lora_alpha);
    if (saved.model.layers != t->cfg.model.layers)
        return loom_fail("%s: adapters of the ladder rung model.layers=%d, the job has model.layers=%d "
                         "(0: the base's full depth)", file, saved.model.layers, t->cfg.model.layers);
    if (train && a->qat != b->qat)
        return loom_fail("%s: trained with finetune.qat=%s, the job has %s: the resumed steps would differ",
                         file, a->qat ? "true" : "false", b->qat ? "true" : "false");
    if (st->base_digest != t->base_digest && !b->allow_other_base)
        return loom_fail("%s: the adapters were trained on another base than %s (digest %016llx, this file "
                         "%016llx); finetune.allow_other_base=true resumes anyway", file, b->base,
                         (unsigned long long)st->base_digest, (unsigned long long)t->base_digest);
    if (st->sample_cursor != st->step * (int64_t)saved.train.batch_size || st->adam_step > st->step)
        return loom_fail("%s: attributes step %lld, sample_cursor %lld, adam_step %lld disagree", file,
                         (long long)st->step, (long long)st->sample_cursor, (long long)st->adam_step);
    if (st->adam_step > INT32_MAX - 1) return loom_fail("%s: attribute adam_step %lld out of range", file, (long long)st->adam_step);
    if (!train) return 0; /* an evaluation reads the adapters under any schedule and numerics */
    return resume_check_job(&t->cfg, file, st->job_config_json) ||
                   resume_check_tokenizer(file, st->tokenizer_hash, saved.model.tokenizer, t->cfg.model.tokenizer)
               ? -1 : 0;
}

static int nf_resume(nf *t, const char *path, int train)
{
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    ckpt_state st = {0};
    float *host = malloc(3 * t->state_elems * sizeof(float));
    int rc = !host ? loom_fail("resume: out of host memory") : ckpt_read_state(r, &st);
    if (rc == 0 && !ckpt_has_group(r, "optimizer/lora_v"))
        rc = loom_fail("%s: no group lora / optimizer/lora_*: not a Needle fine-tune's checkpoint", file);
    if (rc == 0) rc = nf_check_saved(t, file, &st, train);
    const char *groups[3] = {"lora", "optimizer/lora_m", "optimizer/lora_v"};
    for (int w = 0; rc == 0 && w < 3; w++) {
        ckpt_group g = {groups[w], t->table, 2 * t->nad, host + w * t->state_elems, NULL, NULL};
        rc = ckpt_read_group(r, &g);
    }
    for (int w = 0; rc == 0 && w < 3; w++) rc = nf_state(t, w, 1, host + w * t->state_elems);
    if (rc == 0) {
        t->step = st.step;
        t->adam_count = (int)st.adam_step;
        char of[32] = ""; /* the run's length is known to a training job only */
        if (train) snprintf(of, sizeof of, " of %d", t->cfg.train.steps);
        log_info("%s %s: step %lld%s, AdamW step %d, saved by %d rank%s on %s", train ? "resumed" : "loaded", file,
                 (long long)st.step, of, t->adam_count, st.world_size, st.world_size == 1 ? "" : "s",
                 st.backend ? st.backend : "?");
    }
    free(host);
    ckpt_state_free(&st);
    ckpt_close(r);
    return rc;
}

/* --- the loop --- */

/* The adapters' gradients summed over ranks (in double; the host carries them, whatever the
 * backend's memory: a transport for device pointers is not needed for a few MB). */
static int nf_reduce_grads(nf *t)
{
    if (t->c->size == 1) return 0;
    size_t off = 0;
    float *f = t->gflt;
    for (int i = 0; i < t->ngbuf; i++) {
        backend_copy_d2h(t->be, f + off, t->gbuf[i], t->gcount[i] * sizeof(float));
        off += t->gcount[i];
    }
    for (size_t e = 0; e < off; e++) t->gsum[e] = f[e];
    for (size_t lo = 0; lo < off; lo += 1u << 28) {
        size_t n = off - lo < (1u << 28) ? off - lo : 1u << 28;
        if (comm_allreduce_host(t->c, t->gsum + lo, (int)n)) return -1;
    }
    for (size_t e = 0; e < off; e++) f[e] = (float)t->gsum[e];
    off = 0;
    for (int i = 0; i < t->ngbuf; i++) {
        backend_copy_h2d(t->be, t->gbuf[i], f + off, t->gcount[i] * sizeof(float));
        off += t->gcount[i];
    }
    return 0;
}

/* One optimizer step: 0 done, 1 skipped (non-finite), -1 error. */
static int nf_step(nf *t, int step, double *loss, double *norm, float *lr, double *tokens, double *flops)
{
    const train_config *tc = &t->cfg.train;
    const int W = t->c->size, r = t->c->rank;
    const uint64_t first = (uint64_t)step * tc->batch_size;
    const int T = sft_batch_len(&t->sft, tc->seed, 0, first, tc->batch_size);
    const double denom = (double)sft_batch_loss_tokens(&t->sft, tc->seed, 0, first, tc->batch_size, T);
    double stats[2 + INTERRUPT_SLOTS] = {0, 0}; /* loss, real tokens, the stop agreement */
    for (int k = 0; k < t->accum; k++) {
        uint64_t g = first + ((uint64_t)k * W + r) * t->mb;
        sft_batch(&t->sft, tc->seed, 0, g, t->mb, T, t->tokens, t->targets);
        for (size_t i = 0; i < (size_t)t->mb * T; i++) stats[1] += t->tokens[i] != t->chat.pad;
        nf_weights(t, t->mb, T);
        double l = 0;
        if (needle_net_grad(t->net, t->tokens, t->weights, t->mb, T, denom > 0 ? denom : 1.0, k > 0, &l)) return -1;
        stats[0] += l;
    }
    interrupt_put(t->stop, stats + 2);
    if (nf_reduce_grads(t) || comm_allreduce_host(t->c, stats, 2 + INTERRUPT_SLOTS)) return -1;
    t->stopped = interrupt_agreed(stats + 2);
    *loss = stats[0], *tokens = stats[1];
    /* every rank its rows and its own merge and adapter gradients (docs/needle.md section 7) */
    *flops = needle_net_step_flops(t->net, t->mb * t->accum, T) * W;
    *lr = optim_lr(tc, step);
    if (!isfinite(*loss)) {
        *norm = NAN;
        return 1;
    }
    needle_adamw o = {*lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->grad_clip, 1.0f, t->adam_count + 1};
    int rc = needle_net_step(t->net, &o, norm);
    if (rc == 0) t->adam_count++;
    return rc;
}

/* The validation loss over every held-out row: each rank its share of micro-batches, the sums
 * and counts added over ranks. */
static int nf_validate(nf *t, double *val)
{
    const int n = t->sft.val.n, W = t->c->size;
    double s[2] = {0, 0};
    for (int first = t->c->rank * t->mb; first < n; first += W * t->mb) {
        int T = sft_val_batch_len(&t->sft, first, t->mb);
        long cnt = sft_val_batch(&t->sft, first, t->mb, T, t->tokens, t->targets);
        nf_weights(t, t->mb, T);
        double l = 0;
        if (cnt > 0 && needle_net_loss(t->net, t->tokens, t->weights, t->mb, T, 1.0, &l)) return -1;
        s[0] += l, s[1] += (double)cnt;
    }
    if (comm_allreduce_host(t->c, s, 2)) return -1;
    *val = s[1] > 0 ? s[0] / s[1] : NAN;
    return 0;
}

/* Tool-call accuracy of the held-out examples (eval.max_examples of them, each rank a share) as
 * Needle scores a fine-tune (ft:345-384, _score_quantised): greedy decoding of up to 96 tokens on
 * the merged adapters with W4 weights and float activations (under QAT the training net with A8
 * off; after a float fine-tune a W4 net of its own),
 * Needle's exact-call figure (no call block = the answer []) beside loom's exact and names. */
static int nf_accuracy(nf *t, const char *what, eval_result *res)
{
    const double t0 = nf_now();
    const sft_set *v = &t->sft.val;
    const int T = t->sft.T, W = t->c->size, B = t->cfg.eval.batch; /* clipped to [1, 64] (nf_load_data) */
    const int maxlen = needle_net_config(t->net)->max_seq_len, cap = t->Tpass + FINETUNE_NEEDLE_EVAL_NEW; /* prompts <= Tpass */
    int *sel = malloc((size_t)(v->n > 0 ? v->n : 1) * sizeof(int));
    int32_t *rows = malloc((size_t)B * cap * sizeof(int32_t));
    int *lens = malloc((size_t)B * sizeof(int) * 3), *max_new = lens + B, *made = lens + 2 * B;
    char *text = malloc((size_t)cap * 16 + 16);
    /* a QAT net's weights are W4 already: it decodes with A8 off (needle_net_set_a8); a float one's
     * are not, so a W4 net of its own takes its adapters */
    const int own = !t->cfg.finetune.qat;
    needle_net *e = own ? NULL : t->net;
    int rc = !sel || !rows || !lens || !text ? loom_fail("eval: out of host memory") : 0;
    if (rc == 0 && own && !(e = needle_net_open(t->be, t->cfg.finetune.base, t->cfg.model.layers, NULL, NEEDLE_NUM_W4))) rc = -1;
    if (rc == 0 && own) rc = needle_net_lora_init(e, t->rank, t->cfg.finetune.lora_alpha, t->cfg.train.seed);
    float *ab = rc == 0 && own ? malloc(t->state_elems * sizeof(float)) : NULL;
    if (rc == 0 && own && !ab) rc = loom_fail("eval: out of host memory");
    for (int i = 0; rc == 0 && own && i < t->nad; i++) {
        float *a = ab + t->table[2 * i].offset, *b = ab + t->table[2 * i + 1].offset;
        rc = needle_net_lora_state(t->net, needle_lora_path(i), 0, a, b, NULL, NULL, NULL, NULL) ||
                     needle_net_lora_state(e, needle_lora_path(i), 1, a, b, NULL, NULL, NULL, NULL) ? -1 : 0;
    }
    free(ab);
    if (!own) needle_net_set_a8(e, 0);
    double s[7] = {0}; /* exact, names, Needle's exact call, examples, tokens, answer [], no call block */
    const int nsel = rc == 0 ? evaluate_select(v->n, t->cfg.eval.max_examples, sel) : 0;
    int mine[64], nm = 0;
    for (int k = t->c->rank; rc == 0 && k < nsel; k += W) {
        mine[nm++] = sel[k];
        if (nm < B && nm < 64 && k + W < nsel) continue;
        for (int j = 0; j < nm; j++) {
            const int i = mine[j], plen = v->prompt_len[i] < T ? v->prompt_len[i] : T;
            memcpy(rows + (size_t)j * cap, v->tokens + (size_t)i * T, (size_t)plen * sizeof(int32_t));
            lens[j] = plen;
            max_new[j] = v->prompt_len[i] >= T || plen >= maxlen ? 0
                         : FINETUNE_NEEDLE_EVAL_NEW < maxlen - plen ? FINETUNE_NEEDLE_EVAL_NEW : maxlen - plen;
        }
        rc = needle_net_generate(e, rows, nm, cap, lens, max_new, t->chat.eot, made);
        for (int j = 0; rc == 0 && j < nm; j++) {
            const sft_example *ex = &v->ex[mine[j]];
            int got = toolcall_extract(&t->chat, rows + (size_t)j * cap + lens[j], made[j], text, (size_t)cap * 16 + 16);
            s[2] += toolcall_needle_match(got < 0 ? NULL : text, ex->answers_json);
            s[4] += made[j], s[5] += toolcall_needle_match(NULL, ex->answers_json), s[6] += got < 0;
            if (got >= 0) {
                toolcall_grade g = toolcall_grade_text(text, ex->answers);
                s[0] += g.exact, s[1] += g.names;
            }
            s[3]++;
        }
        nm = 0;
    }
    if (own) needle_net_close(e);
    else needle_net_set_a8(e, 1);
    free(sel), free(rows), free(lens), free(text);
    double failed = rc != 0;
    if (comm_allreduce_host(t->c, &failed, 1) || (failed > 0 && rc == 0 && loom_fail("eval: failed on another rank")))
        return -1;
    if (rc || comm_allreduce_host(t->c, s, 7)) return -1;
    const double k = s[3] > 0 ? 1.0 / s[3] : NAN;
    *res = (eval_result){s[0] * k, s[1] * k, s[2] * k, s[5] * k, s[6] * k, (int)s[3], (long)s[4], nf_now() - t0};
    if (t->c->rank == 0)
        log_info("eval %s: %d held-out examples, greedy on W4 weights as Needle scores: Needle's exact-call %.1f%%, "
                 "loom's exact %.1f%%, right names %.1f%% (%.1f s)",
                 what, res->examples, 100.0 * res->needle, 100.0 * res->accuracy, 100.0 * res->names, res->seconds);
    return 0;
}

static int nf_loop(nf *t, train_report *rep, const train_options *opt)
{
    const train_config *tc = &t->cfg.train;
    int bad_in_row = 0;
    for (int step = (int)t->step; step < tc->steps; step++) {
        fault_at_step(&t->fault, t->c->rank, step + 1);
        double t0 = nf_now(), loss = 0, norm = 0, tokens = 0, flops = 0;
        float lr = 0;
        int st = nf_step(t, step, &loss, &norm, &lr, &tokens, &flops);
        if (st < 0) return -1;
        const char *broken = backend_failure(t->be);
        if (broken) return loom_fail("finetune: step %d: %s", step + 1, broken);
        if (metrics_bad_step(st, step + 1, loss, norm, tc->max_bad_steps, &bad_in_row, &rep->bad_steps)) return -1;
        t->step = step + 1;
        if (opt && opt->losses_out && step < opt->losses_cap) opt->losses_out[step] = loss;
        metrics_step(t->log, backend_peak_flops(t->be) * t->c->size, step + 1, loss, lr, norm, tokens, flops, nf_now() - t0);
        rep->last_loss = loss;
        rep->steps_done = step + 1;
        if (t->sft.val.n && (t->step % t->steps_per_epoch == 0 || t->step == tc->steps)) {
            double val;
            if (nf_validate(t, &val)) return -1;
            metrics_val(t->log, (int)t->step, val);
            rep->val_loss = val;
        }
        /* a signal on any rank: this step's state saved whatever checkpoint.every says, then out */
        if (nf_maybe_save(t, t->stopped != 0)) return -1;
        if (t->stopped) {
            rep->stopped = t->stopped;
            return 0;
        }
    }
    return nf_maybe_save(t, 1);
}

/* The backend, the net (numerics qat) and a fresh adapter on each target: what training, evaluation
 * and sampling share. data 1 also loads the data (nf_load_data); 2 (training) also checks the job
 * fits the device (plan_check, before the net allocates anything) and starts its peak memory's
 * count (plan_log_peak). */
static int nf_open_net(nf *t, const job_config *cfg, comm *c, int qat, int data)
{
    t->cfg = *cfg;
    t->c = c;
    t->lock_fd = -1;
    fault_setup(&t->fault);
    if (nf_check_config(cfg)) return -1;
    needle_file *f = needle_open(cfg->finetune.base);
    if (!f) return -1;
    t->base_digest = needle_file_digest(f);
    int rc = data ? nf_load_data(t, needle_file_config(f)) : 0;
    needle_close(f);
    if (rc) return -1;
    if (tokenizer_hash_of(cfg->model.tokenizer, &t->tok_hash)) t->tok_hash = 0;
    if (!(t->be = session_backend_open(&t->cfg, c))) return -1;
    if (data == 2) {
        size_t peak;
        if (plan_check(&t->cfg, c, t->be, t->Tpass, 1)) return -1;
        plan_reset_peak();
        plan_rss(&t->rss_before, &peak);
    }
    if (!(t->net = needle_net_open(t->be, cfg->finetune.base, cfg->model.layers, NULL, qat))) return -1;
    t->L = needle_net_config(t->net)->num_layers;
    needle_net_set_recompute(t->net, cfg->train.recompute);
    if (needle_net_lora_init(t->net, cfg->finetune.lora_rank, cfg->finetune.lora_alpha, cfg->train.seed)) return -1;
    t->nad = NEEDLE_LORA_TARGETS; /* lora_init puts one on each */
    needle_net_lora_info(t->net, 0, NULL, NULL, &t->rank, &t->scale);
    t->state_elems = finetune_needle_table(needle_net_config(t->net), t->rank, t->table, t->names);
    return 0;
}

/* train 0 (loom eval): no checkpoint lock, no metrics, nothing written. */
static int nf_open(nf *t, const job_config *cfg, comm *c, const train_options *opt, int train)
{
    if (nf_open_net(t, cfg, c, cfg->finetune.qat ? NEEDLE_NUM_QAT : 0, train ? 2 : 1)) return -1;
    const train_config *tc = &t->cfg.train;
    t->mb = tc->micro_batch > 0 ? tc->micro_batch : tc->batch_size / c->size;
    if (t->mb < 1 || tc->batch_size % (t->mb * c->size) != 0)
        return loom_fail("train.batch_size %d must be a multiple of micro_batch (%d) x ranks (%d)", tc->batch_size,
                         t->mb, c->size);
    t->accum = tc->batch_size / (t->mb * c->size);
    size_t n = (size_t)t->mb * t->T;
    t->tokens = malloc(n * sizeof(int32_t)), t->targets = malloc(n * sizeof(int32_t));
    t->weights = malloc(n * sizeof(float));
    t->gsum = malloc(t->state_elems * sizeof(double)), t->gflt = malloc(t->state_elems * sizeof(float));
    if (!t->tokens || !t->targets || !t->weights || !t->gsum || !t->gflt) return loom_fail("finetune: out of host memory");
    if ((t->ngbuf = needle_net_lora_grad_buffers(t->net, t->gbuf, t->gcount, 2 * NEEDLE_LORA_TARGETS)) < 0) return -1;
    const needle_config *nc = needle_net_config(t->net);
    log_info("model needle (%s): %d layers%s, d_model %d, vocab %d; LoRA rank %d alpha %g (scale %g) on q/k/v/gate/out_proj: "
             "%zu trainable parameters; numerics %s; %d rank%s, micro-batch %d x %d", cfg->finetune.base, nc->num_layers,
             cfg->model.layers ? " (its ladder rung, model.layers)" : "", nc->d_model, nc->vocab_size, t->rank, cfg->finetune.lora_alpha, t->scale, t->state_elems,
             cfg->finetune.qat ? "Needle's QAT (W4 STE of the merged weights, A8, KV8; finetune.qat)" : "float32",
             c->size, c->size == 1 ? "" : "s", t->mb, t->T);
    if (cfg->parallel.zero_stage > 0 && c->size > 1)
        log_info("parallel.zero_stage %d: nothing to shard, a Needle base's trainable state (adapters, gradients, "
                 "moments: %.1f MB) is replicated on every rank and the frozen base mapped from its file",
                 cfg->parallel.zero_stage, 4.0 * 4.0 * (double)t->state_elems / 1e6);
    session_out_dir(cfg, t->out_dir, sizeof t->out_dir);
    session_ckpt_dir_of(cfg, t->out_dir, t->ckpt_dir, sizeof t->ckpt_dir);
    const int resume = opt && opt->resume && opt->resume[0];
    if (resume && nf_resume(t, opt->resume, train)) return -1;
    if (!train) return 0;
    t->stop = opt ? opt->stop : NULL;
    if (c->rank == 0 && session_mkdirs(t->out_dir)) return -1;
    if (session_lock_dir(c, cfg, t->ckpt_dir, &t->lock_fd)) return -1;
    if (!resume && session_claim_run(c, t->out_dir, t->ckpt_dir, opt && opt->overwrite)) return -1;
    t->log = metrics_open(&t->cfg, c->rank, opt && opt->quiet, resume ? (long)t->step : -1);
    backend_peak_flops(t->be); /* the MFU reference is measured now, not inside step 1 */
    return t->log ? 0 : -1;
}

static void nf_close(nf *t)
{
    metrics_close(t->log);
    ckpt_unlock(t->lock_fd);
    free(t->tokens), free(t->targets), free(t->weights), free(t->gsum), free(t->gflt);
    if (t->tok) sft_data_free(&t->sft);
    tokenizer_free(t->tok);
    needle_net_close(t->net);
    backend_destroy(t->be);
}

int finetune_needle_run(const job_config *cfg, comm *c, const train_options *opt, train_report *report)
{
    nf *t = calloc(1, sizeof *t);
    if (!t) return loom_fail("finetune: out of host memory");
    train_report rep = {0};
    rep.val_loss = rep.accuracy = rep.base_accuracy = rep.names = rep.base_names = NAN;
    int rc = nf_open(t, cfg, c, opt, 1);
    const int eval = rc == 0 && opt && opt->eval_accuracy && t->sft.val.n > 0;
    eval_result ev;
    if (eval && cfg->finetune.eval_base && !(opt->resume && opt->resume[0]) &&
        (rc = nf_accuracy(t, "base model", &ev)) == 0)
        rep.base_accuracy = ev.accuracy, rep.base_names = ev.names, rep.base_eval_s = ev.seconds;
    if (rc == 0) rc = nf_loop(t, &rep, opt);
    rep.total_steps = t->cfg.train.steps;
    if (rc == 0 && eval && !rep.stopped && (rc = nf_accuracy(t, "fine-tuned", &ev)) == 0)
        rep.accuracy = ev.accuracy, rep.names = ev.names, rep.eval_s = ev.seconds, rep.eval_examples = ev.examples;
    if (t->log) metrics_summary(t->log, &rep.tokens_per_s, &rep.mfu);
    if (t->net) needle_net_bytes(t->net, &rep.state_bytes, &rep.activation_bytes); /* the frozen base included */
    if (rc == 0) plan_log_peak(&t->cfg, c, t->be, t->Tpass, 1, t->rss_before);
    if (report) *report = rep;
    nf_close(t);
    free(t);
    return rc;
}

int finetune_needle_eval(const job_config *cfg, comm *c, const char *ckpt, double *val_loss, eval_result *res)
{
    nf *t = calloc(1, sizeof *t);
    if (!t) return loom_fail("eval: out of host memory");
    train_options opt = {.resume = ckpt};
    int rc = nf_open(t, cfg, c, &opt, 0);
    *val_loss = NAN;
    memset(res, 0, sizeof *res);
    res->accuracy = res->names = res->needle = res->empty = res->no_call = NAN;
    if (rc == 0 && t->sft.val.n == 0) rc = loom_fail("%s: no held-out examples to evaluate (data.val, data.val_split)", cfg->data.train);
    if (rc == 0) rc = nf_validate(t, val_loss);
    if (rc == 0) rc = nf_accuracy(t, ckpt && ckpt[0] ? "checkpoint" : "base model", res);
    nf_close(t);
    free(t);
    return rc;
}

/* --- loom sample --- */

typedef struct nf_pick {
    float temperature;
    int top_k, V;          /* the tokenizer's ids: never a padded vocabulary row */
    uint64_t seed;
    int n;                 /* the prompt's length: a token's position is n + k */
} nf_pick;

static int32_t nf_pick_token(void *ctx, int b, int k, const float *logits, int V)
{
    const nf_pick *p = ctx;
    return evaluate_pick(logits, p->V < V ? p->V : V, p->temperature, p->top_k, p->seed + (uint64_t)b,
                         (uint64_t)(p->n + k));
}

int finetune_needle_sample(const job_config *cfg, comm *c, const char *ckpt, const chat_template *ct,
                           const int32_t *prompt, int n, int R, int max_new, float temperature, int top_k,
                           uint64_t seed, int32_t *out, int *made)
{
    nf *t = calloc(1, sizeof *t);
    if (!t) return loom_fail("sample: out of host memory");
    int rc = nf_open_net(t, cfg, c, cfg->finetune.qat ? NEEDLE_NUM_W4 : 0, 0);
    if (rc == 0 && ckpt && ckpt[0]) rc = nf_resume(t, ckpt, 0);
    const int maxlen = rc == 0 ? needle_net_config(t->net)->max_seq_len : 0;
    if (rc == 0 && n >= maxlen) rc = loom_fail("sample: a prompt of %d tokens leaves no room in the model's %d", n, maxlen);
    const int cap = n + max_new < maxlen ? n + max_new : maxlen;
    int32_t *rows = rc == 0 ? malloc((size_t)R * cap * sizeof(int32_t)) : NULL;
    int *lens = rc == 0 ? malloc((size_t)R * 2 * sizeof(int)) : NULL;
    if (rc == 0 && (!rows || !lens)) rc = loom_fail("sample: out of host memory");
    for (int r = 0; rc == 0 && r < R; r++) {
        memcpy(rows + (size_t)r * cap, prompt, (size_t)n * sizeof(int32_t));
        lens[r] = n, lens[R + r] = max_new;
    }
    nf_pick p = {temperature, top_k, tokenizer_vocab(ct->tok), seed, n};
    if (rc == 0) rc = needle_net_sample(t->net, rows, R, cap, lens, lens + R, ct->eot, nf_pick_token, &p, made);
    for (int r = 0; rc == 0 && r < R; r++)
        memcpy(out + (size_t)r * max_new, rows + (size_t)r * cap + n, (size_t)made[r] * sizeof(int32_t));
    free(rows), free(lens);
    nf_close(t);
    free(t);
    return rc;
}
