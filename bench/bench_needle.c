/* bench_needle.c BASE.safetensors [B T STEPS QAT PROMPT]: the loom side of bench/needle.sh. Loads a Needle
 * base checkpoint (needle_net_open), puts a fresh r 16 / alpha 32 adapter on Needle's five targets,
 * then times Needle's LoRA step: needle_net_grad (the fine-tune loss, forward and backward with
 * every layer recomputed, the adapters' gradients) and needle_net_step (clip, AdamW, the merge and
 * W4 of the five targets), on B x T random tokens, every position with loss (or all but each row's
 * first PROMPT share, a fine-tune's prompt: 0 by default, as Needle's bench), on the backend
 * LOOM_BACKEND picks (default cpu); RECOMPUTE=1 recomputes whole layers (train.recompute), else
 * each layer keeps its block. Prints one line of JSON on stdout: the time from start to the end of
 * the first step (loading included), the median of the rest, the first loss, peak RSS. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/backend.h"
#include "base/error.h"
#include "core/model/model.h"
#include "bench/bench_prof.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const double t0 = now();
    if (argc < 2) {
        fprintf(stderr, "usage: bench_needle BASE.safetensors [B T STEPS QAT PROMPT]\n");
        return 2;
    }
    const int B = argc > 2 ? atoi(argv[2]) : 16, T = argc > 3 ? atoi(argv[3]) : 256;
    const int steps = argc > 4 ? atoi(argv[4]) : 3, qat = argc > 5 ? atoi(argv[5]) : 1;
    const double prompt = argc > 6 ? atof(argv[6]) : 0.0;
    const char *name = getenv("LOOM_BACKEND");
    backend *be = backend_select(name && *name ? name : "cpu", NULL, NULL, 0);
    needle_net *n = be ? needle_net_open(be, argv[1], 0, NULL, qat ? NEEDLE_NUM_QAT : 0) : NULL;
    if (n && needle_net_lora_init(n, 16, 32.0f, 0)) needle_net_close(n), n = NULL;
    if (n && getenv("RECOMPUTE") && atoi(getenv("RECOMPUTE"))) needle_net_set_recompute(n, 1);
    const double opened = now() - t0;
    if (!n || B <= 0 || T <= 0 || steps <= 0) {
        fprintf(stderr, "bench_needle: %s\n", loom_error() ? loom_error() : "bad arguments");
        return 1;
    }
    const int V = needle_net_config(n)->vocab_size;
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    float *w = malloc((size_t)B * T * sizeof(float));
    double *dt = malloc((size_t)steps * sizeof(double));
    srand(1);
    for (size_t i = 0; i < (size_t)B * T; i++)
        tok[i] = 3 + rand() % (V - 3), w[i] = (double)(i % (size_t)T) >= prompt * T ? 1.0f : 0.0f;
    double loss0 = 0, first = 0, grad0 = 0;
    const int profile = getenv("PROFILE") && atoi(getenv("PROFILE"));
    for (int s = 0; s < steps; s++) {
        if (profile && s == 1) prof_threads = backend_cfg(be)->threads, prof_install_needle(be); /* the first step pays the page faults */
        double a = now(), loss = 0;
        needle_adamw o = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-4f,
                          .clip = 1.0f, .grad_mult = 1.0f, .count = s + 1};
        int bad = needle_net_grad(n, tok, w, B, T, 0, 0, &loss);
        if (s == 0) grad0 = now() - a;
        if (bad || needle_net_step(n, &o, NULL)) {
            fprintf(stderr, "bench_needle: %s\n", loom_error());
            return 1;
        }
        dt[s] = now() - a;
        if (s == 0) loss0 = loss, first = now() - t0;
    }
    double med = 0;
    if (steps > 1) {
        qsort(dt + 1, (size_t)steps - 1, sizeof *dt, cmp_double);
        med = dt[1 + (steps - 1) / 2];
    }
    if (profile && steps > 1) prof_print(steps - 1, med);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    size_t held, acts;
    needle_net_bytes(n, &held, &acts);
    printf("{\"first_step_s\": %.3f, \"open_s\": %.3f, \"first_grad_s\": %.3f, \"step_s\": %.3f, \"loss0\": %.6f, \"peak_rss_mb\": %.1f, "
           "\"held_mb\": %.1f, \"activations_mb\": %.1f, \"model_gflop\": %.4f, \"backend\": \"%s\"}\n", first, opened, grad0,
           steps > 1 ? med : dt[0], loss0, ru.ru_maxrss / 1024.0, held / 1048576.0, acts / 1048576.0,
           needle_net_step_flops(n, B, T) / 1e9, backend_name(be));
    needle_net_close(n);
    backend_destroy(be);
    free(tok), free(w), free(dt);
    return 0;
}
