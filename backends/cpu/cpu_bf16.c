/* cpu_bf16.c: `precision: bf16` on the CPU: C = alpha op(A) op(B) + beta C with A and B rounded to
 * bf16 (round to nearest even) and the products summed in fp32, as the CUDA backend does
 * (docs/precision.md), through oneDNN's matmul primitive, where it has AMX (cpu_bf16_worth_it).
 *
 * Why: on CPUs with bf16 instructions the fp32 rate is the bottleneck of every step; on 2
 * Sapphire Rapids cores oneDNN ran 2048x1536x576 in bf16 at 1542 GFLOP/s against fp32 sgemm's
 * ~350. Each bf16 product of two bf16 numbers is exact in fp32, so the result is the fp32 sum of
 * the rounded inputs' products: the tolerance of a test is the fp32 sum bound on a bf16-rounded
 * reference.
 *
 * Both operands are rounded on every call (the weights change each optimizer step; rounding them
 * every call gives the same numbers as rounding them once per step, at the cost of a pass over
 * them). oneDNN is loaded with dlopen (libdnnl.so.2, the 2.x API of the headers it was built
 * with); a primitive is made per product shape on its first call and kept, the least recently
 * used one given up for a new shape once CPU_BF16_SHAPES are kept. */
#include "backends/cpu/cpu_bf16.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) &&                              \
    !defined(__SANITIZE_ADDRESS__) && __has_include(<oneapi/dnnl/dnnl_types.h>)
#include <oneapi/dnnl/dnnl_types.h>
#include <oneapi/dnnl/dnnl_version.h>
#if DNNL_VERSION_MAJOR == 2
#define CPU_BF16_ONEDNN 1
#endif
#endif

#ifdef CPU_BF16_ONEDNN
#include <dlfcn.h>
#include <immintrin.h>

/* The entry points (dnnl.h of oneDNN 2.x), found with dlsym. */
static struct {
    dnnl_status_t (*engine_create)(dnnl_engine_t *, dnnl_engine_kind_t, size_t);
    dnnl_status_t (*stream_create)(dnnl_stream_t *, dnnl_engine_t, unsigned);
    dnnl_status_t (*stream_wait)(dnnl_stream_t);
    dnnl_status_t (*md_init)(dnnl_memory_desc_t *, int, const dnnl_dims_t, dnnl_data_type_t,
                             const dnnl_dims_t);
    dnnl_status_t (*matmul_init)(dnnl_matmul_desc_t *, const dnnl_memory_desc_t *,
                                 const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,
                                 const dnnl_memory_desc_t *);
    dnnl_status_t (*attr_create)(dnnl_primitive_attr_t *);
    dnnl_status_t (*attr_destroy)(dnnl_primitive_attr_t);
    dnnl_status_t (*attr_scales)(dnnl_primitive_attr_t, dnnl_dim_t, int, const float *);
    dnnl_status_t (*attr_post_ops)(dnnl_primitive_attr_t, const_dnnl_post_ops_t);
    dnnl_status_t (*po_create)(dnnl_post_ops_t *);
    dnnl_status_t (*po_destroy)(dnnl_post_ops_t);
    dnnl_status_t (*po_sum)(dnnl_post_ops_t, float);
    dnnl_status_t (*pd_create)(dnnl_primitive_desc_t *, const_dnnl_op_desc_t,
                               const_dnnl_primitive_attr_t, dnnl_engine_t,
                               const_dnnl_primitive_desc_t);
    dnnl_status_t (*pd_destroy)(dnnl_primitive_desc_t);
    dnnl_status_t (*prim_create)(dnnl_primitive_t *, const_dnnl_primitive_desc_t);
    dnnl_status_t (*prim_destroy)(dnnl_primitive_t);
    dnnl_status_t (*execute)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t *);
    dnnl_status_t (*mem_create)(dnnl_memory_t *, const dnnl_memory_desc_t *, dnnl_engine_t, void *);
    dnnl_status_t (*mem_handle)(dnnl_memory_t, void *);
    dnnl_status_t (*mem_destroy)(dnnl_memory_t);
    int state; /* 0 untried, 1 ready, -1 unusable (why[] says why) */
    char why[160];
    dnnl_engine_t engine;
    dnnl_stream_t stream;
} d;

