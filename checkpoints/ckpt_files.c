/* ckpt_files.c: durable file-system steps of a checkpoint save (mkdir -p, fsync of files and
 * directories, the atomic `latest` pointer, keep-K rotation) and reading `latest` back.
 * Must never delete anything but step_<digits>.h5 and .step_<digits>.h5.tmp files. */
#include "checkpoints/ckpt_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int ckpt_fs_mkdirs(const char *dir)
{
    char buf[CKPT_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) return loom_fail("%s: bad checkpoint directory name", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        struct stat st;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return loom_fail("%s: cannot create directory %s (%s)", dir, buf, strerror(errno));
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
            return loom_fail("%s: cannot create directory: %s is not a directory", dir, buf);
        buf[i] = saved;
    }
    return 0;
}

int ckpt_fs_fsync_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return loom_fail("%s: cannot open to fsync (%s)", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    return rc == 0 ? 0 : loom_fail("%s: fsync failed (%s)", path, strerror(err));
}

int ckpt_fs_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return loom_fail("%s: cannot open directory to fsync (%s)", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    /* Some file systems refuse fsync on a directory (EINVAL): nothing more we can do there. */
    return rc == 0 || err == EINVAL ? 0 : loom_fail("%s: directory fsync failed (%s)", dir, strerror(err));
}

int ckpt_latest_write(const char *dir, const char *name)
{
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, CKPT_LATEST);
    snprintf(fin, sizeof fin, "%s/%s", dir, CKPT_LATEST);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return loom_fail("%s: cannot create (%s)", tmp, strerror(errno));
    size_t n = strlen(name);
    char line[CKPT_PATH_MAX];
    snprintf(line, sizeof line, "%s\n", name);
    ssize_t w = write(fd, line, n + 1);
    int err = w == (ssize_t)(n + 1) ? 0 : (w < 0 ? errno : ENOSPC);
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, fin) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return loom_fail("%s: cannot update the `latest` pointer (%s)", fin, strerror(err));
    }
    return ckpt_fs_fsync_dir(dir);
}

int ckpt_latest_read(const char *dir, char *name, size_t len)
{
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_LATEST);
    FILE *f = fopen(path, "r");
    if (!f) return loom_fail("%s: no `latest` pointer", dir);
    char line[CKPT_PATH_MAX];
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    while (n && isspace((unsigned char)line[n - 1])) line[--n] = '\0';
    if (n == 0) return loom_fail("%s: no `latest` pointer (%s is empty)", dir, path);
    if (strchr(line, '/') || strchr(line, '\n') || n >= len)
        return loom_fail("%s: `latest` holds a bad file name", path);
    memcpy(name, line, n + 1);
    return 0;
}

/* Step number of "step_<digits>.h5" (tmp == 0) or ".step_<digits>.h5.tmp" (tmp == 1), else -1. */
static long long step_of(const char *name, int tmp)
{
    const char *pre = tmp ? ".step_" : "step_";
    const char *suf = tmp ? ".h5.tmp" : ".h5";
    size_t np = strlen(pre), ns = strlen(suf), n = strlen(name);
    if (n <= np + ns || strncmp(name, pre, np) != 0 || strcmp(name + n - ns, suf) != 0) return -1;
    long long step = 0;
    for (size_t i = np; i < n - ns; i++) {
        if (!isdigit((unsigned char)name[i]) || step > 1000000000000000LL) return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

typedef struct ckpt_entry {
    long long step;
    char name[256];
} ckpt_entry;

static int entry_newer_first(const void *a, const void *b)
{
    long long sa = ((const ckpt_entry *)a)->step, sb = ((const ckpt_entry *)b)->step;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

static int remove_in(const char *dir, const char *name)
{
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return unlink(path) == 0 ? 0 : 1;
}

int ckpt_rotate(const char *dir, int keep, const char *current)
{
    long long cur = step_of(current, 0);
    DIR *d = opendir(dir);
    if (!d) return 1;
    ckpt_entry *list = NULL;
    size_t n = 0, cap = 0;
    int failed = 0, removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (step_of(de->d_name, 1) >= 0) { /* leftover from a crashed save */
            int f = remove_in(dir, de->d_name);
            failed += f;
            removed += !f;
            continue;
        }
        /* Only older steps compete for the `keep` slots: a higher step belongs to another history
         * (a run resumed from an earlier checkpoint) and is left for the user to judge. */
        long long step = step_of(de->d_name, 0);
        if (keep <= 0 || step < 0 || step >= cur || strlen(de->d_name) >= sizeof list->name) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *grown = realloc(list, cap * sizeof *list);
            if (!grown) { failed++; break; }
            list = grown;
        }
        list[n].step = step;
        strcpy(list[n].name, de->d_name);
        n++;
    }
    closedir(d);
    /* `current` is one of the `keep` newest; the older ones are ranked by step number. */
    if (n) qsort(list, n, sizeof *list, entry_newer_first);
    for (size_t i = (size_t)(keep > 0 ? keep - 1 : 0); i < n; i++) {
        int f = remove_in(dir, list[i].name);
        failed += f;
        removed += !f;
    }
    free(list);
    if (removed) ckpt_fs_fsync_dir(dir);
    return failed;
}
