/* cli.c: argument parsing and error reporting shared by the subcommands (see cli.h). */
#include "launch/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "base/error.h"
#include "base/log.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/hf.h"
#include "core/text/text.h"
#include "core/train/train.h"

int cli_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi)
        return loom_fail("%s '%s': want a whole number in %ld..%ld", flag, v, lo, hi);
    *out = x;
    return 0;
}

static int cli_value(int argc, char **argv, int *i, const char **out)
{
    if (*i + 1 >= argc) return loom_fail("flag %s needs a value", argv[*i]);
    *out = argv[++*i];
    return 0;
}

/* An unknown flag; one that names a config field (--steps 5, --learning-rate 1e-4) gets the --set
 * that sets it. */
static int cli_unknown_flag(int argc, char **argv, int i)
{
    char name[64];
    snprintf(name, sizeof name, "%s", argv[i] + 2);
    char *eq = strchr(name, '=');
    if (eq) *eq = '\0';
    for (char *c = name; *c; c++) *c = *c == '-' ? '_' : *c;
    const char *field = config_suggest(name, 1);
    if (!field) return loom_fail("unknown flag '%s'", argv[i]);
    const char *value = strchr(argv[i], '=') ? strchr(argv[i], '=') + 1
                        : i + 1 < argc && argv[i + 1][0] != '-' ? argv[i + 1] : "VALUE";
    return loom_fail("unknown flag '%s' (config fields are set as --set %s=%s)", argv[i], field, value);
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
        else if (strcmp(f, "--init") == 0) rc = cli_value(argc, argv, &i, &a->init);
        else if (strcmp(f, "--quiet") == 0) a->quiet = 1;
        else if (strcmp(f, "--overwrite") == 0) a->overwrite = 1;
        else if (f[0] == '-' && f[1] == '-') return cli_unknown_flag(argc, argv, i);
        else if (!a->job_path) a->job_path = f;
        else return loom_fail("unexpected argument '%s'", f);
        if (rc) return -1;
    }
    if (!a->job_path) return loom_fail("missing the job file (e.g. configs/demo.json)");
    return 0;
}

/* The path fields of a job: one written in the job file is relative to the file's folder, one given
 * on the command line (--set, --out, --init) to the current directory, an absolute one is kept as
 * it is (docs/config.md, "Paths"). "byte" is a tokenizer, not a path. */
static const char *const cli_path_fields[] = {"data.train", "data.val", "finetune.base", "model.tokenizer",
                                              "out", "checkpoint.dir", NULL};

/* Whether a --set names field: then its value is the command line's (--set applies after the file). */
static int cli_set_names(const cli_job *a, const char *field)
{
    size_t l = strlen(field);
    for (int k = 0; k < a->nsets; k++)
        if (strncmp(a->sets[k], field, l) == 0 && a->sets[k][l] == '=') return 1;
    return 0;
}

static int cli_resolve_paths(const cli_job *a, job_config *cfg)
{
    const char *slash = strrchr(a->job_path, '/');
    if (!slash) return 0; /* the job file's folder is the current directory */
    int nf;
    const config_field *fields = config_fields(&nf);
    for (int i = 0; i < nf; i++) {
        const config_field *f = &fields[i];
        int k = 0;
        while (cli_path_fields[k] && strcmp(cli_path_fields[k], f->path)) k++;
        char *path = (char *)cfg + f->offset;
        if (!cli_path_fields[k] || !path[0] || path[0] == '/' || cli_set_names(a, f->path) ||
            (!strcmp(f->path, "model.tokenizer") && !strcmp(path, "byte")))
            continue;
        char buf[1024];
        int n = snprintf(buf, sizeof buf, "%.*s/%s", (int)(slash - a->job_path), a->job_path, path);
        if (n < 0 || (size_t)n >= f->size)
            return loom_fail("%s: %s: %s \"%s\", taken from its folder, is longer than %zu bytes", a->job_path,
                             f->path, f->path, path, f->size - 1);
        memcpy(path, buf, (size_t)n + 1);
    }
    return 0;
}

