/* cli.c: argument parsing and error reporting shared by the subcommands (see cli.h). */
#include "launch/cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

static int cli_value(int argc, char **argv, int *i, const char **out)
{
    if (*i + 1 >= argc) return loom_fail("flag %s needs a value", argv[*i]);
    *out = argv[++*i];
    return 0;
}

int cli_parse_job(int argc, char **argv, int first, cli_job *a)
{
    memset(a, 0, sizeof *a);
    for (int i = first; i < argc; i++) {
        const char *f = argv[i];
        int rc = 0;
        if (strcmp(f, "--set") == 0) {
            if (a->nsets == CLI_MAX_SETS) return loom_fail("too many --set flags (max %d)", CLI_MAX_SETS);
            rc = cli_value(argc, argv, &i, &a->sets[a->nsets++]);
        } else if (strncmp(f, "--set=", 6) == 0) {
            if (a->nsets == CLI_MAX_SETS) return loom_fail("too many --set flags (max %d)", CLI_MAX_SETS);
            a->sets[a->nsets++] = f + 6;
        } else if (strcmp(f, "--out") == 0) rc = cli_value(argc, argv, &i, &a->out);
        else if (strcmp(f, "--backend") == 0) rc = cli_value(argc, argv, &i, &a->backend);
        else if (strcmp(f, "--resume") == 0) rc = cli_value(argc, argv, &i, &a->resume);
        else if (strcmp(f, "--ckpt") == 0) rc = cli_value(argc, argv, &i, &a->ckpt);
        else if (strcmp(f, "--quiet") == 0) a->quiet = 1;
        else if (f[0] == '-' && f[1] == '-') return loom_fail("unknown flag '%s'", f);
        else if (!a->job_path) a->job_path = f;
        else return loom_fail("unexpected argument '%s'", f);
        if (rc) return -1;
    }
    if (!a->job_path) return loom_fail("missing the job file (e.g. configs/demo.json)");
    return 0;
}

/* A relative data path that does not exist from here is taken relative to the job file's folder,
 * so `loom train configs/demo.json` works from anywhere. */
static void cli_resolve_path(char *path, size_t len, const char *job_path)
{
    if (!path[0] || path[0] == '/' || access(path, F_OK) == 0) return;
    const char *slash = strrchr(job_path, '/');
    if (!slash) return;
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s/%s", (int)(slash - job_path), job_path, path);
    if (access(buf, F_OK) == 0 && strlen(buf) < len) snprintf(path, len, "%s", buf);
}

int cli_load_config(const cli_job *a, job_config *cfg)
{
    if (config_load(cfg, a->job_path, a->sets, a->nsets)) return -1;
    cli_resolve_path(cfg->data.train, sizeof cfg->data.train, a->job_path);
    cli_resolve_path(cfg->data.val, sizeof cfg->data.val, a->job_path);
    cli_resolve_path(cfg->finetune.base, sizeof cfg->finetune.base, a->job_path);
    if (strcmp(cfg->model.tokenizer, "byte") != 0)
        cli_resolve_path(cfg->model.tokenizer, sizeof cfg->model.tokenizer, a->job_path);
    if (a->out) snprintf(cfg->out, sizeof cfg->out, "%s", a->out);
    if (a->backend) snprintf(cfg->backend, sizeof cfg->backend, "%s", a->backend);
    return config_validate(cfg);
}

int cli_fail(void)
{
    fprintf(stderr, "loom: error: %s\n", loom_error());
    return 1;
}
