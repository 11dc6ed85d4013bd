/* cmd_ckpt.c: `loom ckpt info FILE_OR_DIR`, `loom ckpt seal FILE_OR_DIR` and `loom ckpt merge BASE
 * ADAPTER OUT_DIR [--allow-other-base]`. Parsing and printing only: the work is in checkpoints/
 * (ckpt_inspect hands over the facts `info` formats here) and core/train/export.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "checkpoints/hf.h"
#include "core/train/train.h"
#include "launch/cli.h"

#define INFO_MAX_GROUPS 64

/* What `ckpt info` has printed so far, and the per-group totals it ends with. */
typedef struct info_table {
    int width;         /* of the tensor column */
    int listed;        /* the tensors were listed: the table, totals and STATUS get printed */
    int bad;           /* tensors not "ok", the missing ones included */
    size_t found;      /* tensors in the file */
    struct {
        char name[256];
        int64_t bytes, tensors;
    } tot[INFO_MAX_GROUPS];
    int ntot;
} info_table;

static void info_state(void *ctx, const char *file, const char *format, const ckpt_state *s)
{
    (void)ctx;
    printf("checkpoint     %s\n", file);
    printf("format         %s v%d, whole-file seal ok, per-tensor crc32c\n", format, s->format_version);
    printf("step           %" PRId64 "\n", s->step);
    printf("tokens_seen    %" PRId64 "\n", s->tokens_seen);
    printf("sample_cursor  %" PRId64 "   epoch %" PRId64 "\n", s->sample_cursor, s->epoch);
    printf("seed           %" PRIu64 "   rng_counter %" PRIu64 "   lr %.6g\n", s->seed, s->rng_counter, s->lr);
    printf("adam_step      %" PRId64 "%s\n", s->adam_step, s->format_version < 2 ? "   (from rng_counter: version 1)" : "");
    if (s->base_digest) printf("base_digest    %016" PRIx64 "   (LoRA adapters bound to this base)\n", s->base_digest);
    if (s->tokenizer_hash) printf("tokenizer_hash %016" PRIx64 "\n", s->tokenizer_hash);
    printf("saved by       world_size %d, zero stage %d, backend %s\n", s->world_size, s->zero_stage,
           s->backend[0] ? s->backend : "?");
    if (s->tuning[0]) {
        /* one line per rank; each "BACKEND MACHINE | CHOICES" */
        const char *line = s->tuning;
        for (int rank = 0; *line; rank++) {
            size_t n = strcspn(line, "\n");
            printf("tuning rank %-3d%.*s\n", rank, (int)n, line);
            line += n + (line[n] == '\n');
        }
    }
    printf("model_config   %s\n", s->model_config_json[0] ? s->model_config_json : "(none)");
    printf("job_config     %zu bytes of JSON\n", strlen(s->job_config_json));
    if (s->source[0]) printf("source         %zu bytes of JSON (what `loom import` recorded of its file)\n", strlen(s->source));
}

static void info_listed(void *ctx, const char *const *found, size_t nfound, const char *const *missing,
                        size_t nmissing)
{
    info_table *it = ctx;
    it->listed = 1;
    it->width = 12;
    for (size_t i = 0; i < nmissing; i++)
        if ((int)strlen(missing[i]) > it->width) it->width = (int)strlen(missing[i]);
    for (size_t i = 0; i < nfound; i++)
        if ((int)strlen(found[i]) > it->width) it->width = (int)strlen(found[i]);
    printf("\n%-*s  %-22s %12s  %s\n", it->width, "tensor", "shape", "numel", "checksum");
}

/* Bytes of tensor `name` into the total of its group (the path up to its last '/'). */
static void info_add_total(info_table *it, const char *name, int64_t bytes)
{
    const char *slash = strrchr(name, '/');
    size_t glen = slash ? (size_t)(slash - name) : 0;
    if (glen >= sizeof it->tot[0].name) glen = sizeof it->tot[0].name - 1;
    int i = 0;
    while (i < it->ntot && !(strlen(it->tot[i].name) == glen && strncmp(it->tot[i].name, name, glen) == 0)) i++;
    if (i == it->ntot) {
        if (it->ntot == INFO_MAX_GROUPS) return;
        memcpy(it->tot[i].name, name, glen);
        it->tot[i].name[glen] = '\0';
        it->tot[i].bytes = it->tot[i].tensors = 0;
        it->ntot++;
    }
    it->tot[i].bytes += bytes;
    it->tot[i].tensors++;
}

