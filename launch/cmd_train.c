/* cmd_train.c: `loom train JOB.json` and `loom finetune JOB.json`: load the config, join the
 * ranks, run the job, report. One file: the two differ only in the loop they call. Owns the
 * SIGINT/SIGTERM handler of a job: it only sets a flag the loop reads (a second signal aborts). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
 * be waiting in a collective for this one), unless every rank already knows (comm_agree_failure)
 * and ends here the same way: then no kill cuts off another rank's message. */
int cli_job_failed(comm *c)
{
    log_warn("loom: error: %s", loom_error());
    if (c->size > 1 && !c->failed_together) comm_abort(c, 1);
    comm_destroy(c);
    return 1;
}

/* The first SIGINT/SIGTERM's number (train_options.stop), 0 = none yet; and whether this process
 * is rank 0, the one that says a signal came (once, not once per rank). */
static volatile sig_atomic_t cmd_train_signal, cmd_train_rank0;

/* Async-signal-safe: a flag, write(2), and for a second signal the default action (the process
 * ends by that signal at once, no save: a save in flight leaves the previous checkpoint whole). */
static void cmd_train_on_signal(int sig)
{
    static const char first[] = "loom: signal received: stopping after this step and saving a checkpoint "
                                "(a second signal aborts at once)\n";
    static const char second[] = "loom: second signal: aborting now, without a save\n";
    if (cmd_train_signal) {
        if (write(STDERR_FILENO, second, sizeof second - 1) < 0) { /* nothing to do about it */ }
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cmd_train_signal = sig;
    if (cmd_train_rank0 && write(STDERR_FILENO, first, sizeof first - 1) < 0) { /* nothing to do about it */ }
}

static int cmd_train_catch_signals(const comm *c)
{
    cmd_train_rank0 = c->rank == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cmd_train_on_signal;
    sa.sa_flags = SA_RESTART; /* the step and a save in flight go on as if nothing happened */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return loom_fail("cannot install the SIGINT/SIGTERM handler");
    return 0;
}

/* Append word w to the shell line out (length *n of len), quoted when it holds more than plain
 * characters ('\'' for a quote inside). */
static void cmd_train_put_word(char *out, size_t len, size_t *n, const char *w)
{
    static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:+@%";
    int quote = !w[0] || strspn(w, plain) != strlen(w);
    char buf[2048];
    size_t k = 0;
    for (const char *p = w; *p && k + 5 < sizeof buf; p++) {
        if (*p == '\'') memcpy(buf + k, "'\\''", 4), k += 4;
        else buf[k++] = *p;
    }
    buf[k] = '\0';
    int m = snprintf(out + *n, len - *n, "%s%s%s%s", *n ? " " : "", quote ? "'" : "", buf, quote ? "'" : "");
    if (m > 0) *n = *n + (size_t)m < len ? *n + (size_t)m : len - 1;
}

/* The command line that continues this job: argv with `--resume X` and `--overwrite` left out and
 * `--resume dir` added. */
static void cmd_train_resume_line(int argc, char **argv, const char *dir, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--overwrite") == 0) continue;
        if (strcmp(argv[i], "--resume") == 0) {
            i++;
            continue;
        }
        cmd_train_put_word(out, len, &n, argv[i]);
    }
    cmd_train_put_word(out, len, &n, "--resume");
    cmd_train_put_word(out, len, &n, dir);
}

/* A job every rank stopped on a signal: rank 0 says where it stands and how to go on (one line,
 * kept under --quiet); the exit code is 128 + the signal, as a shell reports a process it ended. */
static int cmd_train_stopped(const job_config *cfg, comm *c, const train_report *rep, int argc, char **argv)
{
    const char *name = rep->stopped == SIGINT ? "SIGINT" : "SIGTERM";
    char out_dir[512], dir[600], line[4096];
    session_out_dir(cfg, out_dir, sizeof out_dir);
    session_ckpt_dir_of(cfg, out_dir, dir, sizeof dir);
    cmd_train_resume_line(argc, argv, dir, line, sizeof line);
    if (c->rank == 0 && cfg->checkpoint.every < 0)
        log_warn("loom: stopped by %s after step %d of %d; checkpoint.every = -1, so nothing was saved and the "
                 "run cannot be resumed", name, rep->steps_done, rep->total_steps);
    else if (c->rank == 0 && c->size > 1)
        log_warn("loom: stopped by %s after step %d of %d, checkpoint saved; resume with (under the same launcher, "
                 "%d ranks for a bitwise continuation): %s", name, rep->steps_done, rep->total_steps, c->size, line);
    else if (c->rank == 0)
        log_warn("loom: stopped by %s after step %d of %d, checkpoint saved; resume with: %s", name,
                 rep->steps_done, rep->total_steps, line);
    comm_destroy(c);
    return 128 + rep->stopped;
}

static int cmd_train_or_finetune(int argc, char **argv, int finetune)
{
    cli_job a;
    job_config cfg;
    if (cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg) ||
        cli_check_inputs(&cfg, finetune ? CLI_IN_TRAIN | CLI_IN_VAL : CLI_IN_TRAIN))
        return cli_fail();
    comm *c = cli_comm(&cfg, &argc, &argv);
    if (!c) return cli_fail();
    const char *bad = a.init && finetune ? "--init is for `loom train`; a fine-tune starts from finetune.base"
                      : a.overwrite && a.resume ? "--overwrite starts the run afresh, --resume continues it: give one"
                      : NULL;
    if (bad || cmd_train_catch_signals(c)) {
        comm_destroy(c);
        if (bad) loom_fail("%s", bad);
        return cli_fail();
    }
    train_options opt = {.resume = a.resume, .quiet = a.quiet, .eval_accuracy = finetune, .init = a.init != NULL,
                         .overwrite = a.overwrite, .stop = &cmd_train_signal};
    train_report rep;
    int rc = finetune ? finetune_run(&cfg, c, &opt, &rep) : train_run(&cfg, c, &opt, &rep);
    if (rc) return cli_job_failed(c);
    if (rep.stopped) return cmd_train_stopped(&cfg, c, &rep, argc, argv);
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
