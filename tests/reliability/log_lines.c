/* log_lines.c: log lines stay whole when several processes share one stderr (as mpirun's ranks
 * do): 4 forked "ranks" each write 2000 warnings into one pipe at once, and every line read back
 * must be exactly one rank's prefix and message. Also: a line longer than the log buffer is cut
 * safely and still ends in a newline; stdout text printed before log_result stays before it;
 * info lines go to stderr (never stdout), are silenced by quiet, and results are not.
 * Must never leave a child running (each child exits on its own; the parent reaps them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "tests/check.h"

enum { RANKS = 4, LINES = 2000, BODY = 300 };


/* Run child(arg) in a process whose file descriptor `fd` is the write end of a pipe; return what
 * all such children wrote (malloc'd, NUL-terminated) once they have exited. */
static char *capture(int fd, int nchild, void (*child)(int))
{
    int p[2];
    if (pipe(p) != 0) return NULL;
    for (int i = 0; i < nchild; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            dup2(p[1], fd);
            child(i);
            fflush(NULL);
            _exit(0);
        }
    }
    close(p[1]);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && (got = read(p[0], buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (cap - n < 4096) {
            char *more = realloc(buf, cap *= 2);
            if (!more) free(buf);
            buf = more;
        }
    }
    close(p[0]);
    for (int i = 0; i < nchild; i++) wait(NULL);
    if (buf) buf[n] = '\0';
    return buf;
}

static void rank_child(int rank)
{
    char body[BODY + 1];
    memset(body, 'a' + rank, BODY);
    body[BODY] = '\0';
    log_set_rank(rank, RANKS);
    for (int k = 0; k < LINES; k++) log_warn("line %d %s", k, body);
}

/* Every line is "[rank R] line K <BODY x letter R>", each (R, K) exactly once. */
static void check_interleaving(char *out)
{
    static int seen[RANKS][LINES];
    int lines = 0, bad = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int r = -1, k = -1, used = 0;
        lines++;
        if (sscanf(l, "[rank %d] line %d %n", &r, &k, &used) != 2 || r < 0 || r >= RANKS || k < 0 || k >= LINES ||
            strlen(l + used) != BODY || strspn(l + used, (char[]){(char)('a' + r), 0}) != BODY) {
            if (bad++ < 3) fprintf(stderr, "mixed line: %.120s...\n", l);
            continue;
        }
        seen[r][k]++;
    }
    int missing = 0;
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < LINES; k++) missing += seen[r][k] != 1;
    CHECK(bad == 0 && missing == 0 && lines == RANKS * LINES,
          "%d lines (want %d), %d of them mixed, %d lines missing or repeated", lines, RANKS * LINES, bad, missing);
}

static void long_child(int i)
{
    (void)i;
    static char msg[10000];
    memset(msg, 'x', sizeof msg - 1);
    log_set_rank(1, 2);
    log_warn("%s", msg);
    log_warn("after");
}

static void order_child(int i)
{
    (void)i;
    log_set_rank(0, 1);
    printf("first, ");
    log_result("then the result line");
    log_info("an info line (stderr)");
    printf("last\n");
}

static void streams_child(int i)
{
    log_set_rank(0, 1);
    log_set_quiet(i);
    log_info("info %d", i);
    log_result("result %d", i);
}

int main(void)
{
    char *out = capture(2, RANKS, rank_child);
    CHECK(out != NULL, "capture");
    if (out) check_interleaving(out);
    free(out);

    out = capture(2, 1, long_child);
    CHECK(out != NULL, "capture");
    if (out) {
        char *nl = strchr(out, '\n');
        size_t len = nl ? (size_t)(nl - out) + 1 : 0;
        CHECK(len > 3000 && len <= 4096, "a long line is cut to the log buffer, got %zu bytes", len);
        CHECK(strncmp(out, "[rank 1] xxx", 12) == 0 && len >= 7 && strncmp(nl - 6, " [...]\n", 7) == 0,
              "the cut line keeps its prefix and ends in \" [...]\": %.20s ... %.10s", out, nl ? nl - 9 : "");
        CHECK(nl && strcmp(nl + 1, "[rank 1] after\n") == 0, "the next line is whole: %s", nl ? nl + 1 : "(none)");
    }
    free(out);

    out = capture(1, 1, order_child);
    CHECK(out && strcmp(out, "first, then the result line\nlast\n") == 0, "stdout order kept: '%s'", out ? out : "");
    free(out);

    out = capture(2, 2, streams_child); /* child 0 logs, child 1 is quiet */
    CHECK(out && strcmp(out, "info 0\n") == 0, "stderr: want child 0's info line alone, got '%s'", out ? out : "");
    free(out);
    out = capture(1, 2, streams_child); /* both results, quiet or not; no info line */
    CHECK(out && strlen(out) == 18 && strstr(out, "result 0\n") && strstr(out, "result 1\n"),
          "stdout: want both result lines alone, got '%s'", out ? out : "");
    free(out);

    printf("%s: %s\n", "test_log_lines", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
