/* test_flops.c: the FLOPs a step is charged for MFU, against a count by hand: 6 per matmul weight
 * per real token (4 for frozen LoRA bases), attention at the step's own row length (batches by
 * length run shorter rows), and the head only on the positions that carry a loss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "tests/check.h"

/* gpt2-124m by hand: C 768, 12 layers, F 3072, vocab 50304; q,k,v,o are C x C, fc and proj C x F. */
static double hand_body(double per_weight, double T)
{
    double C = 768, L = 12, F = 3072;
    return per_weight * L * (4 * C * C + 2 * C * F) + 6 * L * T * C;
}

int main(void)
{
    job_config c;
    config_defaults(&c);
    CHECK(config_set(&c, "model=gpt2-124m") == 0, "preset: %s", loom_error());
    model m;
    memset(&m, 0, sizeof m);
    CHECK(model_layout(&m, &c.model) == 0, "layout: %s", loom_error());
    const double head = 6.0 * 50304 * 768, tokens = 2048, T = 256;
    double want = tokens * (hand_body(6, T) + head), got = model_step_flops(&m, 256, tokens, tokens);
    CHECK(fabs(got - want) <= 1e-12 * want, "pretraining step: every token through the head: %.6g vs %.6g", got, want);
    got = model_flops_per_token(&m, 256);
    CHECK(fabs(got - (hand_body(6, T) + head)) <= 1e-12 * got, "per token: %.6g", got);
    /* a bucketed step at rows of 64: the attention term follows the row length */
    want = tokens * (hand_body(6, 64) + head);
    got = model_step_flops(&m, 64, tokens, tokens);
    CHECK(fabs(got - want) <= 1e-12 * want, "rows of 64: %.6g vs %.6g", got, want);
    /* a fine-tune step whose loss is on 512 of the 2048 positions: the compact head runs on 512 */
    want = tokens * hand_body(6, T) + 512 * head;
    got = model_step_flops(&m, 256, tokens, 512);
    CHECK(fabs(got - want) <= 1e-12 * want, "head on the 512 loss positions: %.6g vs %.6g", got, want);
    /* LoRA: the frozen weights forward + input gradient (4), the adapters' parameters all 6 */
    m.lora.rank = 16;
    m.nparams = 1000000;
    want = tokens * (hand_body(4, T) + 6e6) + 512 * 4.0 * 50304 * 768;
    got = model_step_flops(&m, 256, tokens, 512);
    CHECK(fabs(got - want) <= 1e-12 * want, "LoRA step: %.6g vs %.6g", got, want);
    free(m.tensors);
    free(m.region_offset);
    return check_exit_code("test_flops");
}
