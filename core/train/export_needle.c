/* export_needle.c: `loom export needle CKPT OUT.safetensors` (export.h): a Needle fine-tune's
 * adapters out of a loom checkpoint into Needle's adapter file. The checkpoint holds them in
 * Needle's own layout (A [L, in, r], B [L, r, out], B's columns in Needle's order; see
 * finetune_needle.c), so the tensors go out as stored: a file loom wrote from Needle's adapter
 * and trained zero steps has that adapter's bytes. A ladder rung's adapters (model.layers) go out
 * at the base's full depth with zeros on the layers the rung drops, so that Needle's own `needle
 * build --lora OUT --layers N` (merge into the base, then cut the rung) gives the rung trained;
 * --merge writes the rung itself, cut as Needle cuts it with the adapters folded in. A checkpoint
 * `loom import` made of a Needle base goes out as that base's file again. */
#include "core/train/export.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/needle.h"
#include "core/config/config.h"
#include "core/train/finetune_needle.h"

/* The stored form of float x in dtype dt at out[i]. */
static void export_needle_store(void *out, size_t i, st_dtype dt, float x)
{
    if (dt == ST_BF16) ((uint16_t *)out)[i] = st_f32_to_bf16(x);
    else if (dt == ST_F16) ((uint16_t *)out)[i] = st_f32_to_f16(x);
    else ((float *)out)[i] = x;
}

/* Target t's kernel of the base (tensor i of f, [L, in, out]) with the adapter folded in as
 * Needle's merge_lora does it (ft:336-342: W + scale (A B), in float32), in the tensor's own dtype
 * (so a zero adapter gives the stored bytes back). NULL + loom_fail. */
static void *export_needle_fold(needle_file *f, int i, const float *A, const float *B, int r, float scale)
{
    const st_tensor *x = needle_file_tensor(f, i);
    const int L = (int)x->shape[0], in = (int)x->shape[1], out = (int)x->shape[2];
    float *W = malloc(x->numel * sizeof(float));
    void *o = malloc(x->numel * (x->dtype == ST_F32 ? 4 : 2));
    if (!W || !o || (x->dtype != ST_F32 && x->dtype != ST_BF16 && x->dtype != ST_F16) || needle_file_read(f, i, W, x->numel)) {
        if (W && o) loom_fail("tensor %s: dtype not F32, BF16 or F16, or unreadable", x->name);
        else loom_fail("export: out of host memory");
        free(W), free(o);
        return NULL;
    }
    for (int l = 0; l < L; l++)
        for (int p = 0; p < in; p++)
            for (int q = 0; q < out; q++) {
                float ab = 0.0f;
                for (int k = 0; k < r; k++) ab += A[((size_t)l * in + p) * r + k] * B[((size_t)l * r + k) * out + q];
                const size_t e = ((size_t)l * in + p) * out + q;
                export_needle_store(o, e, x->dtype, W[e] + scale * ab);
            }
    free(W);
    return o;
}

/* The base the adapters were trained on (its rung when model.layers): the digest checked. */
static needle_file *export_needle_base(const char *file, const ckpt_state *st, const job_config *job, int layers,
                                       int allow_other_base)
{
    needle_file *f = needle_open_rung(job->finetune.base, layers);
    if (f && needle_file_digest(f) != st->base_digest && !allow_other_base) {
        loom_fail("%s: the adapters were trained on another base than %s (its digest differs); "
                  "--allow-other-base exports anyway", file, job->finetune.base);
        needle_close(f);
        return NULL;
    }
    return f;
}

/* Base f into `out`: every tensor's bytes as f stores them (a LoRA target's replaced by fold[t]
 * when fold is given) and the metadata strings as stored, in their order (the safetensors library
 * writes its hash map's order, which varies between Needle's runs). sorted: the tensors in the
 * order Needle's writer puts them (a rung renames engram sites), else in f's own. */
