/* hf_peft.c: loom LoRA adapters -> a PEFT adapter folder (adapter_config.json +
 * adapter_model.safetensors, names base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight)
 * for the Llama-family mappings. PEFT's A (r, in) and B (out, r) are loom's; the B rows of q and
 * k go back from loom's rope pair order to HF's, as the base q/k rows do. */
#include "checkpoints/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

/* loom LoRA targets in LORA_* order (q, k, v, o, fc, gate, up, proj): stems and HF modules */
static const char *const peft_stem[8] = {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc", "mlp.gate", "mlp.up", "mlp.down"};
static const char *const peft_module[8] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                           NULL, "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

typedef struct peft_ctx {
    hf_map *maps;
    int n;
    hf_get_fn get;
    void *ctx;
    float *buf;
    size_t cap;
} peft_ctx;


static const float *peft_fetch(void *ctx, int k)
{
    peft_ctx *p = ctx;
    const hf_map *m = &p->maps[k];
    size_t n = (size_t)m->shape[0] * (size_t)m->shape[1];
    const float *x = p->get(p->ctx, m->loom);
    if (!x) { loom_fail("export peft: the checkpoint has no tensor %s", m->loom); return NULL; }
    if (n > p->cap) {
        float *b = realloc(p->buf, n * sizeof(float));
        if (!b) { loom_fail("out of memory"); return NULL; }
        p->buf = b;
        p->cap = n;
    }
    hf_convert(m, (float *)x, p->buf, 1);
    return p->buf;
}

static int peft_write_config(const char *out_dir, int rank, float alpha, unsigned targets, const char *base_name)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    cJSON_AddStringToObject(c, "base_model_name_or_path", base_name ? base_name : "");
    cJSON_AddNumberToObject(c, "r", rank);
    cJSON_AddNumberToObject(c, "lora_alpha", alpha);
    cJSON_AddNumberToObject(c, "lora_dropout", 0.0);
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddBoolToObject(c, "fan_in_fan_out", 0);
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    cJSON_AddBoolToObject(c, "use_rslora", 0);
    cJSON_AddBoolToObject(c, "use_dora", 0);
    cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    cJSON *tm = cJSON_AddArrayToObject(c, "target_modules");
    for (int t = 0; t < 8; t++)
        if (targets & (1u << t)) cJSON_AddItemToArray(tm, cJSON_CreateString(strchr(peft_module[t], '.') + 1));
    char *txt = cJSON_Print(c), path[4096];
    cJSON_Delete(c);
    snprintf(path, sizeof path, "%s/adapter_config.json", out_dir);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int rc = f && fputs(txt, f) >= 0 ? 0 : loom_fail("%s: cannot write", path);
    if (f && fclose(f) != 0) rc = loom_fail("%s: cannot write", path);
    free(txt);
    return rc;
}

int hf_export_peft(const char *out_dir, const char *model_json, hf_get_fn get, void *ctx,
                   int rank, float alpha, unsigned targets, const char *base_name)
{
    hf_dims d;
    if (hf_dims_from_loom_json(model_json, &d)) return -1;
    if (!d.swiglu || !d.rope)
        return loom_fail("export peft: only the Llama-family mappings (Llama, Mistral, Qwen2, Qwen3) have PEFT names; "
                         "use `loom export hf CKPT OUT --merge` for this model");
    if (targets & (1u << 4)) return loom_fail("export peft: target fc does not exist in a swiglu model");
    int C = d.d_model, D = hf_head_dim(&d), qC = D * d.n_head, kvC = D * d.n_kv_head, F = d.d_ff, rc = 0;
    peft_ctx p = {0};
    p.get = get;
    p.ctx = ctx;
    char hf[128], lo[64];
    for (int l = 0; rc == 0 && l < d.n_layer; l++)
        for (int t = 0; rc == 0 && t < 8; t++) {
            if (!(targets & (1u << t))) continue;
            int in = t == 7 ? F : t == 3 ? qC : C;
            int out = t == 0 ? qC : (t == 1 || t == 2) ? kvC : (t == 5 || t == 6) ? F : C;
            int rope = t == 0 || t == 1;
            snprintf(hf, sizeof hf, "base_model.model.model.layers.%d.%s.lora_A.weight", l, peft_module[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_A", l, peft_stem[t]);
            rc = hf_map_add(&p.maps, &p.n, hf, lo, HF_COPY, 0, 1, 0, 2, rank, in, 2, rank, in);
            snprintf(hf, sizeof hf, "base_model.model.model.layers.%d.%s.lora_B.weight", l, peft_module[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_B", l, peft_stem[t]);
            if (rc == 0) rc = hf_map_add(&p.maps, &p.n, hf, lo, rope ? HF_ROPE : HF_COPY, 0, 1, D, 2, out, rank, 2, out, rank);
        }
    st_wtensor *wt = rc == 0 ? calloc((size_t)(p.n ? p.n : 1), sizeof *wt) : NULL;
    if (rc == 0 && !wt) rc = loom_fail("out of memory");
    for (int i = 0; rc == 0 && i < p.n; i++) {
        wt[i].name = p.maps[i].hf;
        wt[i].ndim = 2;
        wt[i].shape[0] = p.maps[i].shape[0];
        wt[i].shape[1] = p.maps[i].shape[1];
    }
    if (rc == 0) rc = peft_write_config(out_dir, rank, alpha, targets, base_name);
    if (rc == 0) rc = st_write_dir(out_dir, "adapter_model", ST_F32, wt, p.n, peft_fetch, &p, UINT64_MAX);
    if (rc == 0) log_info("exported a PEFT LoRA adapter (rank %d, alpha %g, %d tensors) to %s", rank, alpha, p.n, out_dir);
    free(wt);
    free(p.maps);
    free(p.buf);
    return rc;
}
