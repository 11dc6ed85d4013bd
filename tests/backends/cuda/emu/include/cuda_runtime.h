/* cuda_runtime.h (emulator): the subset of the CUDA runtime the loom CUDA backend uses, executed
 * on the host so its kernels can be tested on a machine without a GPU (tests/backends/cuda/emu).
 * Test-only: it must never be on the include path of a real build. */
#ifndef LOOM_EMU_CUDA_RUNTIME_H
#define LOOM_EMU_CUDA_RUNTIME_H
/* Kernels that inline PTX (backends/cuda/cuda_attention_bf16.cu) call the emulator's stand-in
 * for it under this. */
#define LOOM_CUDA_EMU 1

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorNotReady = 600,
    cudaErrorUnknown = 999
} cudaError_t;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaEventDisableTiming 0x02

enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
    size_t sharedMemPerBlockOptin;
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct cudaFuncAttributes {
    int maxThreadsPerBlock;
    size_t maxDynamicSharedSizeBytes;
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
/* Same leading fields, in the same order, as the real struct (code built against the real
 * headers may call the emulator's cudaPointerGetAttributes). */
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamGetDevice(cudaStream_t s, int *dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMallocHost(void **p, size_t bytes); /* pinned host memory: plain host memory here */
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);

/* Emulator internals visible to C++ kernels and the launch shim. */
void emu_set_error(cudaError_t e);
int emu_device_count(void);

#ifdef __cplusplus
}

/* ---------------- device-side emulation (C++ only) ---------------- */
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
static inline uint2 make_uint2(unsigned x, unsigned y)
{
    uint2 v;
    v.x = x, v.y = y;
    return v;
}
static inline float4 make_float4(float x, float y, float z, float w)
{
    float4 v;
    v.x = x, v.y = y, v.z = z, v.w = w;
    return v;
}
static inline float2 make_float2(float x, float y)
{
    float2 v;
    v.x = x;
    v.y = y;
    return v;
}

extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;

static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    __builtin_memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
static inline int max(int a, int b) { return a > b ? a : b; }

void __syncthreads(void);
/* Exchange 8 bytes between the lanes of the calling warp; all 32 lanes must call it. */
uint64_t emu_shfl(unsigned mask, uint64_t bits, int src_lane_or_xor, int is_xor, int width);
void *emu_dyn_smem(void);
/* d += a b: one warp's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32; all 32 lanes call it. */
void emu_mma_bf16_m16n8k16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1);

template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t bits = 0;
    __builtin_memcpy(&bits, &v, sizeof v);
    bits = emu_shfl(mask, bits, lane_mask, 1, width);
    T out;
    __builtin_memcpy(&out, &bits, sizeof out);
    return out;
}

template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32)
{
    uint64_t bits = 0;
    __builtin_memcpy(&bits, &v, sizeof v);
    bits = emu_shfl(mask, bits, src_lane, 0, width);
    T out;
    __builtin_memcpy(&out, &bits, sizeof out);
    return out;
}

/* Kernel launch (the <<<...>>> syntax is rewritten to this by emu/cu2cpp.py). Runs every block
 * before returning, one block at a time, each with blockDim real threads. */
void emu_run(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
             const std::function<void()> &body);

template <class F>
static inline const void *emu_kptr(F *f)
{
    return reinterpret_cast<const void *>(f);
}

void emu_set_max_dyn_smem(const void *kernel, int bytes);

template <class F>
static inline cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 232448)
        return cudaErrorInvalidValue;
    emu_set_max_dyn_smem(emu_kptr(f), value);
    return cudaSuccess;
}

template <class F>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F *f)
{
    (void)f;
    a->maxThreadsPerBlock = 1024;
    a->maxDynamicSharedSizeBytes = 48 * 1024;
    return cudaSuccess;
}
#endif

#endif