static int export_needle_write(needle_file *f, const char *out, void *const *fold, int sorted)
{
    int rc = 0, n = needle_file_count(f), nm = needle_file_meta_count(f);
    needle_wtensor *w = calloc((size_t)n + 1, sizeof *w);
    needle_meta *m = calloc((size_t)nm + 1, sizeof *m);
    if (!w || !m) rc = loom_fail("export: out of host memory");
    for (int i = 0; rc == 0 && i < n; i++) {
        const st_tensor *x = needle_file_tensor(f, i);
        int t = 0;
        while (fold && t < NEEDLE_LORA_TARGETS && strcmp(x->name, needle_lora_path(t))) t++;
        size_t nb;
        w[i] = (needle_wtensor){x->name, x->dtype, x->ndim, {0}, fold && t < NEEDLE_LORA_TARGETS ? fold[t] : NULL};
        if (!w[i].data && !(w[i].data = needle_file_bytes(f, i, &nb))) rc = -1;
        for (int k = 0; k < x->ndim; k++) w[i].shape[k] = x->shape[k];
    }
    for (int k = 0; rc == 0 && k < nm; k++) m[k].key = needle_file_meta_at(f, k, &m[k].value);
    if (rc == 0) rc = sorted ? needle_write(out, w, n, m, nm) : needle_write_ordered(out, w, n, m, nm);
    free(m);
    free(w);
    return rc;
}

/* The base with every adapter folded in, the other tensors and the metadata as the base stores
 * them: what Needle's read_checkpoint loads (zero adapters: the base file back, byte for byte). */
static int export_needle_merged(const char *file, const ckpt_state *st, const job_config *job, const float *data,
                                const ckpt_tensor *table, const char *out, int allow_other_base)
{
    needle_file *f = export_needle_base(file, st, job, job->model.layers, allow_other_base);
    if (!f) return -1;
    int rc = 0;
    void *fold[NEEDLE_LORA_TARGETS] = {0};
    const float scale = (float)((double)job->finetune.lora_alpha / job->finetune.lora_rank);
    for (int t = 0; rc == 0 && t < NEEDLE_LORA_TARGETS; t++) {
        const int i = needle_file_find(f, needle_lora_path(t));
        if (i < 0) rc = loom_fail("%s: no tensor %s", job->finetune.base, needle_lora_path(t));
        else if (!(fold[t] = export_needle_fold(f, i, data + table[2 * t].offset, data + table[2 * t + 1].offset,
                                                job->finetune.lora_rank, scale)))
            rc = -1;
    }
    if (rc == 0) rc = export_needle_write(f, out, fold, 1);
    for (int t = 0; t < NEEDLE_LORA_TARGETS; t++) free(fold[t]);
    needle_close(f);
    return rc;
}

/* A Needle base `loom import` made (no adapters): its file again, tensors and metadata bitwise in
 * the file's order (mtp_ tensors, dropped at import, are not in it). */
static int export_needle_imported(const char *file, const char *out)
{
    needle_file *f = needle_open(file);
    if (!f) return -1;
    int rc = export_needle_write(f, out, NULL, 0);
    if (rc == 0) log_info("export: %s -> %s (the imported Needle base, as its file held it)", file, out);
    needle_close(f);
    return rc;
}

/* A rung's adapters (table's [D, ...] tensors in data) at the base's full depth L into *full
 * (malloc'd, the same tensors [L, ...] with zero rows off the rung), the table's shapes set to L. */
static int export_needle_pad(const char *file, const ckpt_state *st, const job_config *job, ckpt_tensor *table,
                             const float *data, int allow_other_base, float **full)
{
    needle_file *f = export_needle_base(file, st, job, 0, allow_other_base);
    if (!f) return -1;
    const int L = needle_file_config(f)->num_layers, D = job->model.layers;
    int sel[NEEDLE_MAX_LIST];
    int rc = needle_ladder_layers(needle_file_config(f), D, sel);
    needle_close(f);
    if (rc) return -1;
    size_t total = 0;
    for (int i = 0; i < 2 * NEEDLE_LORA_TARGETS; i++) total += (size_t)L * table[i].shape[1] * table[i].shape[2];
    if (!(*full = calloc(total, sizeof(float)))) return loom_fail("export: out of host memory");
    size_t off = 0;
    for (int i = 0; i < 2 * NEEDLE_LORA_TARGETS; i++) {
        const size_t per = (size_t)table[i].shape[1] * table[i].shape[2];
        for (int j = 0; j < D; j++)
            memcpy(*full + off + (size_t)sel[j] * per, data + table[i].offset + (size_t)j * per, per * sizeof(float));
        table[i].shape[0] = L, table[i].offset = off;
        off += (size_t)L * per;
    }
    return 0;
}

