/* plan.c: a training job's memory per rank before anything is allocated (see plan.h). The model's
 * and dp's parts come from the functions their allocations run (model_plan, dp_plan_sizes,
 * optim_state_bytes); the bf16 copies follow model_weights_bf16 and dp's stage-3 gathers; the
 * workspace is the CPU backend's transient buffers, counted here (named below, each with where it
 * is allocated). Host memory facts (available RAM, cgroup limits, this process's RSS) are read
 * from /proc and /sys on Linux only. */
#include "core/train/plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/needle.h"
#include "core/model/model.h"
#include "core/train/dp.h"
#include "core/train/evaluate.h"
#include "core/train/finetune_needle.h"

const char *plan_part_name(int part)
{
    static const char *const names[PLAN_NPARTS] = {
        "parameters", "frozen base", "gradients", "optimizer state", "bf16 copies", "activations",
        "comm buffers", "workspace"};
    return part >= 0 && part < PLAN_NPARTS ? names[part] : "?";
}

const char *plan_bytes(size_t bytes, char *buf, size_t len)
{
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0) snprintf(buf, len, "%.1f KiB", b / 1024.0);
    else snprintf(buf, len, "%zu B", bytes);
    return buf;
}

/* The libraries' pages and the sgemm reference's buffers (plan_cpu_workspace): the part of a CPU
 * rank's workspace no model shape changes. *libs the first, the second returned. */
static size_t plan_cpu_fixed(const plan_shape *sh, size_t *libs)
{
    const size_t f = sizeof(float);
    const char *gemm = getenv("LOOM_GEMM"), *peak = getenv("LOOM_CPU_PEAK_GFLOPS");
    const int race = !(gemm && gemm[0]);
    *libs = ((size_t)3 + (race ? 12 + 5 * (size_t)sh->threads : 0)) << 20;
    if (peak && atof(peak) > 0) return 0;
    return 3 * (size_t)1536 * 1552 * f + (race ? 3 * (size_t)1536 * 576 * f : 0);
}

/* The CPU backend's buffers beyond the model's, at their peak (bytes):
 *  - the MFU reference (cpu_blas_calibrate: three 1536 x 1552 floats) and, with oneDNN or BLIS
 *    installed and LOOM_GEMM unset, the library race inside it (cpu_gemm_race: three 1536 x 576),
 *    measured once after the model is allocated (trainer_open) and freed: skipped when
 *    LOOM_CPU_PEAK_GFLOPS gives the peak;
 *  - per product shape's race, a copy of C's rows when the product accumulates (cpu_gemm_shape_race:
 *    at most the residual, N x C), during a step's first products, freed;
 *  - bf16: the rounded operands (cpu_bf16.c's abuf, bbuf: the largest op(A) is one chunk of the
 *    head's dlogits, head_chunk x V (model_forward), or a layer's N x F; the largest unkept op(B) a
 *    layer input, N x max(C, F)), kept;
 *  - attention's per-thread blocks (cpu_attention.c: 64 query rows x (T + 2 D + 2) per group member);
 *  - the checkpoint writer's region buffer (rank 0, session_ckpt.c: the largest region) during a save;
 *  - what the BLAS libraries touch after the model is allocated (their packing buffers, oneDNN's
 *    and BLIS's pages once loaded): not loom's to size, measured instead on 2 Zen 4 cores with
 *    Debian 12's OpenBLAS 0.3.21, oneDNN 2.6 and BLIS 0.9 (models of 200 MB to 1.2 GB): OpenBLAS
 *    alone (LOOM_GEMM=openblas) 3 MiB at 1 or 2 threads; racing the three, 17-18 MiB on 1 thread,
 *    18-29 on 2. So 3 MiB, and with the race 12 MiB + 5 MiB a thread more (counted where LOOM_GEMM
 *    is unset even if only OpenBLAS is installed: a plan errs on the large side).
 * The reference runs before the step's buffers exist: the peak is the larger of the two phases. */