static void info_tensor(void *ctx, const ckpt_tensor_report *t)
{
    info_table *it = ctx;
    if (strcmp(t->status, "ok") != 0) it->bad++;
    if (strcmp(t->status, "missing") == 0) {
        printf("%-*s  %-22s %12s  missing\n", it->width, t->name, "-", "-");
        return;
    }
    char ss[128] = "?";
    if (t->ndim >= 0) { /* "[a, b, c]" */
        size_t used = (size_t)snprintf(ss, sizeof ss, "[");
        for (int d = 0; d < t->ndim && used < sizeof ss; d++)
            used += (size_t)snprintf(ss + used, sizeof ss - used, "%s%" PRId64, d ? ", " : "", t->shape[d]);
        if (used < sizeof ss) snprintf(ss + used, sizeof ss - used, "]");
    }
    printf("%-*s  %-22s %12" PRId64 "  %s\n", it->width, t->name, ss, t->numel, t->status);
    info_add_total(it, t->name, t->numel * 4);
    it->found++;
}

/* The group totals and the verdict under the tensor table (refused: a load refuses the file for
 * what its attributes say, though every tensor is sound). */
static void info_footer(const info_table *it, int refused)
{
    printf("\n%-24s %8s %16s\n", "group", "tensors", "bytes");
    int64_t all = 0;
    for (int i = 0; i < it->ntot; i++) {
        printf("%-24s %8" PRId64 " %16" PRId64 "  (%.1f MB)\n", it->tot[i].name[0] ? it->tot[i].name : "/",
               it->tot[i].tensors, it->tot[i].bytes, it->tot[i].bytes / 1e6);
        all += it->tot[i].bytes;
    }
    printf("%-24s %8zu %16" PRId64 "  (%.1f MB)\n", "total", it->found, all, all / 1e6);
    printf("\n%s\n", it->bad ? "STATUS: CORRUPT" : refused ? "STATUS: REFUSED (a load refuses it: see the error)"
                                                         : "STATUS: ok");
}

static int ckpt_info(const char *file)
{
    if (hf_is_folder(file)) { /* not a checkpoint: say what it is and how it becomes one */
        loom_fail("%s is a Hugging Face model folder, not a loom checkpoint: `loom import %s OUT.h5` makes one, "
                  "and finetune.base takes the folder as it is", file, file);
        return cli_fail();
    }
    info_table it;
    memset(&it, 0, sizeof it);
    ckpt_inspect_fns fns = {info_state, info_listed, info_tensor};
    /* the verdict is the load's: first what a load refuses before any tensor (the attributes
     * against each other and against the tensors' shapes), then every tensor's checksum */
    char refused[1024] = "";
    if (session_check_file(file)) snprintf(refused, sizeof refused, "%s", loom_error());
    int rc = ckpt_inspect(file, &fns, &it);
    if (it.listed) info_footer(&it, refused[0] != 0);
    fflush(stdout);
    if (rc == 0 && refused[0]) rc = loom_fail("%s", refused);
    return rc ? cli_fail() : 0;
}

int cmd_ckpt(int argc, char **argv)
{
    int other = argc == 7 && strcmp(argv[6], "--allow-other-base") == 0;
    if ((argc == 6 || other) && strcmp(argv[2], "merge") == 0)
        return export_merge_lora(argv[3], argv[4], argv[5], other) ? cli_fail() : 0;
    if (argc == 4 && strcmp(argv[2], "seal") == 0) {
        int rc = ckpt_seal(argv[3]);
        if (rc < 0) return cli_fail();
        printf("%s: %s\n", argv[3], rc ? "already sealed, unchanged" : "every tensor checksum ok, sealed");
        return 0;
    }
    if (argc != 4 || strcmp(argv[2], "info") != 0) {
        fprintf(stderr, "usage: loom ckpt info FILE_OR_DIR | loom ckpt seal FILE_OR_DIR | "
                        "loom ckpt merge BASE ADAPTER OUT_DIR [--allow-other-base]\n");
        return 2;
    }
    return ckpt_info(argv[3]);
}
