/* cpu_backend.c: the CPU backend's vtable, memory, events and registry entry (scratch: cpu_scratch.c).
 * Device memory is host memory and every op runs synchronously on the caller's OpenMP team, so
 * events and sync are no-ops. Ops must never allocate here except to grow scratch. */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/cpu/cpu_bf16.h"
#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_needle.h"
#include "backends/cpu/cpu_needle_mix.h"
#include "base/error.h"
#include "base/log.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include <unistd.h>

struct backend_event {
    int unused;
};

/* Buffers this large are 2 MB aligned and asked to live on transparent huge pages (fewer TLB
 * misses streaming activations and logits; the kernel here only gives them on madvise). */
#define CPU_HUGE_MIN ((size_t)4 << 20)

static void *cpu_alloc(backend *be, size_t bytes)
{
    void *p = NULL;
    size_t align = bytes >= CPU_HUGE_MIN ? (size_t)2 << 20 : 64; /* 64: one AVX-512 line */
    if (posix_memalign(&p, align, bytes ? bytes : 64) != 0) {
        loom_fail("cpu backend: out of memory allocating %zu bytes", bytes);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (bytes >= CPU_HUGE_MIN) madvise(p, bytes / align * align, MADV_HUGEPAGE);
#endif
    /* Every page faulted in now, not in the first step, by every thread: the kernel clears each
     * page it gives (a huge page on madvise), and a 2 GB arena cleared by one thread cost 1.5-4.5
     * s of Needle's first step here, 0.4 s on two. */
    int nt = bytes < CPU_HUGE_MIN ? 1 : cpu_st(be)->threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t lo, hi;
        cpu_split(bytes, &lo, &hi);
        memset((char *)p + lo, 0, hi - lo);
    }
    return p;
}

static void cpu_free(backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static void cpu_copy_h2d(backend *be, void *dst, const void *src, size_t bytes)
{
    cpu_copy_d2d(be, dst, src, bytes);
}

static void cpu_copy_d2h(backend *be, void *dst, const void *src, size_t bytes)
{
    cpu_copy_d2d(be, dst, src, bytes);
}

static void cpu_sync(backend *be) { (void)be; }

static backend_event *cpu_event_create(backend *be)
{
    (void)be;
    backend_event *ev = calloc(1, sizeof *ev);
    if (!ev) loom_fail("cpu backend: out of memory creating an event");
    return ev;
}

static void cpu_event_destroy(backend *be, backend_event *ev)
{
    (void)be;
    free(ev);
}

static void cpu_event_noop(backend *be, backend_event *ev)
{
    (void)be;
    (void)ev;
}

static void *cpu_native_stream(backend *be, int which)
{
    (void)be;
    (void)which;
    return NULL;
}

static void cpu_destroy(backend *be)
{
    if (!be) return;
    cpu_state *st = cpu_st(be);
    if (st) {
        for (int t = 0; t < st->threads; t++) free(st->scratch[t]);
        free(st->scratch);
        free(st->rope_tab);
        free(st->rope_key);
        free(st->att_part);
        free(st->att_amx);
        cpu_bf16_kept_free(st);
        free(st);
    }
    free(be);
}

/* Peak FLOP/s for MFU, measured on first use (backend_peak_flops): the fp32 FMA peak of this
 * backend's threads (cpu_peak.c: no model's rate can exceed it; with precision bf16, the bf16
 * matmul rate), unless $LOOM_CPU_PEAK_GFLOPS gave it at create. The sgemm rate is measured too
 * (it also picks the library the large products take: docs/cpu-gemm.md) and logged beside it. */
static double cpu_measure_peak(backend *be)
{
    int threads = cpu_st(be)->threads, bf16 = be->cfg.precision == BACKEND_BF16;
    double gemm = cpu_blas_calibrate(threads, bf16);
    if (bf16) {
        log_info("cpu: bf16 matmul %.1f GFLOP/s on %d thread%s (the MFU reference)", gemm / 1e9, threads,
                 threads == 1 ? "" : "s");
        return gemm;
    }
    double peak = cpu_fma_peak(threads);
    if (gemm > peak) peak = gemm; /* a trial slowed by another process: the larger is still a floor */
    log_info("cpu: FMA peak %.1f GFLOP/s on %d thread%s (the MFU reference); sgemm %.1f GFLOP/s, %.0f%% of it",
             peak / 1e9, threads, threads == 1 ? "" : "s", gemm / 1e9, 100.0 * gemm / peak);
    return peak;
}

static double cpu_peak_from_env(void)
{
    const char *env = getenv("LOOM_CPU_PEAK_GFLOPS");
    if (env && env[0]) {
        char *end = NULL;
        double g = strtod(env, &end);
        if (end != env && g > 0) return g * 1e9;
        log_warn("cpu backend: ignoring LOOM_CPU_PEAK_GFLOPS='%s' (not a positive number)", env);
    }
    return 0.0;
}

/* What the sgemm choices of a checkpoint are only valid on: the CPU (cpuid's vendor, family,
 * model, stepping) and the BLAS kernel. Another machine times the libraries afresh. */
static void cpu_machine(char *buf, size_t len)
{
    char cpu[48] = "cpu";
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d, vendor[4] = {0};
    if (__get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1]) && __get_cpuid(1, &a, &b, &c, &d)) {
        unsigned family = (a >> 8) & 15, model = (a >> 4) & 15;
        if (family == 6 || family == 15) model += ((a >> 16) & 15) << 4;
        if (family == 15) family += (a >> 20) & 255;
        snprintf(cpu, sizeof cpu, "%.12s-%u-%u-%u", (const char *)vendor, family, model, a & 15);
    }
