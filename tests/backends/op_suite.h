/* op_suite.h: the cross-backend op check. Runs every op of backend.h on a backend under test and
 * on the CPU reference with the same seeded random inputs (several shapes, GQA, masks, padded
 * vocab, odd sizes) and compares outputs and gradients elementwise. Used by the CUDA and Metal
 * tests; the CPU backend itself is checked against finite differences in tests/backends/cpu. */
#ifndef LOOM_OP_SUITE_H
#define LOOM_OP_SUITE_H

#include "backends/backend.h"

/* Compare every op. Tolerances are the suite's fp32 defaults multiplied by tol_scale (use ~1 for
 * exact-fp32 backends, larger for TF32/bf16 matmuls; the caller states why). Prints one line per
 * op (max abs/rel error) when verbose, and every failure always. Returns the number of failing
 * ops (0 = pass). */
int op_suite_run(backend *test, backend *ref, double tol_scale, int verbose);

#endif
