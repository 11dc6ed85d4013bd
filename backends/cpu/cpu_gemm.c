/* cpu_gemm.c: which library runs the CPU backend's large sgemms: OpenBLAS (linked), or oneDNN or
 * BLIS loaded with dlopen when installed, picked per product shape by a race on its first call, or
 * by $LOOM_GEMM. It must never make oneDNN or BLIS a build or run dependency: when absent,
 * OpenBLAS runs. */
#include "backends/cpu/cpu_gemm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#include "backends/cpu/cpu_internal.h"
#include "base/log.h"

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif
/* Sanitizer builds load neither library: LeakSanitizer's exit-time tracer crashes (SIGSEGV) in a
 * process that ran oneDNN's JIT kernels, so they check loom's code on OpenBLAS alone. */
#if (defined(__linux__) || defined(__APPLE__)) && !defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#define CPU_GEMM_DLOPEN 1
#endif

static struct {
    int chosen;          /* a CPU_GEMM_* once decided; -1 before */
    int forced;          /* chosen by $LOOM_GEMM or cpu_gemm_force: no per-shape races */
    int rival;           /* the per-shape races' challenger to OpenBLAS; -1: none installed */
    int tried[CPU_GEMM_COUNT]; /* dlopen attempted */
    dnnl_sgemm_fn dnnl;
    bli_sgemm_fn bli;
    void (*bli_threads)(int64_t);
    void (*omp_threads)(int); /* oneDNN sizes its OpenMP regions by omp_get_max_threads() */
    int invert; /* $LOOM_GEMM_RACE_INVERT=1: every per-shape race picks its loser (tests) */
} g = {-1, 0, -1, {0}, NULL, NULL, NULL, NULL, 0};

static const char *const cpu_gemm_names[CPU_GEMM_COUNT] = {"openblas", "onednn", "blis"};
static const char *const cpu_gemm_packages[CPU_GEMM_COUNT] = {"libopenblas0-openmp", "libdnnl2",
                                                              "libblis4-openmp"};

const char *cpu_gemm_lib_name(int lib)
{
    return lib >= 0 && lib < CPU_GEMM_COUNT ? cpu_gemm_names[lib] : "?";
}

const char *cpu_gemm_lib_package(int lib)
{
    return lib >= 0 && lib < CPU_GEMM_COUNT ? cpu_gemm_packages[lib] : "?";
}

int cpu_gemm_lib_from_name(const char *name)
{
    for (int i = 0; i < CPU_GEMM_COUNT; i++)
        if (name && strcmp(name, cpu_gemm_names[i]) == 0) return i;
    return -1;
}

