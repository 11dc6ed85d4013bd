/* session_ckpt.c: checkpoint save and resume for a session. Shards are gathered into full logical
 * host tensors (dp), rank 0 writes them through ckpt.h, and every rank agrees on the outcome;
 * on resume every rank reads the file, checks its state against itself and the job, and keeps
 * the slices it owns, whatever the world size or ZeRO stage was at save. */
#include "core/train/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/hf.h"
#include "base/error.h"
#include "base/log.h"
#include "core/train/fault.h"
#include "core/train/resume_check.h"
#include "core/text/text.h"

ckpt_tensor *session_ckpt_table_of(const model_tensor *mt, int n)
{
    ckpt_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        t[i].name = mt[i].name;
        t[i].ndim = mt[i].ndim;
        t[i].shape[0] = mt[i].shape[0];
        t[i].shape[1] = mt[i].shape[1];
        t[i].offset = mt[i].offset;
    }
    return t;
}

static ckpt_tensor *session_ckpt_table(const model *m)
{
    return session_ckpt_table_of(m->tensors, m->ntensors);
}

/* The trainable array's group: the whole model, or the adapters of a LoRA fine-tune. */
static const char *session_param_group(const session *s)
{
    return s->model->lora.rank ? "lora" : "model";
}

void session_ckpt_dir_of(const job_config *cfg, const char *out_dir, char *dir, size_t len)
{
    if (cfg->checkpoint.dir[0]) snprintf(dir, len, "%s", cfg->checkpoint.dir);
    else snprintf(dir, len, "%s/ckpt", out_dir);
}

static void session_ckpt_dir(const session *s, char *dir, size_t len)
{
    session_ckpt_dir_of(s->cfg, s->out_dir, dir, len);
}

/* The save streams region by region: every rank walks the same (group, tensor) sequence and
 * gathers a region when the walk enters it (collective where the array is sharded); rank 0 hands
 * each tensor to the writer straight from the region buffer. Host memory is one region (a layer,
 * or the embeddings) instead of a copy of params + moments. */
typedef struct {
    session *s;
    float *buf;      /* rank 0: the current region; other ranks: NULL (they only take part) */
    int group, region;
    int next_group, next_k; /* the next step of the walk */
    int failed;      /* a gather failed: the walk stops (the collective is broken) */
} save_walk;

typedef struct {
    save_walk *w;
    int group;       /* 0 parameters, 1 first moment, 2 second moment */
} save_group_ctx;

static const float *session_save_fetch(void *ctx, int k)
{
    save_group_ctx *gc = ctx;
    save_walk *w = gc->w;
    model *m = w->s->model;
    if (w->failed) return NULL;
    if (gc->group == 0 && k == 0) fault_in_save(w->s->fault, w->s->comm->rank, (long long)w->s->step);
    if (w->group != gc->group) w->group = gc->group, w->region = -1;
    int r = m->tensors[k].region;
    if (r != w->region) {
        const float *state = gc->group == 0 ? NULL : gc->group == 1 ? w->s->opt->m : w->s->opt->v;
        if (dp_gather_region(w->s->dp, state, r, w->buf)) {
            w->failed = 1;
            return NULL;
        }
        w->region = r;
    }
    w->next_group = gc->group + (k + 1 == m->ntensors);
    w->next_k = (k + 1) % m->ntensors;
    return w->buf ? w->buf + (m->tensors[k].offset - m->region_offset[r]) : NULL;
}

/* Take the walk to its end (rank 0 after a failed write, and every other rank): the gathers are
 * collective, so every rank must make the same ones. */
static int session_save_drain(save_group_ctx *gc)
{
    save_walk *w = gc[0].w;
    while (!w->failed && w->next_group < 3) session_save_fetch(&gc[w->next_group], w->next_k);
    return w->failed ? -1 : 0;
}