static size_t plan_cpu_workspace(const job_config *cfg, const train_plan *p, const model *m)
{
    const model_config *c = &cfg->model;
    size_t f = sizeof(float), N = (size_t)p->micro_batch * p->shape.T, C = (size_t)c->d_model;
    size_t F = (size_t)c->d_ff > C ? (size_t)c->d_ff : C, V = (size_t)c->vocab, D = (size_t)config_head_dim(c);
    size_t G = (size_t)(c->n_head / (c->n_kv_head > 0 ? c->n_kv_head : 1));
    const char *gemm = getenv("LOOM_GEMM");
    size_t libs, reference = plan_cpu_fixed(&p->shape, &libs);
    size_t kept = (size_t)p->shape.threads * 64 * G * ((size_t)p->shape.T + 2 * D + 2) * f;
    size_t head = (size_t)m->head_chunk * V;
    if (p->shape.bf16) kept += (head > N * F ? head : N * F) * 2 + N * F * 2;
    size_t race = gemm && gemm[0] ? 0 : N * C * f, ckpt = 0;
    if (cfg->checkpoint.every >= 0)
        for (int r = 0; r < m->nregions; r++) {
            size_t len = (m->region_offset[r + 1] - m->region_offset[r]) * f;
            if (len > ckpt) ckpt = len;
        }
    size_t step = kept + (race > ckpt ? race : ckpt);
    return libs + (reference > step ? reference : step);
}

/* The bf16 copies a bf16 backend keeps: the trainable weights once per step where the rank holds
 * them all (model_weights_bf16), each gathered region's at stage 3 (dp_region_begin), and the
 * frozen base once for the job. */
static size_t plan_bf16_copies(const train_plan *p, const dp_sizes *z)
{
    if (!p->shape.bf16) return 0;
    size_t held = p->zero_stage < 3 ? p->nparams : z->gathered_floats;
    return (held + p->nbase_params) * 2;
}

/* Host memory MPI takes for itself once the ranks exchange gradients (several ranks on a CPU
 * backend): its shared-memory transport's segments and a temporary the size of the largest
 * reduction (Open MPI's all-reduce and reduce-scatter copy their input). Measured with Debian 12's
 * Open MPI 4.1 on 2 ranks: 8 MiB + the largest bucket (stages 0-1) or padded region (2-3), within
 * 5 MiB at every stage. A GPU's collectives (NCCL) take device memory that is not counted here. */
static size_t plan_mpi_temporaries(const plan_shape *sh, const dp_sizes *z)
{
    if (sh->ranks < 2 || !sh->cpu) return 0;
    return ((size_t)8 << 20) + z->largest_reduce;
}

static int plan_lora(const job_config *cfg, const plan_shape *sh, lora_spec *lora)
{
    memset(lora, 0, sizeof *lora);
    if (!sh->finetune || strcmp(cfg->finetune.method, "lora") != 0) return 0;
    return lora_spec_from_config(&cfg->finetune, &cfg->model, lora);
}

/* The CPU kernels' scratch in a Needle step, at its largest: attention's backward, per thread
 * (cpu_attention.c: blocks of M = 48 query rows of a kv head's group, at least 4 per head, each
 * 2 T + 4 F + 2 floats), and where a step has fewer than 8 (row, kv head) pairs, the partial dK,
 * dV of its query segments (2 x pairs x segments x T x F). */
static size_t plan_needle_scratch(const needle_net_size *s, const plan_shape *sh, int rows)
{
    const size_t T = (size_t)sh->T, F = (size_t)s->head_width, G = (size_t)(s->heads / (s->kv_heads > 0 ? s->kv_heads : 1));
    const size_t M = 4 * G > 48 ? 4 * G : 48, pairs = (size_t)rows * s->kv_heads;
    size_t seg = pairs >= 8 ? 1 : (8 + pairs - 1) / pairs, part = seg > 1 ? 2 * pairs * seg * T * F : 0;
    return ((size_t)sh->threads * M * (2 * T + 4 * F + 2) + part) * sizeof(float);
}

/* A fine-tune of a Needle base (core/train/finetune_needle.c), from its net's own sizes
 * (needle_net_plan): the frozen base as the net holds it (each target's base and its merged copy,
 * the rest; W4 in place under QAT), the adapters, gradients and moments, replicated on every rank
 * (parallel.zero_stage shards nothing there), one training pass's arena, and with several ranks the
 * gradients' host copies (double and float) and MPI's temporary for their sum. The workspace is the
 * libraries', plus the largest of: a step's host rows and the CPU kernels' per-thread scratch; the
 * held-out evaluation (every fine-tune with held-out rows ends with one), its decode caches and
 * prefill, and after a float fine-tune a second net (W4 weights) beside the first; the sgemm
 * reference less the arena (it runs before the first pass allocates it). */
