/* gguf_adapter.c: loom LoRA adapters -> a GGUF LoRA adapter (see gguf.h), as llama.cpp's
 * convert_lora_to_gguf.py writes it: the adapted weights in the order of their HF names, each as a
 * lora_a / lora_b pair; B's q/k rows as the base GGUF has them (loom's pair order for llama, HF's
 * halves for the NEOX qwen2/qwen3). A tensor at a time in memory. */
#include "checkpoints/gguf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

/* loom's LoRA targets (LORA_* order): loom stem, HF module, llama.cpp tensor */
static const char *const ad_stem[8] = {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc", "mlp.gate", "mlp.up", "mlp.down"};
static const char *const ad_module[8] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                         NULL, "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
static const char *const ad_gguf[8] = {"attn_q", "attn_k", "attn_v", "attn_output", NULL, "ffn_gate", "ffn_up", "ffn_down"};

typedef struct ad_pair {
    char order[128];     /* HF name: the converter's order */
    int layer, target;
    int64_t out, in;
} ad_pair;

static int ad_cmp(const void *a, const void *b) { return strcmp(((const ad_pair *)a)->order, ((const ad_pair *)b)->order); }

/* the converter's type for a 2-d lora_a/lora_b: the one asked, but q8_0 rows not a multiple of 32 -> f16 */
static gguf_type ad_type(int64_t ne0, gguf_type want) { return want == GGUF_Q8_0 && ne0 % 32 ? GGUF_F16 : want; }

static int ad_write(gguf_writer *w, const ad_pair *p, int np, hf_get_fn get, void *ctx, int rank, int neox, size_t D)
{
    float *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    char name[96];
    for (int i = 0; rc == 0 && i < np; i++)
        for (int b = 0; rc == 0 && b < 2; b++) {
            snprintf(name, sizeof name, "h.%d.%s.lora_%s", p[i].layer, ad_stem[p[i].target], b ? "B" : "A");
            const float *x = get(ctx, name);
            size_t n = (size_t)rank * (size_t)(b ? p[i].out : p[i].in);
            if (!x) { rc = loom_fail("export gguf --adapter: the checkpoint has no tensor %s", name); break; }
            if (!(b && neox && p[i].target <= 1)) { rc = gguf_put(w, x, n); continue; }
            if (n > cap) {
                float *g = realloc(buf, n * sizeof *g);
                if (!g) { rc = loom_fail("export gguf --adapter: out of memory"); break; }
                buf = g;
                cap = n;
            }
            gguf_rows_to_neox(x, buf, (size_t)p[i].out, (size_t)rank, D);
            rc = gguf_put(w, buf, n);
        }
    free(buf);
    return rc;
}

int gguf_export_adapter(const char *out_path, const char *model_json, const char *what, hf_get_fn get, void *ctx,
                        int rank, float alpha, unsigned targets, gguf_type type)
{
    hf_dims d;
    if (hf_dims_from_loom_json(model_json, &d)) return -1;
    int arch = gguf_arch_of(&d, what);
    if (arch < 0) return -1;
    if (arch == GGUF_ARCH_GPT2)
        return loom_fail("%s: GGUF LoRA adapters of GPT-2 (its fused attn_qkv) are not supported: export merged "
                         "(`loom export gguf` without --adapter)", what);
    int64_t C = d.d_model, D = hf_head_dim(&d), F = d.d_ff;
    const int64_t dims[8][2] = {{D * d.n_head, C}, {D * d.n_kv_head, C}, {D * d.n_kv_head, C}, {C, D * d.n_head},
                                {0, 0}, {F, C}, {F, C}, {C, F}}; /* (out, in) */
    ad_pair *p = calloc((size_t)d.n_layer * 8, sizeof *p);
    int np = 0;
    if (!p) return loom_fail("export gguf --adapter: out of memory");
    for (int l = 0; l < d.n_layer; l++)
        for (int t = 0; t < 8; t++) {
            if (!(targets & (1u << t))) continue;
            if (!ad_module[t]) { free(p); return loom_fail("%s: LoRA target %s has no llama.cpp tensor", what, ad_stem[t]); }
            ad_pair *q = &p[np++];
            snprintf(q->order, sizeof q->order, "model.layers.%d.%s.weight", l, ad_module[t]);
            q->layer = l, q->target = t, q->out = dims[t][0], q->in = dims[t][1];
        }
    qsort(p, (size_t)np, sizeof *p, ad_cmp);
    gguf_writer *w = gguf_create(out_path, 32);
    int rc = w ? 0 : -1;
    if (rc == 0)
        rc = gguf_kv_str(w, "general.architecture", gguf_arch_name(arch)) || gguf_kv_str(w, "general.type", "adapter") ||
             gguf_kv_str(w, "adapter.type", "lora") || gguf_kv_f32(w, "adapter.lora.alpha", alpha) ||
             gguf_kv_u32(w, "general.quantization_version", 2);
    char name[96];
    for (int i = 0; rc == 0 && i < np; i++) {
        int64_t a[2] = {p[i].in, rank}, b[2] = {rank, p[i].out};
        snprintf(name, sizeof name, "blk.%d.%s.weight.lora_a", p[i].layer, ad_gguf[p[i].target]);
        rc = gguf_tensor_add(w, name, 2, a, ad_type(a[0], type));
        snprintf(name, sizeof name, "blk.%d.%s.weight.lora_b", p[i].layer, ad_gguf[p[i].target]);
        if (rc == 0) rc = gguf_tensor_add(w, name, 2, b, ad_type(b[0], type));
    }
    if (rc == 0) rc = gguf_data_begin(w) || ad_write(w, p, np, get, ctx, rank, arch != GGUF_ARCH_LLAMA, (size_t)D);
    if (rc == 0) {
        rc = gguf_commit(w);
        w = NULL;
    }
    if (rc == 0) log_info("exported a %s LoRA adapter (%d pairs, rank %d, alpha %g) to %s", gguf_arch_name(arch), np, rank, alpha, out_path);
    gguf_abort(w);
    free(p);
    return rc;
}
