/* op_suite_internal.h: what the files of the op suite share (op_suite.c: the harness and the
 * ops every model uses; op_suite_needle.c and op_suite_needle_mix.c: Needle's layers): the run's
 * state, host arrays mirrored on both backends, and the tolerance of a comparison. Test-only;
 * include tests/check.h (with the file's own CHECK_COUNTER) before it. */
#ifndef LOOM_OP_SUITE_INTERNAL_H
#define LOOM_OP_SUITE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tests/backends/op_suite.h"

typedef struct {
    backend *t, *r;
    double u_dot; /* unit roundoff of the tested side's inner products; 0 = bitwise */
    int verbose, failed;
    uint64_t rng;
} suite;

/* One host array mirrored on both backends. */
typedef struct {
    void *t, *r;
    size_t bytes;
} pair;

double suite_rnd(suite *s); /* uniform [-1, 1) */
float *host_rand(suite *s, size_t n, double scale);
/* Both copies of host[0..bytes) (zeros when host is NULL). */
pair pair_new(suite *s, const void *host, size_t bytes);
pair pair_rand(suite *s, size_t n, double scale);
void pair_free(suite *s, pair *p);
/* The tolerance of a comparison between the two sides (tests/check.h): each side's own error
 * against the exact result, added. K accumulated terms adding up to about S, r roundings of the
 * result's own; `dot` marks values whose inner products run in the tested side's matmul
 * arithmetic (TF32/bf16 loosen only those). Bitwise when u_dot is 0 (the same implementation). */
check_tol suite_tol(const suite *s, double K, double S, double r, int dot);
check_tol tol_times(check_tol t, double f); /* t scaled by f */
void suite_count(suite *s, int ok);         /* a failed check counts once */
/* Download both copies and compare element-wise under t: the reference side is `want`. */
void pair_check(suite *s, const char *op, pair *p, check_tol t);

/* op_suite_needle.c: Needle's layers (conv taps, gates, fake quantisation). */
void suite_needle(suite *s);
/* op_suite_needle_mix.c: Needle's mixing layers (Kronecker products, permutations, softmax, the
 * Hadamard middle, mHC, the engram gate), against double references; skipped (and said) where a
 * side lacks BACKEND_OP_NEEDLE_MIX. */
void suite_needle_mix(suite *s);

/* The device pointer of pair p on side 0 (test) or 1 (reference), and that side's backend. */
#define PF(p, side) ((float *)((side) ? (p).r : (p).t))
#define PI(p, side) ((const int32_t *)((side) ? (p).r : (p).t))
#define FOR_SIDES(be)                                                                              \
    for (int side = 0; side < 2; side++)                                                           \
        for (backend *be = side ? s->r : s->t; be; be = NULL)

#endif