/* 1 when `lib` can run: OpenBLAS always; the others once dlopen found them (tried once). */
int cpu_gemm_available(int lib)
{
    if (lib == CPU_GEMM_OPENBLAS) return 1;
    if (lib < 0 || lib >= CPU_GEMM_COUNT) return 0;
#ifdef CPU_GEMM_DLOPEN
    if (!g.tried[lib]) {
        g.tried[lib] = 1;
        static const char *const so[CPU_GEMM_COUNT][3] = {
            {NULL}, {"libdnnl.so.3", "libdnnl.so.2", NULL}, {"libblis.so.4", NULL}};
        void *h = NULL;
        for (int i = 0; so[lib][i] && !h; i++) h = dlopen(so[lib][i], RTLD_NOW | RTLD_LOCAL);
        if (h && lib == CPU_GEMM_ONEDNN) {
            g.dnnl = (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm");
            g.omp_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
        } else if (h && lib == CPU_GEMM_BLIS) {
            g.bli = (bli_sgemm_fn)dlsym(h, "bli_sgemm");
            g.bli_threads = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads");
            if (!g.bli_threads) g.bli = NULL; /* could not match loom's thread count */
        }
    }
#endif
    return lib == CPU_GEMM_ONEDNN ? g.dnnl != NULL : g.bli != NULL;
}

/* oneDNN takes the host thread's OpenMP count, which the backend set at create; it is restated
 * only where oneDNN can run products (the choice, or the per-shape races' challenger), so
 * nothing else of OpenMP's changes otherwise. */
void cpu_gemm_set_threads(int n)
{
    int dnnl_runs = g.chosen == CPU_GEMM_ONEDNN || (!g.forced && g.rival == CPU_GEMM_ONEDNN);
    if (g.omp_threads && dnnl_runs) g.omp_threads(n);
    if (g.bli_threads) g.bli_threads(n);
}

void cpu_gemm_lib(int lib, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (lib == CPU_GEMM_ONEDNN && g.dnnl) {
        g.dnnl(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
               ldc);
    } else if (lib == CPU_GEMM_BLIS && g.bli) {
        g.bli(transA ? 8 : 0, transB ? 8 : 0, M, N, K, &alpha, A, lda, 1, B, ldb, 1, &beta, C, ldc,
              1);
    } else {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                    transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
    }
}

/* The race's shapes: a transformer layer at 512 tokens, 576 wide, MLP 1536 (forward x W^T,
 * dx = dy W, dW = dy^T x), 0.9 GFLOP each: ~4.5 ms at 200 GFLOP/s, so the race (3 libraries x 3
 * shapes x 3 calls) takes ~0.15 s. a, b, c hold RACE_ELEMS floats. */
#define RACE_T 512
#define RACE_ELEMS (1536 * 576)
static const int cpu_gemm_race_shapes[3][5] = {
    {RACE_T, 1536, 576, 0, 1}, {RACE_T, 576, 1536, 0, 0}, {1536, 576, RACE_T, 1, 0}};

/* Seconds `lib` takes for the race's shapes, summed; round 0 first runs each shape untimed (the
 * warm-up, which also lets oneDNN generate its kernels). */
static double cpu_gemm_race_one(int lib, int round, const float *a, const float *b, float *c)
{
    double total = 0.0;
    for (int s = 0; s < 3; s++) {
        const int *sh = cpu_gemm_race_shapes[s];
        int M = sh[0], N = sh[1], K = sh[2], tA = sh[3], tB = sh[4];
        double best = 1e30;
        for (int it = round == 0 ? 0 : 1; it < 2; it++) {
            double t0 = cpu_now();
            cpu_gemm_lib(lib, tA, tB, M, N, K, 1.0f, a, tA ? M : K, b, tB ? K : N, 0.0f, c, N);
            double dt = cpu_now() - t0;
            if (it > 0 && dt < best) best = dt;
        }
        total += best;
    }
    return total;
}

/* The race: every library present, in alternating order over two rounds (a burst of load hits
 * them alike), best round each. Another library must beat OpenBLAS by 3%, so a near-tie keeps
 * the default. Returns the winner and logs the rates. */
static int cpu_gemm_race(int threads)
{
    int libs[CPU_GEMM_COUNT], nl = 0;
    for (int i = 0; i < CPU_GEMM_COUNT; i++)
        if (cpu_gemm_available(i)) libs[nl++] = i;
    if (nl == 1) {
        log_info("cpu: sgemm by openblas (no oneDNN or BLIS to race: apt-get install %s %s)",
                 cpu_gemm_packages[CPU_GEMM_ONEDNN], cpu_gemm_packages[CPU_GEMM_BLIS]);
        return CPU_GEMM_OPENBLAS;
    }
    size_t n = RACE_ELEMS;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)),
          *c = malloc(n * sizeof(float));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return CPU_GEMM_OPENBLAS;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    /* OpenBLAS's count is the caller's (cpu_blas_set_threads); BLIS's and oneDNN's are set here */
    if (g.bli_threads) g.bli_threads(threads);
    if (g.omp_threads) g.omp_threads(threads);
    double best[CPU_GEMM_COUNT];
    for (int i = 0; i < nl; i++) best[i] = 1e30;
    for (int round = 0; round < 2; round++)
        for (int j = 0; j < nl; j++) {
            int i = round ? nl - 1 - j : j;
            double t = cpu_gemm_race_one(libs[i], round, a, b, c);
            if (t < best[i]) best[i] = t;
        }
    free(a), free(b), free(c);
    int win = 0, rival = 1;
    for (int i = 1; i < nl; i++) {
        if (best[i] < best[win] && best[i] * 1.03 < best[0]) win = i;
        if (best[i] < best[rival]) rival = i;
    }
    g.rival = libs[rival];
    char rates[160] = "";
    for (int i = 0; i < nl; i++) {
        size_t len = strlen(rates);
        snprintf(rates + len, sizeof rates - len, "%s%s %.0f", i ? ", " : "",
                 cpu_gemm_names[libs[i]], 3 * 2.0 * RACE_T * 1536 * 576 / best[i] / 1e9);
    }
    log_info("cpu: sgemm by %s, or %s where a product shape's first call races it faster "
             "(GFLOP/s on %d thread%s: %s; LOOM_GEMM=openblas|onednn|blis forces one)",
             cpu_gemm_names[libs[win]], cpu_gemm_names[libs[win] ? CPU_GEMM_OPENBLAS : g.rival],
             threads, threads == 1 ? "" : "s", rates);
    return libs[win];
}

