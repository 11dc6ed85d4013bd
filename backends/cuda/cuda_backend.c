/* cuda_backend.c: the CUDA backend's registry entry, device setup, memory, copies (small uploads
 * through pinned staging), events, streams and vtable (error bookkeeping and scratch for the
 * kernels: cuda_state.c). Ops run in issue order on one compute
 * stream; the communication layer gets a second stream. It must never use managed memory, print
 * when no driver/device exists, or exit(). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_needle.h"
#include "backends/cuda/cuda_needle_mix.h"

#define CUDA_BLAS_WS_BYTES (32u << 20) /* cuBLAS workspace: NVIDIA's recommendation for Hopper */

struct backend_event {
    cudaEvent_t ev;
};

static const char *cuda_failure(backend *be)
{
    cuda_impl *im = cuda_im(be);
    return im->error == cudaSuccess ? NULL : im->why;
}

/* --- memory and copies --- */

static void *cuda_alloc(backend *be, size_t bytes)
{
    cuda_impl *im = cuda_im(be);
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError(); /* an OOM is reported here, not by the next kernel launch */
        loom_fail("cuda backend (device %d): cannot allocate %zu bytes: %s", im->device, bytes,
                  cudaGetErrorString(err));
        return NULL;
    }
    /* zero-filled before anyone (either stream) can read it */
    if (cuda_check(be, cudaMemsetAsync(p, 0, bytes, im->compute), "zeroing an allocation") != 0 ||
        cuda_check(be, cudaStreamSynchronize(im->compute), "zeroing an allocation") != 0) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free_ptr(backend *be, void *ptr)
{
    if (ptr) cuda_check(be, cudaFree(ptr), "cudaFree");
}

/* From pageable memory (malloc) CUDA first waits for the stream's queued work, so a per-micro-
 * batch upload would stall the host behind the whole previous pass. Small copies go through a
 * pinned slot instead: memcpy into it, an async copy out of it ordered on the compute stream, and
 * the host waits only when the slot's previous copy has not run yet (the device is a ring of
 * copies behind). Either way host_src may be reused as soon as this returns. The compute stream,
 * not a copy stream: the destination (the model's one token buffer) is still read by the queued
 * pass, and a 128 KB copy is microseconds against a step. Large copies (loads) go direct. */
static void cuda_copy_h2d(backend *be, void *dst, const void *host_src, size_t bytes)
{
    cuda_impl *im = cuda_im(be);
    if (bytes == 0 || cuda_broken(be)) return;
    if (!im->stage || bytes > CUDA_STAGE_BYTES) {
        cuda_check(be, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, im->compute),
                   "copy host to device");
        return;
    }
    int s = im->stage_next;
    im->stage_next = (s + 1) % CUDA_STAGE_SLOTS;
    char *slot = (char *)im->stage + (size_t)s * CUDA_STAGE_BYTES;
    if (cuda_check(be, cudaEventSynchronize(im->stage_done[s]), "waiting for a staging slot") != 0) return;
    memcpy(slot, host_src, bytes);
    if (cuda_check(be, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, im->compute),
                   "copy host to device") == 0)
        cuda_check(be, cudaEventRecord(im->stage_done[s], im->compute), "recording a staging copy");
}

static void cuda_copy_d2h(backend *be, void *host_dst, const void *src, size_t bytes)
{
    cuda_impl *im = cuda_im(be);
    if (bytes == 0) return;
    if (!cuda_broken(be) &&
        cuda_check(be, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, im->compute),
                   "copy device to host") == 0 &&
        cuda_check(be, cudaStreamSynchronize(im->compute), "copy device to host") == 0)
        return;
    memset(host_dst, 0xff, bytes); /* all-ones floats are NaN: a failure cannot look like data */
}

static void cuda_copy_d2d(backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src || cuda_broken(be)) return;
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_im(be)->compute),
               "copy device to device");
}

static void cuda_sync(backend *be)
{
    if (cuda_broken(be)) return;
    cuda_check(be, cudaStreamSynchronize(cuda_im(be)->compute), "synchronize");
}

/* --- events --- */

static backend_event *cuda_event_create(backend *be)
{
    backend_event *e = calloc(1, sizeof *e);
    if (!e) {
        loom_fail("cuda backend: out of memory creating an event");
        return NULL;
    }
    if (cuda_check(be, cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming), "creating an event") != 0) {
        free(e);
        return NULL;
    }
    return e;
}

static void cuda_event_destroy(backend *be, backend_event *e)
{
    if (!e) return;
    cuda_check(be, cudaEventDestroy(e->ev), "destroying an event");
    free(e);
}