int export_needle(const char *ckpt, const char *out, int merge, int allow_other_base)
{
    char file[1024];
    if (ckpt_resolve(ckpt, file, sizeof file)) return -1;
    /* a peek: an import goes on to needle_open, whose open of the same file then skips the seal */
    ckpt_reader *r = ckpt_open_peek(file);
    if (!r) return -1;
    ckpt_state st = {0};
    job_config job;
    ckpt_tensor table[2 * NEEDLE_LORA_TARGETS];
    char names[2 * NEEDLE_LORA_TARGETS][128];
    size_t total = 0;
    float *data = NULL, *padded = NULL;
    int rc = ckpt_read_state(r, &st);
    if (rc == 0 && st.source[0] && !ckpt_has_group(r, "lora")) { /* an import: the base it holds */
        ckpt_state_free(&st);
        ckpt_close(r);
        return export_needle_imported(file, out);
    }
    if (rc == 0 && (!ckpt_has_group(r, "lora") || !ckpt_has_group(r, "optimizer/lora_m")))
        rc = loom_fail("%s: not a Needle fine-tune's checkpoint (no Needle config and adapters); `loom export hf` "
                       "and `peft` take the others", file);
    if (rc == 0 && config_load_string(&job, st.job_config_json, file, NULL, 0))
        rc = loom_fail("%s: attribute job_config is unreadable: %s", file, loom_error());
    needle_config nc;
    if (rc == 0 && needle_config_parse(&nc, st.model_config_json, file)) rc = -1;
    if (rc == 0) total = finetune_needle_table(&nc, job.finetune.lora_rank, table, names);
    if (rc == 0 && !(data = malloc(total * sizeof(float)))) rc = loom_fail("export: out of host memory");
    if (rc == 0) {
        ckpt_group grp = {"lora", table, 2 * NEEDLE_LORA_TARGETS, data, NULL, NULL};
        rc = ckpt_read_group(r, &grp);
    }
    if (rc == 0 && merge) rc = export_needle_merged(file, &st, &job, data, table, out, allow_other_base);
    else if (rc == 0 && job.model.layers > 0 && export_needle_pad(file, &st, &job, table, data, allow_other_base, &padded))
        rc = -1;
    else if (rc == 0) {
        const float *src = padded ? padded : data;
        const char *paths[NEEDLE_LORA_TARGETS];
        needle_wtensor w[2 * NEEDLE_LORA_TARGETS];
        for (int i = 0; i < 2 * NEEDLE_LORA_TARGETS; i++) {
            if (i % 2 == 0) paths[i / 2] = needle_lora_path(i / 2);
            w[i] = (needle_wtensor){NULL, ST_F32, 3, {0}, src + table[i].offset};
            for (int k = 0; k < 3; k++) w[i].shape[k] = table[i].shape[k];
        }
        const double scale = (double)job.finetune.lora_alpha / job.finetune.lora_rank;
        rc = needle_write_adapter(out, paths, w, NEEDLE_LORA_TARGETS, scale, job.finetune.base, job.finetune.lora_rank,
                                  (int64_t)job.train.seed);
    }
    if (rc == 0)
        log_info("export: %s -> %s (%s%s, rank %d, scale %g, step %lld)", file, out,
                 merge ? "Needle base with the adapters merged" : "Needle LoRA adapter",
                 !job.model.layers ? "" : merge ? ", the ladder rung cut" : ", at the base's depth (zero off the rung)",
                 job.finetune.lora_rank,
                 (double)job.finetune.lora_alpha / job.finetune.lora_rank, (long long)st.step);
    free(data), free(padded);
    ckpt_state_free(&st);
    ckpt_close(r);
    return rc;
}
