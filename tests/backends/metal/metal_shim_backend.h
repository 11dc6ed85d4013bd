/* metal_shim_backend.h: creates the "metal-shim" backend, the Metal backend's op layer and
 * kernels running on the host, for Linux tests. Test-only; never part of loom itself. */
#ifndef LOOM_TEST_METAL_SHIM_BACKEND_H
#define LOOM_TEST_METAL_SHIM_BACKEND_H

#include "backends/backend.h"

/* A new metal-shim backend (destroy with backend_destroy); NULL + loom_fail on error. */
backend *metal_shim_backend_create(const backend_config *cfg);

/* Misuses the shim device has detected so far (bad pointers, argument counts, matmul shapes). */
int metal_shim_error_count(void);

#endif
