/* ckpt_files.c: durable file-system steps of a checkpoint save (mkdir -p, fsync of files and
 * directories, the whole-file seal, the atomic `latest` pointer, keep-K rotation) and reading
 * `latest` back; the folder's writer lock. Must never delete anything but step_<digits>.h5 and
 * .step_<digits>.h5.tmp files (and `latest`, when ckpt_clear empties a folder for a new run), and
 * never change a byte of a checkpoint's HDF5 part (the seal only appends or replaces itself). */
#include "checkpoints/ckpt.h"
#include "checkpoints/ckpt_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt_crc.h"
#include "base/error.h"

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
    if (fd < 0) return loom_fail("%s: cannot update the `latest` pointer (cannot create %s: %s)", fin, tmp, strerror(errno));
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
    /* O_NONBLOCK: a FIFO (or device) named `latest` must not block open() forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return loom_fail("%s: no `latest` pointer", dir);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail("%s: `latest` is not a regular file", path);
    }
    char line[CKPT_PATH_MAX];
    ssize_t got = read(fd, line, sizeof line - 1);
    close(fd);
    size_t n = got > 0 ? (size_t)got : 0;
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

/* Walk dir's checkpoint files: count step_<digits>.h5 (and its highest step), and with `remove`
 * unlink them and any .step_<digits>.h5.tmp. The count, or -1 + loom_fail. */
static int walk_steps(const char *dir, long long *newest, int remove)
{
    *newest = -1;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : loom_fail("%s: cannot read the checkpoint folder (%s)", dir, strerror(errno));
    int n = 0, err = 0;
    struct dirent *de;
    char bad[256] = "";
    while ((de = readdir(d)) != NULL) {
        long long step = step_of(de->d_name, 0);
        int ours = step >= 0 || step_of(de->d_name, 1) >= 0;
        if (step >= 0) n++, *newest = step > *newest ? step : *newest;
        if (remove && ours && remove_in(dir, de->d_name) && !err) {
            err = errno;
            snprintf(bad, sizeof bad, "%s", de->d_name);
        }
    }
    closedir(d);
    if (err) return loom_fail("%s/%s: cannot remove the old checkpoint (%s)", dir, bad, strerror(err));
    return n;
}

int ckpt_count(const char *dir, long long *newest) { return walk_steps(dir, newest, 0); }

int ckpt_clear(const char *dir)
{
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_LATEST);
    if (unlink(path) != 0 && errno != ENOENT)
        return loom_fail("%s: cannot remove (%s)", path, strerror(errno));
    long long newest;
    int n = walk_steps(dir, &newest, 1);
    if (n < 0) return -1;
    if (n > 0) ckpt_fs_fsync_dir(dir);
    return 0;
}

/* --- the seal --- */

/* Bytes per read when streaming a file through the CRC: large sequential reads. */
#define SEAL_READ_BYTES ((size_t)4 << 20)

static void seal_put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t seal_get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void seal_encode(unsigned char t[CKPT_SEAL_BYTES], uint64_t len, uint32_t crc)
{
    memcpy(t, CKPT_SEAL_MAGIC, 8);
    seal_put_le(t + 8, len, 8);
    seal_put_le(t + 16, crc, 4);
    seal_put_le(t + 20, CKPT_SEAL_VERSION, 4);
}

/* Exactly n bytes at off; 0, or -1 (errno set; 0 at an early end of file). */
static int seal_pread(int fd, void *buf, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t got = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0;
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
}

/* *crc continued over bytes [from, from + len) of fd. 0, or -1 + loom_fail naming path. */
static int seal_crc_range(int fd, const char *path, uint64_t from, uint64_t len, uint32_t *crc)
{
    size_t cap = len < SEAL_READ_BYTES ? (size_t)len : SEAL_READ_BYTES;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf) return loom_fail("checkpoint %s: out of memory for the checksum", path);
    uint32_t c = *crc;
    int rc = 0;
    for (uint64_t done = from, end = from + len; done < end && !rc;) {
        size_t want = end - done < cap ? (size_t)(end - done) : cap;
        if (seal_pread(fd, buf, want, done) != 0)
            rc = loom_fail("checkpoint %s: read failed at byte %llu (%s)", path, (unsigned long long)done,
                           errno ? strerror(errno) : "the file shrank while being read");
        else
            c = ckpt_crc32c(c, buf, want);
        done += want;
    }
    free(buf);
    *crc = c;
    return rc;
}