static void session_save_state(const session *s, ckpt_state *st)
{
    const train_config *tc = &s->cfg->train;
    st->step = s->step;
    st->tokens_seen = s->step * (int64_t)tc->batch_size * tc->seq_len;
    st->sample_cursor = s->step * (int64_t)tc->batch_size;
    st->seed = tc->seed;
    st->rng_counter = (uint64_t)st->sample_cursor; /* the data order is keyed by the sample index */
    st->adam_step = s->opt->t;
    st->base_digest = s->model->lora.rank ? s->base_digest : 0;
    st->tokenizer_hash = s->tok_hash;
    st->lr = optim_lr(tc, (int)(s->step > 0 ? s->step - 1 : 0));
    st->world_size = s->comm->size;
    st->zero_stage = s->cfg->parallel.zero_stage;
    st->backend = backend_name(s->be);
}

/* Bytes of one rank's backend tuning line in a checkpoint (a CPU's sgemm choices: ~30 per
 * product family, a few dozen families). */
#define SESSION_TUNING_MAX 16384

enum { SESSION_TUNING_SLOT = SESSION_TUNING_MAX / 4 };

/* Every rank's backend_tuning_save line ("-" for none), '\n'-joined in rank order, into
 * *out on rank 0 (malloc'd; NULL elsewhere). Collective; `all` is the caller's zeroed array of
 * size x SESSION_TUNING_SLOT doubles and `line` its SESSION_TUNING_MAX bytes (allocated before
 * the ranks agreed that every one has its memory). The lines travel as one host sum: each rank
 * puts its bytes, 4 to a double (exact below 2^53), in its own slot. */
static int session_gather_tuning(session *s, double *all, char *line, char **out)
{
    const int size = s->comm->size, rank = s->comm->rank, slot = SESSION_TUNING_SLOT;
    *out = NULL;
    if (backend_tuning_save(s->be, line, SESSION_TUNING_MAX) ||
        strchr(line, '\n'))
        snprintf(line, SESSION_TUNING_MAX, "-");
    const unsigned char *u = (const unsigned char *)line;
    for (int i = 0; i < slot; i++)
        all[(size_t)rank * slot + i] =
            (double)((uint32_t)u[4 * i] | (uint32_t)u[4 * i + 1] << 8 |
                     (uint32_t)u[4 * i + 2] << 16 | (uint32_t)u[4 * i + 3] << 24);
    if (size > 1 && comm_allreduce_host(s->comm, all, size * slot)) return -1;
    if (rank != 0) return 0;
    char *joined = calloc((size_t)size, SESSION_TUNING_MAX + 1);
    if (!joined) return loom_fail("checkpoint: out of host memory for the tuning lines");
    size_t n = 0;
    for (int r = 0; r < size; r++) {
        if (r) joined[n++] = '\n';
        for (int i = 0; i < slot; i++) {
            uint32_t w = (uint32_t)all[(size_t)r * slot + i];
            for (int b = 0; b < 4; b++) joined[n + 4 * (size_t)i + b] = (char)(w >> 8 * b & 255);
        }
        joined[n + SESSION_TUNING_MAX - 1] = '\0'; /* a rank's line ends within its slot */
        n += strlen(joined + n);
    }
    *out = joined;
    return 0;
}

/* This rank's line of a checkpoint's tuning (rank order, '\n'-joined) to its backend, when the
 * saved run had as many ranks: rank r's choices were made on rank r's machine. */
static void session_adopt_tuning(session *s, const char *file, const ckpt_state *st)
{
    if (!st->tuning || !st->tuning[0]) return;
    if (st->world_size != s->comm->size) {
        if (s->comm->rank == 0)
            log_info("%s: saved by %d ranks, resumed by %d: each backend chooses its kernels "
                     "afresh (the resumed run is not bitwise the uninterrupted one)",
                     file, st->world_size, s->comm->size);
        return;
    }
    const char *line = st->tuning;
    for (int r = 0; r < s->comm->rank && line; r++) {
        line = strchr(line, '\n');
        if (line) line++;
    }
    if (!line) return;
    size_t n = strcspn(line, "\n");
    char *mine = malloc(n + 1);
    if (!mine) return;
    memcpy(mine, line, n);
    mine[n] = '\0';
    if (strcmp(mine, "-") != 0) backend_tuning_load(s->be, mine);
    free(mine);
}

