/* metal_shim_device.cpp: the "metal-shim" backend for Linux: the Metal backend's own op layer
 * (backends/metal/metal_ops*.c) on a host-memory device that runs the C++-compiled kernels over
 * their grids and performs matmul by MPSMatrixMultiplication's documented semantics.
 * Test-only: it must never be linked into loom; every misuse it detects is counted as an error. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "backends/metal/metal_kernels.h"
#include "backends/metal/metal_ops.h"
#include "backends/metal/metal_ptrmap.h"
#include "tests/backends/metal/metal_shim_backend.h"
int metal_shim_run(int k, size_t grid, void *const *bufs, int nbufs, const void *params, size_t params_bytes,
                   int reverse);
}

namespace {

struct shim_dev {
    metal_ptrmap map;
};

int shim_errors = 0; /* misuse seen by any shim device (the test fails on any) */

void shim_error(const char *what)
{
    shim_errors++;
    std::fprintf(stderr, "metal-shim: %s\n", what);
}

/* [p, p + bytes) lies inside one allocation. */
bool shim_inside(shim_dev *d, const void *p, size_t bytes)
{
    size_t off = 0;
    void *h = metal_ptrmap_find(&d->map, p, &off);
    if (!h) return false;
    size_t i = 0;
    while (i < d->map.n && d->map.e[i].handle != h) i++;
    return i < d->map.n && off + bytes <= d->map.e[i].size;
}

void shim_destroy(void *dev)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    if (d->map.n) std::fprintf(stderr, "metal-shim: %zu allocations still live at destroy\n", d->map.n);
    for (size_t i = 0; i < d->map.n; i++) std::free(d->map.e[i].handle);
    metal_ptrmap_clear(&d->map);
    delete d;
}

void *shim_alloc(void *dev, size_t bytes)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    size_t n = bytes ? bytes : 1;
    void *p = std::calloc(1, n);
    if (!p) return nullptr;
    if (metal_ptrmap_insert(&d->map, p, n, p) != 0) {
        std::free(p);
        return nullptr;
    }
    return p;
}

void shim_free(void *dev, void *ptr)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    void *h = metal_ptrmap_remove(&d->map, ptr);
    if (!h) {
        shim_error("free of a pointer that is not the start of an allocation");
        return;
    }
    std::free(h);
}

/* As the Metal host does, every argument must resolve to (buffer, offset) before binding. Then
 * the grid runs twice from the same memory, threads in increasing and in decreasing order, and
 * the buffers must come out bitwise equal: on a GPU the threads of a dispatch run in no set
 * order, so a kernel whose result depends on the order (one thread reading what another wrote,
 * two threads adding to one element) is a race there and an error here. */
void shim_launch(void *dev, int k, size_t grid, void *const *bufs, int nbufs, const void *params,
                 size_t params_bytes)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    char msg[200];
    std::vector<metal_ptrmap_entry> allocs;
    for (int i = 0; i < nbufs; i++) {
        size_t off = 0;
        void *h = metal_ptrmap_find(&d->map, bufs[i], &off);
        if (!h) {
            std::snprintf(msg, sizeof msg, "%s argument %d (%p) is not inside a device allocation",
                          metal_kernel_name(k), i, bufs[i]);
            shim_error(msg);
            return;
        }
        bool seen = false;
        for (auto &a : allocs) seen = seen || a.handle == h;
        if (!seen) {
            size_t j = 0;
            while (d->map.e[j].handle != h) j++;
            allocs.push_back(d->map.e[j]);
        }
    }
    if (params_bytes > 4096) shim_error("params block over setBytes' 4 KB limit");
    std::vector<std::vector<char>> before, forward;
    for (auto &a : allocs) before.emplace_back((char *)a.base, (char *)a.base + a.size);
    if (metal_shim_run(k, grid, bufs, nbufs, params, params_bytes, 0) != 0) {
        shim_error("kernel launch rejected");
        return;
    }
    for (size_t i = 0; i < allocs.size(); i++) {
        forward.emplace_back((char *)allocs[i].base, (char *)allocs[i].base + allocs[i].size);
        std::memcpy((void *)allocs[i].base, before[i].data(), allocs[i].size);
    }
    metal_shim_run(k, grid, bufs, nbufs, params, params_bytes, 1);
    for (size_t i = 0; i < allocs.size(); i++) {
        if (std::memcmp((void *)allocs[i].base, forward[i].data(), allocs[i].size) != 0) {
            std::snprintf(msg, sizeof msg, "%s: result depends on the order of its threads (a race on a GPU)",
                          metal_kernel_name(k));
            shim_error(msg);
            return;
        }
    }
}