int cli_check_inputs(const job_config *cfg, int which)
{
    const struct { int bit; const char *field, *path; } in[] = {
        {CLI_IN_TRAIN, "data.train", cfg->data.train}, {CLI_IN_VAL, "data.val", cfg->data.val}};
    for (size_t k = 0; k < sizeof in / sizeof *in; k++)
        if ((which & in[k].bit) && in[k].path[0] && access(in[k].path, F_OK) != 0)
            return loom_fail("%s: %s: %s (a job file's relative paths are taken from its folder, --set's from the "
                             "current directory)", in[k].field, in[k].path, strerror(errno));
    return 0;
}

/* A loom checkpoint's model config as the job's (an HF folder's config.json is, the same way). The
 * tokenizer it names, unless the job names one: the copy beside it when an import left one
 * there and the recorded path no longer leads anywhere (it was relative to where the import ran).
 * `must`: a config that is not loom's (a Needle file's) is an error (--init); else it is left to
 * the checkpoint's own loader, and the job's model stands. */
static int cli_model_from_ckpt(model_config *m, const char *path, const unsigned char *explicit, int must)
{
    char file[1024];
    if (ckpt_resolve(path, file, sizeof file)) return must ? -1 : 0;
    ckpt_reader *r = ckpt_open_peek(file);
    if (!r) return -1;
    ckpt_state st = {0};
    model_config saved;
    int rc = ckpt_read_state(r, &st), ours = rc == 0 && config_model_from_json(&saved, st.model_config_json) == 0;
    if (rc == 0 && !ours && must) rc = loom_fail("%s: %s", file, loom_error());
    if (rc == 0 && ours) rc = session_model_adopt(m, &saved, file, explicit);
    ckpt_state_free(&st);
    ckpt_close(r);
    if (rc || !ours || session_model_explicit(explicit, "model.tokenizer") || strcmp(m->tokenizer, "byte") == 0 ||
        access(m->tokenizer, F_OK) == 0)
        return rc;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    size_t n = strlen(dir);
    if (session_dir_tokenizer(dir) && n < sizeof m->tokenizer) memcpy(m->tokenizer, dir, n + 1);
    return 0;
}

/* The loom checkpoint whose model config the job takes, if any: --init's; else finetune.base when
 * it is one (an import, an earlier run; not an HF folder, which brings config.json, nor a Needle
 * base, which its own loader reads); else, with no base, eval's and sample's --ckpt. */
static const char *cli_model_ckpt(const cli_job *a, const job_config *cfg)
{
    const char *b = cfg->finetune.base;
    if (a->init) return a->init;
    if (b[0]) return hf_is_folder(b) || finetune_needle_base(b) ? NULL : b;
    return a->ckpt && !finetune_needle_base(a->ckpt) ? a->ckpt : NULL;
}

int cli_load_config(const cli_job *a, job_config *cfg)
{
    log_set_quiet(a->quiet); /* before anything logs: --quiet leaves results and warnings only */
    if (config_load(cfg, a->job_path, a->sets, a->nsets) || cli_resolve_paths(a, cfg)) return -1;
    if (a->init) snprintf(cfg->finetune.base, sizeof cfg->finetune.base, "%s", a->init);
    /* a Hugging Face base brings its own architecture: its config.json decides the model fields
     * the job does not name itself (cfg->named) */
    const char *ckpt = cli_model_ckpt(a, cfg);
    if (hf_is_folder(cfg->finetune.base)) {
        if (session_model_from_hf(&cfg->model, cfg->finetune.base, cfg->named)) return -1;
    } else if (ckpt && cli_model_from_ckpt(&cfg->model, ckpt, cfg->named, ckpt == a->init)) {
        return -1;
    }
    if (a->out) snprintf(cfg->out, sizeof cfg->out, "%s", a->out);
    if (a->backend) snprintf(cfg->backend, sizeof cfg->backend, "%s", a->backend);
    return config_validate(cfg);
}

int cli_fail(void)
{
    fprintf(stderr, "loom: error: %s\n", loom_error());
    return 1;
}

int cli_job_date(job_config *cfg, const char *ckpt, const char **source)
{
    *source = cfg->data.date_string[0] ? "data.date_string" : ckpt ? "the checkpoint's data.date_string" : "today";
    return session_resolve_date(cfg, ckpt);
}

void cli_say_date(const chat_template *ct, const char *source)
{
    if (ct->format && strcmp(ct->format, "llama3") == 0)
        log_info("chat format llama3: the system turn's date is %s (%s)", ct->date, source);
}
