/* cmd_import.c: `loom import HF_DIR OUT`: a Hugging Face folder -> a loom checkpoint (folder OUT
 * or the one file OUT.h5); the work is core/train/import.c's, this file parses and prints. */
#include <stdio.h>

#include "core/train/train.h"
#include "launch/cli.h"

int cmd_import(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: loom import HF_DIR OUT_DIR|OUT.h5   (a Hugging Face model folder -> a loom checkpoint)\n");
        return 2;
    }
    const char *dir = argv[2], *out = argv[3];
    if (import_hf(dir, out)) return cli_fail();
    printf("%s -> %s\n", dir, out);
    return 0;
}
