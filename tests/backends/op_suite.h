/* op_suite.h: the cross-backend op check. Runs every op of backend.h on a backend under test and
 * on the CPU reference with the same seeded random inputs (several shapes, GQA, masks, padded
 * vocab, odd sizes) and compares outputs and gradients element-wise. Used by the CUDA and Metal
 * tests; the CPU backend itself is checked against finite differences in tests/backends/cpu. */
#ifndef LOOM_OP_SUITE_H
#define LOOM_OP_SUITE_H

#include "backends/backend.h"

/* Compare every op element-wise under tests/check.h's rule, each op's atol and rtol derived from
 * its arithmetic on both sides (see suite_tol in op_suite.c). u_dot is the unit roundoff of the
 * tested backend's inner products (matmul, attention): CHECK_U_FP32, CHECK_U_TF32 or
 * CHECK_U_BF16; only those ops are loosened by it. u_dot = 0: both sides are the same
 * implementation and must agree bit for bit. Prints one line per check when verbose, and every
 * failure always. Returns the number of failing checks (0 = pass). */
int op_suite_run(backend *test, backend *ref, double u_dot, int verbose);

/* The suite's two parts, for a backend whose precision mode changes the arithmetic of some ops
 * only: the products (matmul; attention forward and backward, plain and windowed) and the rest
 * (every other op, the decode-time attention ops included). */
enum { OP_SUITE_PRODUCTS = 1, OP_SUITE_REST = 2, OP_SUITE_ALL = 3 };

/* op_suite_run on the parts in the mask `parts` only (and says what it left out). The inputs are
 * drawn in sequence from one seed, so a case after a left-out one sees other random values. */
int op_suite_run_parts(backend *test, backend *ref, double u_dot, int verbose, unsigned parts);

#endif
