/* ckpt_scan.c: `ckpt_scan FILE_OR_DIR...`: reads every float dataset of loom checkpoint files
 * straight through HDF5 (not through ckpt.h, so a reader bug cannot hide a bad value) and fails
 * if any value is NaN or Inf. Prints one line per file with a digest of all tensor bytes, so two
 * runs can be compared bit for bit. Must never write to the files it reads. */
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct scan {
    int tensors;
    long long values, nonfinite;
    uint64_t digest;  /* FNV-1a over (name, bytes) of every dataset in visit order */
    char first_bad[256];
} scan;

static void fnv(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 1099511628211ull;
}

static herr_t scan_object(hid_t obj, const char *name, const H5O_info_t *info, void *arg)
{
    scan *s = arg;
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
    hid_t sp = d < 0 ? -1 : H5Dget_space(d);
    hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    float *x = n >= 0 ? malloc((size_t)(n ? n : 1) * sizeof(float)) : NULL;
    int ok = x && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0;
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (!ok) {
        fprintf(stderr, "ckpt_scan: cannot read dataset /%s\n", name);
        free(x);
        return -1;
    }
    s->tensors++;
    s->values += n;
    fnv(&s->digest, name, strlen(name));
    fnv(&s->digest, x, (size_t)n * sizeof(float));
    for (hssize_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && s->nonfinite++ == 0)
            snprintf(s->first_bad, sizeof s->first_bad, "/%s[%lld] = %g", name, (long long)i, x[i]);
    free(x);
    return 0;
}

/* 0 when the file reads and every value is finite. */
static int scan_file(const char *path)
{
    scan s = {0, 0, 0, 14695981039346656037ull, ""};
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "ckpt_scan: %s: cannot open\n", path);
        return 1;
    }
    herr_t rc = H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, scan_object, &s);
    H5Fclose(f);
    if (rc < 0 || s.tensors == 0) {
        fprintf(stderr, "ckpt_scan: %s: unreadable or no tensors\n", path);
        return 1;
    }
    printf("%s: %d tensors, %lld values, %lld non-finite, digest %016llx\n", path, s.tensors, s.values,
           s.nonfinite, (unsigned long long)s.digest);
    if (s.nonfinite) fprintf(stderr, "ckpt_scan: %s: non-finite value, first %s\n", path, s.first_bad);
    return s.nonfinite ? 1 : 0;
}

static int is_ckpt_name(const char *n)
{
    size_t l = strlen(n);
    return strncmp(n, "step_", 5) == 0 && l > 3 && strcmp(n + l - 3, ".h5") == 0;
}

/* Every step_*.h5 in dir (temp files are not checkpoints); 1 if any is bad or none exists. */
static int scan_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ckpt_scan: %s: cannot open directory\n", dir);
        return 1;
    }
    int bad = 0, files = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (!is_ckpt_name(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        files++;
        bad |= scan_file(path);
    }
    closedir(d);
    if (!files) fprintf(stderr, "ckpt_scan: %s: no checkpoint files\n", dir);
    return bad || !files;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ckpt_scan FILE_OR_DIR...\n");
        return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) bad |= scan_dir(argv[i]);
        else bad |= scan_file(argv[i]);
    }
    return bad ? 1 : 0;
}
