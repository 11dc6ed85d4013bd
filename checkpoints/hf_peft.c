/* hf_peft.c: loom LoRA adapters -> a PEFT adapter folder (adapter_config.json +
 * adapter_model.safetensors with PEFT's names). PEFT's A (r, in) and B (out, r) are loom's; for
 * Llama-family models the B rows of q and k go back from loom's rope pair order to HF's; for GPT-2
 * the q, k, v pairs become one exact pair on the fused c_attn (A stacked, B block-diagonal). */
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

/* GPT-2's fused c_attn: loom's q, k, v pairs of layer `part` as one PEFT pair (maps' op) */
enum { PEFT_QKV_A = 100, PEFT_QKV_B };

typedef struct peft_ctx {
    hf_map *maps;
    int n;
    int rank;
    unsigned targets;
    hf_get_fn get;
    void *ctx;
    float *buf;
    size_t cap;
} peft_ctx;


static float *peft_buf(peft_ctx *p, size_t n)
{
    if (n > p->cap) {
        float *b = realloc(p->buf, n * sizeof(float));
        if (!b) { loom_fail("out of memory"); return NULL; }
        p->buf = b;
        p->cap = n;
    }
    return p->buf;
}

/* c_attn's pair from the targeted ones of q, k, v (i-th targeted = block i of the rank r' = n r):
 *   A' (n r, C) = [A_q; A_k; A_v]        B' (3C, n r) = blockdiag(B_q, B_k, B_v), zero rows for an
 * untargeted projection; so B' A' x = [B_q A_q x; B_k A_k x; B_v A_v x], each loom's own update. */
static const float *peft_fetch_qkv(peft_ctx *p, const hf_map *m)
{
    static const char *const qkv[3] = {"q", "k", "v"};
    size_t r = (size_t)p->rank, nr = (size_t)m->shape[m->op == PEFT_QKV_A ? 0 : 1];
    size_t C = (size_t)(m->op == PEFT_QKV_A ? m->shape[1] : m->shape[0] / 3);
    float *out = peft_buf(p, (size_t)m->shape[0] * (size_t)m->shape[1]);
    if (!out) return NULL;
    memset(out, 0, (size_t)m->shape[0] * (size_t)m->shape[1] * sizeof(float));
    char name[64];
    for (int j = 0, i = 0; j < 3; j++) {
        if (!(p->targets & (1u << j))) continue;
        snprintf(name, sizeof name, "h.%d.attn.%s.lora_%s", m->part, qkv[j], m->op == PEFT_QKV_A ? "A" : "B");
        const float *x = p->get(p->ctx, name);
        if (!x) { loom_fail("export peft: the checkpoint has no tensor %s", name); return NULL; }
        if (m->op == PEFT_QKV_A) memcpy(out + (size_t)i * r * C, x, r * C * sizeof(float));
        else
            for (size_t o = 0; o < C; o++) memcpy(out + (j * C + o) * nr + (size_t)i * r, x + o * r, r * sizeof(float));
        i++;
    }
    return out;
}

static const float *peft_fetch(void *ctx, int k)
{
    peft_ctx *p = ctx;
    const hf_map *m = &p->maps[k];
    if (m->op == PEFT_QKV_A || m->op == PEFT_QKV_B) return peft_fetch_qkv(p, m);
    size_t n = (size_t)m->shape[0] * (size_t)m->shape[1];
    const float *x = p->get(p->ctx, m->loom);
    if (!x) { loom_fail("export peft: the checkpoint has no tensor %s", m->loom); return NULL; }
    if (!peft_buf(p, n)) return NULL;
    hf_convert(m, (float *)x, p->buf, 1);
    return p->buf;
}

/* What goes into adapter_config.json besides r and lora_alpha. */
typedef struct peft_meta {
    const char *modules[8];
    int nmodules;
    int fan_in_fan_out;     /* GPT-2's Conv1D layers */
    int qkv_rank;           /* > 0: c_attn's rank (rank_pattern; alpha_pattern keeps alpha / r) */
} peft_meta;

static void peft_add_module(peft_meta *pm, const char *name)
{
    for (int i = 0; i < pm->nmodules; i++)
        if (strcmp(pm->modules[i], name) == 0) return;
    pm->modules[pm->nmodules++] = name;
}

