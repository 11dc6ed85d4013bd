/* metal_ops.h: the Metal backend's op layer. metal_ops*.c turn every backend.h op into launches
 * of the kernels in the .metal files on an abstract device (metal_device_ops); the real device is
 * metal_backend.m (Metal + MPS), the Linux test device runs the same kernels compiled as C++.
 * Must never include an Apple header: it is compiled and tested on Linux. */
#ifndef LOOM_METAL_OPS_H
#define LOOM_METAL_OPS_H

#include <stddef.h>

#include "backends/backend.h"

/* One matrix multiplication in MPSMatrixMultiplication's terms: result = alpha op(left) op(right)
 * + beta result, op = transpose when trans_*; each matrix dense row-major as stored
 * (rows x cols, rowBytes = cols * 4); M, N, K = resultRows, resultColumns, interiorColumns. */
typedef struct metal_mm {
    const float *left, *right;
    float *result;
    int left_rows, left_cols, right_rows, right_cols, result_rows, result_cols;
    int trans_left, trans_right;
    int M, N, K;
    double alpha, beta;
} metal_mm;

/* What a device provides. Device pointers are host-visible (shared storage): after sync() the
 * host may read and write them directly. Work is queued in issue order. */
typedef struct metal_device_ops {
    void (*destroy)(void *dev);
    void *(*alloc)(void *dev, size_t bytes); /* zero-filled; NULL + loom_fail on failure */
    void (*free)(void *dev, void *ptr);
    /* Run kernel k (enum metal_kernel) over `grid` threads: bufs[i] (device pointers, possibly
     * inside an allocation) at argument index i, the params block at index nbufs. */
    void (*launch)(void *dev, int k, size_t grid, void *const *bufs, int nbufs, const void *params,
                   size_t params_bytes);
    void (*matmul)(void *dev, const metal_mm *mm);
    void (*copy)(void *dev, void *dst, const void *src, size_t bytes); /* queued device copy */
    void (*sync)(void *dev);                                            /* wait for all queued work */
    void *(*event_create)(void *dev);
    void (*event_destroy)(void *dev, void *ev);
    void (*event_record)(void *dev, void *ev);
    void (*event_sync)(void *dev, void *ev);
} metal_device_ops;

/* A backend named `name` whose ops run on (dev_ops, dev). Takes ownership of dev: it is destroyed
 * with the backend, or at once when this fails (NULL + loom_fail). */
backend *metal_backend_wrap(const char *name, const metal_device_ops *dev_ops, void *dev,
                            const backend_config *cfg, const char *description, double peak_flops);

#endif
