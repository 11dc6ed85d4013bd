/* error.c: the thread-local error message behind loom_fail()/loom_error().
 * Kept deliberately tiny: no allocation, so it works when memory is what ran out. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char error_msg[1024];

int loom_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_msg, sizeof error_msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *loom_error(void) { return error_msg; }

void loom_error_clear(void) { error_msg[0] = '\0'; }
