/* test_ckpt_crash.c: a save killed (SIGKILL via LOOM_FAULT_CKPT_PHASE) at each phase, or failing
 * on a full disk (RLIMIT_FSIZE) or an impossible directory, leaves the previous checkpoint
 * loadable and `latest` on a complete file. Must never kill anything but its own children. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"
#include "base/error.h"

static void path_of(char *buf, size_t len, const char *dir, long long step, int tmp)
{
    snprintf(buf, len, tmp ? "%s/.step_%08lld.h5.tmp" : "%s/step_%08lld.h5", dir, step);
}

/* Save `step` in a child with the fault hook armed; the child must die of SIGKILL. */
static void killed_save(const char *dir, long long step, const char *phase)
{
    fflush(stdout); /* or the child inherits (and may print) our buffered lines */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("LOOM_FAULT_CKPT_PHASE", phase, 1);
        test_ckpt c;
        tc_make(&c, 3, step);
        ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 1);
        _exit(3); /* reaching here means the hook did not fire */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "phase %s: child status %d", phase, status);
}

static void expect_latest(const char *dir, long long step, const char *why)
{
    test_ckpt want;
    tc_make(&want, 3, step);
    CHECK(tc_load_check(dir, &want) == 0, "%s: latest must load as step %lld", why, step);
    tc_free(&want);
}

static void good_save(const char *dir, long long step)
{
    test_ckpt c;
    tc_make(&c, 3, step);
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 1) == 0, "save %lld: %s", step, loom_error());
    tc_free(&c);
}

static void crash_phases(const char *dir)
{
    const char *phases[] = {"after_data", "before_rename", "before_latest", "before_rotate"};
    char p[4400];
    long long good = 1;
    good_save(dir, good);
    for (int i = 0; i < 4; i++, good++) {
        printf("crash at %s while saving step %lld\n", phases[i], good + 1);
        killed_save(dir, good + 1, phases[i]);
        path_of(p, sizeof p, dir, good + 1, 0);
        if (i < 2) { /* the new file never got its final name */
            expect_latest(dir, good, phases[i]);
            CHECK(!tc_exists(p), "%s: %s must not exist", phases[i], p);
            path_of(p, sizeof p, dir, good + 1, 1);
            CHECK(tc_exists(p), "%s: the killed save left its temp file %s", phases[i], p);
        } else if (i == 2) { /* renamed and complete, but `latest` still on the old one */
            expect_latest(dir, good, phases[i]);
            test_ckpt want;
            tc_make(&want, 3, good + 1);
            CHECK(tc_load_check(p, &want) == 0, "%s: the renamed file is complete", phases[i]);
            tc_free(&want);
        } else { /* `latest` moved; the old one was not rotated out yet */
            expect_latest(dir, good + 1, phases[i]);
            path_of(p, sizeof p, dir, good, 0);
            CHECK(tc_exists(p), "%s: previous %s still there", phases[i], p);
        }
        good_save(dir, good + 1); /* the next save recovers and sweeps leftovers */
        path_of(p, sizeof p, dir, good + 1, 1);
        CHECK(!tc_exists(p), "%s: temp file swept by the next save", phases[i]);
        expect_latest(dir, good + 1, "recovery save");
    }
}

/* Disk full: the child's file size limit stops the save at `limit` bytes. */
static void disk_full(const char *dir, long long good, off_t limit)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
        signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write() instead of dying */
        setrlimit(RLIMIT_FSIZE, &rl);
        test_ckpt c;
        tc_make(&c, 3, 99);
        int rc = ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 1);
        int named = strstr(loom_error(), dir) != NULL && !strchr(loom_error(), '\n');
        printf("  limit %lld: rc %d: %s\n", (long long)limit, rc, loom_error());
        fflush(stdout);
        _exit(rc == -1 && named ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "limit %lld: save must fail naming the dir", (long long)limit);
    char p[4400];
    path_of(p, sizeof p, dir, 99, 1);
    CHECK(!tc_exists(p), "limit %lld: temp file removed", (long long)limit);
    path_of(p, sizeof p, dir, 99, 0);
    CHECK(!tc_exists(p), "limit %lld: no step 99 file", (long long)limit);
    expect_latest(dir, good, "disk full");
}

int main(void)
{
    char dir[4096], p[4400];
    tc_dir(dir, sizeof dir, "crash");
    crash_phases(dir);
    long long good = 5;

    struct stat st;
    path_of(p, sizeof p, dir, good, 0);
    CHECK(stat(p, &st) == 0, "stat %s", p);
    off_t limits[] = {1000, st.st_size / 8, st.st_size / 2, st.st_size - 200};
    for (int i = 0; i < 4; i++) disk_full(dir, good, limits[i]);

    /* A directory that cannot be created: a regular file sits where a directory should be
     * (chmod would not stop root). */
    snprintf(p, sizeof p, "%s/afile", dir);
    CHECK(tc_copy("/dev/null", p) == 0, "make %s", p);
    snprintf(p, sizeof p, "%s/afile/ckpt", dir);
    test_ckpt c;
    tc_make(&c, 3, 100);
    CHECK_FAILS(ckpt_save(p, &c.state, c.groups, TC_NGROUPS, 1) == -1, "afile/ckpt");
    tc_free(&c);
    expect_latest(dir, good, "unwritable dir");
    return tc_finish("test_ckpt_crash");
}
