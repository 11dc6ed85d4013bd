/* log.c: rank-aware printing (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int log_rank = 0, log_world = 1, log_quiet = 0;

void log_set_rank(int rank, int world) { log_rank = rank; log_world = world; }
void log_set_quiet(int quiet) { log_quiet = quiet; }

void log_info(const char *fmt, ...)
{
    if (log_rank != 0 || log_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void log_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (log_world > 1) fprintf(stderr, "[rank %d] ", log_rank);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}