/* How long a save may take beyond a healthy collective's timeout_s: its bytes at the slowest write
 * rate measured in this job (rank 0's probe of the folder, then its saves, session->save_rate),
 * SESSION_SAVE_MARGIN times over (a save is slower than a raw write: HDF5, the CRCs, the gathers;
 * and a shared disk's rate varies). Without a measured rate, SESSION_SAVE_FLOOR_RATE (a slow
 * network disk). */
#define SESSION_SAVE_MARGIN 3.0
#define SESSION_SAVE_FLOOR_RATE 20e6
/* The probe's size: enough that the fsync's latency does not dominate, small enough to cost a
 * fraction of a second at startup; never more than the save itself. */
#define SESSION_PROBE_BYTES ((size_t)16 << 20)

/* The bytes a save of this session writes: parameters (or adapters) and both AdamW moments. */
static double session_save_bytes(const session *s)
{
    double n = 0;
    for (int i = 0; i < s->model->ntensors; i++) n += (double)s->model->tensors[i].numel;
    return 3.0 * n * sizeof(float);
}

static double session_save_wait(double bytes, double rate)
{
    return SESSION_SAVE_MARGIN * bytes / (rate > 0 ? rate : SESSION_SAVE_FLOOR_RATE);
}

/* Rank 0 after a save that took `secs`: the slowest rate seen so far. */
static void session_note_rate(session *s, double bytes, double secs)
{
    double rate = secs > 0 ? bytes / secs : 0;
    if (rate > 0 && (s->save_rate <= 0 || rate < s->save_rate)) s->save_rate = rate;
}

static double session_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Write on rank 0 while every rank gathers; then every rank learns the outcome. Every collective
 * of the save waits the comm's timeout plus the save's expected time (rank 0's measured rate
 * reaches the others in the first agreement), so a rank stalled inside the save is named within
 * that bound; a gather that fails ends the save at once (no agreement: a peer does not answer). */