/* $LOOM_GEMM (the forced library, or -1) and $LOOM_GEMM_RACE_INVERT, read and logged once. */
static int cpu_gemm_env(void)
{
    static int read = 0, want = -1;
    if (read) return want;
    read = 1;
    const char *env = getenv("LOOM_GEMM");
    want = env && env[0] && strcmp(env, "auto") != 0 ? cpu_gemm_lib_from_name(env) : -1;
    if (env && env[0] && strcmp(env, "auto") != 0 && want < 0) {
        log_warn("cpu: LOOM_GEMM=%s is not openblas, onednn, blis or auto; racing them", env);
    } else if (want >= 0 && !cpu_gemm_available(want)) {
        log_warn("cpu: LOOM_GEMM=%s but it is not installed (apt-get install %s); using openblas",
                 env, cpu_gemm_packages[want]);
        want = CPU_GEMM_OPENBLAS;
    } else if (want >= 0) {
        log_info("cpu: sgemm by %s (LOOM_GEMM)", cpu_gemm_names[want]);
    }
    const char *inv = getenv("LOOM_GEMM_RACE_INVERT");
    g.invert = inv && strcmp(inv, "1") == 0;
    if (g.invert)
        log_warn("cpu: LOOM_GEMM_RACE_INVERT=1: every product shape's race picks its loser");
    return want;
}

int cpu_gemm_choose(int threads)
{
    if (g.chosen >= 0) return g.chosen;
    int want = cpu_gemm_env();
    g.forced = want >= 0;
    g.chosen = want >= 0 ? want : cpu_gemm_race(threads);
    cpu_gemm_set_threads(threads); /* the chosen library's own count, now that it is known */
    return g.chosen;
}

int cpu_gemm_force(int lib)
{
    if (!cpu_gemm_available(lib)) return -1;
    g.chosen = lib;
    g.forced = 1;
    return 0;
}

/* The per-shape races' results, one row per product family: its two weight-sized dimensions
 * (N, K for op(A) = A, whose M is the token rows; M, N for the transposed-A weight gradients,
 * whose K is), the log2 class of the token dimension, the transpositions, beta != 0 and the
 * thread count. The token count changes from batch to batch in a fine-tune (length buckets, the
 * rows the loss reads): keyed on it, every new batch raced all its products again, each race 5
 * extra runs of the whole product, until the table filled (256 rows after ~25 batches of the
 * demo fine-tune). The class keeps what the size changes: below ~1000 rows the libraries rank
 * differently. A model has ~10-40 families, a few classes each. */
#define CPU_GEMM_SHAPES 256
typedef struct {
    int d1, d2, threads;
    unsigned char tA, tB, acc, cls;
    signed char lib;
} cpu_gemm_shape;
static cpu_gemm_shape cpu_gemm_shapes[CPU_GEMM_SHAPES];
static int cpu_gemm_nshapes;
/* No new races once the choices went into a checkpoint or came from one (cpu_gemm_choices_save,
 * cpu_gemm_choices_load): a shape not in the table then runs on the chosen library, in the saved
 * run and in the resumed one alike. */
static int cpu_gemm_frozen;

static cpu_gemm_shape cpu_gemm_key(int threads, int tA, int tB, int M, int N, int K, int acc)
{
    int tokens = tA ? K : M, cls = 0;
    while (cls < 31 && (tokens >> (cls + 1)) > 0) cls++;
    cpu_gemm_shape k = {tA ? M : N, tA ? N : K, threads, (unsigned char)!!tA,
                        (unsigned char)!!tB, (unsigned char)!!acc, (unsigned char)cls, -1};
    return k;
}

static cpu_gemm_shape *cpu_gemm_shape_find(const cpu_gemm_shape *key)
{
    for (int i = 0; i < cpu_gemm_nshapes; i++) {
        cpu_gemm_shape *s = &cpu_gemm_shapes[i];
        if (s->d1 == key->d1 && s->d2 == key->d2 && s->threads == key->threads &&
            s->tA == key->tA && s->tB == key->tB && s->acc == key->acc && s->cls == key->cls)
            return s;
    }
    return NULL;
}

int cpu_gemm_shape_lib(int threads, int transA, int transB, int M, int N, int K, int accumulate)
{
    cpu_gemm_shape key = cpu_gemm_key(threads, transA, transB, M, N, K, accumulate);
    const cpu_gemm_shape *s = cpu_gemm_shape_find(&key);
    return s ? s->lib : -1;
}

int cpu_gemm_shapes_raced(void) { return cpu_gemm_nshapes; }

