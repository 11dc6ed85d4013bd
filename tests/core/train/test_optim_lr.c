/* test_optim_lr.c: the learning-rate schedule as a function (issue 18.2): never above lr, linear
 * through a whole number of warmup steps, falling after the peak, lr at the peak and min_lr at the
 * last step, for integer and fractional warmups and every steps count from 1 to 50. */
#include <math.h>
#include <string.h>

#include "core/train/optim.h"
#include "tests/check.h"

#define MAX_STEPS 50

/* Fractional warmups in thousandths, so the expected warmup steps are exact integer arithmetic. */
static const int permille[] = {0, 10, 50, 100, 250, 300, 500, 750, 990};
#define NFRAC (int)(sizeof permille / sizeof permille[0])

/* Never above lr; rising to the largest value, non-increasing after it; lr at the peak and
 * min_lr at the last step when warmup ends before it. warm = the whole warmup steps expected. */
static void check_shape(const train_config *tc, const float *lr, int warm)
{
    int n = tc->steps, top = 0;
    for (int s = 0; s < n; s++) {
        CHECK(lr[s] <= tc->lr && lr[s] >= 0.0f && isfinite(lr[s]),
              "steps %d warmup %g: step %d lr %.9g outside [0, %.9g]", n, tc->warmup, s, lr[s], tc->lr);
        if (lr[s] > lr[top]) top = s;
    }
    for (int s = 0; s < warm && s < n; s++) { /* linear from 0, reaching lr on step warm - 1 */
        double want = (double)tc->lr * (s + 1) / warm;
        CHECK(fabs(lr[s] - want) <= 1e-12 + 1e-6 * want, "steps %d warmup %g: warmup step %d lr %.9g, want %.9g",
              n, tc->warmup, s, lr[s], want);
        CHECK(s == 0 || lr[s] > lr[s - 1] || tc->lr == 0.0f, "steps %d warmup %g: warmup does not rise at step %d",
              n, tc->warmup, s);
    }
    for (int s = top + 1; s < n; s++)
        CHECK(lr[s] <= lr[s - 1], "steps %d warmup %g: decay rises at step %d (%.9g > %.9g)", n,
              tc->warmup, s, lr[s], lr[s - 1]);
    CHECK(lr[top] == tc->lr, "steps %d warmup %g: peak %.9g, want lr %.9g", n, tc->warmup, lr[top], tc->lr);
    if (warm < n && n >= 2)
        CHECK(lr[n - 1] == tc->min_lr, "steps %d warmup %g: last step lr %.9g, want min_lr %.9g", n,
              tc->warmup, lr[n - 1], tc->min_lr);
}

/* Every warmup (fractions and whole steps 1..steps) for one steps count and rate pair. */
static void check_steps(int steps, float peak, float min_lr)
{
    train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.steps = steps;
    tc.lr = peak;
    tc.min_lr = min_lr;
    float lr[MAX_STEPS];
    for (int i = 0; i < NFRAC + steps; i++) {
        int whole = i >= NFRAC, k = whole ? i - NFRAC + 1 : permille[i];
        tc.warmup = whole ? (float)k : (float)k / 1000.0f;
        int warm = whole ? k : (k * steps + 999) / 1000; /* ceil(k / 1000 * steps) */
        for (int s = 0; s < steps; s++) lr[s] = optim_lr(&tc, s);
        check_shape(&tc, lr, warm);
    }
}

int main(void)
{
    for (int steps = 1; steps <= MAX_STEPS; steps++) {
        check_steps(steps, 3e-3f, 3e-4f);
        check_steps(steps, 1e-3f, 0.0f);
        check_steps(steps, 2e-3f, 2e-3f);
    }
    /* the reported cases: 4 steps with warmup 0.05 ran step 0 at 5x the peak, a 2-step run 10x */
    train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.steps = 4, tc.lr = 3e-3f, tc.min_lr = 3e-4f, tc.warmup = 0.05f;
    CHECK(optim_lr(&tc, 0) == tc.lr, "4 steps warmup 0.05: step 0 lr %.9g, want the peak %.9g", optim_lr(&tc, 0), tc.lr);
    tc.steps = 2;
    CHECK(optim_lr(&tc, 0) == tc.lr, "2 steps warmup 0.05: step 0 lr %.9g, want the peak %.9g", optim_lr(&tc, 0), tc.lr);
    /* 0.05f * 20 is 1.0000000149 in float: one warmup step, not two */
    tc.steps = 20;
    CHECK(optim_lr(&tc, 0) == tc.lr, "20 steps warmup 0.05: step 0 lr %.9g, want the peak", optim_lr(&tc, 0));
    tc.steps = 20, tc.warmup = 4.0f;
    CHECK(fabsf(optim_lr(&tc, 0) - tc.lr / 4) <= 1e-9f, "linear warmup: step 0 %.9g, want lr/4", optim_lr(&tc, 0));
    CHECK(optim_lr(&tc, 3) == tc.lr, "warmup 4: step 3 %.9g, want the peak", optim_lr(&tc, 3));
    if (failures == 0) printf("test_optim_lr: ok\n");
    return failures != 0;
}
