/* cmd_train.c: `loom train JOB.json` and `loom finetune JOB.json`: load the config, join the
 * ranks, run the job, report. One file: the two differ only in the loop they call. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "core/train/train.h"
#include "launch/cli.h"
#include "parallel/comm.h"

/* Start the ranks the config asks for, the transport chosen for the backend that will run;
 * logs which transport and why. NULL + loom_fail. */
comm *cli_comm(const job_config *cfg, int *argc, char ***argv)
{
    const char *backend = backend_choose(cfg->backend, NULL, 0);
    if (!backend) return NULL;
    comm *c = comm_init(cfg->parallel.comm, argc, argv, backend);
    if (!c) return NULL;
    c->timeout_s = cfg->parallel.timeout_s;
    log_set_rank(c->rank, c->size);
    return c;
}

/* End a job that failed on this rank: the message, then take the other ranks down too (they may
 * be waiting in a collective for this one). */
int cli_job_failed(comm *c)
{
    log_warn("loom: error: %s", loom_error());
    if (c->size > 1) comm_abort(c, 1);
    comm_destroy(c);
    return 1;
}

static int cmd_train_or_finetune(int argc, char **argv, int finetune)
{
    cli_job a;
    job_config cfg;
    if (cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg)) return cli_fail();
    comm *c = cli_comm(&cfg, &argc, &argv);
    if (!c) return cli_fail();
    if (a.init && finetune) {
        comm_destroy(c);
        loom_fail("--init is for `loom train`; a fine-tune starts from finetune.base");
        return cli_fail();
    }
    train_options opt = {.resume = a.resume, .quiet = a.quiet, .eval_accuracy = finetune, .init = a.init != NULL};
    train_report rep;
    int rc = finetune ? finetune_run(&cfg, c, &opt, &rep) : train_run(&cfg, c, &opt, &rep);
    if (rc) return cli_job_failed(c);
    /* the job's answer: stdout, kept under --quiet (progress and info lines went to stderr) */
    if (rep.steps_done == 0) /* a resume of a finished run: no loss, no speed to report */
        log_result("done: no step left to run (the checkpoint had already reached the job's last step)");
    else
        log_result("done: %d steps, final loss %.4f, %.0f tokens/s (median), MFU %.1f%%", rep.steps_done,
                   rep.last_loss, rep.tokens_per_s, 100.0 * rep.mfu);
    log_result("memory: %zu bytes (params + grads + optimizer %zu, activations %zu)",
               rep.state_bytes + rep.activation_bytes, rep.state_bytes, rep.activation_bytes);
    if (finetune && !isnan(rep.accuracy)) {
        if (!isnan(rep.base_accuracy))
            log_result("tool-call accuracy (exact match, held-out): %.1f%% -> %.1f%% (base model -> fine-tuned); "
                       "right tool names %.1f%% -> %.1f%%; %d examples, evaluation %.1f s + %.1f s",
                       100.0 * rep.base_accuracy, 100.0 * rep.accuracy, 100.0 * rep.base_names,
                       100.0 * rep.names, rep.eval_examples, rep.base_eval_s, rep.eval_s);
        else
            log_result("tool-call accuracy (exact match, held-out): %.1f%%; right tool names %.1f%%; "
                       "%d examples, evaluation %.1f s", 100.0 * rep.accuracy, 100.0 * rep.names,
                       rep.eval_examples, rep.eval_s);
    }
    comm_destroy(c);
    return 0;
}

int cmd_train(int argc, char **argv) { return cmd_train_or_finetune(argc, argv, 0); }
int cmd_finetune(int argc, char **argv) { return cmd_train_or_finetune(argc, argv, 1); }
