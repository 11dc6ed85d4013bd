/* hf_llama.c: the Llama family (LlamaForCausalLM incl. rope_scaling llama3, SmolLM/SmolLM2,
 * TinyLlama; MistralForCausalLM; Qwen2ForCausalLM with q/k/v biases; Qwen3ForCausalLM with
 * per-head q/k RMSNorm) <-> loom's rmsnorm + swiglu + rope model. q/k rows are permuted from HF's
 * rotate-half layout to loom's adjacent pairs; a permutation, so the round trip is exact. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/hf_internal.h"

enum { FAM_LLAMA, FAM_MISTRAL, FAM_QWEN2, FAM_QWEN3 };

/* llama3 rope scaling, or none; any other type is refused (it would change the numerics). */
static int llama_rope_scaling(const cJSON *cfg, const char *path, hf_dims *d)
{
    /* transformers 5 writes rope_parameters {rope_type, rope_theta, ...}; 4 wrote rope_theta and
     * rope_scaling {rope_type | type, ...} */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    if (cJSON_IsObject(rs) && hf_json_num(rs, "rope_theta", d->rope_theta, &d->rope_theta, path)) return -1;
    if (!cJSON_IsObject(rs)) rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!rs || cJSON_IsNull(rs)) return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(ty)) ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "?";
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "llama3") != 0)
        return loom_fail("%s: rope_scaling type '%s' is not supported (llama3 or none)", path, t);
    d->llama3 = 1;
    if (hf_json_num(rs, "factor", 8, &d->rope_factor, path) ||
        hf_json_num(rs, "low_freq_factor", 1, &d->rope_low, path) ||
        hf_json_num(rs, "high_freq_factor", 4, &d->rope_high, path) ||
        hf_json_int(rs, "original_max_position_embeddings", 8192, &d->rope_original_max_seq, path))
        return -1;
    if (d->rope_high <= d->rope_low) return loom_fail("%s: rope_scaling high_freq_factor must exceed low_freq_factor", path);
    return 0;
}

/* A sliding window shorter than the context: loom attends to the whole causal past, which is the
 * same only for sequences no longer than the window, so the model's max_seq becomes the window. */
static int llama_window(const cJSON *cfg, const char *path, int fam, hf_dims *d)
{
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(cfg, "sliding_window");
    int use = 1;
    if (fam == FAM_QWEN2 || fam == FAM_QWEN3)
        if (hf_json_bool(cfg, "use_sliding_window", 0, &use, path)) return -1;
    if (!use || !sw || cJSON_IsNull(sw)) return 0;
    if (!cJSON_IsNumber(sw) || sw->valueint < 1) return loom_fail("%s: sliding_window is not a positive number", path);
    if (sw->valueint < d->max_seq) {
        log_info("%s: sliding_window %d < max_position_embeddings %d: loom's max_seq is the window "
                 "(full attention equals the sliding window up to that length)", path, sw->valueint, d->max_seq);
        d->max_seq = sw->valueint;
    }
    return 0;
}

