/* test_ckpt_savefail.c: issue 18.7 and 18.8 at the ckpt.h level. A save that fails keeps its
 * reason (an HDF5 file-lock conflict on the temp file is not "cannot create checkpoint file ()");
 * after `latest` cannot be moved the complete but unreferenced new file is removed and `latest`
 * still names the previous checkpoint; a second writer of a folder is refused by the folder lock,
 * naming the holder's pid and host, until the holder lets go. Real files only. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"
#include "base/error.h"

static void save_ok(const char *dir, long long step)
{
    test_ckpt c;
    tc_make(&c, 2, step);
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 0) == 0, "save step %lld: %s", step, loom_error());
    tc_free(&c);
}

static int save_fails(const char *dir, long long step)
{
    test_ckpt c;
    tc_make(&c, 2, step);
    int rc = ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 0);
    tc_free(&c);
    return rc == -1;
}

/* Another process (here: another open file description) holds a lock on the temp name. */
static void lock_conflict(void)
{
    char dir[4096], tmp[4200];
    tc_dir(dir, sizeof dir, "savefail_lock");
    snprintf(tmp, sizeof tmp, "%s/.step_00000003.h5.tmp", dir);
    int fd = open(tmp, O_RDWR | O_CREAT, 0644);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "hold a lock on %s", tmp);
    CHECK_FAILS(save_fails(dir, 3), "cannot create checkpoint file (unable to lock file: Resource temporarily unavailable)");
    CHECK(!strstr(loom_error(), "file ()"), "the reason is not empty: %s", loom_error());
    if (fd >= 0) close(fd);
}

static void latest_fails(void)
{
    char dir[4096], p[4200], name[256];
    tc_dir(dir, sizeof dir, "savefail_latest");
    save_ok(dir, 1);
    /* latest.tmp cannot be created while a directory holds its name (root-proof, unlike modes) */
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
    CHECK_FAILS(save_fails(dir, 2), "latest: cannot update the `latest` pointer (cannot create ");
    CHECK(strstr(loom_error(), "latest.tmp: Is a directory); the new step_00000002.h5 was removed, `latest` still "
                               "names the previous checkpoint"), "the cause and the removal named: %s", loom_error());
    snprintf(p, sizeof p, "%s/step_00000002.h5", dir);
    CHECK(!tc_exists(p), "the unreferenced %s is gone", p);
    tc_latest(dir, name, sizeof name);
    CHECK(strcmp(name, "step_00000001.h5") == 0, "latest still names step 1: '%s'", name);
    test_ckpt want;
    tc_make(&want, 2, 1);
    CHECK(tc_load_check(dir, &want) == 0, "step 1 still loads");
    tc_free(&want);
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    rmdir(p);
    save_ok(dir, 2);
}

static void folder_lock(void)
{
    char dir[4096], host[256] = "", want[512];
    tc_dir(dir, sizeof dir, "savefail_folder");
    int a = -1, b = -1;
    CHECK(ckpt_lock(dir, &a) == 0 && a >= 0, "first writer locks: %s", loom_error());
    gethostname(host, sizeof host);
    snprintf(want, sizeof want, "is in use by another job (pid %ld on host %s)", (long)getpid(), host);
    CHECK_FAILS(ckpt_lock(dir, &b) == -1, want);
    CHECK(b == -1, "no descriptor for a refused lock");
    ckpt_unlock(a);
    CHECK(ckpt_lock(dir, &b) == 0, "free again once the holder lets go: %s", loom_error());
    ckpt_unlock(b);
}

int main(void)
{
    lock_conflict();
    latest_fails();
    folder_lock();
    return tc_finish("test_ckpt_savefail");
}
