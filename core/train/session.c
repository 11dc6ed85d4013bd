/* session.c: the shared set-up of a job (see session.h): backend per rank, model, dp, optimizer,
 * checkpoint save and resume. Checkpoints hold full logical tensors, so the gather to rank 0 and
 * the scatter on load happen here through dp; ckpt.h never sees ranks. */
#include "core/train/session.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "core/text/text.h"
#include "core/train/plan.h"

int session_mkdirs(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return loom_fail("%s: cannot create folder: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return loom_fail("%s: cannot create folder: %s", buf, strerror(errno));
    return 0;
}

void session_out_dir(const job_config *cfg, char *dir, size_t len)
{
    if (cfg->out[0]) snprintf(dir, len, "%s", cfg->out);
    else snprintf(dir, len, "runs/%s", cfg->name);
}

/* Threads per rank: the configured number, else this node's cores split between its ranks. More
 * than the cores is clamped to them (threads beyond them only wait on each other: 64 on 2 cores,
 * under an address-space limit, spun without a step); more than the cores over the node's ranks
 * together is a warning. Both said once per node, by its first rank. */
static int session_threads(const job_config *cfg, const comm *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores > 0 ? cores : 1), ranks = c->local_size > 0 ? c->local_size : 1;
    int t = cfg->parallel.threads, say = c->local_rank == 0;
    if (t <= 0) return n / ranks > 0 ? n / ranks : 1;
    if (t > n) {
        if (say)
            log_warn("parallel.threads %d is more than this node's %d cores: using %d threads per rank", t, n, n);
        t = n;
    }
    if (t * ranks > n && say)
        log_warn("parallel.threads %d x %d ranks on this node = %d threads on %d cores: oversubscribed, steps run "
                 "slower (parallel.threads=%d fits, or 0 splits the cores)", t, ranks, t * ranks, n,
                 n / ranks > 0 ? n / ranks : 1);
    return t;
}

backend *session_backend_open(const job_config *cfg, const comm *c)
{
    backend_config bc = {0};
    bc.threads = session_threads(cfg, c);
    bc.device_index = c->local_rank;
    bc.precision = strcmp(cfg->precision, "bf16") == 0 ? BACKEND_BF16 : BACKEND_FP32;
    bc.allow_tf32 = strcmp(cfg->precision, "tf32") == 0;
    char why[256] = "";
    backend *be = backend_select(cfg->backend, &bc, why, sizeof why);
    if (!be) return NULL;
    /* what the backend computes (backend_cfg), and the asked precision when it is not that */
    const backend_config *got = backend_cfg(be);
    int same = got->precision == bc.precision && got->allow_tf32 == bc.allow_tf32;
    char asked[96] = "";
    if (!same)
        snprintf(asked, sizeof asked, "; precision %s asked: the %s backend computes fp32 here",
                 cfg->precision, backend_name(be));
    log_info("backend %s  %s  (%s%s)", backend_description(be),
             got->precision == BACKEND_BF16 ? "bf16 matmuls, fp32 master weights"
             : got->allow_tf32 ? "tf32 matmuls, fp32 storage" : "float32", why, asked);
    return be;
}

