/* metal_backend.m: the Metal device under the shared op layer (metal_ops*.c): MTLDevice, one
 * command queue, one compute pipeline per kernel compiled at start from the embedded source,
 * shared-storage MTLBuffers, MPS matmul, blit copies, and command-buffer completion for sync and
 * events. It must never hold math: kernels live in the .metal files, op plans in metal_ops*.c. */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/metal/metal_kernels.h"
#include "backends/metal/metal_ops.h"
#include "backends/metal/metal_ptrmap.h"
#include "base/error.h"
#include "base/log.h"

/* Commands encoded into one command buffer before it is committed: the GPU starts on a step while
 * the host is still encoding the rest of it. */
#define METAL_CB_BATCH 64

@interface LoomMetalDevice : NSObject {
  @public
    id<MTLDevice> device;
    id<MTLCommandQueue> queue;
    NSMutableArray<id<MTLComputePipelineState>> *pipes; /* indexed by enum metal_kernel */
    NSMutableDictionary<NSString *, MPSMatrixMultiplication *> *gemms; /* by shape and scalars */
    id<MTLCommandBuffer> cb;                         /* being encoded; nil when none */
    id<MTLComputeCommandEncoder> enc;                /* open compute encoder on cb; nil when none */
    NSMutableArray<id<MTLCommandBuffer>> *inflight;  /* committed and not yet seen complete, oldest first */
    uint64_t inflight_first;                         /* commit number of inflight[0] (first commit = 1) */
    uint64_t committed;                              /* command buffers committed so far */
    int encoded;                                     /* commands in cb */
    BOOL nonuniform;                                 /* the GPU takes grids that are not threadgroup multiples */
    metal_ptrmap map;                                /* contents pointer -> retained id<MTLBuffer> */
}
@end

@implementation LoomMetalDevice
@end

typedef struct metal_event {
    uint64_t seq; /* every command buffer committed up to this number precedes the event */
} metal_event;

static LoomMetalDevice *dev_of(void *d) { return (__bridge LoomMetalDevice *)d; }

static void dev_check(id<MTLCommandBuffer> c)
{
    if (c.status == MTLCommandBufferStatusError) {
        const char *why = c.error ? c.error.localizedDescription.UTF8String : "unknown error";
        log_warn("metal: a command buffer failed on the GPU: %s", why);
        loom_fail("metal: GPU command buffer failed: %s", why);
    }
}

/* Forget finished command buffers at the front of the in-flight list (reporting errors). */
static void dev_prune(LoomMetalDevice *m)
{
    while (m->inflight.count) {
        id<MTLCommandBuffer> c = m->inflight[0];
        MTLCommandBufferStatus st = c.status;
        if (st != MTLCommandBufferStatusCompleted && st != MTLCommandBufferStatusError) break;
        dev_check(c);
        [m->inflight removeObjectAtIndex:0];
        m->inflight_first++;
    }
}

static void dev_end_encoder(LoomMetalDevice *m)
{
    if (m->enc) {
        [m->enc endEncoding];
        m->enc = nil;
    }
}

static id<MTLCommandBuffer> dev_cb(LoomMetalDevice *m)
{
    if (!m->cb) m->cb = [m->queue commandBuffer];
    return m->cb;
}

static void dev_commit(LoomMetalDevice *m)
{
    dev_end_encoder(m);
    if (!m->cb) return;
    [m->cb commit];
    [m->inflight addObject:m->cb];
    m->committed++;
    m->cb = nil;
    m->encoded = 0;
    dev_prune(m);
}

/* Command buffers of one queue start in order but may complete out of order, so waiting for
 * "everything up to commit seq" waits on each of them, oldest first. */
static void dev_wait(LoomMetalDevice *m, uint64_t seq)
{
    while (m->inflight.count && m->inflight_first <= seq) {
        id<MTLCommandBuffer> c = m->inflight[0];
        [c waitUntilCompleted];
        dev_check(c);
        [m->inflight removeObjectAtIndex:0];
        m->inflight_first++;
    }
}

static void dev_counted(LoomMetalDevice *m)
{
    if (++m->encoded >= METAL_CB_BATCH) dev_commit(m);
}

/* The MTLBuffer holding device pointer p and p's offset in it; nil (+ warning) for a pointer this
 * backend did not allocate. */