/* One product shape's primitive and its three memory objects (data handles set per call). */
typedef struct {
    int M, N, K, tA, tB;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    uint64_t used; /* the call count at its last use */
} cpu_bf16_shape;

/* Primitives kept. A fine-tune's token count changes from batch to batch (length buckets, the
 * rows the loss reads), so its products keep meeting new shapes: past this, the least recently
 * used primitive makes room. The table once stopped growing here and computed every later new
 * shape in fp32: a LoRA fine-tune of SmolLM2's shapes met ~1.5 new shapes a batch (104 in its 68
 * batches), so past ~330 batches its new products turned fp32, and a run resumed from a
 * checkpoint, its table empty, multiplied otherwise than the uninterrupted one. */
#define CPU_BF16_SHAPES 512
static cpu_bf16_shape shapes[CPU_BF16_SHAPES];
static int nshapes;
static uint64_t ncalls;

/* Grow-only host buffers for the rounded operands (host thread only, like every matmul). */
static uint16_t *abuf, *bbuf;
static size_t acap, bcap;

/* bf16 pays only on AMX's tile kernels. Without them oneDNN 2.6 runs its AVX512_BF16 kernel
 * (brg:avx512_core_bf16), which on 2 Emerald Rapids cores without AMX took 33-46 ms for
 * 2048x1536x576 (~100 GFLOP/s) where fp32 sgemm takes ~13 ms: a bf16 LoRA step took 8.6 s against
 * fp32's 5.4. There bf16 runs in fp32 unless LOOM_CPU_BF16=1 asks for the slow path (the tests
 * do, to check it on every CPU with AVX512_BF16). Returns 1 (use it) or -1 (d.why says why). */
static int cpu_bf16_worth_it(void *h)
{
    const char *force = getenv("LOOM_CPU_BF16");
    if (force && strcmp(force, "1") == 0) return 1;
    dnnl_cpu_isa_t (*isa)(void);
    *(void **)&isa = dlsym(h, "dnnl_get_effective_cpu_isa");
    if (isa && (isa() & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx) return 1;
    snprintf(d.why, sizeof d.why,
             "this CPU has no AMX, and oneDNN's AVX512_BF16 matmul runs slower than fp32 sgemm "
             "(LOOM_CPU_BF16=1 runs it anyway)");
    return -1;
}

static int cpu_bf16_load(void)
{
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
        snprintf(d.why, sizeof d.why, "this CPU has no AVX512_BF16");
        return -1;
    }
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(d.why, sizeof d.why, "oneDNN 2.x (libdnnl.so.2) not found: apt-get install libdnnl2");
        return -1;
    }
#define SYM(field, name)                                                                           \
    if (!(*(void **)&d.field = dlsym(h, name))) {                                                  \
        snprintf(d.why, sizeof d.why, "libdnnl.so.2 has no %s", name);                             \
        return -1;                                                                                 \
    }
    SYM(engine_create, "dnnl_engine_create")
    SYM(stream_create, "dnnl_stream_create")
    SYM(stream_wait, "dnnl_stream_wait")
    SYM(md_init, "dnnl_memory_desc_init_by_strides")
    SYM(matmul_init, "dnnl_matmul_desc_init")
    SYM(attr_create, "dnnl_primitive_attr_create")
    SYM(attr_destroy, "dnnl_primitive_attr_destroy")
    SYM(attr_scales, "dnnl_primitive_attr_set_output_scales")
    SYM(attr_post_ops, "dnnl_primitive_attr_set_post_ops")
    SYM(po_create, "dnnl_post_ops_create")
    SYM(po_destroy, "dnnl_post_ops_destroy")
    SYM(po_sum, "dnnl_post_ops_append_sum")
    SYM(pd_create, "dnnl_primitive_desc_create")
    SYM(pd_destroy, "dnnl_primitive_desc_destroy")
    SYM(prim_create, "dnnl_primitive_create")
    SYM(prim_destroy, "dnnl_primitive_destroy")
    SYM(execute, "dnnl_primitive_execute")
    SYM(mem_create, "dnnl_memory_create")
    SYM(mem_handle, "dnnl_memory_set_data_handle")
    SYM(mem_destroy, "dnnl_memory_destroy")
