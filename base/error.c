/* error.c: the thread-local error message behind loom_fail()/loom_error().
 * Kept deliberately tiny: no allocation, so it works when memory is what ran out. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_msg[1024];

/* Formatted into a second buffer first: callers wrap the previous message, as in
 * loom_fail("saving: %s", loom_error()), and vsnprintf must not read what it is writing. */
int loom_fail(const char *fmt, ...)
{
    static _Thread_local char next[sizeof error_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(next, sizeof next, fmt, ap);
    va_end(ap);
    memcpy(error_msg, next, sizeof error_msg);
    return -1;
}

const char *loom_error(void) { return error_msg; }

void loom_error_clear(void) { error_msg[0] = '\0'; }
