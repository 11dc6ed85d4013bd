/* test_ckpt_badfiles.c: damaged or wrong checkpoints (truncated at many sizes, a flipped data
 * byte, a damaged or missing seal, a missing dataset, damaged dataset headers, another format
 * version, no `complete`, not HDF5, bad `latest`, FIFOs, state attributes out of range) each
 * fail with their own message and never crash; `ckpt_seal` accepts an edited file only when its
 * tensors are sound (every one of its manifest present), and never changes a file it refuses. Files edited
 * through HDF5 lose their seal; to test the checks behind it they are re-sealed with the raw
 * ckpt_seal_write (checkpoints/ckpt_internal.h); the seal ckpt_save builds from the tensors' CRCs
 * equals a full re-read's. Must never modify the good original. */
#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt.h"
#include "checkpoints/ckpt_crc.h"
#include "checkpoints/ckpt_internal.h"
#include "ckpt_test_util.h"
#include "base/error.h"

static char good[4400];

static int64_t ckpt_numel_of(const ckpt_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

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
    /* Truncation is reported as such, with the size the superblock and seal promise, before HDF5
     * sees the file; ckpt_seal will not vouch for a truncated file. */
    char want[128];
    snprintf(path, sizeof path, "%s/trunc_%lld.h5", dir, (long long)sizes[10]);
    snprintf(want, sizeof want, "truncated (%lld of %lld bytes)", (long long)sizes[10], (long long)st.st_size);
    CHECK_FAILS(ckpt_open(path) == NULL, want);
    CHECK_FAILS(ckpt_seal(path) == -1, want);
    snprintf(path, sizeof path, "%s/trunc_%lld.h5", dir, (long long)st.st_size - 1);
    snprintf(want, sizeof want, "truncated (%lld of %lld bytes)", (long long)st.st_size - 1, (long long)st.st_size);
    CHECK_FAILS(ckpt_open(path) == NULL, want);
    snprintf(path, sizeof path, "%s/trunc_8.h5", dir);
    CHECK_FAILS(ckpt_open(path) == NULL, "truncated (8 bytes, not even an HDF5 superblock)");
    snprintf(path, sizeof path, "%s/trunc_0.h5", dir);
    CHECK_FAILS(ckpt_open(path) == NULL, "not an HDF5 file (0 bytes)");
}

/* The whole file in memory (malloc'd, *n bytes), or NULL. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long len = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
        fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return buf;
}

/* 1 if the two files hold the same bytes. */
static int same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* ckpt_read_pieces's sink: counts, and copies into x when given. */
typedef struct piece_sink {
    float *x;
    size_t n;
    int pieces;
} piece_sink;

static int piece_put(void *ctx, const float *x, size_t n)
{
    piece_sink *s = ctx;
    if (s->x) memcpy(s->x + s->n, x, n * sizeof(float));
    s->n += n;
    s->pieces++;
    return 0;
}

/* Every tensor of the good file read in pieces equals the whole read, bit for bit. */
static void read_in_pieces(const test_ckpt *want)
{
    ckpt_reader *r = ckpt_open(good);
    CHECK(r != NULL, "open: %s", loom_error());
    for (int g = 0; r && g < TC_NGROUPS; g++)
        for (int k = 0; k < want->groups[g].ntensors; k++) {
            const ckpt_tensor *t = &want->groups[g].tensors[k];
            size_t n = (size_t)ckpt_numel_of(t);
            float *piece = malloc(ckpt_piece_size(t) * sizeof(float) + 4), *all = malloc(n * sizeof(float) + 4);
            piece_sink ps = {all, 0, 0};
            CHECK(ckpt_read_pieces(r, want->groups[g].path, t, piece, piece_put, &ps) == 0, "%s/%s: %s",
                  want->groups[g].path, t->name, loom_error());
            CHECK(ps.n == n && memcmp(all, want->groups[g].data + t->offset, n * sizeof(float)) == 0,
                  "%s/%s in pieces differs", want->groups[g].path, t->name);
            free(piece);
            free(all);
        }
    ckpt_close(r);
}

