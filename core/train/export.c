/* export.c: LoRA merge and HF / PEFT / GGUF export (see export.h). Works on host arrays through ckpt.h,
 * hf.h and the model's tensor tables; the CPU backend only hosts the (tiny, 1-token) model object
 * that owns those tables. Never prints: the CLI reports the result. */
#include "core/train/export.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "checkpoints/ckpt.h"
#include "core/config/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/model/model.h"
#include "core/train/session.h"

/* Open `path` (file or dir) and read the group `grp` laid out as (mt, n); *digest (may be NULL):
 * the group's identity (ckpt_group_digest). */
static int export_read(const char *path, const char *grp, const model_tensor *mt, int n, float *host,
                       uint64_t *digest)
{
    ckpt_state st_local = {0}, *st = &st_local;
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    int rc = ckpt_read_state(r, st);
    if (rc == 0 && !ckpt_has_group(r, grp)) rc = loom_fail("%s: no /%s group (not a %s checkpoint)", file, grp, grp);
    ckpt_tensor *t = session_ckpt_table_of(mt, n);
    ckpt_group g = {grp, t, n, host, NULL, NULL};
    if (rc == 0) rc = t ? ckpt_read_group(r, &g) : loom_fail("out of host memory");
    if (rc == 0 && digest) rc = ckpt_group_digest(r, &g, digest);
    free(t);
    ckpt_close(r);
    ckpt_state_free(st);
    return rc;
}

/* The adapters' recorded base (0 in a version 1 file: not recorded) against the base given. */
static int export_check_base(const char *base, const char *adapter, uint64_t want, uint64_t got, int allow)
{
    if (want == got) return 0;
    if (!want) {
        log_warn("%s: the adapter file does not record its base: cannot check it was trained on %s", adapter, base);
        return 0;
    }
    if (allow) {
        log_warn("%s: merging onto %s, another base than the adapters were trained on (--allow-other-base)", adapter, base);
        return 0;
    }
    return loom_fail("%s: the adapters were trained on another base (digest %016llx), not %s (%016llx); "
                     "add --allow-other-base to merge anyway", adapter, (unsigned long long)want, base,
                     (unsigned long long)got);
}

int export_merge_lora(const char *base, const char *adapter, const char *out_dir, int allow_other_base)
{
    uint64_t base_digest = 0;
    job_config cfg;
    ckpt_state ast = {0};
    model *m = NULL;
    backend *be = NULL;
    float *bh = NULL, *ah = NULL;
    char file[1024];
    int rc = ckpt_resolve(adapter, file, sizeof file);
    ckpt_reader *r = rc == 0 ? ckpt_open(file) : NULL;
    rc = r ? ckpt_read_state(r, &ast) : -1;
    if (r) ckpt_close(r);
    if (rc == 0 && config_load_string(&cfg, ast.job_config_json, file, NULL, 0)) rc = -1;
    lora_spec ls;
    if (rc == 0 && strcmp(cfg.finetune.method, "lora") != 0) rc = loom_fail("%s: not a LoRA fine-tune (finetune.method '%s')", file, cfg.finetune.method);
    if (rc == 0) rc = lora_spec_from_config(&cfg.finetune, &cfg.model, &ls);
    backend_config bc = {.threads = 1};
    if (rc == 0 && !(be = backend_select("cpu", &bc, NULL, 0))) rc = -1;
    if (rc == 0 && !(m = model_create(&cfg.model, be, 1, 1, 0, 0, 0, &ls))) rc = -1;
    if (rc == 0 && (!(bh = malloc(m->nbase_params * sizeof(float))) || !(ah = malloc(m->nparams * sizeof(float)))))
        rc = loom_fail("out of host memory");
    if (rc == 0) rc = export_read(base, "model", m->base_tensors, m->nbase, bh, &base_digest);
    if (rc == 0) rc = export_check_base(base, file, ast.base_digest, base_digest, allow_other_base);
    if (rc == 0) rc = export_read(adapter, "lora", m->tensors, m->ntensors, ah, NULL);
    if (rc == 0) rc = model_lora_merge(m, bh, ah);
    if (rc == 0) {
        ckpt_tensor *t = session_ckpt_table_of(m->base_tensors, m->nbase);
        ckpt_group g = {"model", t, m->nbase, bh, NULL, NULL};
        ckpt_state out = ast; /* step, seeds, configs of the fine-tune: the merged model's history */
        out.base_digest = 0;  /* a whole model now, bound to nothing */
        out.rng_counter = (uint64_t)out.sample_cursor; /* a version 1 adapter kept the AdamW step there */
        int lock = -1; /* one writer per folder, a merge included */
        rc = !t ? loom_fail("out of host memory") : ckpt_lock(out_dir, &lock) ? -1 : ckpt_save(out_dir, &out, &g, 1, 0);
        ckpt_unlock(lock);
        free(t);
    }
    if (rc == 0) log_info("merged %s + %s (LoRA rank %d, scale %g) into %s", base, adapter, ls.rank, m->lora_scale, out_dir);
    free(bh);
    free(ah);
    model_destroy(m);
    backend_destroy(be);
    ckpt_state_free(&ast);
    return rc;
}