static int session_save(session *s)
{
    model *m = s->model;
    int root = s->comm->rank == 0;
    size_t maxreg = 1;
    for (int r = 0; r < m->nregions; r++) {
        size_t len = m->region_offset[r + 1] - m->region_offset[r];
        maxreg = len > maxreg ? len : maxreg;
    }
    save_walk w = {s, root ? malloc(maxreg * sizeof(float)) : NULL, -1, -1, 0, 0, 0};
    save_group_ctx gc[3] = {{&w, 0}, {&w, 1}, {&w, 2}};
    ckpt_tensor *table = session_ckpt_table(m);
    char *model_json = config_model_to_json(&s->cfg->model), *job_json = config_to_json(s->cfg);
    double *tun_all = calloc((size_t)s->comm->size * SESSION_TUNING_SLOT, sizeof *tun_all);
    char *tun_line = calloc(SESSION_TUNING_MAX, 1), *tuning = NULL;
    int rc = ((root && !w.buf) || !table || !model_json || !job_json || !tun_all || !tun_line)
                 ? loom_fail("checkpoint: out of host memory")
                 : 0;
    /* the gathers are collective: every rank walks, or none does; rank 0's write rate comes along */
    double agreed[2] = {rc != 0, root ? s->save_rate : 0};
    int comm_failed = comm_allreduce_host(s->comm, agreed, 2) != 0;
    if (comm_failed) rc = -1, agreed[0] = 1; /* no walk: the gathers would wait on a broken comm */
    else if (agreed[0] > 0 && rc == 0) rc = loom_fail("checkpoint: out of host memory on another rank");
    double no_mem = agreed[0], bytes = session_save_bytes(s), base_wait = s->comm->timeout_s, t0 = session_now();
    if (base_wait > 0) s->comm->timeout_s = base_wait + session_save_wait(bytes, agreed[1]);
    if (no_mem == 0 && rc == 0 && session_gather_tuning(s, tun_all, tun_line, &tuning)) rc = -1;
    if (rc == 0 && root) {
        ckpt_group groups[3] = {
            {session_param_group(s), table, m->ntensors, NULL, session_save_fetch, &gc[0]},
            {"optimizer/m", table, m->ntensors, NULL, session_save_fetch, &gc[1]},
            {"optimizer/v", table, m->ntensors, NULL, session_save_fetch, &gc[2]},
        };
        ckpt_state st = {0};
        session_save_state(s, &st);
        st.model_config_json = model_json;
        st.job_config_json = job_json;
        st.tuning = tuning;
        char dir[600];
        session_ckpt_dir(s, dir, sizeof dir);
        rc = ckpt_save(dir, &st, groups, 3, s->cfg->checkpoint.keep);
        if (rc == 0) log_info("checkpoint: step %lld saved in %s", (long long)s->step, dir);
        if (rc == 0) session_note_rate(s, bytes, session_now() - t0);
    }
    if (no_mem == 0 && s->comm->size > 1 && session_save_drain(gc) && rc == 0)
        rc = loom_fail("checkpoint: gathering the state failed: %s", loom_error());
    int broken = w.failed || comm_failed; /* a peer is dead or stalled: no agreement can follow */
    free(w.buf);
    free(tuning);
    free(tun_all);
    free(tun_line);
    free(table);
    free(model_json);
    free(job_json);
    if (broken) {
        s->comm->timeout_s = base_wait;
        s->save_broken = 1;
        return rc ? rc : -1;
    }
    /* rank 0 says why first: should the agreement below fail (a rank gone), its error replaces this */
    if (rc != 0 && s->comm->size > 1) log_warn("checkpoint: %s", loom_error());
    /* every rank learns whether rank 0's write worked */
    int failed = comm_agree_failure(s->comm, rc != 0);
    s->comm->timeout_s = base_wait;
    if (failed < 0) return s->save_broken = 1, -1;
    if (failed > 0 && rc == 0) return loom_fail("checkpoint: the save failed on rank 0");
    return failed > 0 ? -1 : 0;
}

int session_lock_dir(comm *c, const job_config *cfg, const char *dir, int *fd)
{
    if (cfg->checkpoint.every < 0) return 0; /* never saves: nothing to guard */
    int rc = c->rank == 0 ? ckpt_lock(dir, fd) : 0;
    if (c->size == 1) return rc;
    if (rc != 0) log_warn("checkpoint: %s", loom_error()); /* said before the agreement can fail */
    int failed = comm_agree_failure(c, rc != 0);
    if (failed < 0) return -1;
    if (failed > 0 && rc == 0) return loom_fail("checkpoint: rank 0 could not lock the checkpoint folder %s", dir);
    return failed > 0 ? -1 : 0;
}

/* Rank 0's part of session_claim_run. */
static int session_claim_local(const char *out_dir, const char *ckpt_dir, int overwrite)
{
    char metrics[600], svg[600];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", out_dir);
    snprintf(svg, sizeof svg, "%s/loss.svg", out_dir);
    struct stat st;
    int logged = stat(metrics, &st) == 0 && st.st_size > 0;
    long long newest;
    int nckpt = ckpt_count(ckpt_dir, &newest);
    if (nckpt < 0) return -1;
    if (!logged && nckpt == 0) return 0;
    if (!overwrite && nckpt == 0)
        return loom_fail("%s already holds a run (its metrics.jsonl; no checkpoint to --resume): start afresh "
                         "with --overwrite (removes its metrics and plot) or give another --out", out_dir);
    if (!overwrite)
        return loom_fail("%s already holds a run (checkpoints up to step %lld in %s): continue it with --resume %s, "
                         "or start afresh with --overwrite (removes its metrics, plot and checkpoints), or give "
                         "another --out", out_dir, newest, ckpt_dir, ckpt_dir);
    if (ckpt_clear(ckpt_dir)) return -1;
    const char *files[2] = {metrics, svg};
    for (int i = 0; i < 2; i++)
        if (unlink(files[i]) != 0 && errno != ENOENT)
            return loom_fail("%s: cannot remove the previous run's file (--overwrite): %s", files[i], strerror(errno));
    log_info("--overwrite: removed the previous run in %s (metrics.jsonl, loss.svg, %d checkpoint(s))", out_dir, nckpt);
    return 0;
}