/* The seal ckpt_save computes from the tensors' CRCs (ckpt_seal_write_known) is the one a full
 * re-read gives; extents are trusted only when they tile the file (a wrong CRC in one shows that
 * its bytes were not read), and else the whole file is read. */
static void seal_from_extents(const char *dir)
{
    char path[4200], copy[4200];
    snprintf(copy, sizeof copy, "%s/resealed.h5", dir);
    CHECK(tc_copy(good, copy) == 0, "copy to %s", copy);
    CHECK(ckpt_seal_write(copy, 1) == 0, "full re-seal: %s", loom_error());
    CHECK(same_bytes(good, copy), "ckpt_save's seal equals the seal of a full re-read");

    unsigned char bytes[10000];
    uint32_t x = 7;
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
    snprintf(path, sizeof path, "%s/extents.bin", dir);
    struct { uint64_t off, len; int bad; const char *want; } cases[][3] = {
        {{5000, 2000, 0, NULL}, {100, 3000, 0, NULL}, {9000, 0, 0, NULL}},      /* unsorted, one empty */
        {{0, 5000, 0, NULL}, {5000, 5000, 0, NULL}, {10000, 0, 0, NULL}},       /* no gaps at all */
        {{100, 3000, 1, "whole-file checksum mismatch (damaged file)"}, {5000, 10, 0, NULL}, {0, 0, 0, NULL}},
        {{100, 3000, 1, NULL}, {3000, 10, 0, NULL}, {0, 0, 0, NULL}},           /* overlap: read all */
        {{100, 3000, 1, NULL}, {9000, 1001, 0, NULL}, {0, 0, 0, NULL}},         /* past the end: idem */
        {{100, 3000, 1, NULL}, {UINT64_MAX, 4, 0, NULL}, {0, 0, 0, NULL}},      /* no address: idem */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes, "write %s", path);
        if (f) fclose(f);
        ckpt_extent ext[3];
        const char *want = NULL;
        for (int i = 0; i < 3; i++) {
            ext[i].off = cases[k][i].off;
            ext[i].len = cases[k][i].len;
            int inside = ext[i].off <= sizeof bytes && ext[i].len <= sizeof bytes - ext[i].off;
            ext[i].crc = inside ? ckpt_crc32c(0, bytes + ext[i].off, ext[i].len) ^ (uint32_t)cases[k][i].bad : 1;
            if (cases[k][i].want) want = cases[k][i].want;
        }
        CHECK(ckpt_seal_write_known(path, ext, 3) == 0, "case %zu: seal: %s", k, loom_error());
        if (want) CHECK_FAILS(ckpt_seal_verify(path, NULL) == -1, want);
        else CHECK(ckpt_seal_verify(path, NULL) == 0, "case %zu: %s", k, loom_error());
    }
}