typedef struct export_src {
    const model_tensor *t;
    int n;
    const float *host;   /* every tensor at its offset; NULL: read one at a time from r */
    ckpt_reader *r;      /* streaming: the checkpoint's /model, each tensor into buf in turn */
    ckpt_tensor *ct;     /* r's table (t as ckpt_tensors) */
    float *buf;          /* the largest tensor */
    float *piece;        /* the largest piece (ckpt_piece_size) */
} export_src;

static const float *export_get(void *ctx, const char *name)
{
    const export_src *s = ctx;
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->t[i].name, name) != 0) continue;
        if (s->host) return s->host + s->t[i].offset;
        ckpt_tensor one = s->ct[i];
        one.offset = 0;
        ckpt_group g = {"model", &one, 1, s->buf, NULL, NULL};
        return ckpt_read_group(s->r, &g) ? NULL : s->buf; /* valid until the next call: hf_export's contract */
    }
    return NULL;
}

/* Group grp (table t, n) of the open checkpoint r (file) into host. */
static int export_read_from(ckpt_reader *r, const char *file, const char *grp, const model_tensor *t, int n,
                            float *host)
{
    int rc = ckpt_has_group(r, grp) ? 0 : loom_fail("%s: no /%s group", file, grp);
    ckpt_tensor *ct = session_ckpt_table_of(t, n);
    ckpt_group g = {grp, ct, n, host, NULL, NULL};
    if (rc == 0) rc = ct ? ckpt_read_group(r, &g) : loom_fail("out of host memory");
    free(ct);
    return rc;
}

static int export_read_group(const char *path, const char *grp, const model_tensor *t, int n, float *host)
{
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    int rc = export_read_from(r, file, grp, t, n, host);
    ckpt_close(r);
    return rc;
}

/* The base weights of a job (an HF folder or a loom checkpoint) into host (table t, n). */
static int export_read_base(const char *base, const model_tensor *t, int n, float *host)
{
    if (!hf_is_folder(base)) return export_read_group(base, "model", t, n, host);
    hf_model *h = hf_open(base);
    int rc = h ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) rc = hf_read(h, t[i].name, host + t[i].offset, t[i].numel);
    hf_close(h);
    return rc;
}

/* Where the tokenizer files and the source config.json are: beside the checkpoint (an import),
 * else finetune.base (an HF folder, or an import folder). NULL when nowhere. */
static const char *export_side_dir(const char *ckpt_file, const job_config *cfg, char *buf, size_t len)
{
    char tmp[1024], probe[1200];
    snprintf(tmp, sizeof tmp, "%s", ckpt_file);
    snprintf(buf, len, "%s", dirname(tmp));
    snprintf(probe, sizeof probe, "%s/hf_config.json", buf);
    if (access(probe, F_OK) == 0) return buf;
    const char *b = cfg->finetune.base;
    if (!b[0]) return NULL;
    if (hf_is_folder(b)) { snprintf(buf, len, "%s", b); return buf; }
    snprintf(probe, sizeof probe, "%s/hf_config.json", b);
    if (access(probe, F_OK) == 0) { snprintf(buf, len, "%s", b); return buf; }
    return NULL;
}

/* The checkpoint's job config; *lora = 1 when it holds LoRA adapters. The reader stays open in
 * *out (the seal is checked once): the caller closes it. */
