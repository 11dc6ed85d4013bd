/* cmd_tokenize.c: `loom tokenize IN.txt OUT.bin [--width 2|4]`: text to a token file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/data.h"
#include "base/error.h"
#include "core/tokenizer.h"
#include "launch/cli.h"

int cmd_tokenize(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: loom tokenize IN.txt OUT.bin [--width 2|4]\n");
        return 2;
    }
    int width = 2;
    if (argc >= 6 && strcmp(argv[4], "--width") == 0) width = atoi(argv[5]);
    token_data d;
    /* the command says its input is text, whatever the file is called */
    if (token_data_load_text(&d, argv[2], TOKENIZER_VOCAB)) return cli_fail();
    int rc = tokfile_write(argv[3], d.tokens, d.n, width);
    if (rc == 0) printf("%s: %zu tokens (%d bytes each)\n", argv[3], d.n, width);
    token_data_free(&d);
    return rc ? cli_fail() : 0;
}