/* Marks the compute stream's position and makes the communication stream wait for it, so a
 * collective started after event_record (e.g. on a gradient bucket) reads finished data
 * without the host waiting. */
static void cuda_event_record(backend *be, backend_event *e)
{
    cuda_impl *im = cuda_im(be);
    if (cuda_broken(be)) return;
    if (cuda_check(be, cudaEventRecord(e->ev, im->compute), "recording an event") == 0)
        cuda_check(be, cudaStreamWaitEvent(im->comm, e->ev, 0), "ordering the comm stream");
}

static void cuda_event_sync(backend *be, backend_event *e)
{
    if (cuda_broken(be)) return;
    cuda_check(be, cudaEventSynchronize(e->ev), "waiting for an event");
}

static void *cuda_native_stream(backend *be, int which)
{
    cuda_impl *im = cuda_im(be);
    return which == 1 ? (void *)im->comm : (void *)im->compute;
}

/* --- peak FLOP/s for MFU ---
 * Dense (no sparsity) datasheet numbers, TFLOP/s, for fp32 on CUDA cores / TF32 / BF16:
 *   H100 & H200 SXM, GH200: 66.9 / 494.7 / 989.4  (132 SMs x 1830 MHz x 256 / 2048 / 4096)
 *   H100 & H200 NVL:        60 / 417.5 / 835      (datasheet sparse numbers halved)
 *   H100 PCIe:              51.2 / 378 / 756
 *   A100 (SXM and PCIe):    19.5 / 156 / 312
 * Other devices: SMs x peak clock x FLOP per clock per SM by compute capability:
 *   >= 10.0: 256 / 4096 / 8192;  9.x: 256 / 2048 / 4096;  8.0: 128 / 1024 / 2048;
 *   8.6-8.9: 256 / 512 / 1024 (workstation parts; GeForce runs bf16 with fp32 accumulate at
 *   half that, so their MFU reads low); older: 128 for all (no TF32/bf16 tensor cores).
 * The estimate is an upper bound: the reported peak clock is above the sustained tensor clock
 * (an H100 SXM reports 1980 MHz; its datasheet uses 1830). mode: 0 fp32, 1 TF32, 2 bf16. */
static double cuda_peak_flops(const char *name, int major, int minor, int sms, int clock_khz,
                              int mode, const char **source)
{
    static const struct {
        const char *a, *b; /* both must occur in the device name (b may be NULL) */
        double tflops[3];
    } known[] = {
        {"H100", "NVL", {60.0, 417.5, 835.0}},   {"H200", "NVL", {60.0, 417.5, 835.0}},
        {"H100", "PCIe", {51.2, 378.0, 756.0}},  {"H100", NULL, {66.9, 494.7, 989.4}},
        {"H200", NULL, {66.9, 494.7, 989.4}},    {"A100", NULL, {19.5, 156.0, 312.0}},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(name, known[i].a) && (!known[i].b || strstr(name, known[i].b))) {
            *source = "datasheet";
            return known[i].tflops[mode] * 1e12;
        }
    int per_clk[3] = {128, 128, 128};
    if (major >= 10) per_clk[0] = 256, per_clk[1] = 4096, per_clk[2] = 8192;
    else if (major == 9) per_clk[0] = 256, per_clk[1] = 2048, per_clk[2] = 4096;
    else if (major == 8 && minor == 0) per_clk[0] = 128, per_clk[1] = 1024, per_clk[2] = 2048;
    else if (major == 8) per_clk[0] = 256, per_clk[1] = 512, per_clk[2] = 1024;
    *source = "estimated from SMs x clock";
    return (double)sms * clock_khz * 1e3 * per_clk[mode];
}

/* The device's free and total memory (the backend's device current, as every call of ours
 * expects it). */
static int cuda_memory(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        *free_bytes = *total_bytes = 0;
        return loom_fail("cuda backend (device %d): cudaMemGetInfo: %s", cuda_im(be)->device, cudaGetErrorString(err));
    }
    return 0;
}

/* --- lifetime --- */

static void cuda_destroy(backend *be)
{
    if (!be) return;
    cuda_impl *im = cuda_im(be);
    if (im) {
        cudaSetDevice(im->device);
        if (im->compute) cudaStreamSynchronize(im->compute);
        if (im->blas) cublasDestroy(im->blas);
        if (im->blas_ws) cudaFree(im->blas_ws);
        if (im->scratch) cudaFree(im->scratch);
        cuda_weights_free(be);
        for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
            if (im->stage_done[i]) cudaEventDestroy(im->stage_done[i]);
        if (im->stage) cudaFreeHost(im->stage);
        if (im->comm) cudaStreamDestroy(im->comm);
        if (im->compute) cudaStreamDestroy(im->compute);
        cudaGetLastError(); /* teardown errors of a broken context must not leak to the next user */
        free(im);
    }
    free(be);
}