int session_claim_run(comm *c, const char *out_dir, const char *ckpt_dir, int overwrite)
{
    int rc = c->rank == 0 ? session_claim_local(out_dir, ckpt_dir, overwrite) : 0;
    if (c->size == 1) return rc;
    if (rc != 0) log_warn("%s", loom_error()); /* said before the agreement can fail */
    int failed = comm_agree_failure(c, rc != 0);
    if (failed < 0) return -1;
    if (failed > 0 && rc == 0) return loom_fail("rank 0 refused the run folder %s", out_dir);
    return failed > 0 ? -1 : 0;
}

int session_lock_ckpt_dir(session *s)
{
    char dir[600];
    session_ckpt_dir(s, dir, sizeof dir);
    if (session_lock_dir(s->comm, s->cfg, dir, &s->ckpt_lock_fd)) return -1;
    /* rank 0 (the writer) measures the folder's write rate for the first save's wait */
    double bytes = session_save_bytes(s);
    if (s->ckpt_lock_fd >= 0 && s->opt)
        s->save_rate = ckpt_write_rate(s->ckpt_lock_fd, bytes < SESSION_PROBE_BYTES ? (size_t)bytes : SESSION_PROBE_BYTES);
    return 0;
}

void session_unlock_ckpt_dir(session *s)
{
    ckpt_unlock(s->ckpt_lock_fd);
    s->ckpt_lock_fd = -1;
}

int session_maybe_checkpoint(session *s, int final)
{
    int every = s->cfg->checkpoint.every;
    int due = final ? (every >= 0) : (every > 0 && s->step % every == 0 && s->step < s->cfg->train.steps);
    if (!due || !s->opt) return 0;
    if (session_save(s) == 0) return 0;
    if (s->save_broken) return -1; /* a rank is gone: neither continuing nor another save can work */
    if (final) /* on_error=continue or not: the job cannot end well without its last state saved */
        return loom_fail("checkpoint: the last save (step %lld) failed, the end state is not saved: %s",
                         (long long)s->step, loom_error());
    if (strcmp(s->cfg->checkpoint.on_error, "continue") == 0) {
        log_warn("checkpoint failed, training continues (checkpoint.on_error): %s", loom_error());
        return 0;
    }
    return -1;
}

/* Check the checkpoint's model config against the job's: same architecture or a clear error.
 * `tok`: the same tokenizer too (a resume, the weights eval and sample run); a base is a starting
 * point whose tokenizer the job chooses, as for an HF folder's (docs/hf.md). */
static int session_check_model(const session *s, const char *file, const ckpt_state *st, int tok)
{
    model_config saved;
    if (config_model_from_json(&saved, st->model_config_json))
        return loom_fail("%s: unreadable model config: %s", file, loom_error());
    /* the tokenizer is the same by its content, wherever its file now is: not by the path */
    if (tok && resume_check_tokenizer(file, st->tokenizer_hash, saved.tokenizer, s->cfg->model.tokenizer)) return -1;
    memcpy(saved.tokenizer, s->cfg->model.tokenizer, sizeof saved.tokenizer);
    const char *field = config_model_diff(&saved, &s->cfg->model);
    if (field)
        return loom_fail("%s: checkpoint model differs from the job's in field '%s'", file, field);
    return 0;
}

/* Where a tensor read from a checkpoint goes: logical elements [lo, hi) of array `what`. */
enum { SINK_PARAMS, SINK_M, SINK_V, SINK_BASE };

