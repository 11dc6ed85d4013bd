/* test_ckpt_rotation.c: `latest` follows every save; keep-K deletes only older step_*.h5 files
 * (never other files, never the one `latest` names, never higher steps from another history)
 * and sweeps temp files left by crashed saves. Must never rely on timestamps. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"
#include "base/error.h"

static void touch(const char *dir, const char *name)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) close(fd);
}

static int has(const char *dir, long long step)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/step_%08lld.h5", dir, step);
    return tc_exists(p);
}

static int has_name(const char *dir, const char *name)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return tc_exists(p);
}

static void save(const char *dir, long long step, int keep)
{
    test_ckpt c;
    tc_make(&c, 1, step);
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, keep) == 0, "save step %lld: %s", step, loom_error());
    char want[64], latest[256];
    snprintf(want, sizeof want, "step_%08lld.h5", step);
    tc_latest(dir, latest, sizeof latest);
    CHECK(strcmp(latest, want) == 0, "after step %lld latest = '%s'", step, latest);
    CHECK(tc_load_check(dir, &c) == 0, "latest loads as step %lld", step);
    tc_free(&c);
}

int main(void)
{
    char dir[4096];
    tc_dir(dir, sizeof dir, "rotation");
    const char *bystanders[] = {"step_notes.txt", "notes.h5", "step_00000001.h5.bak", "step_x.h5", "latest.old"};
    for (int i = 0; i < 5; i++) touch(dir, bystanders[i]);

    for (long long s = 1; s <= 5; s++) {
        save(dir, s, 2);
        for (long long k = 1; k <= 5; k++)
            CHECK(has(dir, k) == (k <= s && k >= s - 1), "after step %lld: step %lld present=%d", s, k, has(dir, k));
    }
    for (int i = 0; i < 5; i++) CHECK(has_name(dir, bystanders[i]), "%s must survive rotation", bystanders[i]);
    CHECK(!has_name(dir, "latest.tmp"), "no latest.tmp left");

    /* Resumed from an earlier step: higher steps (another history) are left alone. */
    save(dir, 3, 2);
    CHECK(has(dir, 3) && has(dir, 4) && has(dir, 5), "steps 3,4,5 present after saving 3");
    touch(dir, ".step_00000009.h5.tmp"); /* leftover of a crashed save */
    save(dir, 4, 2);
    CHECK(has(dir, 3) && has(dir, 4) && has(dir, 5), "steps 3,4,5 present after re-saving 4");
    CHECK(!has_name(dir, ".step_00000009.h5.tmp"), "crashed-save temp file swept");
    save(dir, 6, 1);
    CHECK(!has(dir, 3) && !has(dir, 4) && !has(dir, 5) && has(dir, 6), "keep 1 leaves only step 6");

    /* keep = 0 keeps everything. */
    tc_dir(dir, sizeof dir, "rotation_keep_all");
    for (long long s = 1; s <= 3; s++) save(dir, s, 0);
    CHECK(has(dir, 1) && has(dir, 2) && has(dir, 3), "keep 0 keeps all");
    return tc_finish("test_ckpt_rotation");
}
