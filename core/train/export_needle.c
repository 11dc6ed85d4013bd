/* export_needle.c: `loom export needle CKPT OUT.safetensors` (export.h): a Needle fine-tune's
 * adapters out of a loom checkpoint into Needle's adapter file. The checkpoint holds them in
 * Needle's own layout (A [L, in, r], B [L, r, out], B's columns in Needle's order; see
 * finetune_needle.c), so the tensors go out as stored: a file loom wrote from Needle's adapter
 * and trained zero steps has that adapter's bytes. */
#include "core/train/export.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle.h"
#include "core/config/config.h"
#include "core/train/finetune_needle.h"

/* The adapters' table from the checkpoint's Needle config and job config. */
static int export_needle_table(const char *file, const ckpt_state *st, const job_config *job, ckpt_tensor *table,
                               char names[][64], size_t *total)
{
    needle_config nc;
    if (needle_config_parse(&nc, st->model_config_json, file)) return -1;
    needle_geometry g;
    needle_geometry_of(&nc, &g);
    const int r = job->finetune.lora_rank;
    size_t off = 0;
    for (int t = 0; t < NEEDLE_LORA_TARGETS; t++) {
        int in, out;
        needle_lora_dims(&g, nc.d_model, t, &in, &out);
        for (int ab = 0; ab < 2; ab++) {
            finetune_needle_name(t, ab, names[2 * t + ab], 64);
            ckpt_tensor *x = &table[2 * t + ab];
            *x = (ckpt_tensor){names[2 * t + ab], 3, {nc.num_layers, ab ? r : in, ab ? out : r}, off};
            off += (size_t)nc.num_layers * (ab ? (size_t)r * out : (size_t)in * r);
        }
    }
    *total = off;
    return 0;
}

int export_needle(const char *ckpt, const char *out)
{
    char file[1024];
    if (ckpt_resolve(ckpt, file, sizeof file)) return -1;
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    ckpt_state st = {0};
    job_config job;
    ckpt_tensor table[2 * NEEDLE_LORA_TARGETS];
    char names[2 * NEEDLE_LORA_TARGETS][64];
    size_t total = 0;
    float *data = NULL;
    int rc = ckpt_read_state(r, &st);
    if (rc == 0 && (!ckpt_has_group(r, "lora") || !ckpt_has_group(r, "optimizer/lora_m")))
        rc = loom_fail("%s: not a Needle fine-tune's checkpoint (no Needle config and adapters); `loom export hf` "
                       "and `peft` take the others", file);
    if (rc == 0 && config_load_string(&job, st.job_config_json, file, NULL, 0))
        rc = loom_fail("%s: attribute job_config is unreadable: %s", file, loom_error());
    if (rc == 0) rc = export_needle_table(file, &st, &job, table, names, &total);
    if (rc == 0 && !(data = malloc(total * sizeof(float)))) rc = loom_fail("export: out of host memory");
    if (rc == 0) {
        ckpt_group grp = {"lora", table, 2 * NEEDLE_LORA_TARGETS, data, NULL, NULL};
        rc = ckpt_read_group(r, &grp);
    }
    if (rc == 0) {
        const char *paths[NEEDLE_LORA_TARGETS];
        needle_wtensor w[2 * NEEDLE_LORA_TARGETS];
        for (int i = 0; i < 2 * NEEDLE_LORA_TARGETS; i++) {
            if (i % 2 == 0) paths[i / 2] = needle_lora_path(i / 2);
            w[i] = (needle_wtensor){NULL, ST_F32, 3, {0}, data + table[i].offset};
            for (int k = 0; k < 3; k++) w[i].shape[k] = table[i].shape[k];
        }
        const double scale = (double)job.finetune.lora_alpha / job.finetune.lora_rank;
        rc = needle_write_adapter(out, paths, w, NEEDLE_LORA_TARGETS, scale, job.finetune.base, job.finetune.lora_rank,
                                  (int64_t)job.train.seed);
    }
    if (rc == 0)
        log_info("export: %s -> %s (Needle LoRA adapter, rank %d, scale %g, step %lld)", file, out,
                 job.finetune.lora_rank, (double)job.finetune.lora_alpha / job.finetune.lora_rank, (long long)st.step);
    free(data);
    ckpt_state_free(&st);
    ckpt_close(r);
    return rc;
}
