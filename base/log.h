/* log.h: progress and diagnostic lines, and command results. Logs (info, warnings) go to stderr,
 * results to stdout, so `loom ... > out` keeps the bare result. Only rank 0 prints info lines
 * and results; warnings are printed by every rank, prefixed with the rank when there are several. */
#ifndef LOOM_LOG_H
#define LOOM_LOG_H

/* Set which rank this process is and how many there are (called once after comm init). */
void log_set_rank(int rank, int world);

/* Silence info lines (--quiet, tests, benchmarks); warnings and results still print. */
void log_set_quiet(int quiet);

/* Info line to stderr, rank 0 only, unless quiet. A '\n' is appended. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Warning/error line to stderr, every rank. A '\n' is appended. */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Result line to stdout, rank 0 only, printed even when quiet (a command's answer: the eval
 * numbers, the end-of-job summary). A '\n' is appended. */
void log_result(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
