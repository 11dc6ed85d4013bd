/* needle_ladder.c: Needle's ladder (architecture.py:131-224, finetune.py:293-303): every depth from
 * 2 to num_layers is a deployable model made of nested layer subsets. `needle build --layers N`
 * cuts rung N out of a base; loom trains and exports rungs the same way (model.layers, see
 * docs/needle.md section 5). Pure functions of a config; the file view lives in needle.c. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/needle.h"

/* _ladder_layer_order (architecture.py:131-150): 0, L-1, then the midpoint of the largest gap
 * between selected layers, the leftmost of equal gaps first. */
static void needle_ladder_bisect(int L, int *order)
{
    int sel[NEEDLE_MAX_LIST], n = 0;
    order[n] = 0, sel[n++] = 0;
    if (L == 1) return;
    order[n] = L - 1, sel[n++] = L - 1;
    while (n < L) {
        int best = -1;
        for (int i = 0; i + 1 < n; i++) /* sel is ascending: the gaps in order, leftmost wins a tie */
            if (sel[i + 1] - sel[i] > 1 && (best < 0 || sel[i + 1] - sel[i] > sel[best + 1] - sel[best])) best = i;
        const int c = (sel[best] + sel[best + 1]) / 2;
        int j = n++;
        while (j > 0 && sel[j - 1] > c) sel[j] = sel[j - 1], j--;
        sel[j] = c;
        order[n - 1] = c;
    }
}

/* ladder_order(config): the saved ladder_order of a rung (so a rung of a rung nests), else the
 * bisection order of its depth. needle_config_parse has checked a saved one is a permutation. */
static void needle_ladder_order(const needle_config *c, int *order)
{
    if (c->ladder_order.n == c->num_layers && c->num_layers > 0)
        memcpy(order, c->ladder_order.v, (size_t)c->num_layers * sizeof(int));
    else
        needle_ladder_bisect(c->num_layers, order);
}

static int needle_int_cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int needle_ladder_layers(const needle_config *c, int depth, int *sel)
{
    if (depth < 2 || depth > c->num_layers)
        return loom_fail("a ladder rung of %d layers: Needle's rungs have 2 to %d (the base's num_layers)", depth,
                         c->num_layers);
    int order[NEEDLE_MAX_LIST];
    needle_ladder_order(c, order);
    memcpy(sel, order, (size_t)depth * sizeof(int));
    qsort(sel, (size_t)depth, sizeof(int), needle_int_cmp);
    return 0;
}

/* A list's layers that the rung keeps, renumbered (remap[l] = the kept layer's new index, -1 dropped). */
static void needle_ladder_remap(needle_list *x, const int *remap)
{
    int n = 0;
    for (int i = 0; i < x->n; i++)
        if (remap[x->v[i]] >= 0) x->v[n++] = remap[x->v[i]];
    x->n = n;
}

int needle_ladder_config(const needle_config *c, int depth, needle_config *out)
{
    int sel[NEEDLE_MAX_LIST], order[NEEDLE_MAX_LIST], remap[NEEDLE_MAX_LIST];
    if (needle_ladder_layers(c, depth, sel)) return -1;
    for (int s = 1; s < c->engram_layers.n; s++)
        if (c->engram_layers.v[s] <= c->engram_layers.v[s - 1]) /* ladder_config asserts it */
            return loom_fail("config field engram_layers: not ascending, Needle cuts no rung of it");
    needle_ladder_order(c, order);
    for (int l = 0; l < c->num_layers; l++) remap[l] = -1;
    for (int i = 0; i < depth; i++) remap[sel[i]] = i;
    *out = *c;
    out->num_layers = depth;
    out->ladder_order.n = c->num_layers; /* ladder_config: the parent's order, kept layers renumbered */
    memcpy(out->ladder_order.v, order, (size_t)c->num_layers * sizeof(int));
    needle_ladder_remap(&out->ladder_order, remap);
    needle_ladder_remap(&out->global_layers, remap);
    needle_ladder_remap(&out->engram_layers, remap);
    out->ladder_depths.n = 0, out->ladder_sample = 0; /* ladder_config and rung() */
    out->ladder_widths.n = 0;                          /* rung() */
    return 0;
}
