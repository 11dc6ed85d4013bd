/* cmd_export.c: `loom export hf CKPT OUT_DIR [--dtype f32|bf16|f16] [--merge] [--shard-mb N]` and
 * `loom export peft CKPT OUT_DIR`: a loom checkpoint -> a Hugging Face folder or a PEFT adapter.
 * The tensors are the checkpoint's logical fp32 ones (a LoRA checkpoint's base comes from its
 * finetune.base: a loom checkpoint or an HF folder); the mapping is checkpoints/hf*.c's. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/hf.h"
#include "core/model/model.h"
#include "core/train/train.h"
#include "launch/cli.h"

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

/* Group `grp` of checkpoint `path` laid out as (t, n) into host. */
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

typedef struct export_args {
    const char *kind, *ckpt, *out;
    st_dtype dtype;
    int merge;
    double shard_mb;
} export_args;

static int export_parse(int argc, char **argv, export_args *a)
{
    memset(a, 0, sizeof *a);
    a->dtype = ST_F32;
    a->shard_mb = 2048;
    if (argc < 5) return loom_fail("usage: loom export hf CKPT OUT_DIR [--dtype f32|bf16|f16] [--merge] [--shard-mb N] | loom export peft CKPT OUT_DIR");
    a->kind = argv[2];
    a->ckpt = argv[3];
    a->out = argv[4];
    if (strcmp(a->kind, "hf") != 0 && strcmp(a->kind, "peft") != 0) return loom_fail("export: unknown kind '%s' (hf, peft)", a->kind);
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--merge") == 0) a->merge = 1;
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") == 0) a->dtype = ST_F32;
            else if (strcmp(d, "bf16") == 0) a->dtype = ST_BF16;
            else if (strcmp(d, "f16") == 0) a->dtype = ST_F16;
            else return loom_fail("export: --dtype '%s' (f32, bf16, f16)", d);
        } else if (strcmp(argv[i], "--shard-mb") == 0 && i + 1 < argc) {
            a->shard_mb = atof(argv[++i]);
            if (!(a->shard_mb > 0)) return loom_fail("export: --shard-mb must be positive");
        } else return loom_fail("export: unexpected argument '%s'", argv[i]);
    }
    return 0;
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
static int export_streamed(ckpt_reader *r, const char *file, const model_tensor *t, int n, const char *out,
                           const char *mj, const export_args *a, const char *sd)
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
    if (rc == 0)
        rc = hf_export_pieces(out, mj, export_get, export_pieces, &src, a->dtype, sd, (uint64_t)(a->shard_mb * 1024 * 1024));
    free(src.ct);
    free(src.buf);
    free(src.piece);
    return rc;
}

static int export_run(const export_args *a)
{
    char file[1024], side[1024];
    job_config cfg;
    int lora = 0;
    ckpt_reader *r = NULL;
    if (export_job(a->ckpt, file, sizeof file, &cfg, &lora, &r)) return -1;
    int peft = strcmp(a->kind, "peft") == 0, rc = 0;
    if (peft && !lora) rc = loom_fail("%s: not a LoRA checkpoint (no /lora group): use `loom export hf`", file);
    if (!rc && !peft && lora && !a->merge)
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
    if (rc == 0) rc = session_mkdirs(a->out);
    const char *sd = export_side_dir(file, &cfg, side, sizeof side);
    if (rc == 0 && peft) {
        export_src src = {m->tensors, m->ntensors, ad, NULL, NULL, NULL, NULL};
        rc = hf_export_peft(a->out, mj, export_get, &src, ls.rank, ls.alpha, ls.targets, cfg.finetune.base);
    } else if (rc == 0 && lora) {
        export_src src = {bt, nb, base, NULL, NULL, NULL, NULL};
        rc = hf_export(a->out, mj, export_get, &src, a->dtype, sd, (uint64_t)(a->shard_mb * 1024 * 1024));
    } else if (rc == 0) {
        rc = export_streamed(r, file, bt, nb, a->out, mj, a, sd);
    }
    free(mj);
    free(base);
    free(ad);
    model_destroy(m);
    backend_destroy(be);
    ckpt_close(r);
    return rc;
}

int cmd_export(int argc, char **argv)
{
    export_args a;
    if (export_parse(argc, argv, &a) || export_run(&a)) return cli_fail();
    printf("%s -> %s\n", a.ckpt, a.out);
    return 0;
}
