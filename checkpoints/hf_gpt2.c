/* hf_gpt2.c: GPT2LMHeadModel <-> loom's layernorm + gelu + learned-positions model with biases.
 * GPT-2 stores its linear layers as Conv1D, (in, out): loom's (out, in) is the transpose, and the
 * fused c_attn (C, 3C) splits into q, k, v along its last dim. Names with or without the
 * "transformer." prefix (the Hub's gpt2 has none). */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/hf_internal.h"

static int gpt2_parse(const cJSON *c, const char *path, hf_dims *d)
{
    memset(d, 0, sizeof *d);
    d->layernorm = d->bias = 1;
    int inner = 0, scale = 1, by_layer = 0;
    if (hf_json_int(c, "vocab_size", -1, &d->vocab, path) || hf_json_int(c, "n_embd", -1, &d->d_model, path) ||
        hf_json_int(c, "n_layer", -1, &d->n_layer, path) || hf_json_int(c, "n_head", -1, &d->n_head, path) ||
        hf_json_int(c, "n_positions", 1024, &d->max_seq, path) ||
        hf_json_num(c, "layer_norm_epsilon", 1e-5, &d->norm_eps, path) ||
        hf_json_bool(c, "tie_word_embeddings", 1, &d->tied, path) ||
        hf_json_bool(c, "scale_attn_weights", 1, &scale, path) ||
        hf_json_bool(c, "scale_attn_by_inverse_layer_idx", 0, &by_layer, path))
        return -1;
    const cJSON *n_inner = cJSON_GetObjectItemCaseSensitive(c, "n_inner");
    if (n_inner && !cJSON_IsNull(n_inner) && hf_json_int(c, "n_inner", 0, &inner, path)) return -1;
    d->d_ff = inner > 0 ? inner : 4 * d->d_model;
    d->n_kv_head = d->n_head;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "activation_function");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") != 0 &&
        strcmp(act->valuestring, "gelu_pytorch_tanh") != 0)
        return loom_fail("%s: activation_function '%s' is not supported (gelu_new)", path, act->valuestring);
    if (!scale || by_layer)
        return loom_fail("%s: scale_attn_weights false / scale_attn_by_inverse_layer_idx true are not supported", path);
    if (d->n_head < 1 || d->d_model % d->n_head)
        return loom_fail("%s: n_head %d does not divide n_embd %d", path, d->n_head, d->d_model);
    return 0;
}

static int gpt2_map(const hf_dims *d, const char *prefix, hf_map **m, int *n)
{
    int C = d->d_model, F = d->d_ff, V = d->vocab;
    char hf[128], lo[64];
#define ADD(h, l, op, part, np, hn, h0, h1, ln, l0, l1)                                      \
    do {                                                                                     \
        if (hf_map_add(m, n, h, l, op, part, np, 0, hn, h0, h1, ln, l0, l1)) return -1;       \
    } while (0)
    snprintf(hf, sizeof hf, "%swte.weight", prefix);
    ADD(hf, "wte.weight", HF_COPY, 0, 1, 2, V, C, 2, V, C);
    snprintf(hf, sizeof hf, "%swpe.weight", prefix);
    ADD(hf, "wpe.weight", HF_COPY, 0, 1, 2, d->max_seq, C, 2, d->max_seq, C);
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int l = 0; l < d->n_layer; l++) {
#define NAMES(h, lm) (snprintf(hf, sizeof hf, "%sh.%d.%s", prefix, l, h), snprintf(lo, sizeof lo, "h.%d.%s", l, lm))
        NAMES("ln_1.weight", "ln_1.weight"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
        NAMES("ln_1.bias", "ln_1.bias"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
        for (int p = 0; p < 3; p++) {
            snprintf(hf, sizeof hf, "%sh.%d.attn.c_attn.weight", prefix, l);
            snprintf(lo, sizeof lo, "h.%d.attn.%s.weight", l, qkv[p]);
            ADD(hf, lo, HF_T, p, 3, 2, C, 3 * C, 2, C, C);
            snprintf(hf, sizeof hf, "%sh.%d.attn.c_attn.bias", prefix, l);
            snprintf(lo, sizeof lo, "h.%d.attn.%s.bias", l, qkv[p]);
            ADD(hf, lo, HF_COPY, p, 3, 1, 3 * C, 0, 1, C, 0);
        }
        NAMES("attn.c_proj.weight", "attn.o.weight"); ADD(hf, lo, HF_T, 0, 1, 2, C, C, 2, C, C);
        NAMES("attn.c_proj.bias", "attn.o.bias"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
        NAMES("ln_2.weight", "ln_2.weight"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
        NAMES("ln_2.bias", "ln_2.bias"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
        NAMES("mlp.c_fc.weight", "mlp.fc.weight"); ADD(hf, lo, HF_T, 0, 1, 2, C, F, 2, F, C);
        NAMES("mlp.c_fc.bias", "mlp.fc.bias"); ADD(hf, lo, HF_COPY, 0, 1, 1, F, 0, 1, F, 0);
        NAMES("mlp.c_proj.weight", "mlp.proj.weight"); ADD(hf, lo, HF_T, 0, 1, 2, F, C, 2, C, F);
        NAMES("mlp.c_proj.bias", "mlp.proj.bias"); ADD(hf, lo, HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
#undef NAMES
    }
    snprintf(hf, sizeof hf, "%sln_f.weight", prefix);
    ADD(hf, "ln_f.weight", HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
    snprintf(hf, sizeof hf, "%sln_f.bias", prefix);
    ADD(hf, "ln_f.bias", HF_COPY, 0, 1, 1, C, 0, 1, C, 0);
    if (!d->tied) ADD("lm_head.weight", "lm_head.weight", HF_COPY, 0, 1, 2, V, C, 2, V, C);
#undef ADD
    return 0;
}

static void gpt2_write_config(const hf_dims *d, cJSON *c)
{
#define SET(k, v) (cJSON_DeleteItemFromObjectCaseSensitive(c, k), cJSON_AddItemToObject(c, k, v))
    SET("vocab_size", cJSON_CreateNumber(d->vocab));
    SET("n_embd", cJSON_CreateNumber(d->d_model));
    SET("n_layer", cJSON_CreateNumber(d->n_layer));
    SET("n_head", cJSON_CreateNumber(d->n_head));
    SET("n_inner", cJSON_CreateNumber(d->d_ff));
    SET("n_positions", cJSON_CreateNumber(d->max_seq));
    SET("n_ctx", cJSON_CreateNumber(d->max_seq));
    SET("layer_norm_epsilon", cJSON_CreateNumber(d->norm_eps));
    SET("activation_function", cJSON_CreateString("gelu_new"));
    SET("tie_word_embeddings", cJSON_CreateBool(d->tied));
#undef SET
}

/* The causal-mask buffers older transformers saved with the weights. */
static int gpt2_is_buffer(const char *name)
{
    size_t n = strlen(name);
    return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

const hf_family hf_family_gpt2 = {"GPT2LMHeadModel", "gpt2", gpt2_parse, gpt2_map, gpt2_write_config, gpt2_is_buffer};
