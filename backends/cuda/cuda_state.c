/* cuda_state.c: what every CUDA kernel file shares with the backend: the sticky-error
 * bookkeeping (cuda_check), the grown-on-demand device scratch buffer and the launch grid size
 * (declared in cuda_internal.h). Below the vtable in cuda_backend.c: it never calls an op. */
#include <stdio.h>

#include "backends/cuda/cuda_internal.h"

int cuda_check(backend *be, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return 0;
    cuda_impl *im = cuda_im(be);
    if (im->error == cudaSuccess) {
        im->error = err;
        snprintf(im->why, sizeof im->why, "cuda backend (device %d): %s failed: %s", im->device,
                 what, cudaGetErrorString(err));
        loom_fail("%s", im->why);
        log_warn("cuda backend (device %d): %s failed: %s; the backend is unusable from here on "
                 "(later results are NaN)", im->device, what, cudaGetErrorString(err));
    }
    return -1;
}

int cuda_check_launch(backend *be, const char *what) { return cuda_check(be, cudaGetLastError(), what); }

void *cuda_scratch(backend *be, size_t bytes)
{
    cuda_impl *im = cuda_im(be);
    if (bytes <= im->scratch_bytes) return im->scratch;
    size_t want = bytes + bytes / 4; /* headroom so a slightly larger shape does not regrow */
    want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (im->scratch) cudaFree(im->scratch); /* waits for the device: no queued op still uses it */
    im->scratch = NULL;
    im->scratch_bytes = 0;
    if (cuda_check(be, cudaMalloc(&im->scratch, want), "allocating scratch") != 0) {
        im->scratch = NULL;
        return NULL;
    }
    im->scratch_bytes = want;
    return im->scratch;
}

unsigned cuda_grid_for(backend *be, size_t n)
{
    size_t blocks = (n + CUDA_BLOCK - 1) / CUDA_BLOCK, cap = (size_t)cuda_im(be)->sm_count * 8;
    if (cap < 1) cap = 1;
    return (unsigned)(blocks < cap ? (blocks ? blocks : 1) : cap);
}