/* Rows of C a race times: all of them up to 2^29 multiply-adds (~5 ms at 200 GFLOP/s), fewer
 * beyond, never under 1024 (at 2^30, Needle's first step spent 3 s in races). Raced whole, a tied
 * head's weight gradient (50304 x 384 x 2048, beta 1: a 77 MB copy of C per run) made a 2 s step's
 * first call 8 s longer; cut to 256 rows, a race put 2048 x 1536 x 576 on OpenBLAS at 180 GFLOP/s
 * where oneDNN runs it at 215 (below ~1000 rows the libraries rank differently). */
static int cpu_gemm_race_rows(int M, int N, int K)
{
    double cap = (double)(1 << 29) / ((double)N * K);
    int rows = cap > M ? M : (int)cap;
    if (rows < 1024) rows = M < 1024 ? M : 1024;
    return rows;
}

/* One shape's race on the call's operands (its first rows): a warm-up call each on at most 128 of
 * those rows (oneDNN generates its kernel, OpenBLAS takes its buffers: the whole rows made the
 * race a third longer, and a 512-row block of a 16k vocabulary's head is 13 GFLOP a run), then two
 * timed rounds in alternating order, best of each (one round where a run is above 2^31
 * multiply-adds, ~20 ms: its noise is small against it). beta == 0
 * writes C itself (the winner's call overwrites it after); otherwise each run gets a fresh copy of
 * C's rows, as a timed call must read the real C and must not accumulate into it. Without memory
 * for that copy: the start race's winner. op(A)'s first rows are A's first rows (lda K), or its
 * first columns when transposed (lda M), so the leading dimensions stay the call's. */
static int cpu_gemm_shape_race(int tA, int tB, int M, int N, int K, float alpha, const float *A,
                               const float *B, float beta, float *C)
{
    /* the start race's winner keeps the shape unless the other beats it by 3%: a near-tie, or a
     * noisy round, stays with the library that won on the whole layer */
    const int def = g.chosen >= 0 ? g.chosen : CPU_GEMM_OPENBLAS;
    int rows = cpu_gemm_race_rows(M, N, K);
    size_t mn = (size_t)rows * N;
    float *tmp = beta != 0.0f ? malloc(mn * sizeof(float)) : NULL;
    if (beta != 0.0f && !tmp) return def;
    float *out = tmp ? tmp : C;
    const int libs[2] = {def, def == CPU_GEMM_OPENBLAS ? g.rival : CPU_GEMM_OPENBLAS};
    double best[2] = {1e30, 1e30};
    const int rounds = (double)rows * N * K > 2147483648.0 ? 2 : 3;
    for (int it = 0; it < rounds; it++)
        for (int j = 0; j < 2; j++) {
            int i = it == 2 ? 1 - j : j;
            if (tmp) memcpy(tmp, C, mn * sizeof(float));
            const int m = it == 0 && rows > 128 ? 128 : rows;
            double t0 = cpu_now();
            cpu_gemm_lib(libs[i], tA, tB, m, N, K, alpha, A, tA ? M : K, B, tB ? K : N, beta, out,
                         N);
            double dt = cpu_now() - t0;
            if (it > 0 && dt < best[i]) best[i] = dt;
        }
    free(tmp);
    int rival_wins = best[1] * 1.03 < best[0];
    return libs[rival_wins != g.invert];
}

void cpu_gemm_big(int threads, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, const float *B, float beta, float *C)
{
    int lib = cpu_gemm_choose(threads);
    if (!g.forced && g.rival >= 0) {
        cpu_gemm_shape key = cpu_gemm_key(threads, transA, transB, M, N, K, beta != 0.0f);
        cpu_gemm_shape *s = cpu_gemm_shape_find(&key);
        if (!s && !cpu_gemm_frozen && cpu_gemm_nshapes < CPU_GEMM_SHAPES) {
            /* oneDNN's OpenMP count: stated by cpu_gemm_choose once the rival was known */
            key.lib = (signed char)cpu_gemm_shape_race(transA, transB, M, N, K, alpha, A, B, beta,
                                                       C);
            s = &cpu_gemm_shapes[cpu_gemm_nshapes++];
            *s = key;
        }
        if (s) lib = s->lib;
    }
    cpu_gemm_lib(lib, transA, transB, M, N, K, alpha, A, transA ? M : K, B, transB ? K : N, beta,
                 C, N);
}

/* --- the choices in a checkpoint ---
 * "chosen=LIB rival=LIB|none forced=0|1 shapes=D1,D2,CLASS,TA,TB,ACC,THREADS=LIB;..." */

