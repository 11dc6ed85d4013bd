/* emu_runtime.cpp: executes the CUDA backend's kernels on the host for testing without a GPU.
 * Each block runs with blockDim threads of its own stack (so __syncthreads and warp shuffles
 * really synchronise); blocks run one after another. Threads are fibers on the calling thread
 * (switched at barriers only, in ascending or descending threadIdx order, alternating by launch),
 * or real threads under a sanitizer or EMU_THREADS=1 (so ThreadSanitizer can see shared-memory
 * races). Divergent barriers (a __syncthreads some threads skip, a shuffle some lanes skip) and
 * launch configurations a GPU would reject stop the program with a message. Test-only. */
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "emu_ctx.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

static void emu_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU FATAL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

/* ---------------- fibers ---------------- */
/* Real threads are what ThreadSanitizer checks; a sanitizer build keeps them (ASan would need
 * every stack switch annotated). Elsewhere fibers: a barrier costs a user-space context switch
 * per thread instead of a futex wake-up and a reschedule of up to 1024 OS threads on a few
 * cores (which made most of the emulator's time). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define EMU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define EMU_SANITIZED 1
#endif
#endif
#ifndef EMU_SANITIZED
#define EMU_SANITIZED 0
#endif

static int emu_fibers(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("EMU_THREADS");
        on = !EMU_SANITIZED && !(v && *v && strcmp(v, "0") != 0);
    }
    return on;
}

struct EmuBarrier;
struct EmuFiber { /* small (no ucontext inside): the scheduler walks an array of them */
    const EmuBarrier *wait = nullptr; /* blocked in this barrier until its gen moves on */
    unsigned wait_gen = 0;
    int done = 0, tid = 0;
    uint3 tidx, bidx; /* its thread-local state while another fiber runs */
    EmuCtx ctx;
    const char *what = nullptr;
};
static thread_local EmuCtx g_sched;    /* the launching thread's context: the scheduler */
static thread_local EmuFiber *g_fcur;   /* the running fiber, or none (a real thread) */

static void emu_fiber_block(const EmuBarrier *b, unsigned gen, const char *what);

/* ---------------- barriers ---------------- */
enum { KIND_SYNC = 1, KIND_SHFL = 2, KIND_EXIT = 3 };

struct EmuBarrier {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, count = 0, kind = 0;
    unsigned gen = 0;
    std::function<void()> on_exit_complete;

    void arrive(int k, const char *what)
    {
        if (g_fcur) { /* one fiber runs at a time: no lock; the others run while it waits */
            check_kind(k, what);
            if (++count == n) {
                count = 0;
                gen++;
                if (k == KIND_EXIT && on_exit_complete) on_exit_complete();
                return;
            }
            emu_fiber_block(this, gen, what);
            return;
        }
        std::unique_lock<std::mutex> l(m);
        check_kind(k, what);
        if (++count == n) {
            count = 0;
            gen++;
            if (k == KIND_EXIT && on_exit_complete) on_exit_complete();
            cv.notify_all();
            return;
        }
        unsigned g = gen;
        if (!cv.wait_for(l, std::chrono::seconds(60), [&] { return gen != g; }))
            emu_die("deadlock: %d of %d threads waited 60 s in a %s (block %u,%u)", count, n, what,
                    blockIdx.x, blockIdx.y);
    }

    void check_kind(int k, const char *what)
    {
        if (count == 0) kind = k;
        else if (kind != k)
            emu_die("divergent barrier in a %s: some threads at kind %d, this one (%s) at kind %d "
                    "(block %u,%u thread %u,%u)", what, kind, what, k, blockIdx.x, blockIdx.y,
                    threadIdx.x, threadIdx.y);
    }
};

struct EmuWarp {
    EmuBarrier bar;
    uint64_t slots[2][32]; /* the lanes' values, alternately for one shuffle and the next */
    unsigned nshfl[32] = {}; /* shuffles each lane has made: which slots its next one uses */
    uint32_t mma_a[32][4], mma_b[32][2]; /* every lane's fragments of one mma.sync */
};

struct EmuLaunch {
    dim3 grid, block;
    int nthreads = 0;
    EmuBarrier block_bar;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    unsigned char *dyn_mem = nullptr; /* dynamic shared memory, 128-byte aligned like the GPU's */
    size_t dyn_bytes = 0;
    const std::function<void()> *body = nullptr;
};

