/* test_ckpt_badfiles.c: damaged or wrong checkpoints (truncated at many sizes, a flipped data
 * byte, a missing dataset, another format version, no `complete`, not HDF5, bad `latest`) each
 * fail with their own message and never crash. Must never modify the good original. */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "ckpt_test_util.h"
#include "core/error.h"

static char good[4400];

/* Open + read everything; 0 if the whole checkpoint loads. */
static int load_all(const char *file)
{
    ckpt_reader *r = ckpt_open(file);
    if (!r) return -1;
    test_ckpt c;
    tc_make_empty(&c);
    int rc = ckpt_read_state(r, &c.state);
    for (int g = 0; g < TC_NGROUPS && !rc; g++) rc = ckpt_read_group(r, &c.groups[g]);
    ckpt_close(r);
    tc_free(&c);
    return rc;
}

/* Copy the good file to dir/name and open the copy read-write with plain HDF5 (or -1). */
static hid_t edit_copy(const char *dir, const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    CHECK(tc_copy(good, path) == 0, "copy to %s", path);
    return H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
}

static void truncated(const char *dir)
{
    struct stat st;
    CHECK(stat(good, &st) == 0, "stat good file");
    off_t sizes[] = {0, 1, 8, 100, 512, 2048, 4096, 0, 0, 0, 0, 0, 0, 0, 0, st.st_size - 1};
    for (int k = 1; k <= 8; k++) sizes[6 + k] = st.st_size * k / 9;
    char path[4400];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        snprintf(path, sizeof path, "%s/trunc_%lld.h5", dir, (long long)sizes[i]);
        CHECK(tc_copy(good, path) == 0 && truncate(path, sizes[i]) == 0, "truncate copy");
        int rc = load_all(path);
        CHECK(rc == -1 && strstr(loom_error(), path), "truncated at %lld must fail naming the file: %s",
              (long long)sizes[i], loom_error());
        printf("  truncated at %lld: %s\n", (long long)sizes[i], loom_error());
    }
    /* Mid-file truncation is reported as such (HDF5 compares the size with the stored EOF). */
    snprintf(path, sizeof path, "%s/trunc_%lld.h5", dir, (long long)sizes[10]);
    CHECK_FAILS(ckpt_open(path) == NULL, "truncated");
    snprintf(path, sizeof path, "%s/trunc_0.h5", dir);
    CHECK_FAILS(ckpt_open(path) == NULL, "not an HDF5 file (0 bytes)");
}

/* Flip one bit `at` bytes into the data of dataset `dset` in a copy named `name`. */
static void flip(const char *dir, const char *name, const char *dset, long at, char *path, size_t len)
{
    hid_t fid = edit_copy(dir, name, path, len);
    hid_t d = H5Dopen2(fid, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d); /* file offset of the contiguous data */
    H5Dclose(d);
    H5Fclose(fid);
    CHECK(off != HADDR_UNDEF, "dataset offset");
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)off + at, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, (long)off + at, SEEK_SET);
    fputc(byte ^ 0x10, f);
    fclose(f);
}

static void flipped_byte(const char *dir)
{
    char path[4400];
    /* In the last of big.2d's three pieces (2.8 MB, 1 MB pieces): the chained CRC sees it. */
    flip(dir, "flipped_big.h5", "/lora/big.2d", 2500000, path, sizeof path);
    ckpt_reader *rb = ckpt_open(path);
    test_ckpt cb;
    tc_make_empty(&cb);
    CHECK_FAILS(rb && ckpt_read_group(rb, &cb.groups[3]) == -1, "checksum mismatch in /lora/big.2d (corrupt file)");
    ckpt_close(rb);
    tc_free(&cb);

    flip(dir, "flipped.h5", "/model/wte.weight", 1000, path, sizeof path);
    ckpt_reader *r = ckpt_open(path);
    CHECK(r != NULL, "a flipped data byte still opens: %s", loom_error());
    if (!r) return;
    test_ckpt c;
    tc_make_empty(&c);
    CHECK_FAILS(ckpt_read_group(r, &c.groups[0]) == -1, "checksum mismatch in /model/wte.weight (corrupt file)");
    CHECK(ckpt_read_group(r, &c.groups[1]) == 0, "other groups still read: %s", loom_error());
    ckpt_close(r);
    tc_free(&c);
    CHECK(ckpt_print_info(path) == -1, "info reports the bad checksum");
}

