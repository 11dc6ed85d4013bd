/* cpu_blas.h: making sure the BLAS runs its fast kernel on this CPU, and saying which one runs.
 * Debian's OpenBLAS 0.3.21 falls back to a generic kernel (Prescott) on CPUs it does not know,
 * 4-5x slower; this re-executes the program once with OPENBLAS_CORETYPE set. Never used by ops. */
#ifndef LOOM_CPU_BLAS_H
#define LOOM_CPU_BLAS_H

/* Call first thing in main(), before any thread or MPI exists. If the BLAS picked a kernel slower
 * than the CPU supports (cpuid: avx512f -> SkylakeX, avx2 -> Haswell), OPENBLAS_CORETYPE and
 * LOOM_NO_REEXEC are unset and this is not already a re-executed process, sets OPENBLAS_CORETYPE
 * and execv()s /proc/self/exe with argv (so the BLAS reads it when it loads). Returns normally
 * otherwise, or with a warning if the exec fails. No-op where the BLAS is not OpenBLAS. */
void cpu_blas_ensure_fast_kernel(char **argv);

/* The kernel the BLAS runs ("SkylakeX", "Haswell", ...; "Accelerate" on Apple). Static string. */
const char *cpu_blas_corename(void);

/* The kernel this CPU deserves ("SkylakeX", "Haswell") or NULL when the generic one is right.
 * (Exposed for the test.) */
const char *cpu_blas_wanted_kernel(void);

/* 1 when kernel `core` (as cpu_blas_corename reports it) is at least as fast as `wanted`. */
int cpu_blas_kernel_ok(const char *core, const char *wanted);

/* The sgemm rate (bf16: the bf16 matmul rate) of `threads` threads on a 1536^3 product, the best
 * of several runs, FLOP/s; it also makes the start's library choice (docs/cpu-gemm.md). */
double cpu_blas_calibrate(int threads, int bf16);

#endif