static id<MTLBuffer> dev_buffer(LoomMetalDevice *m, const void *p, NSUInteger *offset, const char *what)
{
    size_t off = 0;
    void *h = metal_ptrmap_find(&m->map, p, &off);
    if (!h) {
        log_warn("metal: %s: %p is not memory of this Metal backend; command skipped", what, p);
        loom_fail("metal: %s got a pointer (%p) that is not a Metal buffer", what, p);
        return nil;
    }
    *offset = off;
    return (__bridge id<MTLBuffer>)h;
}

/* --- metal_device_ops --- */

static void dev_sync(void *d)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        dev_commit(m);
        dev_wait(m, m->committed);
    }
}

static void dev_destroy(void *d)
{
    @autoreleasepool {
        dev_sync(d);
        LoomMetalDevice *m = (__bridge_transfer LoomMetalDevice *)d;
        for (size_t i = 0; i < m->map.n; i++) CFBridgingRelease(m->map.e[i].handle);
        metal_ptrmap_clear(&m->map);
        m = nil;
    }
}

/* Shared storage: the GPU and the CPU see the same memory, so the contents pointer is the device
 * pointer core holds. Zero-filled by the host. */
static void *dev_alloc(void *d, size_t bytes)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        NSUInteger len = bytes ? bytes : 16;
        if (len > m->device.maxBufferLength) {
            loom_fail("metal: %zu bytes exceed this GPU's largest buffer (%lu bytes)", bytes,
                      (unsigned long)m->device.maxBufferLength);
            return NULL;
        }
        id<MTLBuffer> b = [m->device newBufferWithLength:len options:MTLResourceStorageModeShared];
        if (!b) {
            loom_fail("metal: out of GPU memory allocating %zu bytes", bytes);
            return NULL;
        }
        void *p = b.contents;
        memset(p, 0, len);
        void *h = (__bridge_retained void *)b;
        if (metal_ptrmap_insert(&m->map, p, len, h) != 0) {
            CFBridgingRelease(h);
            return NULL;
        }
        return p;
    }
}

/* Command buffers retain the buffers they use, so releasing ours while work is queued is safe. */
static void dev_free(void *d, void *p)
{
    LoomMetalDevice *m = dev_of(d);
    void *h = metal_ptrmap_remove(&m->map, p);
    if (!h) {
        log_warn("metal: free of %p, which is not the start of a Metal buffer", p);
        return;
    }
    CFBridgingRelease(h);
}

static void dev_launch(void *d, int k, size_t grid, void *const *bufs, int nbufs, const void *params,
                       size_t params_bytes)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        id<MTLComputePipelineState> pipe = m->pipes[(NSUInteger)k];
        id<MTLBuffer> b[16];
        NSUInteger off[16];
        for (int i = 0; i < nbufs && i < 16; i++)
            if (!(b[i] = dev_buffer(m, bufs[i], &off[i], metal_kernel_name(k)))) return;
        if (!m->enc) m->enc = [dev_cb(m) computeCommandEncoder]; /* serial dispatch: each sees the last */
        id<MTLComputeCommandEncoder> e = m->enc;
        [e setComputePipelineState:pipe];
        for (int i = 0; i < nbufs; i++) [e setBuffer:b[i] offset:off[i] atIndex:(NSUInteger)i];
        [e setBytes:params length:params_bytes atIndex:(NSUInteger)nbufs]; /* < 4 KB by construction */
        NSUInteger w = pipe.threadExecutionWidth, tg = MIN(pipe.maxTotalThreadsPerThreadgroup, (NSUInteger)256);
        if (tg > w) tg -= tg % w;
        if (m->nonuniform)
            [e dispatchThreads:MTLSizeMake(grid, 1, 1) threadsPerThreadgroup:MTLSizeMake(tg, 1, 1)];
        else /* every kernel checks gid against its size, so a partial last threadgroup is harmless */
            [e dispatchThreadgroups:MTLSizeMake((grid + tg - 1) / tg, 1, 1) threadsPerThreadgroup:MTLSizeMake(tg, 1, 1)];
        dev_counted(m);
    }
}

/* An MPSMatrix over (buffer, offset): rows x cols floats, dense rows. */
static MPSMatrix *dev_matrix(LoomMetalDevice *m, const float *p, int rows, int cols)
{
    NSUInteger off = 0;
    id<MTLBuffer> b = dev_buffer(m, p, &off, "matmul");
    if (!b) return nil;
    MPSMatrixDescriptor *desc = [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)rows
                                                                      columns:(NSUInteger)cols
                                                                     rowBytes:(NSUInteger)cols * sizeof(float)
                                                                     dataType:MPSDataTypeFloat32];
    return [[MPSMatrix alloc] initWithBuffer:b offset:off descriptor:desc];
}

