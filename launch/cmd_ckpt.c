/* cmd_ckpt.c: `loom ckpt info FILE_OR_DIR`. */
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt.h"
#include "launch/cli.h"

int cmd_ckpt(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[2], "info") != 0) {
        fprintf(stderr, "usage: loom ckpt info FILE_OR_DIR\n");
        return 2;
    }
    char file[1024];
    if (ckpt_resolve(argv[3], file, sizeof file)) return cli_fail();
    return ckpt_print_info(file) ? cli_fail() : 0;
}
