/* test_lora_targets.c: finetune.lora_targets in each naming (loom's, PEFT's Llama names, GPT-2's
 * Conv1D names, all-linear) maps to the projections a PEFT user means; unknown or
 * architecture-mismatched names are refused in one line naming the field. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/config/config.h"
#include "core/model/lora.h"
#include "tests/check.h"

static unsigned targets_of(const char *preset, const char *list, int *rc)
{
    job_config c;
    config_defaults(&c);
    char set[300];
    snprintf(set, sizeof set, "model=%s", preset);
    lora_spec ls;
    *rc = config_set(&c, set);
    snprintf(c.finetune.lora_targets, sizeof c.finetune.lora_targets, "%s", list);
    if (*rc == 0) *rc = lora_spec_from_config(&c.finetune, &c.model, &ls);
    return *rc == 0 ? ls.targets : 0;
}

int main(void)
{
    const unsigned q = 1u << LORA_Q, k = 1u << LORA_K, v = 1u << LORA_V, o = 1u << LORA_O,
                   fc = 1u << LORA_FC, gate = 1u << LORA_GATE, up = 1u << LORA_UP, proj = 1u << LORA_PROJ;
    int rc;
    unsigned t = targets_of("tiny", "c_attn", &rc);
    CHECK(rc == 0 && t == (q | k | v), "gpt2 c_attn -> q,k,v: rc %d targets %#x (%s)", rc, t, rc ? loom_error() : "");
    t = targets_of("tiny", "c_proj", &rc);
    CHECK(rc == 0 && t == (o | proj), "gpt2 c_proj matches attn.c_proj and mlp.c_proj: %#x", t);
    t = targets_of("tiny", "c_fc,c_attn", &rc);
    CHECK(rc == 0 && t == (fc | q | k | v), "gpt2 c_fc,c_attn: %#x", t);
    t = targets_of("tiny", "all-linear", &rc);
    CHECK(rc == 0 && t == (q | k | v | o | fc | proj), "gpt2 all-linear: %#x", t);
    t = targets_of("llama-small", "q_proj,v_proj,down_proj", &rc);
    CHECK(rc == 0 && t == (q | v | proj), "llama q_proj,v_proj,down_proj: %#x", t);
    t = targets_of("llama-small", "all-linear", &rc);
    CHECK(rc == 0 && t == (q | k | v | o | gate | up | proj), "llama all-linear: %#x", t);
    t = targets_of("llama-small", "c_fc", &rc);
    CHECK(rc != 0 && strstr(loom_error(), "finetune.lora_targets"), "c_fc on a swiglu model is refused: %s", loom_error());
    t = targets_of("llama-small", "qkv", &rc);
    CHECK(rc != 0 && strstr(loom_error(), "'qkv'"), "unknown name refused: %s", loom_error());
    return check_exit_code("test_lora_targets");
}