#undef SYM
    if (d.engine_create(&d.engine, dnnl_cpu, 0) != dnnl_success ||
        d.stream_create(&d.stream, d.engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(d.why, sizeof d.why, "oneDNN could not make a CPU engine and stream");
        return -1;
    }
    return cpu_bf16_worth_it(h);
}

int cpu_bf16_ready(char *why, size_t len)
{
    if (d.state == 0) d.state = cpu_bf16_load();
    if (d.state < 0 && why && len) snprintf(why, len, "%s", d.why);
    return d.state > 0;
}

/* dst[i] = src[i] rounded to bf16, nearest even (NaN stays NaN: the hardware conversion). */
__attribute__((target("avx512f,avx512bf16"))) static void cpu_bf16_round(uint16_t *dst,
                                                                         const float *src,
                                                                         size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)v);
    }
    if (i < n) {
        __mmask16 lo = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __mmask16 hi = n - i <= 16 ? 0 : (__mmask16)((1u << (n - i - 16)) - 1);
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16),
                                         _mm512_maskz_loadu_ps(lo, src + i));
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)lo | ((__mmask32)hi << 16), (__m512i)v);
    }
}

/* The rounded copy of n floats, split across the threads (a memory pass each). */
static void cpu_bf16_round_par(int threads, uint16_t *dst, const float *src, size_t n)
{
    if (n < ((size_t)1 << 16)) threads = 1;
    size_t per = (n / threads + 31) / 32 * 32;
#pragma omp parallel for num_threads(threads) schedule(static, 1) if (threads > 1)
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * per, hi = lo + per < n ? lo + per : n;
        if (lo < hi) cpu_bf16_round(dst + lo, src + lo, hi - lo);
    }
}

static int cpu_bf16_grow(uint16_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap) return 0;
    uint16_t *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(uint16_t)) != 0) return -1;
    free(*buf);
    *buf = p;
    *cap = n;
    return 0;
}

/* The slot for a new shape: a free one, or the least recently used, its objects destroyed. */
static cpu_bf16_shape *cpu_bf16_shape_slot(void)
{
    if (nshapes < CPU_BF16_SHAPES) return &shapes[nshapes++];
    cpu_bf16_shape *old = &shapes[0];
    for (int i = 1; i < nshapes; i++)
        if (shapes[i].used < old->used) old = &shapes[i];
    d.prim_destroy(old->prim);
    d.mem_destroy(old->a);
    d.mem_destroy(old->b);
    d.mem_destroy(old->c);
    return old; /* the caller fills it */
}

int cpu_bf16_shapes_kept(void) { return nshapes; }

/* The primitive for a shape, made on its first call; NULL when oneDNN refused it (the caller
 * computes that product in fp32). */