/* Streams and cuBLAS. The compute stream is a blocking stream (not cudaStreamNonBlocking): work
 * on the legacy default stream is ordered after it, which is how the nccl transport orders a
 * collective after the compute issued before it without knowing this stream. The comm stream is
 * non-blocking and has the highest priority, so a collective's kernels are scheduled ahead of
 * queued compute when both are ready (better overlap). */
static int cuda_init_streams(backend *be)
{
    cuda_impl *im = cuda_im(be);
    int least = 0, greatest = 0;
    if (cuda_check(be, cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities") != 0 ||
        cuda_check(be, cudaStreamCreateWithPriority(&im->compute, cudaStreamDefault, least),
                   "creating the compute stream") != 0 ||
        cuda_check(be, cudaStreamCreateWithPriority(&im->comm, cudaStreamNonBlocking, greatest),
                   "creating the communication stream") != 0)
        return -1;
    if (cuda_check(be, cudaMallocHost(&im->stage, CUDA_STAGE_SLOTS * CUDA_STAGE_BYTES),
                   "allocating pinned staging") != 0)
        return -1;
    for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
        if (cuda_check(be, cudaEventCreateWithFlags(&im->stage_done[i], cudaEventDisableTiming),
                       "creating a staging event") != 0)
            return -1;
    im->blas_ws_bytes = CUDA_BLAS_WS_BYTES;
    if (cuda_check(be, cudaMalloc(&im->blas_ws, im->blas_ws_bytes), "allocating the cuBLAS workspace") != 0)
        return -1;
    cublasStatus_t st = cublasCreate(&im->blas);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetStream(im->blas, im->compute);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetWorkspace(im->blas, im->blas_ws, im->blas_ws_bytes);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetMathMode(im->blas, CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS) {
        loom_fail("cuda backend (device %d): cuBLAS setup failed: %s", im->device, cublasGetStatusString(st));
        return -1;
    }
    return 0;
}

/* Device properties -> description, peak FLOP/s and the log lines. */
static int cuda_init_device(backend *be)
{
    cuda_impl *im = cuda_im(be);
    struct cudaDeviceProp prop;
    int clock_khz = 0, optin = 0;
    if (cuda_check(be, cudaGetDeviceProperties(&prop, im->device), "reading device properties") != 0 ||
        cuda_check(be, cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, im->device),
                   "reading the clock rate") != 0 ||
        cuda_check(be, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, im->device),
                   "reading the shared memory limit") != 0)
        return -1;
    im->sm_count = prop.multiProcessorCount;
    im->smem_optin = (size_t)optin;
    const int bf16 = be->cfg.precision == BACKEND_BF16, tf32 = !bf16 && be->cfg.allow_tf32;
    const char *mode = bf16 ? "BF16" : tf32 ? "TF32" : "FP32", *source = "";
    be->peak_flops = cuda_peak_flops(prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                                     clock_khz, bf16 ? 2 : tf32 ? 1 : 0, &source);
    snprintf(be->description, sizeof be->description, "cuda (%.100s, sm_%d%d, %s)", prop.name,
             prop.major, prop.minor, mode);
    log_info("cuda: device %d: %s, sm_%d%d, %d SMs, %d MHz, %.1f GiB; matmul %s; peak %.1f TFLOP/s (%s)",
             im->device, prop.name, prop.major, prop.minor, prop.multiProcessorCount, clock_khz / 1000,
             (double)prop.totalGlobalMem / (1 << 30),
             bf16 ? "cuBLAS bf16 inputs, fp32 accumulate" : tf32 ? "cuBLAS TF32 tensor cores" : "cuBLAS fp32",
             be->peak_flops / 1e12, source);
    log_info("cuda: %s", cuda_attention_choice(be));
    return 0;
}

/* Why cudaGetDeviceCount failed, in words: the runtime reports a missing driver as an old one
 * (cudaErrorInsufficientDriver, "driver version is insufficient"), so look for the driver library
 * the runtime loads. */
static const char *cuda_reason(cudaError_t err)
{
    if (err == cudaErrorNoDevice) return "no CUDA device";
    if (err == cudaErrorInsufficientDriver) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!h) return "no NVIDIA driver (libcuda.so.1 not found)";
        dlclose(h);
    }
    return cudaGetErrorString(err);
}

