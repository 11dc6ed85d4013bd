/* cpu_internal.h: state and op declarations shared by the files of the CPU backend.
 * Only backends/cpu sources include this; nothing outside the folder may depend on it. Ops never
 * allocate on the hot path: scratch buffers live here and only grow (first call of a shape). */
#ifndef LOOM_CPU_INTERNAL_H
#define LOOM_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "backends/backend_impl.h"
#include "backends/bf16_slots.h"

#ifdef _OPENMP
#include <omp.h>
#define CPU_TID() omp_get_thread_num()
#else
#define CPU_TID() 0
#endif

/* Hot loops are compiled for AVX-512, AVX2+FMA and baseline x86-64, picked at load time (ifunc),
 * so one binary runs everywhere and still uses 16-wide vectors where the CPU has them. OpenMP
 * outlines parallel bodies into functions that would not inherit the clones, so a cloned kernel
 * is always a plain function called from inside the parallel region. The library builds with
 * -fno-trapping-math: without it GCC 12 left the AVX2 clone of every loop with a select (cpu_expf)
 * scalar; tests/backends/cpu/clones_vectorised.sh checks the built clones. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/* Monotonic seconds, for the sgemm calibration and the GEMM library race. */
static inline double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Elementwise loops shorter than this run on one thread: waking threads costs more. */
#define CPU_PAR_MIN 32768

#ifdef _OPENMP
#define CPU_NT() omp_get_num_threads()
#else
#define CPU_NT() 1
#endif

/* This thread's share [*lo, *hi) of n items, cut at multiples of 16 (one AVX-512 vector). */
static inline void cpu_split(size_t n, size_t *lo, size_t *hi)
{
    size_t nt = (size_t)CPU_NT(), t = (size_t)CPU_TID();
    size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    *lo = t * per < n ? t * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* weights_bf16's kept copies (cpu_bf16.c): slots of backends/bf16_slots.h, host memory. */
#define CPU_BF16_KEPT 8
typedef bf16_slot cpu_bf16_kept;

typedef struct cpu_state {
    int threads;
    float **scratch;     /* per-thread buffers, [threads] */
    size_t scratch_cap;  /* floats each per-thread buffer holds */
    float *rope_tab;     /* (T, D) rows: cos[D/2] then sin[D/2] for rope_T, rope_D, rope_theta */
    size_t rope_cap;
    int rope_T, rope_D;
    float rope_theta;
    float *rope_key;     /* rope_freqs: the D/2 frequencies the table was built from, else NULL */
    float *att_part;     /* attention backward, few kv heads: per segment dK, dV partials */
    size_t att_part_cap;
    cpu_bf16_kept kept[CPU_BF16_KEPT];
    void *att_amx;       /* bf16 attention (cpu_attention_amx.c): the call's packed operands */
    size_t att_amx_cap;  /* bytes */
} cpu_state;

static inline cpu_state *cpu_st(backend *be) { return (cpu_state *)be->impl; }

/* Make every per-thread scratch buffer hold at least nfloats; 0 ok, -1 on OOM (logged).
 * Call outside parallel regions only. */
int cpu_scratch_reserve(cpu_state *st, size_t nfloats);

/* cpu_blas.c */
void cpu_blas_set_threads(int n);
void cpu_blas_enter_parallel(void); /* before sgemm calls from inside our parallel regions */
void cpu_blas_check_threading(int threads); /* logs when the BLAS threads fight OpenMP's */
void cpu_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta);
/* The fp32 FMA peak FLOP/s of `threads` threads, measured (cpu_peak.c): the MFU reference. */
double cpu_fma_peak(int threads);

/* cpu_elementwise.c */
void cpu_fill(backend *be, float *x, float value, size_t n);
void cpu_copy_d2d(backend *be, void *dst, const void *src, size_t bytes);
void cpu_add(backend *be, float *out, const float *a, const float *b, size_t n);
void cpu_axpy(backend *be, float *y, float alpha, const float *x, size_t n);
void cpu_scale(backend *be, float *x, float alpha, size_t n);
double cpu_sumsq(backend *be, const float *x, size_t n);
void cpu_bias_add(backend *be, float *out, const float *bias, int N, int C);
void cpu_bias_backward(backend *be, float *dbias, const float *dout, int N, int C);

/* cpu_activation.c */
void cpu_gelu_forward(backend *be, float *out, const float *inp, size_t n);
void cpu_gelu_backward(backend *be, float *dinp, const float *inp, const float *dout, size_t n);
void cpu_swiglu_forward(backend *be, float *out, const float *gate, const float *up, size_t n);
void cpu_swiglu_backward(backend *be, float *dgate, float *dup, const float *dout,
                         const float *gate, const float *up, size_t n);

/* cpu_embedding.c */
void cpu_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                           const float *wpe, int B, int T, int C);
void cpu_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int B, int T, int C, int V);

/* cpu_norm.c */
void cpu_layernorm_forward(backend *be, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps);
void cpu_layernorm_backward(backend *be, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int N, int C);
void cpu_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps);
void cpu_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C);

/* cpu_rope.c */
void cpu_rope(backend *be, float *x, int B, int T, int H, int D, float theta, int inverse);
void cpu_rope_rows(backend *be, float *x, const int32_t *pos, int R, int H, int D, float theta, const float *freqs);
void cpu_rope_freqs(backend *be, float *x, int B, int T, int H, int D, const float *freqs, int inverse);

/* cpu_bf16.c: backend op weights_bf16 (register w's bf16 copy, n = 0 drops it), and the copy
 * holding all of B[0..nb) if one does (NULL: round B per call) */
void cpu_weights_bf16(backend *be, const float *w, size_t n);
const uint16_t *cpu_bf16_kept_find(const cpu_state *st, const float *B, size_t nb);
void cpu_bf16_kept_free(cpu_state *st);

/* cpu_attention_amx.c: the attention ops on AMX tiles where precision is bf16; 1 when done, 0
 * when they do not run here (fp32 precision, no AMX, D not a multiple of 64, out of memory):
 * the caller's fp32 path computes them then. Plain causal only: cpu_attention.c never calls them
 * with a sliding window (window > 0 runs fp32). */
int cpu_attention_amx_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int Hkv, int D);
int cpu_attention_amx_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int B, int T, int H, int Hkv, int D);

/* cpu_attention.c */
void cpu_attention_forward(backend *be, float *out, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int H, int Hkv, int D, int window);
void cpu_attention_decode(backend *be, float *out, const float *q, const float *k, const float *v,
                          int Tk, int H, int Hkv, int D);
/* The same with its kernel at most `isa` wide (CPU_SKINNY_*, cpu_skinny.h: AVX-512, AVX2, or
 * none: sgemm), so tests run every kernel the CPU has. */
void cpu_attention_decode_isa(backend *be, int isa, float *out, const float *q, const float *k,
                              const float *v, int Tk, int H, int Hkv, int D);
void cpu_attention_decode_rows(backend *be, float *out, const float *q, const float *knew,
                               const float *vnew, float *kc, float *vc, const int32_t *pos, int R,
                               int cap, int H, int Hkv, int D);
void cpu_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                            const float *q, const float *k, const float *v, const float *out,
                            const float *lse, int B, int T, int H, int Hkv, int D, int window);

/* cpu_xent.c */
void cpu_softmax_xent(backend *be, float *logits, float *losses, const int32_t *targets, int N,
                      int V, int V_real, float grad_scale);

/* cpu_adamw.c */
void cpu_adamw(backend *be, float *param, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t,
               float grad_scale);

#endif
