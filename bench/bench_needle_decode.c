/* bench_needle_decode.c BASE.safetensors [N P NEW BATCH UNCACHED]: the loom side of
 * bench/needle_decode.sh. Loads a Needle base with W4 weights (the numerics Needle scores a
 * fine-tune with, ft:375), makes N prompts of P random ids (BOS first), and decodes NEW tokens
 * greedily for each, BATCH rows together with the KV cache (needle_net_generate; no stop at EOS,
 * so every row makes NEW tokens); with UNCACHED = 1 it also times the cache-less decoder
 * (needle_net_greedy, run.generate's method) on the first BATCH prompts. Prints one line of JSON:
 * load, tokens made, seconds and tokens/s of each, peak RSS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/backend.h"
#include "base/error.h"
#include "core/model/model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Decode prompts [0, n) BATCH at a time; returns the seconds, *made_total the tokens. */
static double decode(needle_net *net, const int32_t *prompts, int n, int P, int NEW, int batch, int cached,
                     long *made_total)
{
    const int cap = P + NEW;
    int32_t *rows = malloc((size_t)batch * cap * sizeof(int32_t));
    int *lens = malloc((size_t)batch * 3 * sizeof(int)), *max_new = lens + batch, *made = lens + 2 * batch;
    double t = now();
    *made_total = 0;
    for (int i0 = 0; i0 < n; i0 += batch) {
        const int R = n - i0 < batch ? n - i0 : batch;
        for (int r = 0; r < R; r++) {
            memcpy(rows + (size_t)r * cap, prompts + (size_t)(i0 + r) * P, (size_t)P * sizeof(int32_t));
            lens[r] = P, max_new[r] = NEW;
        }
        int rc = cached ? needle_net_generate(net, rows, R, cap, lens, max_new, -1, made)
                        : needle_net_greedy(net, rows, R, cap, lens, max_new, -1, made);
        if (rc) {
            fprintf(stderr, "bench_needle_decode: %s\n", loom_error());
            exit(1);
        }
        for (int r = 0; r < R; r++) *made_total += made[r];
    }
    t = now() - t;
    free(rows), free(lens);
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_needle_decode BASE.safetensors [N P NEW BATCH UNCACHED]\n");
        return 2;
    }
    const int N = argc > 2 ? atoi(argv[2]) : 8, P = argc > 3 ? atoi(argv[3]) : 512;
    const int NEW = argc > 4 ? atoi(argv[4]) : 96, batch = argc > 5 ? atoi(argv[5]) : 8;
    const int uncached = argc > 6 ? atoi(argv[6]) : 0;
    const double t0 = now();
    const char *name = getenv("LOOM_BACKEND");
    backend *be = backend_select(name && *name ? name : "cpu", NULL, NULL, 0);
    needle_net *net = be ? needle_net_open(be, argv[1], 0, NULL, NEEDLE_NUM_W4) : NULL;
    if (!net || N <= 0 || P <= 1 || NEW <= 0 || batch <= 0) {
        fprintf(stderr, "bench_needle_decode: %s\n", loom_error() ? loom_error() : "bad arguments");
        return 1;
    }
    const double load = now() - t0;
    const int V = needle_net_config(net)->vocab_size;
    int32_t *prompts = malloc((size_t)N * P * sizeof(int32_t));
    srand(7);
    for (int i = 0; i < N; i++) {
        prompts[(size_t)i * P] = 2; /* BOS */
        for (int j = 1; j < P; j++) prompts[(size_t)i * P + j] = 4 + rand() % (V - 4);
    }
    long made = 0, made_u = 0;
    const double s = decode(net, prompts, N, P, NEW, batch, 1, &made);
    const double su = uncached ? decode(net, prompts, batch < N ? batch : N, P, NEW, batch, 0, &made_u) : 0.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"load_s\": %.3f, \"tokens\": %ld, \"seconds\": %.3f, \"tokens_per_s\": %.2f, \"uncached_tokens\": %ld, "
           "\"uncached_seconds\": %.3f, \"uncached_tokens_per_s\": %.2f, \"peak_rss_mb\": %.1f, \"backend\": \"%s\"}\n",
           load, made, s, made / s, made_u, su, su > 0 ? made_u / su : 0.0, ru.ru_maxrss / 1024.0, backend_name(be));
    needle_net_close(net);
    backend_destroy(be);
    free(prompts);
    return 0;
}