static int plan_needle(const job_config *cfg, train_plan *p)
{
    const plan_shape *sh = &p->shape;
    /* eval.batch as finetune_needle_seq_len clips it: at most 64, at most the held-out examples */
    const int eval_rows = cfg->eval.batch > 0 ? (cfg->eval.batch < 64 ? cfg->eval.batch : 64) : 1;
    const int eval = cfg->data.val_split > 0 || cfg->data.val[0];
    needle_net_ask ask = {cfg->finetune.base, cfg->model.layers, cfg->finetune.qat ? NEEDLE_NUM_QAT : 0,
                          cfg->finetune.lora_rank, p->recompute, p->micro_batch, sh->T,
                          eval ? eval_rows : 0, sh->T + FINETUNE_NEEDLE_EVAL_NEW};
    needle_net_size s;
    if (needle_net_plan(&ask, &s)) return -1;
    const size_t state = s.lora / sizeof(float); /* the adapters' floats */
    p->lora_rank = cfg->finetune.lora_rank;
    p->nparams = state, p->nbase_params = s.base_params;
    p->part[PLAN_PARAMS] = s.lora;
    p->part[PLAN_GRADS] = s.lora;
    p->part[PLAN_OPTIM] = 2 * s.lora;
    p->part[PLAN_BASE] = s.held - 4 * s.lora;
    p->part[PLAN_ACTS] = s.train_pass;
    p->acts_other = s.other_pass;
    if (sh->ranks > 1) p->part[PLAN_DP] = state * (sizeof(double) + sizeof(float)) + (sh->cpu ? ((size_t)8 << 20) + state * sizeof(double) : 0);
    size_t libs = 0, reference = sh->cpu ? plan_cpu_fixed(sh, &libs) : 0;
    size_t rows = (size_t)p->micro_batch * sh->T;
    size_t step = rows * (2 * sizeof(int32_t) + sizeof(float)) + (sh->cpu ? plan_needle_scratch(&s, sh, p->micro_batch) : 0);
    /* under QAT the evaluation decodes on the training net (its arena reused when large enough),
     * after a float fine-tune on a W4 net of its own */
    size_t gen = !eval ? 0 : ask.qat ? (s.gen_pass > s.train_pass ? s.gen_pass - s.train_pass : 0) + s.gen_caches
                                     : s.held + s.gen_pass + s.gen_caches;
    /* the sgemm reference runs before the first pass allocates the arena: the larger phase counts */
    size_t most = reference > s.train_pass + step ? reference - s.train_pass : step;
    p->part[PLAN_WORKSPACE] = libs + (most > gen ? most : gen);
    return 0;
}

/* A fine-tune's held-out evaluation (evaluate_accuracy: eval.batch rows of up to T positions, on
 * a model_gen context): nothing more when its context fits the idle training arena, else its own
 * buffers and caches beside it, with the libraries' pages (the workspace it would replace). Not run
 * at ZeRO-3, nor without held-out rows. */
static size_t plan_eval_gen(const job_config *cfg, const train_plan *p, model *m)
{
    const plan_shape *sh = &p->shape;
    if (!sh->finetune || p->zero_stage == 3 || !(cfg->data.val_split > 0 || cfg->data.val[0])) return 0;
    const int rows = cfg->eval.batch > 0 ? cfg->eval.batch : 1;
    const long want = (long)rows * sh->T;
    const int fwd = want < EVALUATE_FWD_TOKENS ? (int)want : EVALUATE_FWD_TOKENS;
    size_t bytes = model_gen_size(m, rows, sh->T, fwd);
    if (bytes <= m->activation_bytes) return 0;
    size_t libs = 0;
    if (sh->cpu) plan_cpu_fixed(sh, &libs);
    return bytes + libs;
}