static int llama_parse_fam(const cJSON *c, const char *path, hf_dims *d, int fam)
{
    memset(d, 0, sizeof *d);
    d->swiglu = d->rope = 1;
    int tie_default = 0, mlp_bias = 0, head_dim = 0, attn_bias = 0;
    if (hf_json_int(c, "vocab_size", -1, &d->vocab, path) ||
        hf_json_int(c, "hidden_size", -1, &d->d_model, path) ||
        hf_json_int(c, "num_hidden_layers", -1, &d->n_layer, path) ||
        hf_json_int(c, "num_attention_heads", -1, &d->n_head, path) ||
        hf_json_int(c, "intermediate_size", -1, &d->d_ff, path) ||
        hf_json_int(c, "max_position_embeddings", 2048, &d->max_seq, path) ||
        hf_json_num(c, "rms_norm_eps", 1e-6, &d->norm_eps, path) ||
        hf_json_num(c, "rope_theta", 10000, &d->rope_theta, path) ||
        hf_json_bool(c, "tie_word_embeddings", tie_default, &d->tied, path) ||
        hf_json_bool(c, "attention_bias", 0, &attn_bias, path) ||
        hf_json_bool(c, "mlp_bias", 0, &mlp_bias, path) || hf_json_int(c, "head_dim", 0, &head_dim, path))
        return -1;
    if (hf_json_int(c, "num_key_value_heads", d->n_head, &d->n_kv_head, path)) return -1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu") != 0)
        return loom_fail("%s: hidden_act '%s' is not supported (silu)", path, act->valuestring);
    if (mlp_bias) return loom_fail("%s: mlp_bias true is not supported", path);
    if (d->n_head < 1 || d->n_kv_head < 1 || d->n_head % d->n_kv_head || (!head_dim && d->d_model % d->n_head))
        return loom_fail("%s: num_attention_heads %d / num_key_value_heads %d / hidden_size %d do not divide",
                         path, d->n_head, d->n_kv_head, d->d_model);
    /* an explicit head_dim equal to the default stays implicit, as loom's own models have it */
    d->head_dim = head_dim && (d->d_model % d->n_head || head_dim != d->d_model / d->n_head) ? head_dim : 0;
    if (hf_head_dim(d) % 2) return loom_fail("%s: head dim %d is odd (RoPE pairs)", path, hf_head_dim(d));
    d->bias = attn_bias;              /* Llama's attention_bias: q, k, v and o */
    d->qkv_bias = fam == FAM_QWEN2;   /* Qwen2: q, k, v only, always */
    d->qk_norm = fam == FAM_QWEN3;
    if (llama_rope_scaling(c, path, d) || llama_window(c, path, fam, d)) return -1;
    return 0;
}

static int llama_parse(const cJSON *c, const char *p, hf_dims *d) { return llama_parse_fam(c, p, d, FAM_LLAMA); }
static int mistral_parse(const cJSON *c, const char *p, hf_dims *d) { return llama_parse_fam(c, p, d, FAM_MISTRAL); }
static int qwen2_parse(const cJSON *c, const char *p, hf_dims *d) { return llama_parse_fam(c, p, d, FAM_QWEN2); }
static int qwen3_parse(const cJSON *c, const char *p, hf_dims *d) { return llama_parse_fam(c, p, d, FAM_QWEN3); }

static int llama_map(const hf_dims *d, const char *prefix, hf_map **m, int *n)
{
    (void)prefix;
    int C = d->d_model, D = hf_head_dim(d), qC = D * d->n_head, kvC = D * d->n_kv_head, F = d->d_ff, V = d->vocab;
    char hf[128], lo[64];
#define MAP(hfname, loomname, op, hd, r, c)                                                       \
    do {                                                                                          \
        if (hf_map_add(m, n, hfname, loomname, op, 0, 1, hd, (c) ? 2 : 1, r, c, (c) ? 2 : 1, r, c)) \
            return -1;                                                                            \
    } while (0)
    MAP("model.embed_tokens.weight", "wte.weight", HF_COPY, 0, V, C);
    for (int l = 0; l < d->n_layer; l++) {
#define L(h, lm, op, hd, r, c)                                           \
    do {                                                                 \
        snprintf(hf, sizeof hf, "model.layers.%d.%s", l, h);             \
        snprintf(lo, sizeof lo, "h.%d.%s", l, lm);                       \
        MAP(hf, lo, op, hd, r, c);                                       \
    } while (0)
        int qb = d->bias || d->qkv_bias;
        L("input_layernorm.weight", "ln_1.weight", HF_COPY, 0, C, 0);
        L("self_attn.q_proj.weight", "attn.q.weight", HF_ROPE, D, qC, C);
        if (qb) L("self_attn.q_proj.bias", "attn.q.bias", HF_ROPE, D, qC, 0);
        L("self_attn.k_proj.weight", "attn.k.weight", HF_ROPE, D, kvC, C);
        if (qb) L("self_attn.k_proj.bias", "attn.k.bias", HF_ROPE, D, kvC, 0);
        L("self_attn.v_proj.weight", "attn.v.weight", HF_COPY, 0, kvC, C);
        if (qb) L("self_attn.v_proj.bias", "attn.v.bias", HF_COPY, 0, kvC, 0);
        if (d->qk_norm) {
            L("self_attn.q_norm.weight", "attn.ln_q.weight", HF_ROPE, D, D, 0);
            L("self_attn.k_norm.weight", "attn.ln_k.weight", HF_ROPE, D, D, 0);
        }
        L("self_attn.o_proj.weight", "attn.o.weight", HF_COPY, 0, C, qC);
        if (d->bias) L("self_attn.o_proj.bias", "attn.o.bias", HF_COPY, 0, C, 0);
        L("post_attention_layernorm.weight", "ln_2.weight", HF_COPY, 0, C, 0);
        L("mlp.gate_proj.weight", "mlp.gate.weight", HF_COPY, 0, F, C);
        L("mlp.up_proj.weight", "mlp.up.weight", HF_COPY, 0, F, C);
        L("mlp.down_proj.weight", "mlp.down.weight", HF_COPY, 0, C, F);
#undef L
    }
    MAP("model.norm.weight", "ln_f.weight", HF_COPY, 0, C, 0);
    if (!d->tied) MAP("lm_head.weight", "lm_head.weight", HF_COPY, 0, V, C);
#undef MAP
    return 0;
}

