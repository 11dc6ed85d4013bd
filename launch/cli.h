/* cli.h: what the subcommands of `loom` share: parsed job arguments and the one way to end
 * with an error. Each subcommand lives in its own cmd_<name>.c and returns the exit code. */
#ifndef LOOM_CLI_H
#define LOOM_CLI_H

#include "core/config/config.h"

#define CLI_MAX_SETS 64

/* `JOB.json [--set k=v]... [--out DIR] [--backend NAME] [--resume PATH] [--init PATH] [--overwrite]
 * [--quiet]` */
typedef struct cli_job {
    const char *job_path;
    const char *sets[CLI_MAX_SETS];
    int nsets;
    const char *out, *backend, *resume, *ckpt, *init;
    int quiet;
    int overwrite; /* train/finetune: start afresh in a run folder that holds a run */
} cli_job;

/* Parse argv[first..argc) into *a. -1 + loom_fail on an unknown flag or a missing value. */
int cli_parse_job(int argc, char **argv, int first, cli_job *a);

/* Load the job config the arguments name, with --set, --out and --backend applied; --init sets
 * finetune.base, and a Hugging Face folder there, or a loom checkpoint (--init's, finetune.base's,
 * or eval's and sample's --ckpt without a base) supplies the model config. A path the job file gives relative is taken from the file's folder; --set's, --out's and
 * --init's from the current directory. --quiet silences info lines from here on (logs go to stderr, results to stdout:
 * base/log.h). */
int cli_load_config(const cli_job *a, job_config *cfg);

/* The job's data files that a command reads (CLI_IN_* bits: data.train, data.val), when set,
 * exist: else one line naming the field and the path as resolved (cli_load_config). A missing
 * finetune.base is named where the base is opened (session_load_base). */
enum { CLI_IN_TRAIN = 1, CLI_IN_VAL = 2 };
int cli_check_inputs(const job_config *cfg, int which);

/* A flag's whole-number value v in lo..hi, strictly ("abc", "5x", "" and out of range are errors
 * naming the flag). 0, or -1 + loom_fail. */
int cli_long(const char *flag, const char *v, long lo, long hi, long *out);

/* Print "loom: error: <loom_error()>" (prefixed with the rank when several) and return 1. */
int cli_fail(void);

/* Start the ranks (comm) for a job and tell the logger which rank this is. */
struct comm;
struct comm *cli_comm(const job_config *cfg, int *argc, char ***argv);
/* Report this rank's error, abort the other ranks, return the exit code. */
int cli_job_failed(struct comm *c);

/* eval and sample on a checkpoint: data.date_string, the date a Llama 3-style template writes, is
 * the job's when set, else the checkpoint's (ckpt: what it was trained on), else today's
 * (session_resolve_date); *source says which, for cli_say_date. -1 + loom_fail when ckpt does not
 * open. */
int cli_job_date(job_config *cfg, const char *ckpt, const char **source);
/* One info line with the date and its source, when ct's format writes a date (llama3). */
struct chat_template;
void cli_say_date(const struct chat_template *ct, const char *source);

int cmd_train(int argc, char **argv);
int cmd_finetune(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
