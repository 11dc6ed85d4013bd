/* family.c: the model families (family.h) and which one a model config is. Every family is a
 * file of its own (family_<name>.c) that fills a model_family; this table lists them. Knows no
 * family's layers: it only picks one. */
#include "core/model/family.h"

#include <string.h>

#include "base/error.h"

static const model_family *const families[] = {&family_decoder};

/* The family's name from the config. Every config today is the pre-norm decoder, its variants
 * switched by the config's own fields (norm, mlp, positions, biases, qk_norm, rope_scaling). A new
 * family (Needle's, docs/needle.md) adds its table above and says here which configs are its. */
static const char *family_name(const model_config *c)
{
    (void)c;
    return "decoder";
}

const model_family *model_family_of(const model_config *c)
{
    const char *name = family_name(c);
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (strcmp(families[i]->name, name) == 0) return families[i];
    loom_fail("model: no model family %s", name);
    return NULL;
}
