/* test_dp.c: data parallelism on real MPI ranks (run under mpirun -np N). For ZeRO stages 0-3,
 * N ranks training with the same global batch must match one rank's losses step by step, and
 * the per-rank bytes of parameters + gradients + optimizer state must shrink with the stage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/train/train.h"
#include "parallel/comm.h"

#define STEPS 10

static void job(job_config *cfg, int stage, const char *tag, int rank)
{
    const char *src = getenv("LOOM_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/tiny-train.json", src ? src : ".");
    if (config_load(cfg, path, NULL, 0)) { printf("FAIL: %s\n", loom_error()); exit(1); }
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s/configs/data/corpus.txt", src ? src : ".");
    snprintf(cfg->out, sizeof cfg->out, "test_dp_out/%s_r%d", tag, rank);
    cfg->model.n_layer = 12; /* deep enough that sharding per layer pays off in bytes */
    cfg->train.steps = STEPS;
    cfg->train.batch_size = 12; /* divisible by 1, 2, 3 and 4 ranks */
    cfg->parallel.zero_stage = stage;
    cfg->parallel.bucket_mb = 0.05f; /* several buckets even for this small model */
    cfg->parallel.threads = 1;
    cfg->checkpoint.every = -1;
}

int main(int argc, char **argv)
{
    log_set_quiet(1);
    comm *c = comm_init(NULL, &argc, &argv, NULL);
    if (!c) { printf("FAIL: %s\n", loom_error()); return 1; }
    c->timeout_s = 120;
    if (system("mkdir -p test_dp_out") != 0) return 1;
    comm *self = comm_init("self", &argc, &argv, NULL);
    int failures = 0;
    job_config cfg;
    double ref[STEPS], got[STEPS];
    train_options opt = {.quiet = 1, .losses_cap = STEPS, .overwrite = 1}; /* reruns of ctest */
    train_report rep;
    size_t bytes[4];

    job(&cfg, 0, "ref", c->rank);
    opt.losses_out = ref;
    if (train_run(&cfg, self, &opt, &rep)) { printf("FAIL ref: %s\n", loom_error()); return 1; }
    for (int stage = 0; stage <= 3; stage++) {
        char tag[16];
        snprintf(tag, sizeof tag, "z%d", stage);
        job(&cfg, stage, tag, c->rank);
        opt.losses_out = got;
        if (train_run(&cfg, c, &opt, &rep)) { printf("FAIL stage %d: %s\n", stage, loom_error()); comm_abort(c, 1); }
        bytes[stage] = rep.state_bytes;
        double worst = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(got[s] - ref[s]) / fabs(ref[s]));
        if (c->rank == 0)
            printf("np %d zero %d: loss %.5f -> %.5f (1 rank: %.5f), max rel diff %.2e, state %zu bytes\n",
                   c->size, stage, got[0], got[STEPS - 1], ref[STEPS - 1], worst, bytes[stage]);
        if (!(worst < 2e-5)) { printf("FAIL rank %d zero %d: losses differ from 1 rank by %.3g\n", c->rank, stage, worst); failures++; }
    }
    if (c->size > 1)
        for (int stage = 1; stage <= 3; stage++)
            if (bytes[stage] >= bytes[stage - 1]) {
                printf("FAIL: zero %d uses %zu bytes, not fewer than zero %d (%zu)\n", stage, bytes[stage], stage - 1, bytes[stage - 1]);
                failures++;
            }
    double f = failures;
    comm_allreduce_host(c, &f, 1);
    if (c->rank == 0) printf(f > 0 ? "FAILED\n" : "all dp checks passed\n");
    comm_destroy(self);
    comm_destroy(c);
    return f > 0 ? 1 : 0;
}