/* MPSMatrixMultiplication: result = alpha op(left) op(right) + beta result. The descriptors must
 * agree with M, N, K as MPS requires, and each matrix must fit its buffer from its offset:
 * (rows - 1) * rowBytes + columns * 4 bytes. beta == 0 does not read the result. */
void shim_matmul(void *dev, const metal_mm *mm)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    int lr = mm->trans_left ? mm->left_cols : mm->left_rows, lc = mm->trans_left ? mm->left_rows : mm->left_cols;
    int rr = mm->trans_right ? mm->right_cols : mm->right_rows, rc = mm->trans_right ? mm->right_rows : mm->right_cols;
    if (lr != mm->M || lc != mm->K || rr != mm->K || rc != mm->N || mm->result_rows != mm->M ||
        mm->result_cols != mm->N) {
        shim_error("matmul descriptors disagree with resultRows/resultColumns/interiorColumns");
        return;
    }
    auto fits = [&](const void *p, int rows, int cols) {
        return shim_inside(d, p, ((size_t)(rows - 1) * cols + cols) * sizeof(float));
    };
    if (!fits(mm->left, mm->left_rows, mm->left_cols) || !fits(mm->right, mm->right_rows, mm->right_cols) ||
        !fits(mm->result, mm->result_rows, mm->result_cols)) {
        shim_error("matmul matrix does not fit its buffer");
        return;
    }
    for (int i = 0; i < mm->M; i++) {
        for (int j = 0; j < mm->N; j++) {
            double s = 0.0;
            for (int k = 0; k < mm->K; k++) {
                float a = mm->trans_left ? mm->left[(size_t)k * mm->left_cols + i] : mm->left[(size_t)i * mm->left_cols + k];
                float b = mm->trans_right ? mm->right[(size_t)j * mm->right_cols + k]
                                          : mm->right[(size_t)k * mm->right_cols + j];
                s += (double)a * (double)b;
            }
            float *c = &mm->result[(size_t)i * mm->result_cols + j];
            double prev = mm->beta == 0.0 ? 0.0 : mm->beta * (double)*c;
            *c = (float)(mm->alpha * s + prev);
        }
    }
}

void shim_copy(void *dev, void *dst, const void *src, size_t bytes)
{
    shim_dev *d = static_cast<shim_dev *>(dev);
    if (!shim_inside(d, dst, bytes) || !shim_inside(d, src, bytes)) {
        shim_error("copy outside device allocations");
        return;
    }
    std::memmove(dst, src, bytes);
}

/* The shim runs every launch at once, so queued work is always complete. */
void shim_sync(void *) {}
void *shim_event_create(void *) { return std::calloc(1, 1); }
void shim_event_destroy(void *, void *ev) { std::free(ev); }
void shim_event_record(void *, void *) {}
void shim_event_sync(void *, void *) {}

const metal_device_ops shim_ops = {shim_destroy, shim_alloc,  shim_free,         shim_launch,
                                   shim_matmul,  shim_copy,   shim_sync,         shim_event_create,
                                   shim_event_destroy, shim_event_record, shim_event_sync};

} // namespace

backend *metal_shim_backend_create(const backend_config *cfg)
{
    shim_dev *d = new shim_dev();
    return metal_backend_wrap("metal-shim", &shim_ops, d, cfg, "metal-shim (Metal kernels as C++ on the host)", 0.0);
}

int metal_shim_error_count(void) { return shim_errors; }
