/* test_ckpt_durable.c: a save's durability protocol, seen through its system calls: every file is
 * fsync'd before it is renamed into place, and the directory is fsync'd after each rename (the
 * step file's and `latest`'s), before ckpt_save returns. A power loss is not testable; the order of
 * the calls that make a save survive one is. fsync and rename are wrapped (-Wl,--wrap). */
#define _DEFAULT_SOURCE /* realpath, readlink */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"

int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);

/* The calls of the save in order: 'F' an fsync (of a path), 'R' a rename (from, to). */
#define MAX_EVENTS 256
typedef struct sys_event {
    char kind;
    char a[PATH_MAX], b[PATH_MAX];
} sys_event;
static sys_event events[MAX_EVENTS];
static int nevents;

static sys_event *event_add(char kind)
{
    if (nevents == MAX_EVENTS) return NULL;
    sys_event *e = &events[nevents++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    return e;
}

/* The absolute path of p, or of its folder + its name when p does not exist (yet). */
static void abs_path(const char *p, char *out)
{
    if (realpath(p, out)) return;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", p);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : p;
    if (slash) *slash = 0;
    char real[PATH_MAX];
    if (!realpath(slash ? dir : ".", real)) snprintf(real, sizeof real, "?");
    snprintf(out, PATH_MAX, "%.2000s/%.2000s", real, name);
}

int __wrap_fsync(int fd)
{
    sys_event *e = event_add('F');
    if (e) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, e->a, sizeof e->a - 1);
        e->a[n > 0 ? n : 0] = 0;
    }
    return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
    sys_event *e = event_add('R');
    if (e) {
        abs_path(from, e->a);
        abs_path(to, e->b);
    }
    return __real_rename(from, to);
}

/* Rename i's source was fsync'd before it, and its folder is fsync'd after it. */
static void check_rename(int i)
{
    const sys_event *r = &events[i];
    int synced = 0, dir_synced = 0;
    for (int k = 0; k < i; k++) synced |= events[k].kind == 'F' && strcmp(events[k].a, r->a) == 0;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", r->b);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    for (int k = i + 1; k < nevents; k++) dir_synced |= events[k].kind == 'F' && strcmp(events[k].a, dir) == 0;
    CHECK(synced, "%s renamed to %s without an fsync of its bytes first", r->a, r->b);
    CHECK(dir_synced, "rename to %s not followed by an fsync of %s", r->b, dir);
}

static void save_and_check(const char *dir, long long step)
{
    test_ckpt c;
    tc_make(&c, 3, step);
    nevents = 0;
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 2) == 0, "save step %lld: %s", step, loom_error());
    CHECK(nevents < MAX_EVENTS, "too many calls recorded");
    int renames = 0, step_file = 0, latest = 0;
    char want[64];
    snprintf(want, sizeof want, "/step_%08lld.h5", step);
    for (int i = 0; i < nevents; i++) {
        if (events[i].kind != 'R') continue;
        renames++;
        size_t n = strlen(events[i].b);
        step_file |= n > strlen(want) && strcmp(events[i].b + n - strlen(want), want) == 0;
        latest |= n > 7 && strcmp(events[i].b + n - 7, "/latest") == 0;
        check_rename(i);
    }
    CHECK(step_file && latest, "step %lld: the step file (%d) and latest (%d) are renamed into place (%d renames)",
          step, step_file, latest, renames);
    CHECK(tc_load_check(dir, &c) == 0, "step %lld loads back", step);
    tc_free(&c);
}

int main(void)
{
    char dir[4096];
    tc_dir(dir, sizeof dir, "durable");
    save_and_check(dir, 1);
    save_and_check(dir, 2); /* a `latest` there already, a file to keep */
    return tc_finish("test_ckpt_durable");
}