static int peft_write_config(const char *out_dir, int rank, float alpha, const peft_meta *pm, const char *base_name)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    cJSON_AddStringToObject(c, "base_model_name_or_path", base_name ? base_name : "");
    cJSON_AddNumberToObject(c, "r", rank);
    cJSON_AddNumberToObject(c, "lora_alpha", alpha);
    cJSON_AddNumberToObject(c, "lora_dropout", 0.0);
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddBoolToObject(c, "fan_in_fan_out", pm->fan_in_fan_out);
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    cJSON_AddBoolToObject(c, "use_rslora", 0); /* scaling alpha / r, as loom's */
    cJSON_AddBoolToObject(c, "use_dora", 0);
    cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    cJSON *rp = cJSON_AddObjectToObject(c, "rank_pattern"), *ap = cJSON_AddObjectToObject(c, "alpha_pattern");
    if (pm->qkv_rank) { /* the fused pair's rank is n r: alpha n alpha keeps PEFT's alpha / r scaling loom's */
        cJSON_AddNumberToObject(rp, "c_attn", pm->qkv_rank);
        cJSON_AddNumberToObject(ap, "c_attn", (double)alpha * pm->qkv_rank / rank);
    }
    cJSON *tm = cJSON_AddArrayToObject(c, "target_modules");
    for (int i = 0; i < pm->nmodules; i++) cJSON_AddItemToArray(tm, cJSON_CreateString(pm->modules[i]));
    char *txt = cJSON_Print(c), path[4096];
    cJSON_Delete(c);
    snprintf(path, sizeof path, "%s/adapter_config.json", out_dir);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int rc = f && fputs(txt, f) >= 0 ? 0 : loom_fail("%s: cannot write", path);
    if (f && fclose(f) != 0) rc = loom_fail("%s: cannot write", path);
    free(txt);
    return rc;
}

