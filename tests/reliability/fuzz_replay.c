/* fuzz_replay.c: `fuzz_replay DIR`: every file DIR/<target>/<name> (target = config, jsonl,
 * ckpt, safetensors, needle, tokenizer, spm, text, hf or gguf) run once through the same fuzz entry point bench/fuzz.sh
 * fuzzes. Inputs that once crashed a fuzzer live there, so a fixed bug stays fixed; under LOOM_SANITIZE a leak or a bad read in
 * them fails the test too. `fuzz_replay --ckpt-seed FILE` writes the fuzzer's checkpoint seed;
 * `--ckpt-seal FILE` seals a seed that another tool (h5repack) rewrote. Must never modify DIR. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/fuzz/fuzz_targets.h"
#include "checkpoints/ckpt.h"
#include "base/error.h"
#include "base/log.h"

static int replay_file(const char *path, fuzz_target_fn fn)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *more = realloc(buf, cap *= 2);
            if (!more) {
                free(buf);
                buf = NULL;
            }
            buf = more;
        }
    }
    fclose(f);
    if (!buf) return -1;
    fn(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--ckpt-seed") == 0) return fuzz_ckpt_seed(argv[2]) == 0 ? 0 : 1;
    if (argc == 3 && strcmp(argv[1], "--safetensors-seed") == 0)
        return fuzz_safetensors_seed(argv[2]) == 0 ? 0 : 1;
    if (argc == 3 && strcmp(argv[1], "--gguf-seed") == 0) {
        if (fuzz_gguf_seed(argv[2]) == 0) return 0;
        fprintf(stderr, "fuzz_replay: %s\n", loom_error());
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--ckpt-seal") == 0) {
        if (ckpt_seal(argv[2]) >= 0) return 0;
        fprintf(stderr, "fuzz_replay: %s\n", loom_error());
        return 1;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_replay DIR | fuzz_replay --ckpt-seed FILE | fuzz_replay --ckpt-seal FILE | "
                        "fuzz_replay --safetensors-seed DIR | fuzz_replay --gguf-seed FILE\n");
        return 2;
    }
    log_set_quiet(1);
    const char *targets[] = {"config", "jsonl", "ckpt", "safetensors", "needle", "tokenizer", "spm", "text", "hf", "gguf"};
    int total = 0;
    for (int t = 0; t < (int)(sizeof targets / sizeof *targets); t++) {
        char dir[4096], path[8192];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], targets[t]);
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        int count = 0;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            printf("%s: %s\n", targets[t], e->d_name);
            fflush(stdout);
            if (replay_file(path, fuzz_target_by_name(targets[t])) != 0) {
                fprintf(stderr, "FAIL: cannot read %s\n", path);
                closedir(d);
                return 1;
            }
            count++;
        }
        closedir(d);
        total += count;
    }
    if (total == 0) {
        fprintf(stderr, "FAIL: no inputs under %s\n", argv[1]);
        return 1;
    }
    printf("ok: %d inputs replayed without a crash\n", total);
    return 0;
}