/* MPSMatrixMultiplication kernels are cached by their whole configuration: a training step uses a
 * handful of shapes, and the kernel object may be encoded any number of times. */
static MPSMatrixMultiplication *dev_gemm(LoomMetalDevice *m, const metal_mm *mm)
{
    NSString *key = [NSString stringWithFormat:@"%d %d %d %d %d %.17g %.17g", mm->trans_left, mm->trans_right, mm->M,
                                               mm->N, mm->K, mm->alpha, mm->beta];
    MPSMatrixMultiplication *g = m->gemms[key];
    if (g) return g;
    if (m->gemms.count >= 256) [m->gemms removeAllObjects];
    g = [[MPSMatrixMultiplication alloc] initWithDevice:m->device
                                          transposeLeft:mm->trans_left != 0
                                         transposeRight:mm->trans_right != 0
                                             resultRows:(NSUInteger)mm->M
                                          resultColumns:(NSUInteger)mm->N
                                        interiorColumns:(NSUInteger)mm->K
                                                  alpha:mm->alpha
                                                   beta:mm->beta];
    if (g) m->gemms[key] = g;
    return g;
}

static void dev_matmul(void *d, const metal_mm *mm)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        MPSMatrix *a = dev_matrix(m, mm->left, mm->left_rows, mm->left_cols);
        MPSMatrix *b = dev_matrix(m, mm->right, mm->right_rows, mm->right_cols);
        MPSMatrix *c = dev_matrix(m, mm->result, mm->result_rows, mm->result_cols);
        MPSMatrixMultiplication *g = a && b && c ? dev_gemm(m, mm) : nil;
        if (!g) return;
        dev_end_encoder(m); /* MPS encodes its own passes into the command buffer */
        [g encodeToCommandBuffer:dev_cb(m) leftMatrix:a rightMatrix:b resultMatrix:c];
        dev_counted(m);
    }
}

/* Blit copies need 4-byte aligned offsets and sizes on macOS and non-overlapping ranges; anything
 * else is copied by the host once queued work is done (the memory is shared). */
static void dev_copy(void *d, void *dst, const void *src, size_t bytes)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        NSUInteger so = 0, doff = 0;
        id<MTLBuffer> sb = dev_buffer(m, src, &so, "copy_d2d source");
        id<MTLBuffer> db = dev_buffer(m, dst, &doff, "copy_d2d destination");
        if (!sb || !db) return;
        int overlap = sb == db && so < doff + bytes && doff < so + bytes;
        if ((so | doff | bytes) % 4 || overlap) {
            dev_sync(d);
            memmove(dst, src, bytes);
            return;
        }
        dev_end_encoder(m);
        id<MTLBlitCommandEncoder> blit = [dev_cb(m) blitCommandEncoder];
        [blit copyFromBuffer:sb sourceOffset:so toBuffer:db destinationOffset:doff size:bytes];
        [blit endEncoding];
        dev_counted(m);
    }
}

static void *dev_event_create(void *d)
{
    (void)d;
    metal_event *ev = calloc(1, sizeof *ev);
    if (!ev) loom_fail("metal: out of host memory for an event");
    return ev;
}

static void dev_event_destroy(void *d, void *ev)
{
    (void)d;
    free(ev);
}

/* Commits what is encoded so far; the event is reached when every command buffer committed up to
 * now has completed. */
static void dev_event_record(void *d, void *ev)
{
    @autoreleasepool {
        LoomMetalDevice *m = dev_of(d);
        dev_commit(m);
        ((metal_event *)ev)->seq = m->committed;
    }
}

static void dev_event_sync(void *d, void *ev)
{
    @autoreleasepool {
        dev_wait(dev_of(d), ((metal_event *)ev)->seq);
    }
}

static const metal_device_ops metal_dev_ops = {
    dev_destroy, dev_alloc, dev_free, dev_launch, dev_matmul, dev_copy, dev_sync,
    dev_event_create, dev_event_destroy, dev_event_record, dev_event_sync,
};

/* --- device selection, library and pipelines --- */

static id<MTLDevice> metal_pick_device(int index)
{
    if (index <= 0) {
        id<MTLDevice> d = MTLCreateSystemDefaultDevice();
        if (d) return d;
    }
    NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
    return index >= 0 && (NSUInteger)index < all.count ? all[(NSUInteger)index] : nil;
}