/* xor 0x10 into byte `at` of the file. */
static void flip_at(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    fseek(f, at, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(byte ^ 0x10, f);
    fclose(f);
}

/* Copy the good file to dir/name and flip one bit `at` bytes into dataset `dset`'s data. The copy
 * keeps its (now stale) seal: its offset comes from the good file, opened read-only. */
static void flip(const char *dir, const char *name, const char *dset, long at, char *path, size_t len)
{
    hid_t fid = H5Fopen(good, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(fid, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d); /* file offset of the contiguous data */
    H5Dclose(d);
    H5Fclose(fid);
    CHECK(off != HADDR_UNDEF, "dataset offset");
    snprintf(path, len, "%s/%s", dir, name);
    CHECK(tc_copy(good, path) == 0, "copy to %s", path);
    flip_at(path, (long)off + at);
}

/* A flipped data byte: the seal refuses the file; `ckpt_seal` refuses it too, naming the tensor,
 * and leaves it as it was; sealed anyway (raw), the per-tensor checksum still catches it. */
static void flipped_byte(const char *dir)
{
    char path[4400], keep[4410];
    /* In the last of big.2d's three pieces (2.8 MB, 1 MB pieces): the chained CRC sees it. */
    flip(dir, "flipped_big.h5", "/lora/big.2d", 2500000, path, sizeof path);
    CHECK_FAILS(ckpt_open(path) == NULL, "flipped_big.h5: whole-file checksum mismatch (damaged file)");
    CHECK_FAILS(ckpt_inspect(path, NULL, NULL) == -1, "whole-file checksum mismatch (damaged file)");
    snprintf(keep, sizeof keep, "%s.orig", path);
    CHECK(tc_copy(path, keep) == 0, "copy");
    CHECK_FAILS(ckpt_seal(path) == -1, "not sealed: 1 tensor(s) failed their checksum, first /lora/big.2d (BAD)");
    CHECK(same_bytes(path, keep), "a refused ckpt_seal changed the file");
    CHECK(ckpt_seal_write(path, 1) == 0, "raw seal: %s", loom_error());
    ckpt_reader *rb = ckpt_open(path);
    CHECK(rb != NULL, "re-sealed: %s", loom_error());
    test_ckpt cb;
    tc_make_empty(&cb);
    CHECK_FAILS(rb && ckpt_read_group(rb, &cb.groups[3]) == -1, "checksum mismatch in /lora/big.2d (corrupt file)");
    /* in pieces (export hf): every piece handed over, then the checksum refuses them */
    const ckpt_tensor *big = NULL;
    for (int k = 0; k < cb.groups[3].ntensors; k++)
        if (strcmp(cb.groups[3].tensors[k].name, "big.2d") == 0) big = &cb.groups[3].tensors[k];
    CHECK(big != NULL, "fixture has big.2d");
    float *piece = big ? malloc(ckpt_piece_size(big) * sizeof(float)) : NULL;
    piece_sink ps = {NULL, 0, 0};
    CHECK_FAILS(rb && piece && ckpt_read_pieces(rb, "lora", big, piece, piece_put, &ps) == -1,
                "checksum mismatch in /lora/big.2d (corrupt file)");
    CHECK(ps.pieces == 3 && ps.n == 700000, "big.2d came in %d pieces, %zu values", ps.pieces, ps.n);
    free(piece);
    ckpt_close(rb);
    tc_free(&cb);

    flip(dir, "flipped.h5", "/model/wte.weight", 1000, path, sizeof path);
    CHECK(ckpt_seal_write(path, 1) == 0, "raw seal: %s", loom_error());
    ckpt_reader *r = ckpt_open(path);
    CHECK(r != NULL, "a flipped data byte under a fresh seal still opens: %s", loom_error());
    if (!r) return;
    test_ckpt c;
    tc_make_empty(&c);
    CHECK_FAILS(ckpt_read_group(r, &c.groups[0]) == -1, "checksum mismatch in /model/wte.weight (corrupt file)");
    CHECK(ckpt_read_group(r, &c.groups[1]) == 0, "other groups still read: %s", loom_error());
    ckpt_close(r);
    tc_free(&c);
    CHECK(ckpt_inspect(path, NULL, NULL) == -1, "info reports the bad checksum");
}

/* The seal itself: damaged trailer fields, bytes appended, a middle byte flipped. */
static void damaged_seal(const char *dir)
{
    struct stat st;
    CHECK(stat(good, &st) == 0, "stat good file");
    long size = (long)st.st_size;
    const struct { const char *name; long at; const char *want; } cases[] = {
        {"seal_crc.h5", size - 8, "whole-file checksum mismatch (damaged file)"},
        {"seal_len.h5", size - 16, "whole-file checksum mismatch (damaged file: the seal covers"},
        {"seal_magic.h5", size - 24, "no seal"},
        {"seal_version.h5", size - 4, "seal version 17, this loom reads 1"},
        {"middle.h5", size / 2, "whole-file checksum mismatch (damaged file)"},
        {"superblock.h5", 30, "whole-file checksum mismatch (damaged file)"},
    };
    char path[4400];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        CHECK(tc_copy(good, path) == 0, "copy");
        flip_at(path, cases[i].at);
        CHECK_FAILS(ckpt_open(path) == NULL, cases[i].want);
        CHECK(strstr(loom_error(), path) != NULL, "the message names the file: %s", loom_error());
    }
    snprintf(path, sizeof path, "%s/appended.h5", dir);
    CHECK(tc_copy(good, path) == 0, "copy");
    FILE *f = fopen(path, "ab");
    fputs("x", f);
    fclose(f);
    CHECK_FAILS(ckpt_open(path) == NULL, "no seal (not written by loom, or edited after the save; run `loom ckpt seal");
    /* a sound file: ckpt_seal has nothing to do, and says so */
    CHECK(ckpt_seal(good) == 1, "ckpt_seal on a sealed file: %s", loom_error());
}

/* ckpt_seal that cannot write (a file-size limit) leaves the file exactly as it was. */
static void seal_write_fails(const char *dir)
{
    char path[4400], keep[4410];
    struct stat st;
    snprintf(path, sizeof path, "%s/unsealed.h5", dir);
    snprintf(keep, sizeof keep, "%s/unsealed.orig", dir);
    CHECK(tc_copy(good, path) == 0 && stat(path, &st) == 0, "copy");
    CHECK(truncate(path, st.st_size - CKPT_SEAL_BYTES) == 0 && tc_copy(path, keep) == 0, "strip the seal");
    CHECK_FAILS(ckpt_open(path) == NULL, "no seal");
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    lim = old;
    lim.rlim_cur = (rlim_t)(st.st_size - CKPT_SEAL_BYTES + 10); /* room for 10 of the 24 bytes */
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    CHECK_FAILS(ckpt_seal(path) == -1, "cannot write the checkpoint's seal (File too large)");
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0, "restore the limit");
    CHECK(same_bytes(path, keep), "a failed ckpt_seal changed the file");
    CHECK(ckpt_seal(path) == 0, "ckpt_seal: %s", loom_error());
    CHECK(same_bytes(path, good), "ckpt_seal of an unchanged file gives back the original bytes");
}