int plan_compute(const job_config *cfg, const plan_shape *sh, train_plan *p)
{
    memset(p, 0, sizeof *p);
    p->shape = *sh;
    const train_config *tc = &cfg->train;
    int W = sh->ranks > 0 ? sh->ranks : 1;
    p->micro_batch = tc->micro_batch > 0 ? tc->micro_batch : tc->batch_size / W;
    if (p->micro_batch < 1 || tc->batch_size % (p->micro_batch * W) != 0)
        return loom_fail("train.batch_size %d must be a multiple of micro_batch (%d) x ranks (%d)", tc->batch_size,
                         p->micro_batch, W);
    if (sh->T < 1) return loom_fail("plan: rows of %d tokens", sh->T);
    p->zero_stage = cfg->parallel.zero_stage;
    p->recompute = tc->recompute != 0;
    if (sh->finetune && needle_is_base(cfg->finetune.base)) {
        if (plan_needle(cfg, p)) return -1;
        for (int i = 0; i < PLAN_NPARTS; i++) {
            p->total += p->part[i];
            if (p->part[i] > p->part[p->largest]) p->largest = i;
        }
        return 0;
    }
    lora_spec lora;
    if (plan_lora(cfg, sh, &lora)) return -1;
    p->lora_rank = lora.rank;
    const lora_spec *lp = lora.rank ? &lora : NULL;
    model *m = model_plan(&cfg->model, p->micro_batch, sh->T,
                          p->recompute ? MODEL_ACTS_RECOMPUTE : MODEL_ACTS_KEEP, lp);
    model *other = m ? model_plan(&cfg->model, p->micro_batch, sh->T,
                                  p->recompute ? MODEL_ACTS_KEEP : MODEL_ACTS_RECOMPUTE, lp)
                     : NULL;
    dp_sizes z;
    size_t bucket = (size_t)(cfg->parallel.bucket_mb * 1024.0f * 1024.0f); /* as session_open passes it */
    int rc = m && other ? dp_plan_sizes(m, p->zero_stage, W, 0, bucket, &z) : -1;
    if (rc == 0) {
        p->nparams = m->nparams;
        p->nbase_params = lora.rank ? m->nbase_params : 0;
        p->part[PLAN_PARAMS] = z.params;
        p->part[PLAN_BASE] = p->nbase_params * sizeof(float);
        p->part[PLAN_GRADS] = z.grads;
        p->part[PLAN_OPTIM] = z.optimizer;
        p->part[PLAN_BF16] = plan_bf16_copies(p, &z);
        p->part[PLAN_ACTS] = m->activation_bytes;
        p->part[PLAN_DP] = z.staging + plan_mpi_temporaries(sh, &z);
        p->part[PLAN_WORKSPACE] = sh->cpu ? plan_cpu_workspace(cfg, p, m) : 0;
        p->acts_other = other->activation_bytes;
        for (int i = 0; i < PLAN_NPARTS; i++) {
            p->total += p->part[i];
            if (p->part[i] > p->part[p->largest]) p->largest = i;
        }
    }
    if (rc == 0) { /* a fine-tune's held-out evaluation, after (and before) its steps */
        size_t gen = plan_eval_gen(cfg, p, m);
        if (gen > p->part[PLAN_WORKSPACE]) {
            p->total += gen - p->part[PLAN_WORKSPACE];
            p->part[PLAN_WORKSPACE] = gen;
            if (p->part[PLAN_WORKSPACE] > p->part[p->largest]) p->largest = PLAN_WORKSPACE;
        }
    }
    model_destroy(other);
    model_destroy(m);
    return rc;
}

