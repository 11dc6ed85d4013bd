/* error.h: one thread-local error message for the whole library.
 * Library code never prints-and-exits: it records what went wrong with loom_fail() and
 * returns an error code (or NULL); the CLI prints loom_error() and exits non-zero. */
#ifndef LOOM_ERROR_H
#define LOOM_ERROR_H

#include <stddef.h>

/* Record a printf-style message and return -1 (so `return loom_fail(...)` reads naturally).
 * The message should name the file/field/rank involved, in one line, without a trailing '\n'. */
int loom_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The last message recorded on this thread ("" if none). */
const char *loom_error(void);

/* Forget the last message. */
void loom_error_clear(void);

#endif
