/* export.c: LoRA merge (see export.h). Works on host arrays through ckpt.h and the model's tensor
 * tables; the CPU backend only hosts the (tiny, 1-token) model object that owns those tables. */
#include "core/train/export.h"

#include <stdlib.h>
#include <string.h>

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