int cpu_gemm_choices_save(int threads, char *buf, size_t len)
{
    cpu_gemm_choose(threads); /* a later start race could choose otherwise than a resumed one */
    cpu_gemm_frozen = 1;
    const char *rival = g.rival >= 0 ? cpu_gemm_names[g.rival] : "none";
    size_t n = (size_t)snprintf(buf, len, "chosen=%s rival=%s forced=%d shapes=",
                                cpu_gemm_names[g.chosen], rival, g.forced);
    for (int i = 0; i < cpu_gemm_nshapes && n < len; i++) {
        const cpu_gemm_shape *s = &cpu_gemm_shapes[i];
        n += (size_t)snprintf(buf + n, len - n, "%s%d,%d,%d,%d,%d,%d,%d=%s", i ? ";" : "", s->d1,
                              s->d2, s->cls, s->tA, s->tB, s->acc, s->threads,
                              cpu_gemm_names[(int)s->lib]);
    }
    return n < len ? 0 : -1;
}

/* The library named at *p (up to a delimiter), advancing p; -1 if none is. */
static int cpu_gemm_parse_lib(const char **p)
{
    for (int i = 0; i < CPU_GEMM_COUNT; i++) {
        size_t n = strlen(cpu_gemm_names[i]);
        if (strncmp(*p, cpu_gemm_names[i], n) == 0 && strchr(" ;", (*p)[n])) {
            *p += n;
            return i;
        }
    }
    if (strncmp(*p, "none", 4) == 0 && strchr(" ;", (*p)[4])) *p += 4;
    return -1;
}

/* The shapes list of a saved text into tab[] (at most CPU_GEMM_SHAPES); the count, or -1. */
static int cpu_gemm_parse_shapes(const char *p, cpu_gemm_shape *tab)
{
    int n = 0;
    while (*p) {
        int v[7], used = 0;
        if (n == CPU_GEMM_SHAPES ||
            sscanf(p, "%d,%d,%d,%d,%d,%d,%d=%n", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &used) != 7 || used == 0)
            return -1;
        p += used;
        int lib = cpu_gemm_parse_lib(&p);
        if (lib < 0 || v[0] < 1 || v[1] < 1 || v[2] < 0 || v[2] > 31 || v[6] < 1) return -1;
        cpu_gemm_shape s = {v[0], v[1], v[6], (unsigned char)!!v[3], (unsigned char)!!v[4],
                            (unsigned char)!!v[5], (unsigned char)v[2], (signed char)lib};
        tab[n++] = s;
        if (*p == ';') p++;
        else if (*p) return -1;
    }
    return n;
}

int cpu_gemm_choices_load(const char *text, int threads, char *why, size_t why_len)
{
    int want = cpu_gemm_env(); /* no start race: the saved run's choice replaces it */
    const char *p = text;
    int chosen = -1, rival = -1, forced = -1, ns = -1;
    static cpu_gemm_shape tab[CPU_GEMM_SHAPES];
    if (strncmp(p, "chosen=", 7) == 0) {
        p += 7;
        chosen = cpu_gemm_parse_lib(&p);
        if (strncmp(p, " rival=", 7) == 0) {
            p += 7;
            rival = cpu_gemm_parse_lib(&p);
            if (sscanf(p, " forced=%d", &forced) == 1 && (p = strstr(p, " shapes=")) != NULL)
                ns = cpu_gemm_parse_shapes(p + 8, tab);
        }
    }
    if (chosen < 0 || forced < 0 || ns < 0) {
        snprintf(why, why_len, "unreadable choices '%.60s'", text);
        return -1;
    }
    const char *missing = !cpu_gemm_available(chosen) ? cpu_gemm_names[chosen]
                          : rival >= 0 && !cpu_gemm_available(rival) ? cpu_gemm_names[rival]
                                                                     : NULL;
    for (int i = 0; i < ns && !missing; i++)
        if (!cpu_gemm_available(tab[i].lib)) missing = cpu_gemm_names[(int)tab[i].lib];
    if (missing) {
        snprintf(why, why_len, "they use %s, which is not installed here", missing);
        return -1;
    }
    if (want >= 0 && (want != chosen || !forced)) {
        snprintf(why, why_len, "LOOM_GEMM=%s is set here, and the saved run %s %s",
                 getenv("LOOM_GEMM"), forced ? "forced" : "raced, choosing",
                 cpu_gemm_names[chosen]);
        return -1;
    }
    g.chosen = chosen;
    g.rival = rival;
    g.forced = forced;
    memcpy(cpu_gemm_shapes, tab, (size_t)ns * sizeof *tab);
    cpu_gemm_nshapes = ns;
    cpu_gemm_frozen = 1;
    cpu_gemm_set_threads(threads);
    return 0;
}