/* Edited through HDF5: the edit drops the seal (HDF5 cuts the file at its end of allocation on
 * close); sealed again, each HDF5-level check still refuses with its own message. */
static void edited(const char *dir)
{
    char path[4400];
    hid_t fid = edit_copy(dir, "missing.h5", path, sizeof path);
    CHECK(H5Ldelete(fid, "/optimizer/m/h.0.attn.q.weight", H5P_DEFAULT) >= 0, "delete dataset");
    H5Fclose(fid);
    CHECK_FAILS(ckpt_open(path) == NULL, "missing.h5: no seal (not written by loom, or edited after the save");
    /* issue 18.4: the `tensors` manifest names what the save wrote: a lost one is no sound file */
    CHECK_FAILS(ckpt_seal(path) == -1, "not sealed: 1 tensor(s) of the manifest missing, first /optimizer/m/h.0.attn.q.weight");
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
    CHECK_FAILS(ckpt_inspect(path, NULL, NULL) == -1, "1 tensor(s) of the manifest missing, first /optimizer/m/h.0.attn.q.weight");
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
    CHECK_FAILS(ckpt_seal(path) == -1, "format version 7, this loom reads 1 to 2");
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
    CHECK_FAILS(ckpt_open(path) == NULL, "format version 7, this loom reads 1 to 2");

    fid = edit_copy(dir, "incomplete.h5", path, sizeof path);
    H5Adelete(fid, "complete");
    H5Fclose(fid);
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
    CHECK_FAILS(ckpt_open(path) == NULL, "incomplete checkpoint");

    /* `tuning` is optional (files before it have none): absent, it reads as "" */
    fid = edit_copy(dir, "no_tuning.h5", path, sizeof path);
    CHECK(H5Adelete(fid, "tuning") >= 0, "the saved file has a tuning attribute to delete");
    H5Fclose(fid);
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
    r = ckpt_open(path);
    CHECK(r != NULL, "open without tuning: %s", loom_error());
    ckpt_state st;
    if (r) {
        CHECK(ckpt_read_state(r, &st) == 0 && st.tuning && st.tuning[0] == '\0',
              "a file without tuning must read as \"\" (%s)", loom_error());
        ckpt_state_free(&st);
        ckpt_close(r);
    }

    fid = edit_copy(dir, "foreign.h5", path, sizeof path);
    H5Adelete(fid, "loom_format");
    H5Fclose(fid);
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
    /* sealed by loom, so not another program's file: its root attributes are damaged */
    CHECK_FAILS(ckpt_open(path) == NULL, "damaged root attributes under a valid loom seal: loom_format is missing");

    snprintf(path, sizeof path, "%s/text.h5", dir);
    FILE *f = fopen(path, "w");
    fputs("this is not hdf5\n", f);
    fclose(f);
    CHECK_FAILS(ckpt_open(path) == NULL, "not an HDF5 file");
    CHECK_FAILS(ckpt_seal(path) == -1, "not an HDF5 file");
}