static int session_sink(session *s, int what, const float *buf, size_t lo, size_t hi)
{
    switch (what) {
    case SINK_PARAMS: return dp_load_params_range(s->dp, buf, lo, hi);
    case SINK_M: return dp_load_state_range(s->dp, s->opt->m, buf, lo, hi);
    case SINK_V: return dp_load_state_range(s->dp, s->opt->v, buf, lo, hi);
    default: /* the base model: frozen under LoRA, else the trainable parameters themselves */
        if (s->model->lora.rank) return model_load_base_range(s->model, buf, lo, hi);
        return dp_load_params_range(s->dp, buf, lo, hi);
    }
}

/* Group `path` one tensor at a time through a staging buffer the size of the largest tensor,
 * each rank keeping the slices it owns: a whole host copy of params + moments would add three
 * times the model's size to every rank's peak memory for the length of a resume. */
static int session_read_group(session *s, ckpt_reader *r, const char *path, const model_tensor *mt,
                              int n, int what)
{
    size_t maxn = 1;
    for (int i = 0; i < n; i++) maxn = mt[i].numel > maxn ? mt[i].numel : maxn;
    float *buf = malloc(maxn * sizeof(float));
    ckpt_tensor *table = session_ckpt_table_of(mt, n);
    int rc = buf && table ? 0 : loom_fail("out of host memory for a %zu-float tensor", maxn);
    for (int i = 0; rc == 0 && i < n; i++) {
        ckpt_tensor one = table[i];
        one.offset = 0;
        ckpt_group grp = {path, &one, 1, buf, NULL, NULL};
        rc = ckpt_read_group(r, &grp);
        if (rc == 0) rc = session_sink(s, what, buf, mt[i].offset, mt[i].offset + mt[i].numel);
    }
    free(table);
    free(buf);
    return rc;
}

static int session_read_tensors(session *s, ckpt_reader *r)
{
    model *m = s->model;
    const char *paths[3] = {session_param_group(s), "optimizer/m", "optimizer/v"};
    int rc = 0;
    for (int g = 0; rc == 0 && g < (s->opt ? 3 : 1); g++)
        rc = session_read_group(s, r, paths[g], m->tensors, m->ntensors, SINK_PARAMS + g);
    return rc;
}

/* The training state against the rest of the file (ckpt_read_state checked the ranges): loom's
 * save writes sample_cursor = step x train.batch_size, tokens_seen = sample_cursor x
 * train.seq_len, rng_counter = sample_cursor (version 2), seed = train.seed, from the job config
 * it stores, whose model section is model_config. A file that disagrees with itself was edited or
 * damaged: resuming would log one step and train from another, or use another data order. */
static int session_check_state(const char *file, const ckpt_state *st)
{
    job_config saved;
    model_config mc;
    if (config_load_string(&saved, st->job_config_json, file, NULL, 0))
        return loom_fail("%s: attribute job_config is unreadable: %s", file, loom_error());
    if (config_model_from_json(&mc, st->model_config_json))
        return loom_fail("%s: attribute model_config is unreadable: %s", file, loom_error());
    const char *field = config_model_diff(&mc, &saved.model);
    if (field) return loom_fail("%s: attribute model_config disagrees with job_config in field '%s'", file, field);
    const int64_t b = saved.train.batch_size, t = saved.train.seq_len;
    if (st->step > INT64_MAX / (b * t)) return loom_fail("%s: attribute step = %lld is out of range", file, (long long)st->step);
    if (st->sample_cursor != st->step * b)
        return loom_fail("%s: attribute sample_cursor = %lld, but step %lld x train.batch_size %lld (job_config) = %lld",
                         file, (long long)st->sample_cursor, (long long)st->step, (long long)b, (long long)(st->step * b));
    if (st->tokens_seen != st->sample_cursor * t)
        return loom_fail("%s: attribute tokens_seen = %lld, but sample_cursor %lld x train.seq_len %lld (job_config) = %lld",
                         file, (long long)st->tokens_seen, (long long)st->sample_cursor, (long long)t,
                         (long long)(st->sample_cursor * t));
    if (st->format_version >= 2 && st->rng_counter != (uint64_t)st->sample_cursor)
        return loom_fail("%s: attribute rng_counter = %llu, but the data order's position is sample_cursor = %lld", file,
                         (unsigned long long)st->rng_counter, (long long)st->sample_cursor);
    if (st->seed != saved.train.seed)
        return loom_fail("%s: attribute seed = %llu, but job_config has train.seed = %llu", file,
                         (unsigned long long)st->seed, (unsigned long long)saved.train.seed);
    return 0;
}

