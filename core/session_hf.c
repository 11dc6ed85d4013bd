/* session_hf.c: a Hugging Face folder as a session's starting weights (finetune.base, train
 * --init): its model config replaces the job's, and its tensors (mapped by checkpoints/hf*.c)
 * stream one at a time into the frozen base (LoRA) or the parameters, any world size or ZeRO
 * stage. Must never name an HF tensor: checkpoints/hf.h hands over loom's names and layouts. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/hf.h"

int session_model_from_hf(model_config *m, const char *dir)
{
    hf_model *h = hf_open(dir);
    if (!h) return -1;
    model_config mc;
    int rc = config_model_from_json(&mc, hf_model_json(h));
    if (rc) rc = loom_fail("%s: %s", dir, loom_error());
    else {
        mc.init_std = m->init_std;
        mc.preset[0] = '\0';
        *m = mc;
        log_info("model from %s: %s, %d layers, d_model %d, %d/%d heads, vocab %d", dir, hf_arch_name(h),
                 mc.n_layer, mc.d_model, mc.n_head, mc.n_kv_head, mc.vocab);
    }
    hf_close(h);
    return rc;
}

int session_load_hf(session *s, const char *dir, const model_tensor *bt, int nb)
{
    hf_model *h = hf_open(dir);
    if (!h) return -1;
    model_config mc;
    int rc = config_model_from_json(&mc, hf_model_json(h)), n;
    const char *field = rc ? NULL : config_model_diff(&mc, &s->cfg->model);
    if (rc == 0 && field) rc = loom_fail("%s: the folder's model differs from the job's in field 'model.%s'", dir, field + 6);
    hf_tensors(h, &n);
    if (rc == 0 && n != nb) rc = loom_fail("%s: %d tensors for a model of %d", dir, n, nb);
    size_t maxn = 1;
    for (int i = 0; i < nb; i++) maxn = bt[i].numel > maxn ? bt[i].numel : maxn;
    float *buf = rc == 0 ? malloc(maxn * sizeof(float)) : NULL;
    if (rc == 0 && !buf) rc = loom_fail("out of host memory for a %zu-float tensor", maxn);
    for (int i = 0; rc == 0 && i < nb; i++) {
        rc = hf_read(h, bt[i].name, buf, bt[i].numel);
        size_t lo = bt[i].offset, hi = lo + bt[i].numel;
        if (rc == 0) rc = s->model->lora.rank ? model_load_base_range(s->model, buf, lo, hi)
                                              : dp_load_params_range(s->dp, buf, lo, hi);
    }
    free(buf);
    hf_close(h);
    if (rc == 0) log_info("base model loaded from Hugging Face folder %s", dir);
    return rc;
}
