/* import_needle.c: a Needle base (.safetensors) -> a loom checkpoint (folder OUT or the one file
 * OUT.h5) that finetune.base, eval, sample and `loom export needle` take as the file itself
 * (checkpoints/needle.h, needle_ckpt_save). Checks the whole file before writing anything; a
 * failed import leaves no checkpoint and no folder it made. */
#include "core/train/import.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoints/needle.h"

/* Save f into folder dir; on failure remove dir if this call made it (ckpt_save leaves no file). */
static int import_needle_save(needle_file *f, const char *src, const char *dir)
{
    struct stat st;
    const int had = stat(dir, &st) == 0;
    if (needle_ckpt_save(f, src, dir) == 0) return 0;
    if (!had) rmdir(dir);
    return -1;
}

/* OUT.h5: saved in OUT.d, then the one file moved to OUT (import_move_single). */
static int import_needle_file(needle_file *f, const char *src, const char *out)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.d", out) >= (int)sizeof tmp) return loom_fail("%s: path too long", out);
    return import_needle_save(f, src, tmp) || import_move_single(tmp, out) ? -1 : 0;
}

int import_needle(const char *src, const char *out)
{
    needle_file *f = needle_open(src);
    if (!f) return -1;
    size_t n = strlen(out);
    int rc = n > 3 && strcmp(out + n - 3, ".h5") == 0 ? import_needle_file(f, src, out) : import_needle_save(f, src, out);
    if (rc == 0) {
        size_t params = 0;
        for (int i = 0; i < needle_file_count(f); i++) params += needle_file_tensor(f, i)->numel;
        log_info("imported Needle base %s: %d tensors, %zu parameters", src, needle_file_count(f), params);
    }
    needle_close(f);
    return rc;
}