static int export_job(const char *ckpt, char *file, size_t len, job_config *cfg, int *lora, ckpt_reader **out)
{
    *out = NULL;
    if (ckpt_resolve(ckpt, file, len)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    ckpt_state st = {0};
    int rc = ckpt_read_state(r, &st);
    if (rc == 0) rc = config_load_string(cfg, st.job_config_json, file, NULL, 0);
    if (rc == 0) rc = config_model_from_json(&cfg->model, st.model_config_json);
    *lora = ckpt_has_group(r, "lora");
    ckpt_state_free(&st);
    if (rc) ckpt_close(r);
    else *out = r;
    return rc;
}

/* A tensor of the streamed checkpoint in pieces of about 1 MB (its checksum checked at the end:
 * a bad one fails the export, whose file is then removed). */
static int export_pieces(void *ctx, const char *name, int (*put)(void *pctx, const float *x, size_t n), void *pctx)
{
    const export_src *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return ckpt_read_pieces(s->r, "model", &s->ct[i], s->piece, put, pctx);
    return loom_fail("export: the checkpoint has no tensor %s", name);
}

/* `export hf` of a whole-model checkpoint, from the reader export_job opened: tensors whose
 * layout does not change in pieces, the others (q/k rows of RoPE models, GPT-2's fused and
 * transposed ones) one whole tensor at a time (hf_export is done with each before the next). */
static int export_streamed(ckpt_reader *r, const char *file, const model_tensor *t, int n, const char *mj,
                           const export_options *o, const char *sd)
{
    size_t maxn = 1, maxp = 1;
    export_src src = {t, n, NULL, r, session_ckpt_table_of(t, n), NULL, NULL};
    for (int i = 0; src.ct && i < n; i++) {
        size_t p = ckpt_piece_size(&src.ct[i]);
        maxn = t[i].numel > maxn ? t[i].numel : maxn;
        maxp = p > maxp ? p : maxp;
    }
    /* malloc'd but touched only as far as the tensors read whole need (a few MB): the embedding
     * goes through in pieces */
    src.buf = malloc(maxn * sizeof(float));
    src.piece = malloc(maxp * sizeof(float));
    int rc = ckpt_has_group(r, "model") ? 0 : loom_fail("%s: no /model group", file);
    if (rc == 0 && (!src.ct || !src.buf || !src.piece)) rc = loom_fail("export: out of host memory");
    if (rc == 0 && o->gguf) rc = gguf_export(o->out_dir, mj, file, export_get, export_pieces, &src, o->gguf_type, sd);
    else if (rc == 0)
        rc = hf_export_pieces(o->out_dir, mj, export_get, export_pieces, &src, o->dtype, sd,
                              (uint64_t)(o->shard_mb * 1024 * 1024));
    free(src.ct);
    free(src.buf);
    free(src.piece);
    return rc;
}

int export_hf(const export_options *o)
{
    char file[1024], side[1024];
    job_config cfg;
    int lora = 0;
    ckpt_reader *r = NULL;
    if (export_job(o->ckpt, file, sizeof file, &cfg, &lora, &r)) return -1;
    int peft = o->peft || (o->gguf && o->gguf_adapter), rc = 0; /* the adapters alone */
    if (peft && !lora)
        rc = o->gguf ? loom_fail("%s: not a LoRA checkpoint (no /lora group): --adapter needs one (without it: the model)", file)
                     : loom_fail("%s: not a LoRA checkpoint (no /lora group): use `loom export hf`", file);
    if (!rc && !peft && lora && !o->merge && !o->gguf) /* a GGUF of a LoRA fine-tune is always merged */
        rc = loom_fail("%s: a LoRA checkpoint: add --merge (adapters folded into the base) or use `loom export peft`", file);
    lora_spec ls = {0};
    if (!rc && lora && lora_spec_from_config(&cfg.finetune, &cfg.model, &ls)) rc = -1;
    backend_config bc = {.threads = 1};
    backend *be = rc ? NULL : backend_select("cpu", &bc, NULL, 0);
    model *m = be ? model_create(&cfg.model, be, 1, 1, 0, 0, 0, lora ? &ls : NULL) : NULL;
    const model_tensor *bt;
    int nb;
    size_t nbp;
    float *base = NULL, *ad = NULL;
    if (!rc && !m) rc = -1;
    if (rc == 0) {
        model_base_table(m, &bt, &nb, &nbp);
        base = peft || !lora ? NULL : malloc(nbp * sizeof(float)); /* no LoRA: streamed */
        ad = lora ? malloc(m->nparams * sizeof(float)) : NULL;
        if ((!peft && lora && !base) || (lora && !ad)) rc = loom_fail("export: out of host memory");
    }
    if (rc == 0 && lora && !peft) rc = export_read_base(cfg.finetune.base, bt, nb, base);
    if (rc == 0 && lora) rc = export_read_from(r, file, "lora", m->tensors, m->ntensors, ad);
    if (rc == 0 && lora && !peft) rc = model_lora_merge(m, base, ad);
    char *mj = rc == 0 ? config_model_to_json(&cfg.model) : NULL;
    if (rc == 0 && !mj) rc = loom_fail("out of memory");
    if (rc == 0 && !o->gguf) rc = session_mkdirs(o->out_dir); /* a GGUF is one file, in a folder that exists */
    const char *sd = export_side_dir(file, &cfg, side, sizeof side);
    if (rc == 0 && peft) {
        export_src src = {m->tensors, m->ntensors, ad, NULL, NULL, NULL, NULL};
        rc = o->gguf ? gguf_export_adapter(o->out_dir, mj, file, export_get, &src, ls.rank, ls.alpha, ls.targets, o->gguf_type)
                     : hf_export_peft(o->out_dir, mj, export_get, &src, ls.rank, ls.alpha, ls.targets, cfg.finetune.base);
    } else if (rc == 0 && lora && o->gguf) {
        export_src src = {bt, nb, base, NULL, NULL, NULL, NULL};
        rc = gguf_export(o->out_dir, mj, file, export_get, NULL, &src, o->gguf_type, sd);
    } else if (rc == 0 && lora) {
        export_src src = {bt, nb, base, NULL, NULL, NULL, NULL};
        rc = hf_export(o->out_dir, mj, export_get, &src, o->dtype, sd, (uint64_t)(o->shard_mb * 1024 * 1024));
    } else if (rc == 0) {
        rc = export_streamed(r, file, bt, nb, mj, o, sd);
    }
    free(mj);
    free(base);
    free(ad);
    model_destroy(m);
    backend_destroy(be);
    ckpt_close(r);
    return rc;
}