/* LoRA adapters belong to the base they were trained on: another base (even of the same shape)
 * gives another model. finetune.allow_other_base = true accepts it knowingly. */
static int session_check_base(const session *s, const char *file, const ckpt_state *st)
{
    if (!s->model->lora.rank || st->base_digest == s->base_digest) return 0;
    if (!st->base_digest) {
        log_warn("%s: a version %d checkpoint does not record its base: cannot check that %s is the base its "
                 "adapters were trained on", file, st->format_version, s->cfg->finetune.base);
        return 0;
    }
    if (s->cfg->finetune.allow_other_base) {
        log_warn("%s: the adapters were trained on another base than %s (finetune.allow_other_base)", file,
                 s->cfg->finetune.base);
        return 0;
    }
    return loom_fail("%s: the adapters were trained on another base (digest %016llx), not finetune.base %s (%016llx); "
                     "set finetune.allow_other_base=true to resume on it anyway", file,
                     (unsigned long long)st->base_digest, s->cfg->finetune.base, (unsigned long long)s->base_digest);
}

/* The model config in the file describes the tensors stored with it (shapes, before any data is
 * read): else the mismatch is the attribute's, not the tensor's. */
static int session_check_shapes(session *s, const char *file, ckpt_reader *r)
{
    ckpt_tensor *table = session_ckpt_table(s->model);
    if (!table) return loom_fail("out of host memory");
    ckpt_group g = {session_param_group(s), table, s->model->ntensors, NULL, NULL, NULL};
    int rc = ckpt_check_shapes(r, &g);
    free(table);
    return rc ? loom_fail("%s: attribute model_config does not describe the stored tensors: %s", file, loom_error()) : 0;
}

static int session_read(session *s, const char *file, ckpt_reader *r)
{
    ckpt_state st = {0};
    if (ckpt_read_state(r, &st)) return -1;
    int rc = session_check_model(s, file, &st, 1);
    if (rc == 0) rc = session_check_state(file, &st);
    if (rc == 0) rc = session_check_base(s, file, &st);
    if (rc == 0) rc = session_check_shapes(s, file, r);
    if (rc == 0 && s->mode != SESSION_INFER) /* eval and sample read weights, not the schedule */
        rc = resume_check_job(s->cfg, file, st.job_config_json);
    if (rc == 0) rc = session_read_tensors(s, r);
    if (rc == 0 && s->opt) s->opt->t = (int)st.adam_step;
    if (rc == 0 && s->mode != SESSION_INFER) session_adopt_tuning(s, file, &st);
    if (rc == 0) {
        s->step = st.step;
        s->sample_cursor = st.sample_cursor;
        /* eval and sample load weights: nothing is resumed */
        log_info("%s %s at step %lld (saved by %d rank%s, ZeRO %d, %s)",
                 s->mode == SESSION_INFER ? "loaded" : "resumed from", file,
                 (long long)st.step, st.world_size, st.world_size == 1 ? "" : "s", st.zero_stage, st.backend ? st.backend : "?");
    }
    ckpt_state_free(&st);
    return rc;
}

/* Group "model" of the checkpoint at `path`, laid out as the base table says, into the frozen
 * base (LoRA) or the parameters (full fine-tune), one tensor at a time. */