/* Llama family: one PEFT pair per loom pair, q and k B rows back to HF's rotate-half order. */
static int peft_llama_maps(const hf_dims *d, peft_ctx *p, peft_meta *pm)
{
    if (p->targets & (1u << 4)) return loom_fail("export peft: target fc does not exist in a swiglu model");
    int C = d->d_model, D = hf_head_dim(d), qC = D * d->n_head, kvC = D * d->n_kv_head, F = d->d_ff, r = p->rank;
    char hf[128], lo[64];
    for (int t = 0; t < 8; t++)
        if (p->targets & (1u << t)) peft_add_module(pm, strchr(peft_module[t], '.') + 1);
    for (int l = 0; l < d->n_layer; l++)
        for (int t = 0; t < 8; t++) {
            if (!(p->targets & (1u << t))) continue;
            int in = t == 7 ? F : t == 3 ? qC : C;
            int out = t == 0 ? qC : (t == 1 || t == 2) ? kvC : (t == 5 || t == 6) ? F : C;
            int rope = t == 0 || t == 1;
            snprintf(hf, sizeof hf, "base_model.model.model.layers.%d.%s.lora_A.weight", l, peft_module[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_A", l, peft_stem[t]);
            if (hf_map_add(&p->maps, &p->n, hf, lo, HF_COPY, 0, 1, 0, 2, r, in, 2, r, in)) return -1;
            snprintf(hf, sizeof hf, "base_model.model.model.layers.%d.%s.lora_B.weight", l, peft_module[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_B", l, peft_stem[t]);
            if (hf_map_add(&p->maps, &p->n, hf, lo, rope ? HF_ROPE : HF_COPY, 0, 1, D, 2, out, r, 2, out, r)) return -1;
        }
    return 0;
}

/* GPT-2: q, k, v fused into c_attn (rank n r for n targeted, see peft_fetch_qkv); o -> attn.c_proj,
 * fc -> mlp.c_fc, proj -> mlp.c_proj, each pair as loom's (PEFT's Conv1D LoRA keeps Linear's A and
 * B; fan_in_fan_out only transposes its merge into the (in, out) weight). */
static int peft_gpt2_maps(const hf_dims *d, peft_ctx *p, peft_meta *pm)
{
    if (p->targets & (3u << 5)) return loom_fail("export peft: targets gate/up do not exist in a GPT-2 model");
    static const char *const mod[8] = {"c_attn", "c_attn", "c_attn", "attn.c_proj", "mlp.c_fc", NULL, NULL, "mlp.c_proj"};
    static const char *const stem[8] = {NULL, NULL, NULL, "attn.o", "mlp.fc", NULL, NULL, "mlp.proj"};
    int C = d->d_model, F = d->d_ff, r = p->rank, nqkv = 0;
    for (int t = 0; t < 3; t++) nqkv += (p->targets >> t) & 1;
    for (int t = 0; t < 8; t++)
        if (p->targets & (1u << t)) peft_add_module(pm, mod[t]);
    pm->fan_in_fan_out = 1;
    pm->qkv_rank = nqkv * r;
    char hf[128], lo[64];
    for (int l = 0; l < d->n_layer; l++) {
        if (nqkv) {
            snprintf(hf, sizeof hf, "base_model.model.transformer.h.%d.attn.c_attn.lora_A.weight", l);
            if (hf_map_add(&p->maps, &p->n, hf, "", PEFT_QKV_A, l, 1, 0, 2, nqkv * r, C, 2, nqkv * r, C)) return -1;
            snprintf(hf, sizeof hf, "base_model.model.transformer.h.%d.attn.c_attn.lora_B.weight", l);
            if (hf_map_add(&p->maps, &p->n, hf, "", PEFT_QKV_B, l, 1, 0, 2, 3 * C, nqkv * r, 2, 3 * C, nqkv * r)) return -1;
        }
        for (int t = 3; t < 8; t++) {
            if (!(p->targets & (1u << t))) continue;
            int in = t == 7 ? F : C, out = t == 4 ? F : C;
            snprintf(hf, sizeof hf, "base_model.model.transformer.h.%d.%s.lora_A.weight", l, mod[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_A", l, stem[t]);
            if (hf_map_add(&p->maps, &p->n, hf, lo, HF_COPY, 0, 1, 0, 2, r, in, 2, r, in)) return -1;
            snprintf(hf, sizeof hf, "base_model.model.transformer.h.%d.%s.lora_B.weight", l, mod[t]);
            snprintf(lo, sizeof lo, "h.%d.%s.lora_B", l, stem[t]);
            if (hf_map_add(&p->maps, &p->n, hf, lo, HF_COPY, 0, 1, 0, 2, out, r, 2, out, r)) return -1;
        }
    }
    return 0;
}

int hf_export_peft(const char *out_dir, const char *model_json, hf_get_fn get, void *ctx,
                   int rank, float alpha, unsigned targets, const char *base_name)
{
    hf_dims d;
    if (hf_dims_from_loom_json(model_json, &d)) return -1;
    int llama = d.swiglu && d.rope, gpt2 = !d.swiglu && !d.rope && d.layernorm && d.bias;
    if (!llama && !gpt2)
        return loom_fail("export peft: this model maps onto no HF family with PEFT names (Llama, Mistral, Qwen2, "
                         "Qwen3, GPT-2); use `loom export hf CKPT OUT --merge`");
    peft_ctx p = {0};
    p.get = get;
    p.ctx = ctx;
    p.rank = rank;
    p.targets = targets;
    peft_meta pm = {0};
    int rc = llama ? peft_llama_maps(&d, &p, &pm) : peft_gpt2_maps(&d, &p, &pm);
    st_wtensor *wt = rc == 0 ? calloc((size_t)(p.n ? p.n : 1), sizeof *wt) : NULL;
    if (rc == 0 && !wt) rc = loom_fail("out of memory");
    for (int i = 0; rc == 0 && i < p.n; i++) {
        wt[i].name = p.maps[i].hf;
        wt[i].ndim = 2;
        wt[i].shape[0] = p.maps[i].shape[0];
        wt[i].shape[1] = p.maps[i].shape[1];
    }
    if (rc == 0) rc = peft_write_config(out_dir, rank, alpha, &pm, base_name);
    if (rc == 0) rc = st_write_dir(out_dir, "adapter_model", ST_F32, wt, p.n, peft_fetch, &p, UINT64_MAX);
    if (rc == 0) log_info("exported a PEFT LoRA adapter (rank %d, alpha %g, %d tensors) to %s", rank, alpha, p.n, out_dir);
    free(wt);
    free(p.maps);
    free(p.buf);
    return rc;
}
