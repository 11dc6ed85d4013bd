/* cmd_config.c: `loom config show JOB.json [--set k=v]...` and `loom config docs`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/cli.h"

int cmd_config(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[2], "docs") == 0) {
        char *md = config_markdown();
        if (!md) return cli_fail();
        fputs(md, stdout);
        free(md);
        return 0;
    }
    if (argc < 4 || strcmp(argv[2], "show") != 0) {
        fprintf(stderr, "usage: loom config show JOB.json [--set key=value]... | loom config docs\n");
        return 2;
    }
    cli_job a;
    job_config cfg;
    if (cli_parse_job(argc, argv, 3, &a) || cli_load_config(&a, &cfg)) return cli_fail();
    char *json = config_to_json(&cfg);
    if (!json) return cli_fail();
    printf("%s\n", json);
    free(json);
    return 0;
}