int session_load_base(session *s)
{
    const char *base = s->cfg->finetune.base;
    if (!base[0]) return loom_fail("finetune.base: a fine-tune needs a base checkpoint (file or directory)");
    const model_tensor *bt;
    int nb;
    size_t nparams;
    model_base_table(s->model, &bt, &nb, &nparams);
    if (hf_is_folder(base)) return session_load_hf(s, base, bt, nb);
    char file[1024];
    if (ckpt_resolve(base, file, sizeof file)) return loom_fail("finetune.base: %s", loom_error());
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    ckpt_state st = {0};
    int rc = ckpt_read_state(r, &st);
    if (rc == 0) rc = session_check_model(s, file, &st, 0);
    if (rc == 0) rc = session_read_group(s, r, "model", bt, nb, SINK_BASE);
    ckpt_tensor *table = rc == 0 ? session_ckpt_table_of(bt, nb) : NULL;
    ckpt_group g = {"model", table, nb, NULL, NULL, NULL};
    if (rc == 0) rc = table ? ckpt_group_digest(r, &g, &s->base_digest) : loom_fail("out of host memory");
    free(table);
    ckpt_state_free(&st);
    ckpt_close(r);
    if (rc == 0) log_info("base model loaded from %s", base);
    return rc;
}

/* model_config against the shapes of the stored /model tensors (not a LoRA file's adapters), and
 * of the AdamW moments a resume reads when the file is past step 0 (an import has none). */
static int session_check_file_shapes(const char *file, ckpt_reader *r, const model_config *mc, int moments)
{
    model m;
    memset(&m, 0, sizeof m);
    int rc = model_layout(&m, mc);
    ckpt_tensor *table = rc == 0 ? session_ckpt_table_of(m.tensors, m.ntensors) : NULL;
    if (rc == 0 && !table) rc = loom_fail("out of host memory");
    const char *groups[3] = {"model", "optimizer/m", "optimizer/v"};
    for (int k = 0; rc == 0 && k < (moments ? 3 : 1); k++) {
        ckpt_group g = {groups[k], table, m.ntensors, NULL, NULL, NULL};
        if (ckpt_check_shapes(r, &g)) /* a moment's error is the read's, which names the tensor */
            rc = k ? -1 : loom_fail("%s: attribute model_config does not describe the stored tensors: %s", file, loom_error());
    }
    free(table);
    free(m.tensors);
    free(m.region_offset);
    return rc;
}

int session_check_file(const char *path)
{
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open_peek(file); /* ckpt_inspect's open next does not read it all again */
    if (!r) return -1;
    ckpt_state st = {0};
    model_config mc;
    job_config saved;
    int rc = ckpt_read_state(r, &st);
    /* a model config of another kind (a Needle file's) is its own loader's to check */
    int ours = rc == 0 && config_model_from_json(&mc, st.model_config_json) == 0 &&
               config_load_string(&saved, st.job_config_json, file, NULL, 0) == 0;
    if (rc == 0 && ours) rc = session_check_state(file, &st);
    if (rc == 0 && ours && !(saved.finetune.base[0] && !strcmp(saved.finetune.method, "lora")))
        rc = session_check_file_shapes(file, r, &mc, st.step > 0);
    ckpt_state_free(&st);
    ckpt_close(r);
    return rc;
}

int session_resolve_date(job_config *cfg, const char *resume)
{
    char *d = cfg->data.date_string;
    if (d[0]) return 0;
    if (!resume || !resume[0]) return chat_date_today(d, sizeof cfg->data.date_string), 0;
    char file[1024];
    if (ckpt_resolve(resume, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open_peek(file); /* the resume's open does not read it all again */
    if (!r) return -1;
    ckpt_state st = {0};
    int rc = ckpt_read_state(r, &st);
    if (rc == 0) resume_saved_date(st.job_config_json, d, sizeof cfg->data.date_string);
    ckpt_state_free(&st);
    ckpt_close(r);
    if (rc == 0 && !d[0]) chat_date_today(d, sizeof cfg->data.date_string); /* saved unresolved */
    return rc;
}

int session_resume(session *s, const char *path)
{
    /* a LoRA checkpoint holds only the adapters: the frozen base comes from finetune.base */
    if (s->model->lora.rank && session_load_base(s)) return -1;
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    int rc = session_read(s, file, r);
    ckpt_close(r);
    return rc;
}
