/* check.h: the assertion of loom's C tests: a failed CHECK prints where and why, counts the
 * failure and lets the test go on, so one run reports every broken check; main returns
 * `failures != 0`. Include once per test program. */
#ifndef LOOM_TESTS_CHECK_H
#define LOOM_TESTS_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                 \
    do {                                                 \
        if (!(cond)) {                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);  \
            printf(__VA_ARGS__);                         \
            printf("\n");                                \
            failures++;                                  \
        }                                                \
    } while (0)

#endif