#endif
    snprintf(buf, len, "%s/%s", cpu, cpu_blas_corename());
}

/* "cpu MACHINE | CHOICES" (cpu_gemm_choices_save's text). */
static int cpu_tuning_save(backend *be, char *buf, size_t len)
{
    char machine[96];
    cpu_machine(machine, sizeof machine);
    int n = snprintf(buf, len, "cpu %s | ", machine);
    if (n < 0 || (size_t)n >= len) return -1;
    return cpu_gemm_choices_save(cpu_st(be)->threads, buf + n, len - (size_t)n);
}

static int cpu_tuning_load(backend *be, const char *line)
{
    char machine[96], why[200];
    cpu_machine(machine, sizeof machine);
    size_t n = strlen(machine);
    const char *sep = strstr(line, " | ");
    if (strncmp(line, "cpu ", 4) != 0 || !sep) {
        log_warn("cpu: the checkpoint's sgemm choices are unreadable ('%.40s'); racing afresh",
                 line);
        return 1;
    }
    if ((size_t)(sep - line - 4) != n || strncmp(line + 4, machine, n) != 0) {
        log_info("cpu: the checkpoint's sgemm choices were made on %.*s, this is %s: racing afresh "
                 "(the resumed run is not bitwise the uninterrupted one)", (int)(sep - line - 4),
                 line + 4, machine);
        return 1;
    }
    if (cpu_gemm_choices_load(sep + 3, cpu_st(be)->threads, why, sizeof why)) {
        log_warn("cpu: the checkpoint's sgemm choices are not used: %s (the resumed run is not "
                 "bitwise the uninterrupted one)", why);
        return 1;
    }
    log_info("cpu: sgemm choices from the checkpoint (%d product families, else %s), no new "
             "races: the resumed run multiplies as the saved one did", cpu_gemm_shapes_raced(),
             cpu_gemm_lib_name(cpu_gemm_choose(cpu_st(be)->threads)));
    return 0;
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_noop,
    .event_sync = cpu_event_noop,
    .native_stream = cpu_native_stream,
    .matmul = cpu_matmul,
    .weights_bf16 = cpu_weights_bf16,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .bias_add = cpu_bias_add,
    .bias_backward = cpu_bias_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .rope = cpu_rope,
    .rope_freqs = cpu_rope_freqs,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_decode = cpu_attention_decode,
    .rope_rows = cpu_rope_rows,
    .attention_decode_rows = cpu_attention_decode_rows,
    .softmax_xent = cpu_softmax_xent,
    .adamw = cpu_adamw,
    .conv_taps_forward = cpu_conv_taps_forward,
    .conv_taps_backward = cpu_conv_taps_backward,
    .conv_taps_decode = cpu_conv_taps_decode,
    .sigmoid_gate_forward = cpu_sigmoid_gate_forward,
    .sigmoid_gate_backward = cpu_sigmoid_gate_backward,
    .scalar_gate_forward = cpu_scalar_gate_forward,
    .scalar_gate_backward = cpu_scalar_gate_backward,
    .cq_w4_quant = cpu_cq_w4_quant,
    .fake_quant_a8 = cpu_fake_quant_a8,
    .kron_apply = cpu_kron_apply,
    .permute_cols = cpu_permute_cols,
    .scale_cols = cpu_scale_cols,
    .softmax_rows = cpu_softmax_rows,
    .softmax_rows_backward = cpu_softmax_rows_backward,
    .hada_mid_forward = cpu_hada_mid_forward,
    .hada_mid_backward = cpu_hada_mid_backward,
    .mhc_coeffs_forward = cpu_mhc_coeffs_forward,
    .mhc_coeffs_backward = cpu_mhc_coeffs_backward,
    .mhc_collapse = cpu_mhc_collapse,
    .mhc_collapse_backward = cpu_mhc_collapse_backward,
    .mhc_expand = cpu_mhc_expand,
    .mhc_expand_backward = cpu_mhc_expand_backward,
    .engram_gate_forward = cpu_engram_gate_forward,
    .engram_gate_backward = cpu_engram_gate_backward,
    .measure_peak = cpu_measure_peak,
    .tuning_save = cpu_tuning_save,
    .tuning_load = cpu_tuning_load,
};

