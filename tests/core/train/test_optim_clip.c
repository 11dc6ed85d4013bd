/* test_optim_clip.c: optim_clip_scale on its own (issue 42): min(1, clip / norm) for norms above,
 * below and at the clip, 1 with clipping off (grad_clip 0; a negative one is refused by the
 * config), and no finite scale for a NaN or Inf norm (the step is skipped instead). */
#include <math.h>
#include <string.h>

#include "core/config/config.h"
#include "core/train/optim.h"
#include "tests/check.h"

/* optim_clip_scale(clip, norm) against clip / norm in double: the code divides in double and
 * rounds the quotient to float once, so got is within u = 2^-24 of the exact quotient (the
 * double division's own 2^-53 is far inside that): rtol u, atol 0. A scale computed from the
 * squared norm is off by a factor norm (here >= 1.25), far outside. */
static void check_clipped(float clip, const double *norms, int n)
{
    train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.grad_clip = clip;
    float got[8];
    double want[8];
    for (int i = 0; i < n; i++) {
        got[i] = optim_clip_scale(&tc, norms[i]);
        want[i] = (double)clip / norms[i];
    }
    char what[64];
    snprintf(what, sizeof what, "clip %g, norms above it", (double)clip);
    check_allclose(what, got, want, (size_t)n, (check_tol){0.0, CHECK_U_FP32});
}

/* Exactly 1 (no scaling, bitwise) for each norm. */
static void check_unscaled(float clip, const double *norms, int n, const char *why)
{
    train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.grad_clip = clip;
    float got[8], one[8];
    for (int i = 0; i < n; i++) {
        got[i] = optim_clip_scale(&tc, norms[i]);
        one[i] = 1.0f;
    }
    char what[64];
    snprintf(what, sizeof what, "clip %g, %s", (double)clip, why);
    check_equal_f32(what, got, one, (size_t)n);
}

int main(void)
{
    /* above the clip: exact quotients (4 -> 1/4), inexact ones (3, 7), far above (1e6), and the
     * float just above the clip (its scale rounds to 1 or one ulp below) */
    const double above1[] = {4.0, 3.0, 7.0, 1.25, 1e6, (double)nextafterf(1.0f, 2.0f)};
    check_clipped(1.0f, above1, 6);
    const double above_small[] = {0.5, 0.3, 2.0, 123.456};
    check_clipped(0.1f, above_small, 4); /* clip 0.1f is inexact: the quotient uses its float value */
    const double above_big[] = {6.0, 10.0, 1e4};
    check_clipped(5.0f, above_big, 3);

    /* at or below the clip: no scaling; equal is not above (min(1, clip/norm) = 1 exactly) */
    const double below1[] = {1.0, 0.999999, 0.5, 1e-3, 0.0, (double)nextafterf(1.0f, 0.0f)};
    check_unscaled(1.0f, below1, 6, "norms at or below it");
    const double at_small[] = {(double)0.1f, 0.05, 0.0};
    check_unscaled(0.1f, at_small, 3, "norms at or below it");

    /* clipping off: 1 for every finite norm, however large */
    const double any[] = {0.0, 0.5, 1.0, 4.0, 1e6, 1e30};
    check_unscaled(0.0f, any, 6, "off (0)");
    check_unscaled(-1.0f, any, 6, "off (negative)");
    job_config cfg;
    config_defaults(&cfg);
    CHECK(config_set(&cfg, "train.grad_clip=-1") != 0, "train.grad_clip=-1 accepted by the config");
    CHECK(cfg.train.grad_clip >= 0.0f, "train.grad_clip is %g after a refused -1", (double)cfg.train.grad_clip);

    /* a NaN or Inf norm (a NaN or Inf gradient): no finite scale, clip on or off. 1 would apply
     * the bad gradients as they are, 0 would pass for a clipped step; the caller must skip the
     * step (train.c does: tests/reliability nan_steps.sh checks the skip end to end). */
    const float clips[] = {1.0f, 0.0f};
    int before = failures;
    const double bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 4; i++) {
            train_config tc;
            memset(&tc, 0, sizeof tc);
            tc.grad_clip = clips[c];
            float s = optim_clip_scale(&tc, bad[i]);
            CHECK(isnan(s), "clip %g, norm %g: scale %g, want NaN (no valid scale)", (double)clips[c], bad[i],
                  (double)s);
        }
    if (failures == before) printf("ok   clip scale of NaN / Inf norms is NaN with clipping on and off\n");
    return check_exit_code("test_optim_clip");
}