/* IEEE float semantics (NaN/Inf kept, no reassociation): the kernels rely on -INFINITY in online
 * softmax and must propagate NaN to the loss. mathMode replaces fastMathEnabled from macOS 15. */
static void metal_math_safe(MTLCompileOptions *opt)
{
#if defined(__MAC_OS_X_VERSION_MIN_REQUIRED) && __MAC_OS_X_VERSION_MIN_REQUIRED >= 150000
    opt.mathMode = MTLMathModeSafe;
#elif defined(__MAC_15_0) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
    if (@available(macOS 15.0, *))
        opt.mathMode = MTLMathModeSafe;
    else
        opt.fastMathEnabled = NO;
#else
    opt.fastMathEnabled = NO;
#endif
}

/* The library is compiled at run time from the embedded source (newLibraryWithSource) rather than
 * by `xcrun metal` at build time: that compiler ships only with full Xcode (a separate download
 * since Xcode 16), while the run-time compiler is part of macOS, so a Homebrew toolchain with just
 * the Command Line Tools builds loom. The OS caches the compiled result. */
static int metal_build_pipelines(LoomMetalDevice *m)
{
    NSError *err = nil;
    MTLCompileOptions *opt = [MTLCompileOptions new];
    metal_math_safe(opt);
    id<MTLLibrary> lib = [m->device newLibraryWithSource:@(loom_metal_source) options:opt error:&err];
    if (!lib)
        return loom_fail("metal: kernel source failed to compile: %s",
                         err ? err.localizedDescription.UTF8String : "unknown error");
    m->pipes = [NSMutableArray arrayWithCapacity:MK_COUNT];
    for (int k = 0; k < MK_COUNT; k++) {
        id<MTLFunction> fn = [lib newFunctionWithName:@(metal_kernel_name(k))];
        if (!fn) return loom_fail("metal: kernel %s missing from the compiled library", metal_kernel_name(k));
        id<MTLComputePipelineState> p = [m->device newComputePipelineStateWithFunction:fn error:&err];
        if (!p)
            return loom_fail("metal: pipeline for %s failed: %s", metal_kernel_name(k),
                             err ? err.localizedDescription.UTF8String : "unknown error");
        [m->pipes addObject:p];
    }
    return 0;
}

static int metal_open(LoomMetalDevice *m, const backend_config *cfg)
{
    m->device = metal_pick_device(cfg ? cfg->device_index : 0);
    if (!m->device) return loom_fail("metal: no Metal device %d", cfg ? cfg->device_index : 0);
    if (!MPSSupportsMTLDevice(m->device))
        return loom_fail("metal: Metal Performance Shaders do not support %s", m->device.name.UTF8String);
    m->queue = [m->device newCommandQueue];
    if (!m->queue) return loom_fail("metal: cannot create a command queue on %s", m->device.name.UTF8String);
    m->inflight = [NSMutableArray array];
    m->gemms = [NSMutableDictionary dictionary];
    m->inflight_first = 1;
    m->nonuniform = [m->device supportsFamily:MTLGPUFamilyApple4] || [m->device supportsFamily:MTLGPUFamilyMac2];
    if (cfg && cfg->precision == BACKEND_BF16) log_warn("metal: bf16 compute is not implemented; running fp32");
    return metal_build_pipelines(m);
}

static int metal_available(const char **why)
{
    @autoreleasepool {
        id<MTLDevice> d = metal_pick_device(0);
        const char *reason = NULL;
        if (!d)
            reason = "no Metal device";
        else if (!MPSSupportsMTLDevice(d))
            reason = "Metal Performance Shaders do not support this GPU";
        if (why) *why = reason ? reason : "";
        return reason == NULL;
    }
}

static backend *metal_create(const backend_config *cfg)
{
    @autoreleasepool {
        LoomMetalDevice *m = [LoomMetalDevice new];
        if (metal_open(m, cfg) != 0) return NULL;
        char desc[160];
        snprintf(desc, sizeof desc, "metal (%s, %.0f GB working set)", m->device.name.UTF8String,
                 (double)m->device.recommendedMaxWorkingSetSize / 1e9);
        return metal_backend_wrap("metal", &metal_dev_ops, (__bridge_retained void *)m, cfg, desc, 0.0);
    }
}

const backend_entry metal_backend_entry = {"metal", metal_available, metal_create};