static thread_local EmuLaunch *t_launch;
static thread_local int t_tid;

void __syncthreads(void) { t_launch->block_bar.arrive(KIND_SYNC, "__syncthreads"); }

uint64_t emu_shfl(unsigned mask, uint64_t bits, int arg, int is_xor, int width)
{
    if (mask != 0xffffffffu || width != 32) emu_die("shuffle with mask %#x width %d not emulated", mask, width);
    EmuLaunch *L = t_launch;
    if (L->nthreads % 32 != 0) emu_die("shuffle in a block of %d threads (partial warp)", L->nthreads);
    EmuWarp *w = L->warps[t_tid / 32].get();
    int lane = t_tid % 32, src = is_xor ? (lane ^ arg) : arg;
    if (src < 0 || src >= 32) emu_die("shuffle source lane %d", src);
    /* One barrier: posts, then reads after every lane has posted. The slots alternate, so the
     * next shuffle's posts cannot overwrite a value a slower lane has still to read: a lane
     * posts there only after the next barrier, which every lane reaches after its read. */
    const int p = w->nshfl[lane]++ & 1;
    w->slots[p][lane] = bits;
    w->bar.arrive(KIND_SHFL, "warp shuffle");
    return w->slots[p][src];
}

void *emu_dyn_smem(void) { return t_launch->dyn_bytes ? t_launch->dyn_mem : nullptr; }

/* --- WMMA support (include/mma.h) --- */
enum { KIND_WARPSYNC = 4 };

int emu_lane(void) { return t_tid % 32; }

void emu_warp_sync(const char *what)
{
    EmuLaunch *L = t_launch;
    if (L->nthreads % 32 != 0) emu_die("%s in a block of %d threads (partial warp)", what, L->nthreads);
    L->warps[t_tid / 32]->bar.arrive(KIND_WARPSYNC, what);
}

void __syncwarp(unsigned mask)
{
    if (mask != 0xffffffffu) emu_die("__syncwarp with mask %#x not emulated", mask);
    emu_warp_sync("__syncwarp");
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA's fragment layouts): every lane
 * posts its A and B registers, then computes its own four outputs from all of them. Lane 4g + t
 * holds A rows g, g + 8 at columns 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B column g
 * at rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1), C rows g, g + 8 at columns 2t, 2t + 1. The
 * products of two bf16 are exact in fp32; the sum runs k = 0..15 in fp32 after C. */
static float emu_bf16_half(uint32_t w, int hi) { return __uint_as_float(hi ? w & 0xffff0000u : w << 16); }

void emu_mma_bf16_m16n8k16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    EmuWarp *w = t_launch->warps[t_tid / 32].get();
    const int lane = t_tid % 32, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) w->mma_a[lane][i] = a[i];
    w->mma_b[lane][0] = b0, w->mma_b[lane][1] = b1;
    emu_warp_sync("mma.sync"); /* also stops on a partial warp */
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = d[e];
        for (int k = 0; k < 16; k++) {
            const int owner_a = 4 * (row % 8) + (k % 8) / 2, reg_a = (row >= 8) + 2 * (k >= 8);
            const int owner_b = 4 * col + (k % 8) / 2, reg_b = k >= 8;
            acc += emu_bf16_half(w->mma_a[owner_a][reg_a], k % 2) *
                   emu_bf16_half(w->mma_b[owner_b][reg_b], k % 2);
        }
        d[e] = acc;
    }
    emu_warp_sync("mma.sync"); /* no lane posts the next product's fragments early */
}

void emu_wmma_check(const void *p, unsigned ldm, const char *what)
{
    if ((uintptr_t)p % 32 != 0) emu_die("%s: pointer %p is not 32-byte aligned", what, p);
    if (ldm % 4 != 0) emu_die("%s: ldm %u is not a multiple of 4 floats", what, ldm);
}

/* ---------------- launches ---------------- */
static std::mutex g_mu;
static std::map<const void *, int> g_max_dyn;
static cudaError_t g_last = cudaSuccess;

void emu_set_error(cudaError_t e)
{
    std::lock_guard<std::mutex> l(g_mu);
    if (g_last == cudaSuccess) g_last = e;
}