/* CRC32C of the first len bytes of fd. 0, or -1 + loom_fail naming path. */
static int seal_crc(int fd, const char *path, uint64_t len, uint32_t *crc)
{
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* a hint: a failure changes nothing */
    *crc = 0;
    return seal_crc_range(fd, path, 0, len, crc);
}

static int seal_extent_cmp(const void *a, const void *b)
{
    const ckpt_extent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The CRC of fd's first len bytes from the extents' CRCs and the gaps between them, read. 1 (no
 * loom_fail) when the extents do not tile [0, len): the caller reads the whole file. */
static int seal_crc_known(int fd, const char *path, uint64_t len, ckpt_extent *ext, int n, uint32_t *crc)
{
    qsort(ext, (size_t)n, sizeof *ext, seal_extent_cmp);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (ext[i].len == 0) continue;
        if (ext[i].off < at || ext[i].off > len || ext[i].len > len - ext[i].off) return 1;
        at = ext[i].off + ext[i].len;
    }
    uint32_t c = 0;
    at = 0;
    for (int i = 0; i < n; i++) {
        if (ext[i].len == 0) continue;
        if (seal_crc_range(fd, path, at, ext[i].off - at, &c)) return -1;
        c = ckpt_crc32c_combine(c, ext[i].crc, ext[i].len);
        at = ext[i].off + ext[i].len;
    }
    if (seal_crc_range(fd, path, at, len - at, &c)) return -1;
    *crc = c;
    return 0;
}

static const unsigned char seal_h5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/* 1 if an HDF5 signature sits where HDF5 looks for one: offset 0, 512, 1024, 2048, ... */
static int seal_has_signature(int fd, uint64_t size)
{
    unsigned char got[8];
    for (uint64_t off = 0; off + 8 <= size; off = off ? 2 * off : 512)
        if (seal_pread(fd, got, 8, off) == 0 && memcmp(got, seal_h5_sig, 8) == 0) return 1;
    return 0;
}

/* Where the HDF5 data ends by the superblock at offset 0 (base address + end-of-file address),
 * or 0 if there is none we can read (superblock versions 0-3 with 8-byte addresses). */
static uint64_t seal_h5_end(int fd)
{
    unsigned char sb[56];
    if (seal_pread(fd, sb, sizeof sb, 0) != 0 || memcmp(sb, seal_h5_sig, 8) != 0) return 0;
    size_t base;
    if (sb[8] <= 1 && sb[13] == 8) base = sb[8] ? 28 : 24; /* v0/v1: K values and flags first */
    else if ((sb[8] == 2 || sb[8] == 3) && sb[9] == 8) base = 12;
    else return 0;
    uint64_t b = seal_get_le(sb + base, 8), eoa = seal_get_le(sb + base + 16, 8);
    return b > UINT64_MAX / 4 || eoa > UINT64_MAX / 4 ? 0 : b + eoa; /* no overflow below */
}

/* No trailer at the end: a truncated file (shorter than its superblock promises, or cut inside
 * the trailer), not HDF5 at all, or a whole file without a seal. Always -1 + loom_fail. */
static int seal_missing(int fd, const char *path, uint64_t size, ckpt_seal_state *state)
{
    *state = CKPT_SEAL_BROKEN;
    if (!seal_has_signature(fd, size))
        return loom_fail("%s: not an HDF5 file (%llu bytes)", path, (unsigned long long)size);
    if (size < 48) /* the smallest superblock (version 2) is 48 bytes */
        return loom_fail("checkpoint %s: truncated (%llu bytes, not even an HDF5 superblock)", path,
                         (unsigned long long)size);
    uint64_t end = seal_h5_end(fd), full = end + CKPT_SEAL_BYTES;
    int cut = end && size < end;
    if (end && size > end && size < full) { /* cut inside the trailer: its start is there */
        unsigned char want[CKPT_SEAL_BYTES], got[CKPT_SEAL_BYTES];
        seal_encode(want, end, 0);
        size_t n = (size_t)(size - end) < 16 ? (size_t)(size - end) : 16; /* magic + length */
        cut = seal_pread(fd, got, n, end) == 0 && memcmp(got, want, n) == 0;
    }
    if (cut)
        return loom_fail("checkpoint %s: truncated (%llu of %llu bytes)", path, (unsigned long long)size,
                         (unsigned long long)full);
    *state = CKPT_SEAL_NONE;
    return loom_fail("checkpoint %s: no seal (not written by loom, or edited after the save; run "
                     "`loom ckpt seal %s` to accept it)", path, path);
}

