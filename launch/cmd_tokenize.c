/* cmd_tokenize.c: `loom tokenize [JOB.json] IN.txt OUT.bin [--width 2|4] [--tokenizer SPEC]`: text
 * to a token file with the model's tokenizer (the job's model.tokenizer, or --tokenizer, else
 * "byte"); the file records that tokenizer's hash (docs/token-format.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "core/config/config.h"
#include "core/text/text.h"
#include "launch/cli.h"

static int tokenize_usage(void)
{
    fprintf(stderr, "usage: loom tokenize [JOB.json] IN.txt OUT.bin [--width 2|4] [--tokenizer byte|FILE|DIR]\n");
    return 2;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *pos[3] = {0}, *spec = NULL;
    int npos = 0, width = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--width") == 0 && i + 1 < argc) width = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) spec = argv[++i];
        else if (npos < 3 && argv[i][0] != '-') pos[npos++] = argv[i];
        else return tokenize_usage();
    }
    if (npos < 2) return tokenize_usage();
    const char *in = pos[npos - 2], *out = pos[npos - 1];
    static job_config cfg;
    if (npos == 3) { /* the job names the tokenizer */
        cli_job a = {0};
        a.job_path = pos[0];
        if (cli_load_config(&a, &cfg)) return cli_fail();
        if (!spec) spec = cfg.model.tokenizer;
    }
    tokenizer *tok = tokenizer_open(spec ? spec : "byte");
    if (!tok) return cli_fail();
    if (!width) width = tokenizer_vocab(tok) <= 65536 ? 2 : 4;
    token_data d;
    struct timespec t0, t1;
    struct stat st;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* the command says its input is text, whatever the file is called */
    int rc = token_data_load_text(&d, in, tok, tokenizer_vocab(tok));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0) {
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double mb = stat(in, &st) == 0 ? (double)st.st_size / 1e6 : 0.0;
        log_info("tokenize: read and encoded %.2f MB in %.3f s (%.2f MB/s, one thread)", mb, s, s > 0 ? mb / s : 0.0);
        rc = tokfile_write(out, d.tokens, d.n, width, tokenizer_hash(tok));
        if (rc == 0) printf("%s: %zu tokens (%d bytes each, tokenizer %s, hash %016llx)\n", out, d.n, width,
                            tokenizer_describe(tok), (unsigned long long)tokenizer_hash(tok));
        token_data_free(&d);
    }
    tokenizer_free(tok);
    return rc ? cli_fail() : 0;
}