void emu_set_max_dyn_smem(const void *kernel, int bytes)
{
    std::lock_guard<std::mutex> l(g_mu);
    g_max_dyn[kernel] = bytes;
}

/* A pool of worker threads, one per threadIdx, reused across launches: worker i runs thread i of
 * every block of the current launch. start/done are semaphores (ThreadSanitizer understands
 * them, so each launch happens-after the previous one). */
struct EmuWorker {
    pthread_t th;
    sem_t start;
    int tid;
};
static std::vector<EmuWorker *> g_pool;
static EmuLaunch *g_cur;
static sem_t g_done;

static void emu_run_blocks(EmuLaunch *L, int tid)
{
    t_launch = L;
    t_tid = tid;
    blockDim = L->block;
    gridDim = L->grid;
    threadIdx.x = tid % L->block.x;
    threadIdx.y = (tid / L->block.x) % L->block.y;
    threadIdx.z = tid / (L->block.x * L->block.y);
    for (unsigned z = 0; z < L->grid.z; z++)
        for (unsigned y = 0; y < L->grid.y; y++)
            for (unsigned x = 0; x < L->grid.x; x++) {
                blockIdx.x = x;
                blockIdx.y = y;
                blockIdx.z = z;
                (*L->body)();
                L->warps[t_tid / 32]->bar.arrive(KIND_EXIT, "kernel exit (warp)");
                L->block_bar.arrive(KIND_EXIT, "kernel exit");
            }
}

static void *emu_worker(void *p)
{
    EmuWorker *w = (EmuWorker *)p;
    for (;;) {
        while (sem_wait(&w->start) != 0) {}
        emu_run_blocks(g_cur, w->tid);
        sem_post(&g_done);
    }
    return nullptr;
}