/* Zero the signature of dataset dset's object header (its "OHDR"), so HDF5 cannot open it while
 * its link (the name) stays intact. */
static void damage_header(const char *path, const char *dset)
{
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    H5O_info_t oi;
    int ok = fid >= 0 && H5Oget_info_by_name(fid, dset, &oi, H5P_DEFAULT) >= 0;
    if (fid >= 0) H5Fclose(fid);
    CHECK(ok, "find the object header of %s", dset);
    if (!ok) return;
    FILE *f = fopen(path, "r+b");
    char sig[4] = {0};
    CHECK(f && fseek(f, (long)oi.addr, SEEK_SET) == 0 && fread(sig, 1, 4, f) == 4 && memcmp(sig, "OHDR", 4) == 0,
          "%s: no OHDR at %llu", dset, (unsigned long long)oi.addr);
    if (f && fseek(f, (long)oi.addr, SEEK_SET) == 0) fwrite("\0\0\0\0", 1, 4, f);
    if (f) fclose(f);
}

/* issue 18.4: `ckpt info` and `ckpt seal` listed 106 of 108 tensors as "ok" when two dataset
 * headers were damaged (the walk skipped what it could not open). Both must fail naming one. */
static void damaged_headers(const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/headers.h5", dir);
    CHECK(tc_copy(good, path) == 0, "copy");
    damage_header(path, "/model/h.0.attn.q.weight");
    damage_header(path, "/optimizer/v/wte.weight");
    CHECK_FAILS(ckpt_seal(path) == -1, "not sealed: 2 tensor(s) failed their checksum, first /model/h.0.attn.q.weight (unreadable)");
    CHECK(ckpt_seal_write(path, 1) == 0, "raw seal: %s", loom_error());
    CHECK_FAILS(ckpt_inspect(path, NULL, NULL) == -1, "2 tensor(s) failed their checksum, first /model/h.0.attn.q.weight (unreadable)");
}

/* issue 18.5: a FIFO as the checkpoint, or as `latest`, or named by `latest`, is refused at once
 * (open() on a FIFO without a writer blocks forever; an alarm turns a hang into a failure). */
static void fifos(const char *dir)
{
    char sub[4200], path[4400], out[4400];
    snprintf(path, sizeof path, "%s/fifo.h5", dir);
    CHECK(mkfifo(path, 0666) == 0, "mkfifo %s", path);
    alarm(20);
    CHECK_FAILS(ckpt_open(path) == NULL, "fifo.h5: not a regular file, not a checkpoint");
    CHECK_FAILS(ckpt_resolve(path, out, sizeof out) == -1, "fifo.h5: not a regular file, not a checkpoint");
    CHECK_FAILS(ckpt_seal(path) == -1, "fifo.h5: not a regular file");
    CHECK_FAILS(ckpt_inspect(path, NULL, NULL) == -1, "fifo.h5: not a regular file");
    snprintf(sub, sizeof sub, "%s/fifo_named", dir);
    mkdir(sub, 0777);
    snprintf(path, sizeof path, "%s/step_00000001.h5", sub);
    CHECK(mkfifo(path, 0666) == 0, "mkfifo %s", path);
    snprintf(path, sizeof path, "%s/latest", sub);
    FILE *f = fopen(path, "w");
    if (f) fputs("step_00000001.h5\n", f), fclose(f);
    CHECK_FAILS(ckpt_resolve(sub, out, sizeof out) == -1, "points to step_00000001.h5, which is not a regular file");
    snprintf(sub, sizeof sub, "%s/fifo_latest", dir);
    mkdir(sub, 0777);
    snprintf(path, sizeof path, "%s/latest", sub);
    CHECK(mkfifo(path, 0666) == 0, "mkfifo %s", path);
    CHECK_FAILS(ckpt_resolve(sub, out, sizeof out) == -1, "latest: `latest` is not a regular file");
    alarm(0);
}

