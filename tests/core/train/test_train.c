/* test_train.c: the training loop end to end on one rank, real files: the same seed and config
 * give bitwise identical losses twice; the loss falls; token files round-trip and bad ones
 * (truncated, id >= vocab) are refused with a message naming the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/text/data.h"
#include "base/error.h"
#include "base/log.h"
#include "core/train/train.h"
#include "parallel/comm.h"

#include "tests/check.h"

static tokenizer *g_byte; /* the byte tokenizer, opened in main */

static void tiny_job(job_config *cfg, const char *out)
{
    char path[1024];
    const char *src = getenv("LOOM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/configs/tiny-train.json", src ? src : ".");
    if (config_load(cfg, path, NULL, 0)) { printf("FAIL: %s\n", loom_error()); exit(1); }
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s/configs/data/corpus.txt", src ? src : ".");
    snprintf(cfg->out, sizeof cfg->out, "%s", out);
    cfg->parallel.threads = 2;
}

static void check_determinism(comm *c)
{
    job_config cfg;
    tiny_job(&cfg, "test_train_out/a");
    double a[20], b[20];
    train_options opt = {.losses_out = a, .losses_cap = 20, .quiet = 1, .overwrite = 1}; /* reruns of ctest */
    train_report rep;
    CHECK(train_run(&cfg, c, &opt, &rep) == 0, "run 1: %s", loom_error());
    opt.losses_out = b;
    tiny_job(&cfg, "test_train_out/b");
    CHECK(train_run(&cfg, c, &opt, &rep) == 0, "run 2: %s", loom_error());
    CHECK(memcmp(a, b, sizeof a) == 0, "losses differ between two identical runs (%.9g vs %.9g)", a[19], b[19]);
    CHECK(a[19] < a[0] - 1.0, "loss did not fall: %.4f -> %.4f", a[0], a[19]);
    printf("determinism: 20 steps bitwise equal, loss %.4f -> %.4f\n", a[0], a[19]);
}

static void check_token_files(void)
{
    int32_t toks[5] = {1, 2, 300, 4, 5};
    token_data d;
    CHECK(tokfile_write("test_train_out/t.bin", toks, 5, 2, TOKENIZER_BYTE_HASH) == 0, "write: %s", loom_error());
    CHECK(token_data_load(&d, "test_train_out/t.bin", g_byte, 512) == 0 && d.n == 5 && token_data_at(&d, 2) == 300,
          "round trip: %s", loom_error());
    token_data_free(&d);
    CHECK(token_data_load(&d, "test_train_out/t.bin", g_byte, 256) != 0 && strstr(loom_error(), "vocab") &&
              strstr(loom_error(), "t.bin"),
          "id >= vocab accepted or unclear: %s", loom_error());
    FILE *f = fopen("test_train_out/t.bin", "r+b");
    CHECK(f != NULL, "reopen");
    if (f) { fseek(f, 0, SEEK_END); fclose(f); }
    CHECK(truncate("test_train_out/t.bin", TOKFILE_HEADER_BYTES + 4) == 0, "truncate");
    CHECK(token_data_load(&d, "test_train_out/t.bin", g_byte, 512) != 0 && strstr(loom_error(), "truncated"),
          "truncated file accepted or unclear: %s", loom_error());
    CHECK(token_data_load(&d, "test_train_out/missing.bin", g_byte, 512) != 0 && strstr(loom_error(), "missing.bin"),
          "missing file: %s", loom_error());
    /* a file made by another tokenizer is refused, naming both */
    CHECK(tokfile_write("test_train_out/other.bin", toks, 5, 2, 0x1234) == 0, "write other: %s", loom_error());
    CHECK(token_data_load(&d, "test_train_out/other.bin", g_byte, 512) != 0 &&
              strstr(loom_error(), "made by tokenizer 0000000000001234") && strstr(loom_error(), "byte"),
          "tokenizer mismatch accepted or unclear: %s", loom_error());
    /* version 1 files (24-byte header, no hash) were all made by the byte tokenizer */
    unsigned char v1[24 + 4] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '1', 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                                'h', 0, 'i', 0};
    f = fopen("test_train_out/v1.bin", "wb");
    CHECK(f && fwrite(v1, 1, sizeof v1, f) == sizeof v1 && fclose(f) == 0, "write v1");
    CHECK(token_data_load(&d, "test_train_out/v1.bin", g_byte, 512) == 0 && d.n == 2 && token_data_at(&d, 1) == 'i',
          "version 1 file: %s", loom_error());
    token_data_free(&d);
}

int main(int argc, char **argv)
{
    log_set_quiet(1);
    g_byte = tokenizer_open("byte");
    if (system("mkdir -p test_train_out") != 0) return 1;
    comm *c = comm_init("self", &argc, &argv, NULL);
    if (!c) { printf("FAIL: %s\n", loom_error()); return 1; }
    check_determinism(c);
    check_token_files();
    comm_destroy(c);
    printf(failures ? "%d check(s) failed\n" : "all training checks passed\n", failures);
    return failures ? 1 : 0;
}