session *session_open(const job_config *cfg, comm *c, session_mode mode, int finetune, int T)
{
    int train = mode != SESSION_INFER;
    session *s = calloc(1, sizeof *s);
    if (!s) { loom_fail("out of host memory"); return NULL; }
    s->ckpt_lock_fd = -1;
    /* a Needle base never gets here (finetune_needle_base hands it over first) */
    if (cfg->model.layers) {
        free(s);
        loom_fail("model.layers (%d): a ladder rung of a Needle base, and finetune.base '%s' is not one (a "
                  "NAME.safetensors file or its `loom import`); other models take their depth from the base or "
                  "model.n_layer", cfg->model.layers, cfg->finetune.base);
        return NULL;
    }
    s->cfg = cfg;
    s->comm = c;
    s->mode = mode;
    s->finetune = finetune;
    s->seq_len = T;
    const train_config *tc = &cfg->train;
    s->micro_batch = tc->micro_batch > 0 ? tc->micro_batch : tc->batch_size / c->size;
    if (s->micro_batch < 1 || tc->batch_size % (s->micro_batch * c->size) != 0) {
        loom_fail("train.batch_size %d must be a multiple of micro_batch (%d) x ranks (%d)",
                  tc->batch_size, s->micro_batch, c->size);
        goto fail;
    }
    session_out_dir(cfg, s->out_dir, sizeof s->out_dir);
    if (c->rank == 0 && session_mkdirs(s->out_dir)) goto fail;
    /* what checkpoints record of the tokenizer; an unreadable one fails where it is opened */
    if (tokenizer_hash_of(cfg->model.tokenizer, &s->tok_hash)) s->tok_hash = 0;

    s->be = session_backend_open(cfg, c);
    if (!s->be) goto fail;
    if (train && plan_check(cfg, c, s->be, T, finetune)) goto fail; /* before a byte of the model */
    int stage = train ? cfg->parallel.zero_stage : 0, full_params, full_grads;
    dp_model_needs(stage, &full_params, &full_grads);
    lora_spec lora = {0};
    if (s->finetune && strcmp(cfg->finetune.method, "lora") == 0 &&
        lora_spec_from_config(&cfg->finetune, &cfg->model, &lora))
        goto fail;
    /* inference needs no training activations: it generates (and scores) through model_gen */
    int acts = train ? (tc->recompute ? MODEL_ACTS_RECOMPUTE : MODEL_ACTS_KEEP) : MODEL_ACTS_NONE;
    s->model = model_create(&cfg->model, s->be, s->micro_batch, T, full_params,
                            train && full_grads, acts, lora.rank ? &lora : NULL);
    if (!s->model) goto fail;
    s->dp = dp_create(c, s->be, s->model, stage, (size_t)(cfg->parallel.bucket_mb * 1024.0f * 1024.0f));
    if (!s->dp) goto fail;
    if (train) {
        int npieces;
        size_t state_elems;
        const optim_piece *pieces = dp_pieces(s->dp, &npieces, &state_elems);
        s->opt = optim_create(s->be, s->model, pieces, npieces, state_elems);
        if (!s->opt) goto fail;
    }
    size_t total = s->model->nparams + (s->model->lora.rank ? s->model->nbase_params : 0);
    size_t trainable = mode == SESSION_INFER ? 0 : s->model->nparams;
    log_info("model %s: %zu parameters (%.1fM), %zu trainable, %d layers, d_model %d, %.1f MFLOP/token, "
             "%d rank%s, micro-batch %d x %d", cfg->model.preset[0] ? cfg->model.preset : "custom",
             total, (double)total / 1e6, trainable, cfg->model.n_layer, cfg->model.d_model,
             model_flops_per_token(s->model, T) / 1e6, c->size, c->size == 1 ? "" : "s", s->micro_batch, T);
    if (s->model->lora.rank)
        log_info("LoRA rank %d alpha %g on %s: %zu trainable parameters, %zu frozen", s->model->lora.rank,
                 s->model->lora.alpha, cfg->finetune.lora_targets, s->model->nparams, s->model->nbase_params);
    return s;
fail:
    session_close(s);
    return NULL;
}

static int session_start(session *s, const char *resume)
{
    if (resume && resume[0]) return session_resume(s, resume);
    if ((s->finetune || s->init_from_base) && session_load_base(s)) return -1;
    if ((s->finetune && !s->model->lora.rank) || s->init_from_base) return 0; /* the base is the start */
    /* In windows of at most 4M floats: a whole host copy of the parameters would add their
     * size to the job's peak memory (500 MB for GPT-2 124M) for the sake of one copy. */
    size_t n = s->model->nparams, win = n < ((size_t)1 << 22) ? n : (size_t)1 << 22;
    float *host = malloc((win ? win : 1) * sizeof(float));
    if (!host) return loom_fail("out of host memory for %zu parameters", win);
    int rc = 0;
    for (size_t lo = 0; rc == 0 && lo < n; lo += win) {
        size_t hi = lo + win < n ? lo + win : n;
        rc = model_init_range(s->model, s->cfg->train.seed, host, lo, hi);
        if (rc == 0) rc = dp_load_params_range(s->dp, host, lo, hi);
    }
    free(host);
    return rc;
}

int session_init_or_resume(session *s, const char *resume)
{
    /* The folder lock once the start state is in: a refused resume leaves no folder behind. */
    if (session_start(s, resume)) return -1;
    if (s->mode != SESSION_TRAIN) return 0;
    if (session_lock_ckpt_dir(s)) return -1; /* another job writing there is named first */
    if (resume && resume[0]) return 0;        /* a resume continues the run its folder holds */
    char ckpt_dir[600];
    session_ckpt_dir_of(s->cfg, s->out_dir, ckpt_dir, sizeof ckpt_dir);
    return session_claim_run(s->comm, s->out_dir, ckpt_dir, s->overwrite);
}

void session_close(session *s)
{
    if (!s) return;
    session_unlock_ckpt_dir(s);
    optim_destroy(s->opt);
    dp_destroy(s->dp);
    model_destroy(s->model);
    backend_destroy(s->be);
    free(s);
}

int session_finetune_steps(job_config *cfg, long steps_per_epoch)
{
    if (config_named(cfg, "train.steps")) {
        log_info("train.steps %d (set by the job) decides the fine-tune's length: %.2f epochs of %ld steps%s",
                 cfg->train.steps, (double)cfg->train.steps / (double)(steps_per_epoch > 0 ? steps_per_epoch : 1),
                 steps_per_epoch, config_named(cfg, "finetune.epochs") ? " (finetune.epochs is not used)" : "");
        return 0;
    }
    const long steps = steps_per_epoch * cfg->finetune.epochs;
    if (steps < 1 || steps > INT_MAX)
        return loom_fail("finetune.epochs %d of %ld steps: %ld steps (set train.steps instead)", cfg->finetune.epochs,
                         steps_per_epoch, steps);
    cfg->train.steps = (int)steps;
    return 0;
}
