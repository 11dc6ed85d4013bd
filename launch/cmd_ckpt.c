/* cmd_ckpt.c: `loom ckpt info FILE_OR_DIR`, `loom ckpt seal FILE_OR_DIR` and `loom ckpt merge BASE
 * ADAPTER OUT_DIR [--allow-other-base]`. Parsing and printing only: the work is in checkpoints/ and core/train/export.c. */
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt.h"
#include "core/train/train.h"
#include "launch/cli.h"

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
    char file[1024];
    if (ckpt_resolve(argv[3], file, sizeof file)) return cli_fail();
    return ckpt_print_info(file) ? cli_fail() : 0;
}