static void llama_write_config(const hf_dims *d, cJSON *c)
{
#define SET(k, v) (cJSON_DeleteItemFromObjectCaseSensitive(c, k), cJSON_AddItemToObject(c, k, v))
    SET("vocab_size", cJSON_CreateNumber(d->vocab));
    SET("hidden_size", cJSON_CreateNumber(d->d_model));
    SET("num_hidden_layers", cJSON_CreateNumber(d->n_layer));
    SET("num_attention_heads", cJSON_CreateNumber(d->n_head));
    SET("num_key_value_heads", cJSON_CreateNumber(d->n_kv_head));
    SET("intermediate_size", cJSON_CreateNumber(d->d_ff));
    SET("rms_norm_eps", cJSON_CreateNumber(d->norm_eps));
    SET("rope_theta", cJSON_CreateNumber(d->rope_theta));
    SET("tie_word_embeddings", cJSON_CreateBool(d->tied));
    SET("hidden_act", cJSON_CreateString("silu"));
    SET("head_dim", cJSON_CreateNumber(hf_head_dim(d)));
    if (!d->qkv_bias) SET("attention_bias", cJSON_CreateBool(d->bias));
    if (!cJSON_GetObjectItemCaseSensitive(c, "max_position_embeddings"))
        SET("max_position_embeddings", cJSON_CreateNumber(d->max_seq));
    cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    if (cJSON_IsObject(rp)) { /* transformers 5's form, kept when the source had it */
        cJSON *np = cJSON_CreateObject();
        cJSON_AddStringToObject(np, "rope_type", d->llama3 ? "llama3" : "default");
        cJSON_AddNumberToObject(np, "rope_theta", d->rope_theta);
        if (d->llama3) {
            cJSON_AddNumberToObject(np, "factor", d->rope_factor);
            cJSON_AddNumberToObject(np, "low_freq_factor", d->rope_low);
            cJSON_AddNumberToObject(np, "high_freq_factor", d->rope_high);
            cJSON_AddNumberToObject(np, "original_max_position_embeddings", d->rope_original_max_seq);
        }
        cJSON_DeleteItemFromObjectCaseSensitive(c, "rope_theta");
        cJSON_DeleteItemFromObjectCaseSensitive(c, "rope_scaling");
        SET("rope_parameters", np);
    } else if (d->llama3) {
        cJSON *rs = cJSON_CreateObject();
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", d->rope_factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", d->rope_low);
        cJSON_AddNumberToObject(rs, "high_freq_factor", d->rope_high);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", d->rope_original_max_seq);
        SET("rope_scaling", rs);
    } else {
        SET("rope_scaling", cJSON_CreateNull());
    }
#undef SET
}

/* Older Llama checkpoints saved the rotary inv_freq buffer with the weights. */
static int llama_is_buffer(const char *name)
{
    const char *s = strstr(name, "rotary_emb.inv_freq");
    return s && s[strlen("rotary_emb.inv_freq")] == '\0';
}

const hf_family hf_family_llama = {"LlamaForCausalLM", "llama", llama_parse, llama_map, llama_write_config, llama_is_buffer};
const hf_family hf_family_mistral = {"MistralForCausalLM", "mistral", mistral_parse, llama_map, llama_write_config, llama_is_buffer};
const hf_family hf_family_qwen2 = {"Qwen2ForCausalLM", "qwen2", qwen2_parse, llama_map, llama_write_config, llama_is_buffer};
const hf_family hf_family_qwen3 = {"Qwen3ForCausalLM", "qwen3", qwen3_parse, llama_map, llama_write_config, llama_is_buffer};