void plan_hint(const job_config *cfg, const train_plan *p, int part, char *buf, size_t len)
{
    char b[32];
    int W = p->shape.ranks, z = p->zero_stage, full = !p->lora_rank;
    switch (part) {
    case PLAN_ACTS:
        if (!p->recompute) {
            snprintf(buf, len, "train.recompute=true shrinks it to %s", plan_bytes(p->acts_other, b, sizeof b));
        } else if (p->micro_batch > 1) {
            snprintf(buf, len, "a smaller train.micro_batch (now %d) shrinks it in proportion", p->micro_batch);
        } else {
            snprintf(buf, len, "shorter rows (%s, now %d) shrink it",
                     p->shape.finetune ? "data.max_len" : "train.seq_len", p->shape.T);
        }
        return;
    case PLAN_PARAMS:
    case PLAN_GRADS:
    case PLAN_OPTIM: {
        int want = part == PLAN_PARAMS ? 3 : part == PLAN_GRADS ? 2 : 1;
        if (W > 1 && z < want)
            snprintf(buf, len, "parallel.zero_stage=%d shards it over the %d ranks", want, W);
        else if (p->shape.finetune && full && part != PLAN_PARAMS)
            snprintf(buf, len, "finetune.method=lora trains adapters only");
        else
            snprintf(buf, len, "more ranks with parallel.zero_stage=%d (mpirun -np N) shard it", want);
        return;
    }
    case PLAN_BF16:
        snprintf(buf, len, "precision=fp32 drops the copies");
        return;
    case PLAN_BASE:
        snprintf(buf, len, "no switch shrinks it (the base is held whole on every rank): a smaller base or more memory");
        return;
    case PLAN_DP:
        snprintf(buf, len, "a lower parallel.zero_stage (now %d) drops its staging", z);
        return;
    default: /* the workspace: on the CPU mostly the libraries' and the MFU reference's */
        snprintf(buf, len, "mostly fixed (the BLAS libraries, the sgemm reference: LOOM_CPU_PEAK_GFLOPS=N skips "
                 "that); a smaller train.micro_batch (now %d) shrinks the rest", p->micro_batch);
        (void)cfg;
        return;
    }
}

/* A "MemAvailable:   123 kB" style field of a /proc file, bytes; 0 if absent. */
static size_t plan_proc_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0, kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = (size_t)strtoull(line + kl + 1, NULL, 10) * 1024; /* every such field is in kB */
            break;
        }
    fclose(f);
    return v;
}

/* One number from a file (cgroup limits); 0 for "max", absent or unreadable. */
static size_t plan_file_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    if (!isdigit((unsigned char)buf[0])) return 0;
    return (size_t)strtoull(buf, NULL, 10);
}

/* "8G", "512M", "1073741824": bytes; 0 when it is not one. */
static size_t plan_parse_bytes(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    double mult = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1024.0 * 1024
                : *end == 'G' || *end == 'g' ? 1024.0 * 1024 * 1024 : *end == 'T' || *end == 't' ? 1024.0 * 1024 * 1024 * 1024 : 1.0;
    if (end == s || v <= 0 || (mult > 1.0 ? end[1] != '\0' && strcmp(end + 1, "iB") && strcmp(end + 1, "B") : *end != '\0'))
        return 0;
    return (size_t)(v * mult);
}

size_t plan_device_memory(backend *be, int cpu, char *what, size_t len)
{
    const char *env = getenv("LOOM_DEVICE_MEM");
    if (env && env[0]) {
        size_t v = plan_parse_bytes(env);
        if (v) {
            snprintf(what, len, "LOOM_DEVICE_MEM");
            return v;
        }
        log_warn("ignoring LOOM_DEVICE_MEM='%s' (not a size: bytes, or a number with K, M, G or T)", env);
    }
    if (!cpu) {
        size_t free_b = 0, total = 0;
        char b[32];
        if (be && backend_memory(be, &free_b, &total) == 0 && total) {
            snprintf(what, len, "free on the %s device, of %s", backend_name(be), plan_bytes(total, b, sizeof b));
            return free_b ? free_b : 1; /* 0 would read as unknown */
        }
        snprintf(what, len, "not queried on the %s backend", be ? backend_name(be) : "device");
        return 0;
    }
    size_t avail = plan_proc_field("/proc/meminfo", "MemAvailable");
    snprintf(what, len, "available RAM, /proc/meminfo");
    if (!avail) { /* no /proc: the physical pages, as sysconf counts them */
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
        snprintf(what, len, "available RAM, sysconf");
    }
    /* a cgroup's limit (v2, else v1) less what the group already uses */
    size_t lim = plan_file_number("/sys/fs/cgroup/memory.max"), used = plan_file_number("/sys/fs/cgroup/memory.current");
    if (!lim) {
        lim = plan_file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        used = plan_file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
        if (lim >= ((size_t)1 << 60)) lim = 0; /* v1 writes "no limit" as a huge number */
    }
    if (lim && (lim > used ? lim - used : 0) < avail) {
        avail = lim > used ? lim - used : 0;
        snprintf(what, len, "the cgroup's memory limit less its use");
    }
    return avail;
}

void plan_rss(size_t *rss, size_t *peak)
{
    *rss = plan_proc_field("/proc/self/status", "VmRSS");
    *peak = plan_proc_field("/proc/self/status", "VmHWM");
}

