/* cmd_train.c: `loom train JOB.json`: load the config, join the ranks, train, report. */
#include <stdio.h>

#include "core/error.h"
#include "core/log.h"
#include "core/train.h"
#include "launch/cli.h"
#include "parallel/comm.h"

int cmd_train(int argc, char **argv)
{
    cli_job a;
    job_config cfg;
    if (cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg)) return cli_fail();
    comm *c = comm_init(cfg.parallel.comm, &argc, &argv, NULL);
    if (!c) return cli_fail();
    c->timeout_s = cfg.parallel.timeout_s;
    log_set_rank(c->rank, c->size);
    train_options opt = {.resume = a.resume, .quiet = a.quiet};
    train_report rep;
    if (train_run(&cfg, c, &opt, &rep)) {
        log_warn("loom: error: %s", loom_error());
        if (c->size > 1) comm_abort(c, 1); /* the other ranks may be waiting in a collective */
        comm_destroy(c);
        return 1;
    }
    log_info("done: %d steps, final loss %.4f, %.0f tokens/s (median), MFU %.1f%%", rep.steps_done,
             rep.last_loss, rep.tokens_per_s, 100.0 * rep.mfu);
    log_info("memory: %zu bytes (params + grads + optimizer %zu, activations %zu)",
             rep.state_bytes + rep.activation_bytes, rep.state_bytes, rep.activation_bytes);
    comm_destroy(c);
    return 0;
}