/* issue 18.3: each state attribute out of range is refused on load, naming the attribute (the
 * file edited through HDF5, then sealed as it is). */
static void set_i64(const char *path, const char *name, hid_t type, const void *v)
{
    CHECK(tc_copy(good, path) == 0, "copy");
    hid_t fid = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = fid >= 0 ? H5Aopen(fid, name, H5P_DEFAULT) : -1;
    CHECK(a >= 0 && H5Awrite(a, type, v) >= 0, "set %s", name);
    if (a >= 0) H5Aclose(a);
    if (fid >= 0) H5Fclose(fid);
    CHECK(ckpt_seal_write(path, 0) == 0, "raw seal: %s", loom_error());
}

static void state_ranges(const char *dir)
{
    const struct { const char *attr; int64_t v; const char *want; } cases[] = {
        {"step", 1LL << 40, "attribute step = 1099511627776 is out of range [0, 2147483647]"},
        {"step", -5, "attribute step = -5 is out of range [0, 2147483647]"},
        {"step", (1LL << 31) + 20, "attribute step = 2147483668 is out of range"},
        {"adam_step", 1LL << 31, "attribute adam_step = 2147483648 is out of range [0, step 10]"},
        {"adam_step", -1, "attribute adam_step = -1 is out of range [0, step 10]"},
        {"tokens_seen", -7, "attribute tokens_seen = -7 is out of range"},
        {"sample_cursor", -1, "attribute sample_cursor = -1 is out of range"},
        {"epoch", -2, "attribute epoch = -2 is out of range"},
    };
    char path[4400];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/attr_%zu.h5", dir, i);
        set_i64(path, cases[i].attr, H5T_NATIVE_INT64, &cases[i].v);
        ckpt_reader *r = ckpt_open(path);
        ckpt_state st;
        CHECK(r != NULL, "open %s: %s", path, loom_error());
        if (r) CHECK_FAILS(ckpt_read_state(r, &st) == -1, cases[i].want);
        ckpt_close(r);
    }
    const int32_t z = 9, w = 0;
    const double lr = -3e-4;
    snprintf(path, sizeof path, "%s/attr_zero.h5", dir);
    set_i64(path, "zero_stage", H5T_NATIVE_INT32, &z);
    ckpt_reader *r = ckpt_open(path);
    ckpt_state st;
    if (r) CHECK_FAILS(ckpt_read_state(r, &st) == -1, "attribute zero_stage = 9 is out of range [0, 3]");
    ckpt_close(r);
    set_i64(path, "world_size", H5T_NATIVE_INT32, &w);
    r = ckpt_open(path);
    if (r) CHECK_FAILS(ckpt_read_state(r, &st) == -1, "attribute world_size = 0 is out of range");
    ckpt_close(r);
    set_i64(path, "lr", H5T_NATIVE_DOUBLE, &lr);
    r = ckpt_open(path);
    if (r) CHECK_FAILS(ckpt_read_state(r, &st) == -1, "attribute lr = -0.0003 is not a finite non-negative");
    ckpt_close(r);
    /* and the writer never writes what the reader refuses */
    test_ckpt c;
    tc_make(&c, 5, 10);
    c.state.adam_step = 11;
    CHECK_FAILS(ckpt_save(dir, &c.state, c.groups, TC_NGROUPS, 0) == -1, "attribute adam_step = 11 is out of range [0, step 10]");
    tc_free(&c);
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
    read_in_pieces(&c);
    truncated(dir);
    flipped_byte(dir);
    damaged_seal(dir);
    seal_write_fails(dir);
    seal_from_extents(dir);
    edited(dir);
    damaged_headers(dir);
    fifos(dir);
    state_ranges(dir);
    bad_pointers(dir);
    CHECK(tc_load_check(good, &c) == 0, "the original is untouched");
    tc_free(&c);
    return tc_finish("test_ckpt_badfiles");
}
