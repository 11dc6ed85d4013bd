/* log.h: progress and diagnostic lines. Only one rank (rank 0 by default) prints info lines;
 * warnings are printed by every rank, prefixed with the rank when there is more than one. */
#ifndef LOOM_LOG_H
#define LOOM_LOG_H

/* Set which rank this process is and how many there are (called once after comm init). */
void log_set_rank(int rank, int world);

/* Silence info lines (tests, benchmarks). */
void log_set_quiet(int quiet);

/* Info line to stdout, rank 0 only. A '\n' is appended. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Warning/error line to stderr, every rank. A '\n' is appended. */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