static int seal_check(int fd, const char *path, uint64_t size, const unsigned char *t, ckpt_seal_state *state)
{
    uint64_t len = seal_get_le(t + 8, 8), version = seal_get_le(t + 20, 4);
    uint32_t want = (uint32_t)seal_get_le(t + 16, 4), got = 0;
    *state = CKPT_SEAL_BROKEN;
    if (version != CKPT_SEAL_VERSION)
        return loom_fail("checkpoint %s: seal version %llu, this loom reads %d (a newer loom's file, or a "
                         "damaged one)", path, (unsigned long long)version, CKPT_SEAL_VERSION);
    *state = CKPT_SEAL_STALE;
    if (len != size - CKPT_SEAL_BYTES)
        return loom_fail("checkpoint %s: whole-file checksum mismatch (damaged file: the seal covers %llu "
                         "bytes, %llu precede it)", path, (unsigned long long)len,
                         (unsigned long long)(size - CKPT_SEAL_BYTES));
    if (seal_crc(fd, path, len, &got)) return *state = CKPT_SEAL_BROKEN, -1;
    if (got != want) return loom_fail("checkpoint %s: whole-file checksum mismatch (damaged file)", path);
    *state = CKPT_SEAL_OK;
    return 0;
}

int ckpt_seal_verify(const char *path, ckpt_seal_state *state)
{
    ckpt_seal_state dummy;
    if (!state) state = &dummy;
    *state = CKPT_SEAL_BROKEN;
    /* O_NONBLOCK, then fstat: a FIFO passed as a checkpoint must not block open() forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return loom_fail("%s: cannot open checkpoint (%s)", path, strerror(errno));
    struct stat st;
    int rc;
    unsigned char t[CKPT_SEAL_BYTES];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = loom_fail("%s: not a regular file, not a checkpoint", path);
    } else {
        uint64_t size = (uint64_t)st.st_size;
        if (size >= CKPT_SEAL_BYTES && seal_pread(fd, t, sizeof t, size - CKPT_SEAL_BYTES) == 0 &&
            memcmp(t, CKPT_SEAL_MAGIC, 8) == 0)
            rc = seal_check(fd, path, size, t, state);
        else
            rc = seal_missing(fd, path, size, state);
    }
    close(fd);
    return rc;
}

/* Write the trailer at `at`; on failure put back what was there (old, or nothing: truncate). */
static int seal_put(int fd, const char *path, uint64_t at, const unsigned char *t, const unsigned char *old)
{
    int err = 0;
    for (size_t done = 0; done < CKPT_SEAL_BYTES && !err;) {
        ssize_t w = pwrite(fd, t + done, CKPT_SEAL_BYTES - done, (off_t)(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : ENOSPC;
        else done += (size_t)w;
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (!err) return 0;
    if (old) {
        if (pwrite(fd, old, CKPT_SEAL_BYTES, (off_t)at) != CKPT_SEAL_BYTES) { /* nothing more to try */ }
    } else if (ftruncate(fd, (off_t)at) != 0) { /* idem: the trailer is unusable anyway */ }
    return loom_fail("%s: cannot write the checkpoint's seal (%s)", path, strerror(err));
}

/* ckpt_seal_write, with the n extents (n > 0) standing in for reads of their bytes. */
static int seal_write(const char *path, int replace, ckpt_extent *ext, int n)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return loom_fail("%s: cannot open to seal (%s)", path, strerror(errno));
    struct stat st;
    unsigned char t[CKPT_SEAL_BYTES], old[CKPT_SEAL_BYTES];
    uint32_t crc = 0;
    int rc = fstat(fd, &st) == 0 ? 0 : loom_fail("%s: cannot stat to seal (%s)", path, strerror(errno));
    uint64_t size = rc ? 0 : (uint64_t)st.st_size;
    if (!rc && replace && (size < CKPT_SEAL_BYTES || seal_pread(fd, old, sizeof old, size - CKPT_SEAL_BYTES) != 0))
        rc = loom_fail("%s: no seal to replace", path);
    uint64_t len = replace ? size - CKPT_SEAL_BYTES : size;
    int known = !rc && n > 0 ? seal_crc_known(fd, path, len, ext, n, &crc) : 1;
    if (known < 0) rc = -1;
    if (!rc && known) rc = seal_crc(fd, path, len, &crc);
    if (!rc) {
        seal_encode(t, len, crc);
        rc = seal_put(fd, path, len, t, replace ? old : NULL);
    }
    if (close(fd) != 0 && !rc) rc = loom_fail("%s: close after sealing failed (%s)", path, strerror(errno));
    return rc;
}

int ckpt_seal_write(const char *path, int replace) { return seal_write(path, replace, NULL, 0); }

int ckpt_seal_write_known(const char *path, ckpt_extent *ext, int n) { return seal_write(path, 0, ext, n); }

int ckpt_lock(const char *dir, int *fd_out)
{
    *fd_out = -1;
    if (ckpt_fs_mkdirs(dir)) return -1;
    char path[CKPT_PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, CKPT_LOCK_NAME);
    if (n < 0 || (size_t)n >= sizeof path) return loom_fail("%s: checkpoint path too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) return loom_fail("%s: cannot open the checkpoint folder's lock file (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail("%s: the checkpoint folder's lock file is not a regular file", path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char who[256] = "";
        ssize_t got = err == EWOULDBLOCK ? pread(fd, who, sizeof who - 1, 0) : -1;
        close(fd);
        if (err != EWOULDBLOCK)
            return loom_fail("%s: cannot lock the checkpoint folder (%s)", path, strerror(err));
        who[got > 0 ? got : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        return loom_fail("checkpoint folder %s is in use by another job (%s): one writer per folder, or the "
                         "two delete each other's files; give this job another checkpoint.dir", dir,
                         who[0] ? who : "pid and host not yet written");
    }
    /* Ours now: say who holds it, for the next job that finds it taken. */
    char host[256] = "?", line[400];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    int len = snprintf(line, sizeof line, "pid %ld on host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        /* the lock holds without the note; the other job's message just cannot name us */
    }
    *fd_out = fd;
    return 0;
}

/* Monotonic seconds, for ckpt_write_rate. */
static double ckpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The probe goes into the lock file past its note (offset 4096, where ckpt_lock's reader never
 * looks) and is cut off again: no other file is created or deleted in the checkpoint folder. */
#define CKPT_PROBE_AT 4096
#define CKPT_PROBE_CHUNK ((size_t)1 << 20)

double ckpt_write_rate(int lock_fd, size_t bytes)
{
    if (lock_fd < 0 || bytes == 0) return 0;
    unsigned char *buf = malloc(CKPT_PROBE_CHUNK);
    if (!buf) return 0;
    for (size_t i = 0; i < CKPT_PROBE_CHUNK; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13); /* not sparse */
    double t0 = ckpt_now();
    int ok = 1;
    for (size_t off = 0; ok && off < bytes; off += CKPT_PROBE_CHUNK) {
        size_t n = bytes - off < CKPT_PROBE_CHUNK ? bytes - off : CKPT_PROBE_CHUNK;
        ok = pwrite(lock_fd, buf, n, (off_t)(CKPT_PROBE_AT + off)) == (ssize_t)n;
    }
    ok = ok && fsync(lock_fd) == 0;
    double secs = ckpt_now() - t0;
    /* back to the note alone: "pid ... host ...\n" */
    char note[CKPT_PROBE_AT];
    ssize_t got = pread(lock_fd, note, sizeof note, 0);
    char *nl = got > 0 ? memchr(note, '\n', (size_t)got) : NULL;
    if (ftruncate(lock_fd, nl ? (off_t)(nl - note + 1) : 0) != 0) ok = 0;
    free(buf);
    return ok && secs > 0 ? (double)bytes / secs : 0;
}

void ckpt_unlock(int fd)
{
    if (fd >= 0) close(fd); /* closing the only descriptor drops the flock */
}
