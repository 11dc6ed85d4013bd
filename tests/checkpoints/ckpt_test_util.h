/* ckpt_test_util.h: shared fixture for the checkpoint tests: a small deterministic checkpoint
 * (odd shapes, several groups, random bit patterns incl. NaN/Inf/denormals), temp dirs, checks.
 * Must never write outside the build directory's test area. */
#ifndef LOOM_CKPT_TEST_UTIL_H
#define LOOM_CKPT_TEST_UTIL_H

#include <stdio.h>

#include "checkpoints/ckpt.h"

#define TC_NGROUPS 4

/* A whole checkpoint's worth of inputs: state + groups model, optimizer/m, optimizer/v, lora. */
typedef struct test_ckpt {
    ckpt_state state;
    ckpt_group groups[TC_NGROUPS];
    size_t sizes[TC_NGROUPS]; /* floats per group buffer */
} test_ckpt;

extern int tc_failures; /* one counter for the test and ckpt_test_util.c */
#define CHECK_COUNTER tc_failures
#include "tests/check.h"
/* Set before tc_make*: the lora group also holds three tensors of 1.2-2.8 MB (multi-piece I/O). */
extern int tc_big;

/* rc must be -1 (or ptr NULL) with loom_error() containing `want`. */
#define CHECK_FAILS(failed, want) tc_check_fails(__FILE__, __LINE__, (failed), (want))
void tc_check_fails(const char *file, int line, int failed, const char *want);

/* Fixture data is a pure function of (seed, step): tests can rebuild what a file must hold. */
void tc_make(test_ckpt *c, unsigned seed, long long step);
/* Same tables, zeroed buffers and an empty state: a destination for reading. */
void tc_make_empty(test_ckpt *c);
void tc_free(test_ckpt *c);
/* Resolve dir_or_file, open, read state and every group, compare bitwise with want.
 * 0 if identical, else -1 with a message printed. */
int tc_load_check(const char *dir_or_file, const test_ckpt *want);

/* A fresh empty directory <build>/tests/checkpoints/tmp/<name>. */
void tc_dir(char *buf, size_t len, const char *name);
void tc_rmrf(const char *path);
int tc_exists(const char *path);
int tc_copy(const char *src, const char *dst);
/* Contents of dir/latest without the newline ("" if none). */
void tc_latest(const char *dir, char *buf, size_t len);
/* Print PASS/FAIL and return the exit code. */
int tc_finish(const char *test);

#endif