static const backend_ops cuda_ops;

static backend *cuda_create(const backend_config *cfg_in)
{
    const backend_config none = {0}; /* backend_select's cfg may be NULL: device 0, fp32 */
    const backend_config *cfg = cfg_in ? cfg_in : &none;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        cudaGetLastError();
        loom_fail("cuda backend: no usable device (%s)", err != cudaSuccess ? cuda_reason(err) : "no CUDA device");
        return NULL;
    }
    if (cfg->device_index < 0 || cfg->device_index >= count) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        loom_fail("cuda backend: device_index %d, but %d device%s visible (CUDA_VISIBLE_DEVICES=%s)",
                  cfg->device_index, count, count == 1 ? " is" : "s are", vis ? vis : "unset");
        return NULL;
    }
    if ((err = cudaSetDevice(cfg->device_index)) == cudaSuccess) err = cuda_probe_kernels();
    if (err != cudaSuccess) {
        cudaGetLastError();
        loom_fail("cuda backend: device %d cannot run this build's kernels (%s); rebuild with "
                  "-DCMAKE_CUDA_ARCHITECTURES set to the device's compute capability",
                  cfg->device_index, cudaGetErrorString(err));
        return NULL;
    }
    backend *be = calloc(1, sizeof *be);
    cuda_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        loom_fail("cuda backend: out of memory");
        return NULL;
    }
    be->ops = &cuda_ops;
    be->cfg = *cfg;
    be->impl = im;
    im->device = cfg->device_index;
    if (cuda_init_streams(be) != 0 || cuda_init_device(be) != 0) {
        cuda_destroy(be);
        return NULL;
    }
    return be;
}

static int cuda_available(const char **why)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    const char *reason = NULL;
    if (err != cudaSuccess) {
        cudaGetLastError();
        reason = cuda_reason(err);
    } else if (count <= 0) {
        reason = "no CUDA device";
    }
    if (why) *why = reason ? reason : "";
    return reason == NULL;
}

static const backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free_ptr,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .fill = cuda_fill,
    .sync = cuda_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_sync = cuda_event_sync,
    .native_stream = cuda_native_stream,
    .matmul = cuda_matmul,
    .add = cuda_add,
    .axpy = cuda_axpy,
    .scale = cuda_scale,
    .sumsq = cuda_sumsq,
    .bias_add = cuda_bias_add,
    .bias_backward = cuda_bias_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .rope = cuda_rope,
    .rope_freqs = cuda_rope_freqs,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_decode = cuda_attention_decode,
    .rope_rows = cuda_rope_rows,
    .attention_decode_rows = cuda_attention_decode_rows,
    .softmax_xent = cuda_softmax_xent,
    .adamw = cuda_adamw,
    .conv_taps_forward = cuda_conv_taps_forward,
    .conv_taps_backward = cuda_conv_taps_backward,
    .conv_taps_decode = cuda_conv_taps_decode,
    .sigmoid_gate_forward = cuda_sigmoid_gate_forward,
    .sigmoid_gate_backward = cuda_sigmoid_gate_backward,
    .scalar_gate_forward = cuda_scalar_gate_forward,
    .scalar_gate_backward = cuda_scalar_gate_backward,
    .cq_w4_quant = cuda_cq_w4_quant,
    .fake_quant_a8 = cuda_fake_quant_a8,
    /* Needle's mixing layers (BACKEND_OP_NEEDLE_MIX: all of them), cuda_needle_mix.cu */
    .kron_apply = cuda_kron_apply,
    .permute_cols = cuda_permute_cols,
    .scale_cols = cuda_scale_cols,
    .softmax_rows = cuda_softmax_rows,
    .softmax_rows_backward = cuda_softmax_rows_backward,
    .hada_mid_forward = cuda_hada_mid_forward,
    .hada_mid_backward = cuda_hada_mid_backward,
    .mhc_coeffs_forward = cuda_mhc_coeffs_forward,
    .mhc_coeffs_backward = cuda_mhc_coeffs_backward,
    .mhc_collapse = cuda_mhc_collapse,
    .mhc_collapse_backward = cuda_mhc_collapse_backward,
    .mhc_expand = cuda_mhc_expand,
    .mhc_expand_backward = cuda_mhc_expand_backward,
    .engram_gate_forward = cuda_engram_gate_forward,
    .engram_gate_backward = cuda_engram_gate_backward,
    .weights_bf16 = cuda_weights_bf16,
    .failure = cuda_failure,
    .memory = cuda_memory,
};

const backend_entry cuda_backend_entry = {"cuda", cuda_available, cuda_create};