static void edited(const char *dir)
{
    char path[4400];
    hid_t fid = edit_copy(dir, "missing.h5", path, sizeof path);
    CHECK(H5Ldelete(fid, "/optimizer/m/h.0.attn.q.weight", H5P_DEFAULT) >= 0, "delete dataset");
    H5Fclose(fid);
    test_ckpt c;
    tc_make_empty(&c);
    ckpt_reader *r = ckpt_open(path);
    CHECK(r != NULL, "open: %s", loom_error());
    if (r) CHECK_FAILS(ckpt_read_group(r, &c.groups[1]) == -1, "missing tensor /optimizer/m/h.0.attn.q.weight");
    ckpt_close(r);
    tc_free(&c);

    fid = edit_copy(dir, "version.h5", path, sizeof path);
    hid_t a = H5Aopen(fid, "format_version", H5P_DEFAULT);
    int v = 7;
    H5Awrite(a, H5T_NATIVE_INT, &v);
    H5Aclose(a);
    H5Fclose(fid);
    CHECK_FAILS(ckpt_open(path) == NULL, "format version 7, this loom reads 1");

    fid = edit_copy(dir, "incomplete.h5", path, sizeof path);
    H5Adelete(fid, "complete");
    H5Fclose(fid);
    CHECK_FAILS(ckpt_open(path) == NULL, "incomplete checkpoint");

    fid = edit_copy(dir, "foreign.h5", path, sizeof path);
    H5Adelete(fid, "loom_format");
    H5Fclose(fid);
    CHECK_FAILS(ckpt_open(path) == NULL, "not a loom checkpoint");

    snprintf(path, sizeof path, "%s/text.h5", dir);
    FILE *f = fopen(path, "w");
    fputs("this is not hdf5\n", f);
    fclose(f);
    CHECK_FAILS(ckpt_open(path) == NULL, "not an HDF5 file");
}

static void bad_pointers(const char *dir)
{
    char sub[4200], path[4400], out[4400];
    snprintf(sub, sizeof sub, "%s/nolatest", dir);
    mkdir(sub, 0777);
    CHECK_FAILS(ckpt_resolve(sub, out, sizeof out) == -1, "nolatest: no `latest` pointer");
    snprintf(path, sizeof path, "%s/latest", sub);
    FILE *f = fopen(path, "w");
    fclose(f);
    CHECK_FAILS(ckpt_resolve(sub, out, sizeof out) == -1, "no `latest` pointer (");
    f = fopen(path, "w");
    fputs("step_00000077.h5\n", f);
    fclose(f);
    CHECK_FAILS(ckpt_resolve(sub, out, sizeof out) == -1, "points to step_00000077.h5, which does not exist");
    snprintf(path, sizeof path, "%s/does_not_exist", dir);
    CHECK_FAILS(ckpt_resolve(path, out, sizeof out) == -1, "does_not_exist: no such checkpoint file or directory");
    CHECK_FAILS(ckpt_open(path) == NULL, "does_not_exist");
}

int main(void)
{
    char dir[4096];
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    tc_big = 1;
    tc_dir(dir, sizeof dir, "badfiles");
    test_ckpt c;
    tc_make(&c, 5, 10);
    CHECK(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 0) == 0, "save: %s", loom_error());
    snprintf(good, sizeof good, "%s/step_00000010.h5", dir);
    CHECK(tc_load_check(good, &c) == 0, "the original loads");
    truncated(dir);
    flipped_byte(dir);
    edited(dir);
    bad_pointers(dir);
    CHECK(tc_load_check(good, &c) == 0, "the original is untouched");
    tc_free(&c);
    return tc_finish("test_ckpt_badfiles");
}