int plan_reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0; /* 5: reset the peak RSS (Linux 4.0+) */
    return fclose(f) == 0 && ok ? 0 : -1;
}

void plan_log_peak(const job_config *cfg, comm *c, backend *be, int T, int finetune, size_t rss_before)
{
    size_t rss, peak;
    plan_rss(&rss, &peak);
    double *grew = calloc((size_t)c->size, sizeof *grew);
    if (!grew) return;
    grew[c->rank] = peak > rss_before ? (double)(peak - rss_before) : 0.0;
    plan_shape sh;
    plan_shape_of(c, be, T, finetune, &sh);
    train_plan p;
    if ((c->size == 1 || comm_allreduce_host(c, grew, c->size) == 0) && peak && plan_compute(cfg, &sh, &p) == 0) {
        char line[512], b[32];
        int n = 0;
        for (int r = 0; r < c->size && r < 16 && n < (int)sizeof line - 64; r++)
            n += snprintf(line + n, sizeof line - (size_t)n, "%s rank %d %.0f", r ? "," : "", r, grew[r]);
        log_info("memory: peak resident growth since before the model (bytes):%s; plan %zu per rank (%s)", line,
                 p.total, plan_bytes(p.total, b, sizeof b));
    }
    free(grew);
}

void plan_shape_of(comm *c, backend *be, int T, int finetune, plan_shape *sh)
{
    const backend_config *bc = backend_cfg(be);
    memset(sh, 0, sizeof *sh);
    sh->ranks = c->size;
    sh->local_ranks = c->local_size > 0 ? c->local_size : 1;
    sh->T = T;
    sh->finetune = finetune;
    sh->bf16 = bc->precision == BACKEND_BF16;
    sh->cpu = strcmp(backend_name(be), "cpu") == 0;
    sh->threads = bc->threads > 0 ? bc->threads : 1;
}

int plan_check(const job_config *cfg, comm *c, backend *be, int T, int finetune)
{
    plan_shape sh;
    plan_shape_of(c, be, T, finetune, &sh);
    train_plan p;
    if (plan_compute(cfg, &sh, &p)) return -1;
    char what[96];
    size_t dev = plan_device_memory(be, sh.cpu, what, sizeof what);
    /* every rank reads before any allocates (this sum waits for all), and all take the smallest */
    double *v = calloc((size_t)c->size, sizeof *v);
    if (!v) return loom_fail("out of host memory");
    v[c->rank] = (double)dev;
    int rc = c->size > 1 ? comm_allreduce_host(c, v, c->size) : 0;
    for (int r = 0; r < c->size && rc == 0; r++)
        if (v[r] < (double)dev) dev = (size_t)v[r];
    free(v);
    if (rc) return -1;
    const char *skip = getenv("LOOM_NO_FIT_CHECK");
    size_t per = sh.cpu ? (size_t)sh.local_ranks : 1, need = p.total * per;
    if (!dev || need <= dev) return 0;
    char a[32], b[32], d[32], hint[160];
    if (skip && strcmp(skip, "1") == 0) {
        if (c->rank == 0)
            log_warn("the job needs %s per rank%s and the device has %s (%s): running it anyway (LOOM_NO_FIT_CHECK=1)",
                     plan_bytes(p.total, a, sizeof a), sh.cpu && sh.local_ranks > 1 ? " (x its ranks on a node)" : "",
                     plan_bytes(dev, b, sizeof b), what);
        return 0;
    }
    if (c->size > 1 && comm_agree_failure(c, 1) < 0) return -1; /* every rank refuses: no kill needed */
    if (c->rank != 0) return loom_fail("rank 0 refused the job: it does not fit the device");
    plan_hint(cfg, &p, p.largest, hint, sizeof hint);
    char ranks[64] = "";
    if (per > 1) snprintf(ranks, sizeof ranks, " x %zu ranks on this node", per);
    return loom_fail("the job needs %s per rank%s and the device has %s (%s): the largest part is %s, %s; %s "
                     "(`loom plan` shows every part; LOOM_NO_FIT_CHECK=1 runs it anyway)",
                     plan_bytes(p.total, a, sizeof a), ranks, plan_bytes(dev, b, sizeof b), what,
                     plan_part_name(p.largest), plan_bytes(p.part[p.largest], d, sizeof d), hint);
}