static void emu_pool_grow(int n)
{
    static int inited;
    if (!inited) {
        sem_init(&g_done, 0, 0);
        inited = 1;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    while ((int)g_pool.size() < n) {
        EmuWorker *w = new EmuWorker();
        w->tid = (int)g_pool.size();
        sem_init(&w->start, 0, 0);
        if (pthread_create(&w->th, &attr, emu_worker, w) != 0) emu_die("pthread_create failed");
        pthread_detach(w->th);
        g_pool.push_back(w);
    }
    pthread_attr_destroy(&attr);
}

/* Fibers, one per threadIdx, each with a 1 MB stack (as the pool's threads) over a guard page,
 * kept with its context for the next launch: fiber i runs thread i of every block of every
 * launch, as worker i does. The stack tops are staggered by tid (a page and a cache line apart,
 * within EMU_COLOR): tops a whole 1 MB apart would all fall into the same cache sets and evict
 * each other on every switch. The fibers sit in one array (g_fibers[tid]) the passes walk. */
enum { EMU_STACK = 1 << 20, EMU_GUARD = 1 << 16, EMU_COLOR = 1 << 16, EMU_MAX_THREADS = 1024 };
static thread_local EmuFiber *g_fibers;
static thread_local int g_nfibers;
static thread_local unsigned g_fiber_launches;

/* The pass over the launch's fibers in progress: the next position to look at, the order, and
 * how many fibers have not finished the launch. */
struct EmuPass {
    EmuLaunch *L;
    int nt, rev, pos, live;
};
static thread_local EmuPass g_pass;

/* The next runnable fiber of the pass (its thread-local state swapped in), or none at its end. */
static EmuFiber *emu_pass_next(void)
{
    EmuPass *P = &g_pass;
    while (P->pos < P->nt) {
        const int j = P->pos++;
        EmuFiber *f = &g_fibers[P->rev ? P->nt - 1 - j : j];
        if (f->done || (f->wait && f->wait->gen == f->wait_gen)) continue;
        f->wait = nullptr;
        t_launch = P->L, t_tid = f->tid, threadIdx = f->tidx, blockIdx = f->bidx;
        blockDim = P->L->block, gridDim = P->L->grid;
        g_fcur = f;
        return f;
    }
    g_fcur = nullptr;
    return nullptr;
}

/* The running fiber stops (blocked in a barrier, or done with the launch): the pass goes on in
 * the next runnable fiber, switched to directly, or at its end in the scheduler. */
static void emu_fiber_yield(void)
{
    EmuFiber *f = g_fcur;
    f->tidx = threadIdx, f->bidx = blockIdx;
    g_pass.live -= f->done;
    EmuFiber *n = emu_pass_next();
    emu_ctx_swap(&f->ctx, n ? &n->ctx : &g_sched);
}

/* The running fiber waits in barrier b until its generation moves on past gen. */
static void emu_fiber_block(const EmuBarrier *b, unsigned gen, const char *what)
{
    EmuFiber *f = g_fcur;
    f->wait = b, f->wait_gen = gen, f->what = what;
    emu_fiber_yield();
}

static void emu_fiber_main(void)
{
    for (;;) { /* one launch a turn; a pass resumes it at the next launch it takes part in */
        emu_run_blocks(g_cur, g_fcur->tid);
        g_fcur->done = 1;
        emu_fiber_yield();
    }
}

/* Runs the launch's nt fibers to the end, in passes: each pass runs every runnable fiber (not
 * done, not waiting in a barrier still short of threads) until it stops, in ascending threadIdx
 * order on even launches and descending on odd ones (a missing barrier shows either way round),
 * one fiber switching straight to the next. Each fiber's thread-local state (threadIdx, ...) is
 * swapped in and out with it. */
static void emu_fibers_run(EmuLaunch *L, int nt)
{
    if (!g_fibers) g_fibers = new EmuFiber[EMU_MAX_THREADS];
    for (; g_nfibers < nt; g_nfibers++) {
        EmuFiber *f = &g_fibers[g_nfibers];
        const int color = (g_nfibers % 16) * 4096 + (g_nfibers / 16 % 64) * 64;
        void *m = mmap(nullptr, EMU_GUARD + EMU_STACK + EMU_COLOR, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED || mprotect(m, EMU_GUARD, PROT_NONE) != 0) emu_die("fiber stack: out of memory");
        f->tid = g_nfibers;
        emu_ctx_make(&f->ctx, (char *)m + EMU_GUARD, EMU_STACK + EMU_COLOR - color, emu_fiber_main);
    }
    for (int i = 0; i < nt; i++) {
        EmuFiber *f = &g_fibers[i];
        f->done = 0, f->wait = nullptr;
        f->tidx = f->bidx = uint3{0, 0, 0};
    }
    g_pass.L = L, g_pass.nt = nt, g_pass.rev = g_fiber_launches++ & 1, g_pass.live = nt;
    while (g_pass.live > 0) {
        g_pass.pos = 0;
        EmuFiber *f = emu_pass_next();
        if (!f) {
            int waiting = 0;
            const EmuFiber *w = nullptr;
            for (int i = 0; i < nt; i++)
                if (!g_fibers[i].done) waiting++, w = w ? w : &g_fibers[i];
            emu_die("deadlock: %d of %d threads wait forever, thread %d in a %s (block %u,%u)",
                    waiting, nt, w->tid, w->what, w->bidx.x, w->bidx.y);
        }
        emu_ctx_swap(&g_sched, &f->ctx); /* back at the pass's end */
    }
    t_launch = nullptr;
}

void emu_run(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
             const std::function<void()> &body)
{
    (void)s;
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > EMU_MAX_THREADS || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "EMU: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y,
                grid.z, block.x, block.y, block.z);
        emu_set_error(cudaErrorInvalidConfiguration);
        return;
    }
    int allowed = 48 * 1024;
    {
        std::lock_guard<std::mutex> l(g_mu);
        auto it = g_max_dyn.find(kernel);
        if (it != g_max_dyn.end()) allowed = it->second;
    }
    if (smem > (size_t)allowed) {
        fprintf(stderr, "EMU: launch with %zu bytes of dynamic shared memory; kernel allows %d\n", smem, allowed);
        emu_set_error(cudaErrorInvalidValue);
        return;
    }
    EmuLaunch L;
    L.grid = grid;
    L.block = block;
    L.nthreads = (int)nt;
    L.body = &body;
    L.block_bar.n = (int)nt;
    L.dyn_bytes = smem;
    if (smem && posix_memalign((void **)&L.dyn_mem, 128, smem) != 0) emu_die("out of memory");
    if (smem) memset(L.dyn_mem, 0xff, smem); /* NaN pattern: reading unwritten shared memory shows */
    L.block_bar.on_exit_complete = [&L] { if (L.dyn_bytes) memset(L.dyn_mem, 0xff, L.dyn_bytes); };
    for (int w = 0; w < (int)((nt + 31) / 32); w++) {
        L.warps.emplace_back(new EmuWarp());
        L.warps.back()->bar.n = (int)(nt - 32 * (unsigned)w < 32 ? nt - 32 * (unsigned)w : 32);
    }
    g_cur = &L;
    if (emu_fibers()) {
        emu_fibers_run(&L, (int)nt);
    } else {
        emu_pool_grow((int)nt);
        for (unsigned i = 0; i < nt; i++) sem_post(&g_pool[i]->start);
        for (unsigned i = 0; i < nt; i++)
            while (sem_wait(&g_done) != 0) {}
    }
    g_cur = nullptr;
    free(L.dyn_mem);
}