static backend *cpu_create(const backend_config *cfg)
{
    backend *be = calloc(1, sizeof *be);
    cpu_state *st = calloc(1, sizeof *st);
    int threads = cfg && cfg->threads > 0 ? cfg->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (st) st->scratch = calloc((size_t)threads, sizeof(float *));
    if (!be || !st || !st->scratch) {
        if (st) free(st->scratch);
        free(st);
        free(be);
        loom_fail("cpu backend: out of memory creating the backend");
        return NULL;
    }
    st->threads = threads;
    if (cfg) be->cfg = *cfg;
    be->cfg.threads = threads;
    /* be->cfg says what runs, the caller's cfg what was asked, so the session's start line cannot
     * claim what does not run: bf16 matmuls where cpu_bf16.c can run them, else fp32; never TF32 */
    char why[160] = "";
    if (be->cfg.precision == BACKEND_BF16 && !cpu_bf16_ready(why, sizeof why)) {
        be->cfg.precision = BACKEND_FP32;
        log_info("cpu: precision bf16 runs in fp32: %s", why);
    }
    be->cfg.allow_tf32 = 0;
    be->ops = &cpu_ops;
    be->impl = st;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    cpu_blas_set_threads(threads);
    cpu_blas_check_threading(threads);
    be->peak_flops = cpu_peak_from_env();
    snprintf(be->description, sizeof be->description, "cpu (%s %s, %d thread%s)", LOOM_BLAS_NAME,
             cpu_blas_corename(), threads, threads == 1 ? "" : "s");
    return be;
}

static int cpu_available(const char **why)
{
    if (why) *why = "";
    return 1;
}

const backend_entry cpu_backend_entry = {"cpu", cpu_available, cpu_create};
