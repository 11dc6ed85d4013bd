/* import.c: a Hugging Face folder -> a loom checkpoint (folder OUT or the one file OUT.h5), /model
 * only, the tokenizer files and config.json (as hf_config.json) copied beside it (model.tokenizer
 * names that copy). No whole tensor in memory: pieces of about 1 MB go from the mapped folder
 * through the conversion into the file (one whole tensor only where the layout changes: q/k rows
 * of RoPE models, GPT-2's transposed Conv1D). The CLI (`loom import`) parses and calls import_hf. */
#include "core/train/import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/gguf.h"
#include "checkpoints/hf.h"
#include "core/model/model.h"
#include "core/text/text.h"
#include "core/train/session.h"

typedef struct import_ctx {
    hf_model *h;
    const model *m;
} import_ctx;

/* A piece of tensor k, converted from the mapped folder straight into ckpt_save's piece buffer. */
static int import_piece(void *ctx, int k, size_t e0, size_t n, float *dst)
{
    import_ctx *ic = ctx;
    const model_tensor *t = &ic->m->tensors[k];
    return hf_read_range(ic->h, t->name, t->numel, e0, n, dst);
}

/* Write the checkpoint: loom's table laid out from the folder's config, filled from the folder. */
static int import_write(hf_model *h, job_config *cfg, const char *out_dir, uint64_t tok_hash)
{
    model m;
    memset(&m, 0, sizeof m);
    int rc = model_layout(&m, &cfg->model), n;
    hf_tensors(h, &n);
    if (rc == 0 && n != m.ntensors) rc = loom_fail("import: the folder maps to %d tensors, loom's model has %d", n, m.ntensors);
    import_ctx ic = {h, &m};
    ckpt_tensor *table = rc == 0 ? session_ckpt_table_of(m.tensors, m.ntensors) : NULL;
    char *model_json = config_model_to_json(&cfg->model), *job_json = config_to_json(cfg);
    if (rc == 0 && (!table || !model_json || !job_json)) rc = loom_fail("import: out of host memory");
    if (rc == 0) {
        ckpt_group g = {"model", table, m.ntensors, NULL, NULL, NULL};
        ckpt_state st = {0};
        st.model_config_json = model_json;
        st.job_config_json = job_json;
        st.world_size = 1;
        st.seed = cfg->train.seed; /* step 0 of the job it records: its state agrees with it (ckpt info, loads) */
        st.backend = "import";
        st.tokenizer_hash = tok_hash; /* a later load checks the tokenizer by content, not by this path */
        rc = ckpt_save_pieces(out_dir, &st, &g, import_piece, &ic, 0);
    }
    if (rc == 0) log_info("imported %s: %d tensors, %zu parameters", hf_arch_name(h), m.ntensors, m.nparams);
    free(table);
    free(model_json);
    free(job_json);
    free(m.tensors);
    free(m.region_offset);
    return rc;
}

/* A tokenizer.json loom reads is named by the checkpoint; one it cannot read (a WordPiece one,
 * say) leaves the byte tokenizer, with a warning: the weights are still worth importing. */
static int import_tokenizer_ok(const char *spec)
{
    if (strcmp(spec, "byte") == 0) return 0;
    tokenizer *t = tokenizer_open(spec);
    if (!t) log_warn("import: %s; the checkpoint keeps model.tokenizer = byte (set it when fine-tuning)", loom_error());
    tokenizer_free(t);
    return t != NULL;
}

/* OUT ending in .h5: the checkpoint as that one file (saved in OUT.d, then moved), its side files
 * in OUT's folder; else OUT is a checkpoint folder. */
static int import_to(hf_model *h, job_config *cfg, const char *dir, const char *out)
{
    size_t n = strlen(out);
    /* the folder's tokenizer is copied beside the checkpoint: the checkpoint's model names that copy */
    int own_tok = import_tokenizer_ok(cfg->model.tokenizer);
    uint64_t tok_hash = 0; /* the source's files hash as their copies do */
    if (own_tok && tokenizer_hash_of(cfg->model.tokenizer, &tok_hash)) tok_hash = 0;
    if (!own_tok) snprintf(cfg->model.tokenizer, sizeof cfg->model.tokenizer, "byte");
    if (n < 4 || strcmp(out + n - 3, ".h5") != 0) {
        if (own_tok) snprintf(cfg->model.tokenizer, sizeof cfg->model.tokenizer, "%.*s", (int)sizeof cfg->model.tokenizer - 1, out);
        if (session_mkdirs(out) || import_write(h, cfg, out, tok_hash)) return -1;
        return hf_copy_side_files(dir, out, 1);
    }
    char tmp[1100], parent[1100];
    snprintf(tmp, sizeof tmp, "%s.d", out);
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    else snprintf(parent, sizeof parent, ".");
    if (own_tok) snprintf(cfg->model.tokenizer, sizeof cfg->model.tokenizer, "%.*s", (int)sizeof cfg->model.tokenizer - 1, parent);
    if (session_mkdirs(parent) || import_write(h, cfg, tmp, tok_hash) || import_move_single(tmp, out)) return -1;
    return hf_copy_side_files(dir, parent, 1);
}

int import_move_single(const char *tmp, const char *out)
{
    char file[4200];
    snprintf(file, sizeof file, "%s/step_00000000.h5", tmp);
    int rc = rename(file, out) == 0 ? 0 : loom_fail("%s: cannot move the checkpoint here", out);
    if (rc) unlink(file);
    snprintf(file, sizeof file, "%s/latest", tmp);
    unlink(file);
    rmdir(tmp);
    return rc;
}

/* import_hf, the job's finetune.base naming `base` (the file the folder was made from) */
static int import_hf_as(const char *dir, const char *out, const char *base)
{
    hf_model *h = hf_open(dir);
    if (!h) return -1;
    job_config cfg;
    config_defaults(&cfg);
    snprintf(cfg.name, sizeof cfg.name, "import");
    snprintf(cfg.finetune.base, sizeof cfg.finetune.base, "%s", base);
    int rc = session_model_from_hf(&cfg.model, dir, NULL);
    if (cfg.train.seq_len > cfg.model.max_seq) cfg.train.seq_len = cfg.model.max_seq; /* a valid job */
    if (rc == 0) rc = import_to(h, &cfg, dir, out);
    hf_close(h);
    return rc;
}

int import_hf(const char *dir, const char *out) { return import_hf_as(dir, out, dir); }

int import_gguf(const char *path, const char *out)
{
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer.model", "tokenizer_config.json"};
    gguf_model *g = gguf_model_open(path);
    if (!g) return -1;
    char tmp[4200], f[4300];
    snprintf(tmp, sizeof tmp, "%s.gguf-import", out);
    int rc = session_mkdirs(tmp);
    /* one shard whatever the size: the folder lives only until import_hf_as has read it */
    if (rc == 0) rc = hf_export(tmp, gguf_model_json(g), gguf_model_get, g, ST_F32, NULL, UINT64_MAX);
    if (rc == 0) rc = gguf_model_write_tokenizer(g, tmp);
    gguf_model_close(g);
    if (rc == 0) rc = import_hf_as(tmp, out, path);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(f, sizeof f, "%s/%s", tmp, files[i]);
        unlink(f);
    }
    rmdir(tmp);
    return rc;
}