/* ---------------- runtime API ---------------- */
struct emu_stream {
    int device; /* the current device when it was created, as on a GPU */
};
static int emu_current_device; /* cudaSetDevice's; one process drives one device at a time */
struct emu_event {
    int unused;
};

extern "C" {

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
    }
}

cudaError_t cudaGetLastError(void)
{
    std::lock_guard<std::mutex> l(g_mu);
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

/* EMU_DEVICE_MEM=BYTES (a K, M or G suffix allowed) sizes the emulated device; 8 GiB by default.
 * cudaMalloc past it fails as a full GPU's does. */
static size_t emu_device_mem(void)
{
    const char *v = getenv("EMU_DEVICE_MEM");
    if (!v || !v[0]) return (size_t)8 << 30;
    char *end = NULL;
    double x = strtod(v, &end);
    double m = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
    return x > 0 ? (size_t)(x * m) : (size_t)8 << 30;
}

/* EMU_DEVICES=N pretends N devices (default 1; 0 = none), all the same emulated GPU. */
int emu_device_count(void)
{
    const char *v = getenv("EMU_DEVICES");
    return v && *v ? atoi(v) : 1;
}

/* EMU_NO_DRIVER=1: the runtime of a machine without NVIDIA's driver (it reports the missing
 * libcuda.so.1 as an old driver, as the real runtime does). */
cudaError_t cudaGetDeviceCount(int *count)
{
    const char *nd = getenv("EMU_NO_DRIVER");
    if (nd && *nd == '1') {
        *count = 0;
        return cudaErrorInsufficientDriver;
    }
    *count = emu_device_count();
    return *count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= emu_device_count()) return cudaErrorInvalidValue;
    emu_current_device = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= emu_device_count()) return cudaErrorInvalidValue;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "Host emulation of an sm_90 GPU");
    p->totalGlobalMem = emu_device_mem();
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->sharedMemPerBlockOptin = 232448;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev)
{
    if (dev < 0 || dev >= emu_device_count()) return cudaErrorInvalidValue;
    switch (a) {
    case cudaDevAttrClockRate: *v = 1000000; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 4; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; return cudaSuccess;
    }
    return cudaErrorInvalidValue;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int prio)
{
    (void)flags, (void)prio;
    *s = new emu_stream();
    (*s)->device = emu_current_device;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (s == cudaStreamLegacy) return cudaErrorInvalidValue;
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return s ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f)
{
    (void)f;
    return s && e ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaStreamGetDevice(cudaStream_t s, int *dev)
{
    if (!s) return cudaErrorInvalidValue;
    *dev = s == cudaStreamLegacy ? emu_current_device : s->device;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

/* "Device" allocations, so cudaPointerGetAttributes can tell them from host memory, and their
 * bytes (cudaMemGetInfo). */
static std::map<uintptr_t, size_t> g_allocs;
static size_t g_alloc_bytes;

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::mutex> l(g_mu);
    *total_bytes = emu_device_mem();
    *free_bytes = g_alloc_bytes < *total_bytes ? *total_bytes - g_alloc_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    size_t n = (bytes + 255) & ~(size_t)255;
    if (!n) n = 256;
    {
        std::lock_guard<std::mutex> l(g_mu);
        if (g_alloc_bytes + n > emu_device_mem()) {
            *p = NULL;
            return cudaErrorMemoryAllocation;
        }
    }
    *p = aligned_alloc(256, n);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes); /* device memory is not zeroed: make relying on it visible (NaN) */
    std::lock_guard<std::mutex> l(g_mu);
    g_allocs[(uintptr_t)*p] = n;
    g_alloc_bytes += n;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes ? bytes : 1); /* not zeroed either */
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> l(g_mu);
        auto it = g_allocs.find((uintptr_t)p);
        if (it == g_allocs.end()) return cudaErrorInvalidValue;
        g_alloc_bytes -= it->second;
        g_allocs.erase(it);
    }
    free(p);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    memset(a, 0, sizeof *a);
    auto it = g_allocs.upper_bound((uintptr_t)p);
    int dev = it != g_allocs.begin() && (--it, (uintptr_t)p < it->first + it->second);
    a->type = dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    a->devicePointer = dev ? (void *)p : nullptr;
    a->hostPointer = dev ? nullptr : (void *)p;
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    if (!s) return cudaErrorInvalidValue;
    memset(p, v, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k, cudaStream_t s)
{
    (void)k;
    if (!s) return cudaErrorInvalidValue;
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k)
{
    (void)k;
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new emu_event();
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return e && s ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }

