/* cmd_import.c: `loom import HF_DIR|NEEDLE.safetensors|MODEL.gguf OUT`: a Hugging Face folder, a
 * Needle base file or a GGUF model -> a loom checkpoint (folder OUT or the one file OUT.h5); the
 * work is core/train/import.c's and import_needle.c's, this file parses and prints. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/train/train.h"
#include "launch/cli.h"

int cmd_import(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: loom import HF_DIR|NEEDLE.safetensors|MODEL.gguf OUT_DIR|OUT.h5   (a Hugging Face model "
                        "folder, a Needle base file or a GGUF model -> a loom checkpoint)\n");
        return 2;
    }
    const char *src = argv[2], *out = argv[3];
    /* a Hugging Face model is a folder; a single file can only be a Needle base (needle_open says
     * in one line why one is not) */
    struct stat st;
    int needle = stat(src, &st) == 0 && !S_ISDIR(st.st_mode);
    char magic[4] = {0};
    FILE *f = needle ? fopen(src, "rb") : NULL; /* a GGUF says so in its first four bytes */
    int gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    if (gguf ? import_gguf(src, out) : needle ? import_needle(src, out) : import_hf(src, out)) return cli_fail();
    printf("%s -> %s\n", src, out);
    return 0;
}
