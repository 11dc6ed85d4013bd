/* lora.c: which projections carry adapters and their shapes (see lora.h). The adapter math
 * itself sits next to the projections it modifies, in model_forward.c and model_backward.c. */
#include "lora.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"

static const char *const lora_names[LORA_NTARGETS] = {"q", "k", "v", "o", "fc", "gate", "up", "proj"};

static int lora_is_swiglu(const model_config *mc) { return strcmp(mc->mlp, "swiglu") == 0; }

const char *lora_stem(const model_config *mc, int t)
{
    static const char *const stems[LORA_NTARGETS] = {"attn.q", "attn.k", "attn.v", "attn.o",
                                                     "mlp.fc", "mlp.gate", "mlp.up", "mlp.proj"};
    if (t == LORA_PROJ && lora_is_swiglu(mc)) return "mlp.down";
    return stems[t];
}

void lora_dims(const model_config *mc, int t, int *in, int *out)
{
    int C = mc->d_model, D = config_head_dim(mc), qC = D * mc->n_head, kvC = D * mc->n_kv_head, F = mc->d_ff;
    switch (t) {
    case LORA_Q: *in = C; *out = qC; break;
    case LORA_O: *in = qC; *out = C; break;
    case LORA_K: case LORA_V: *in = C; *out = kvC; break;
    case LORA_FC: case LORA_GATE: case LORA_UP: *in = C; *out = F; break;
    case LORA_PROJ: *in = F; *out = C; break;
    default: *in = C; *out = C; break;
    }
}

int lora_target_index(const char *name)
{
    /* HF/PEFT names of the Llama family's projections, as PEFT users write them */
    static const char *const hf[LORA_NTARGETS] = {"q_proj", "k_proj", "v_proj", "o_proj", NULL,
                                                  "gate_proj", "up_proj", "down_proj"};
    for (int t = 0; t < LORA_NTARGETS; t++)
        if (strcmp(name, lora_names[t]) == 0 || (hf[t] && strcmp(name, hf[t]) == 0)) return t;
    if (strcmp(name, "down") == 0) return LORA_PROJ;
    return -1;
}

int lora_spec_from_config(const finetune_config *ft, const model_config *mc, lora_spec *out)
{
    memset(out, 0, sizeof *out);
    out->rank = ft->lora_rank;
    out->alpha = ft->lora_alpha;
    if (out->rank < 1) return loom_fail("finetune.lora_rank must be >= 1, got %d", out->rank);
    char list[sizeof ft->lora_targets];
    snprintf(list, sizeof list, "%s", ft->lora_targets);
    for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int swiglu = lora_is_swiglu(mc);
        if (strcmp(tok, "all-linear") == 0) { /* PEFT's word: every projection but the head */
            out->targets |= (1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V) | (1u << LORA_O) |
                            (1u << LORA_PROJ) |
                            (swiglu ? (1u << LORA_GATE) | (1u << LORA_UP) : 1u << LORA_FC);
            continue;
        }
        /* GPT-2's Conv1D names as PEFT matches them: c_attn is the fused q/k/v (loom keeps a pair
         * per projection: rank r each, exported as one rank-3r c_attn pair), and "c_proj" matches
         * both attn.c_proj and mlp.c_proj */
        if (strcmp(tok, "c_attn") == 0 || strcmp(tok, "c_proj") == 0) {
            out->targets |= tok[2] == 'a' ? (1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V)
                                          : (1u << LORA_O) | (1u << LORA_PROJ);
            continue;
        }
        int found = strcmp(tok, "c_fc") == 0 ? LORA_FC : lora_target_index(tok);
        if (found < 0) return loom_fail("finetune.lora_targets: unknown projection '%s' (q, k, v, o, fc, proj, gate, up, down, "
                                        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, c_attn, c_fc, c_proj, all-linear)", tok);
        if ((found == LORA_FC && swiglu) || ((found == LORA_GATE || found == LORA_UP) && !swiglu))
            return loom_fail("finetune.lora_targets: '%s' does not exist with mlp '%s'", tok, mc->mlp);
        out->targets |= 1u << found;
    }
    if (!out->targets) return loom_fail("finetune.lora_targets is empty");
    return 0;
}
