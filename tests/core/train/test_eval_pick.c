/* test_eval_pick.c: evaluate_pick, the sampler of `loom sample` and evaluation, against the
 * distribution it promises: argmax at temperature 0 (the first on a tie); at temperature t a draw
 * from softmax(logits / t) restricted to the top_k largest logits. Frequencies over 2^16 counters
 * are compared with the exact probabilities (bounds of 6 standard errors, a fixed seed). */
#include <math.h>

#include "core/train/evaluate.h"
#include "tests/check.h"

#define V 6
#define DRAWS (1 << 16)

/* Frequencies of each id over DRAWS counters against softmax(logits / t) over the top_k largest. */
static void check_sampled(const float *logits, float t, int top_k)
{
    int order[V], count[V] = {0};
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++) /* by logit, descending (the test's logits are distinct) */
        for (int j = i + 1; j < V; j++)
            if (logits[order[j]] > logits[order[i]]) { int x = order[i]; order[i] = order[j]; order[j] = x; }
    int keep = top_k > 0 && top_k < V ? top_k : V;
    double p[V] = {0}, z = 0.0;
    for (int i = 0; i < keep; i++) z += p[order[i]] = exp(((double)logits[order[i]] - logits[order[0]]) / t);
    for (int i = 0; i < V; i++) p[i] /= z;
    for (uint64_t c = 0; c < DRAWS; c++) {
        int32_t id = evaluate_pick(logits, V, t, top_k, 42, c);
        CHECK(id >= 0 && id < V, "t %g top_k %d: id %d", t, top_k, id);
        if (id >= 0 && id < V) count[id]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / DRAWS, se = sqrt(p[i] * (1.0 - p[i]) / DRAWS);
        CHECK(fabs(f - p[i]) <= 6 * se + 1e-12, "t %g top_k %d: id %d drawn %.5f of the time, p = %.5f", t,
              top_k, i, f, p[i]);
    }
}

int main(void)
{
    const float logits[V] = {0.5f, 3.0f, 2.0f, -1.0f, 2.5f, 1.0f};
    CHECK(evaluate_pick(logits, V, 0.0f, 0, 1, 0) == 1, "temperature 0: argmax");
    const float tie[4] = {1.0f, 4.0f, 4.0f, 2.0f};
    CHECK(evaluate_pick(tie, 4, 0.0f, 0, 1, 0) == 1, "temperature 0: the first of a tie");
    for (uint64_t c = 0; c < 64; c++)
        CHECK(evaluate_pick(logits, V, 1.0f, 1, 3, c) == 1, "top_k 1 is the argmax (counter %llu)", (unsigned long long)c);
    check_sampled(logits, 1.0f, 0);
    check_sampled(logits, 1.0f, 2);
    check_sampled(logits, 0.7f, 3);
    check_sampled(logits, 2.0f, 5);
    return check_exit_code("test_eval_pick");
}