/* ---------------- cuBLAS ---------------- */
struct emu_blas {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new emu_blas();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    (void)h;
    return ws && bytes ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    (void)h, (void)m;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

/* TF32: 10 explicit mantissa bits, round to nearest even. */
static float emu_tf32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

static float emu_load(const void *p, cudaDataType t, size_t i, int tf32)
{
    if (t == CUDA_R_16BF) {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    float f = ((const float *)p)[i];
    return tf32 ? emu_tf32(f) : f;
}

/* C (m x n, ldc) = alpha op(A) op(B) + beta C, column-major, with cuBLAS's argument rules. */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType At, int lda,
                            const void *B, cudaDataType Bt, int ldb, const void *beta, void *C,
                            cudaDataType Ct, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h || !h->stream) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ok32 = At == CUDA_R_32F && Bt == CUDA_R_32F && Ct == CUDA_R_32F &&
               (ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_FAST_TF32);
    int okbf = At == CUDA_R_16BF && Bt == CUDA_R_16BF && Ct == CUDA_R_32F && ct == CUBLAS_COMPUTE_32F;
    if (!ok32 && !okbf) return CUBLAS_STATUS_NOT_SUPPORTED;
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    const int tf32 = ct == CUBLAS_COMPUTE_32F_FAST_TF32;
    float *c = (float *)C;
    /* op(A) as m rows of k and op(B) as n rows of k, converted once (bf16 widened, TF32 rounded),
     * so the inner loop is a plain dot product; the sums run l = 0..k-1 as before */
    std::vector<float> ar((size_t)m * k), br((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++)
            ar[(size_t)i * k + l] = emu_load(A, At, ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda
                                                                      : (size_t)l + (size_t)i * lda, tf32);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++)
            br[(size_t)j * k + l] = emu_load(B, Bt, tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb
                                                                      : (size_t)j + (size_t)l * ldb, tf32);
    for (int j = 0; j < n; j++)
        for (int i0 = 0; i0 < m; i0 += 4) { /* four rows' sums side by side, each in its order */
            const int ni = m - i0 < 4 ? m - i0 : 4;
            const float *x = ar.data() + (size_t)i0 * k, *y = br.data() + (size_t)j * k;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (ni == 4)
                for (int l = 0; l < k; l++) {
                    acc[0] += x[l] * y[l], acc[1] += x[k + l] * y[l];
                    acc[2] += x[2 * (size_t)k + l] * y[l], acc[3] += x[3 * (size_t)k + l] * y[l];
                }
            else
                for (int r = 0; r < ni; r++)
                    for (int l = 0; l < k; l++) acc[r] += x[(size_t)r * k + l] * y[l];
            for (int r = 0; r < ni; r++) {
                float *cij = c + (size_t)(i0 + r) + (size_t)j * ldc;
                *cij = b == 0.0f ? a * acc[r] : a * acc[r] + b * *cij;
            }
        }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