static cpu_bf16_shape *cpu_bf16_shape_get(int M, int N, int K, int tA, int tB, float alpha,
                                          float beta)
{
    ncalls++;
    for (int i = 0; i < nshapes; i++) {
        cpu_bf16_shape *s = &shapes[i];
        if (s->M == M && s->N == N && s->K == K && s->tA == tA && s->tB == tB &&
            s->alpha == alpha && s->beta == beta) {
            s->used = ncalls;
            return s;
        }
    }
    /* row-major operands as stored: op(A) is M x K, op(B) K x N, their strides say how */
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {tA ? 1 : K, tA ? M : 1}, bs = {tB ? 1 : N, tB ? K : 1}, cs = {N, 1};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_matmul_desc_t mmd;
    if (d.md_init(&amd, 2, ad, dnnl_bf16, as) || d.md_init(&bmd, 2, bd, dnnl_bf16, bs) ||
        d.md_init(&cmd, 2, cd, dnnl_f32, cs) || d.matmul_init(&mmd, &amd, &bmd, NULL, &cmd))
        return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    cpu_bf16_shape s = {M, N, K, tA, tB, alpha, beta, NULL, NULL, NULL, NULL, ncalls};
    int ok = d.attr_create(&attr) == dnnl_success &&
             (alpha == 1.0f || d.attr_scales(attr, 1, 0, &alpha) == dnnl_success);
    if (ok && beta != 0.0f) /* C = alpha A B + beta C: oneDNN's sum post-op */
        ok = d.po_create(&po) == dnnl_success && d.po_sum(po, beta) == dnnl_success &&
             d.attr_post_ops(attr, po) == dnnl_success;
    ok = ok && d.pd_create(&pd, &mmd, attr, d.engine, NULL) == dnnl_success &&
         d.prim_create(&s.prim, pd) == dnnl_success &&
         d.mem_create(&s.a, &amd, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
         d.mem_create(&s.b, &bmd, d.engine, DNNL_MEMORY_NONE) == dnnl_success &&
         d.mem_create(&s.c, &cmd, d.engine, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd) d.pd_destroy(pd);
    if (po) d.po_destroy(po);
    if (attr) d.attr_destroy(attr);
    if (!ok) return NULL; /* the few objects made before a refusal are kept: rare, and small */
    cpu_bf16_shape *slot = cpu_bf16_shape_slot();
    *slot = s;
    return slot;
}

int cpu_bf16_matmul(int threads, float *C, const float *A, const float *B, const uint16_t *Bk,
                    int M, int N, int K, int tA, int tB, float alpha, float beta)
{
    if (!cpu_bf16_ready(NULL, 0) || M <= 0 || N <= 0 || K <= 0) return 0;
    cpu_bf16_shape *s = cpu_bf16_shape_get(M, N, K, tA, tB, alpha, beta);
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    if (!s || cpu_bf16_grow(&abuf, &acap, na) || (!Bk && cpu_bf16_grow(&bbuf, &bcap, nb))) return 0;
    cpu_bf16_round_par(threads, abuf, A, na);
    if (!Bk) cpu_bf16_round_par(threads, bbuf, B, nb);
    d.mem_handle(s->a, abuf);
    d.mem_handle(s->b, (void *)(Bk ? Bk : bbuf));
    d.mem_handle(s->c, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c}};
    /* oneDNN checks its arguments before it computes: a refusal leaves C as it was */
    return d.execute(s->prim, d.stream, 3, args) == dnnl_success &&
           d.stream_wait(d.stream) == dnnl_success;
}

/* Register (cast now) or drop (n = 0) the bf16 copy of w, in the slots of bf16_slots.h (the
 * policy the CUDA backend shares): re-registering allocates nothing; with every slot taken, or
 * out of memory, matmuls keep rounding w per call (the same numbers, only slower). */
void cpu_weights_bf16(backend *be, const float *w, size_t n)
{
    cpu_state *st = cpu_st(be);
    if (be->cfg.precision != BACKEND_BF16 || !w) return;
    bf16_slot *slot = bf16_slot_claim(st->kept, CPU_BF16_KEPT, w, n);
    if (!slot) return;
    if (slot->cap < n) {
        free(slot->copy);
        slot->cap = 0;
        if (posix_memalign((void **)&slot->copy, 64, n * sizeof(uint16_t)) != 0) {
            slot->copy = NULL;
            return;
        }
        slot->cap = n;
    }
    cpu_bf16_round_par(st->threads, slot->copy, w, n);
    bf16_slot_set(slot, w, n);
}

#else /* built without oneDNN 2.x's headers, or a sanitizer build: fp32 only */

void cpu_weights_bf16(backend *be, const float *w, size_t n) { (void)be, (void)w, (void)n; }

int cpu_bf16_ready(char *why, size_t len)
{
    if (why && len)
        snprintf(why, len, "built without oneDNN 2.x's headers (libdnnl-dev), or a sanitizer build");
    return 0;
}

int cpu_bf16_shapes_kept(void) { return 0; }

int cpu_bf16_matmul(int threads, float *C, const float *A, const float *B, const uint16_t *Bk,
                    int M, int N, int K, int tA, int tB, float alpha, float beta)
{
    (void)threads, (void)C, (void)A, (void)B, (void)Bk, (void)M, (void)N, (void)K, (void)tA;
    (void)tB;
    (void)alpha, (void)beta;
    return 0;
}

#endif

const uint16_t *cpu_bf16_kept_find(const cpu_state *st, const float *B, size_t nb)
{
    return bf16_slot_find(st->kept, CPU_BF16_KEPT, B, nb);
}

void cpu_bf16_kept_free(cpu_state *st)
{
    for (int i = 0; i < CPU_BF16_KEPT; i++) free(st->kept[i].copy);
}
