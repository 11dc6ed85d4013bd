/* log.c: rank-aware printing (see log.h). Each line (prefix, message, newline) is formatted into
 * one buffer and handed to the kernel in one write(2), so lines of ranks sharing a terminal, a
 * pipe or a file never interleave mid-line. Must never allocate (it reports out-of-memory too). */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* One line at most: PIPE_BUF (4096 on Linux), the most one write to a pipe keeps whole. */
#define LOG_LINE_MAX 4096

static int log_rank = 0, log_world = 1, log_quiet = 0;

void log_set_rank(int rank, int world) { log_rank = rank; log_world = world; }
void log_set_quiet(int quiet) { log_quiet = quiet; }

/* prefix + fmt + '\n' into one buffer; a longer line is cut, marked " [...]", and still ends in
 * '\n'. Whatever the stream's buffer holds is flushed first so the order of output is kept. */
static void log_line(FILE *stream, const char *prefix, const char *fmt, va_list ap)
{
    static const char cut[] = " [...]\n";
    char buf[LOG_LINE_MAX];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s", prefix);
    if (n >= sizeof buf) n = sizeof buf - 1;
    int m = vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    if (m < 0) m = 0;
    if ((size_t)m >= sizeof buf - n - 1) { /* no room left for the newline */
        n = sizeof buf - sizeof cut;
        memcpy(buf + n, cut, sizeof cut - 1);
        n += sizeof cut - 1;
    } else {
        n += (size_t)m;
        buf[n++] = '\n';
    }
    fflush(stream);
    int fd = fileno(stream);
    for (size_t done = 0; fd >= 0 && done < n;) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break; /* nowhere to report a failed log write */
        done += (size_t)w;
    }
}

void log_info(const char *fmt, ...)
{
    if (log_rank != 0 || log_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    log_line(stderr, "", fmt, ap);
    va_end(ap);
}

void log_result(const char *fmt, ...)
{
    if (log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    log_line(stdout, "", fmt, ap);
    va_end(ap);
}

void log_warn(const char *fmt, ...)
{
    char prefix[32] = "";
    if (log_world > 1) snprintf(prefix, sizeof prefix, "[rank %d] ", log_rank);
    va_list ap;
    va_start(ap, fmt);
    log_line(stderr, prefix, fmt, ap);
    va_end(ap);
}
