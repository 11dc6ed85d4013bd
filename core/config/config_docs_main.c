/* config_docs_main.c: loom_config_docs, the generator of docs/config.md from the field table.
 * `loom_config_docs [OUT]` writes config_markdown() to OUT (default: stdout).
 * Must never add text of its own: everything comes from config_markdown(). */
#include "core/config/config.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char *md = config_markdown();
    if (!md) {
        fprintf(stderr, "loom_config_docs: %s\n", loom_error());
        return 1;
    }
    FILE *f = argc > 1 ? fopen(argv[1], "w") : stdout;
    if (!f) {
        perror(argv[1]);
        free(md);
        return 1;
    }
    size_t len = strlen(md);
    int bad = fwrite(md, 1, len, f) != len;
    bad |= f == stdout ? fflush(f) != 0 : fclose(f) != 0;
    free(md);
    if (bad) fprintf(stderr, "loom_config_docs: cannot write %s\n", argc > 1 ? argv[1] : "stdout");
    return bad;
}
