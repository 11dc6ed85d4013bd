/* resume_check.c: the saved job config against the new one (see resume_check.h). Walks the config
 * table, so a new train field is compared unless exempted here. Refuses rather than adapts: a new
 * batch size moves every later sample (step s starts at sample s * batch_size). */
#include "core/train/resume_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "core/text/text.h"

/* Fields that change how a step runs or is reported, not what it computes or which data it reads;
 * and steps: extending (or cutting) a run keeps the data order, the schedule spans the new total. */
static const char *const resume_free[] = {"train.steps", "train.micro_batch", "train.recompute",
                                          "train.log_every", "train.max_bad_steps", "train.allow_change",
                                          NULL};
static const char *const resume_data[] = {"data.val_split", "data.max_len", "data.bucket", "data.date_string", NULL};

static int resume_listed(const char *path, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(path, list[i]) == 0) return 1;
    return 0;
}

static void resume_value(const config_field *f, const job_config *c, char *buf, size_t len)
{
    const char *p = (const char *)c + f->offset;
    switch (f->type) {
    case CFG_FLOAT: snprintf(buf, len, "%g", *(const float *)p); break;
    case CFG_U64: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case CFG_BOOL: snprintf(buf, len, "%s", *(const int *)p ? "true" : "false"); break;
    case CFG_STRING: snprintf(buf, len, "\"%.*s\"", (int)f->size, p); break;
    default: snprintf(buf, len, "%d", *(const int *)p); break;
    }
}

const char *resume_changed_field(const job_config *saved, const job_config *now, char *what, size_t len)
{
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++) {
        int train = strncmp(f[i].path, "train.", 6) == 0 && !resume_listed(f[i].path, resume_free);
        if (!train && !resume_listed(f[i].path, resume_data)) continue;
        const char *pa = (const char *)saved + f[i].offset, *pb = (const char *)now + f[i].offset;
        size_t size = f[i].type == CFG_STRING ? f[i].size : f[i].type == CFG_FLOAT ? sizeof(float)
                    : f[i].type == CFG_U64 ? sizeof(uint64_t) : sizeof(int);
        if (f[i].type == CFG_STRING ? strncmp(pa, pb, size) == 0 : memcmp(pa, pb, size) == 0) continue;
        if (!strcmp(f[i].path, "data.date_string") && !pb[0]) continue; /* "": the checkpoint's */
        char a[96], b[96];
        resume_value(&f[i], saved, a, sizeof a);
        resume_value(&f[i], now, b, sizeof b);
        if (what) snprintf(what, len, "%s -> %s", a, b);
        return f[i].path;
    }
    return NULL;
}

/* A field added after a checkpoint was written reads as its default, which need not be what that
 * run did: data.bucket (batches by length) is on by default, and a job saved before it existed
 * ran every row at one length. */
static void resume_fields_before(job_config *saved, const char *saved_json)
{
    cJSON *root = cJSON_Parse(saved_json);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (cJSON_IsObject(data) && !cJSON_GetObjectItemCaseSensitive(data, "bucket")) saved->data.bucket = 0;
    cJSON_Delete(root);
    resume_saved_date(saved_json, saved->data.date_string, sizeof saved->data.date_string);
}

void resume_saved_date(const char *saved_json, char *date, size_t len)
{
    cJSON *root = saved_json ? cJSON_Parse(saved_json) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(data, "date_string");
    snprintf(date, len, "%s", cJSON_IsString(d) ? d->valuestring : "26 Jul 2024");
    cJSON_Delete(root);
}

int resume_check_job(const job_config *now, const char *file, const char *saved_json)
{
    if (!saved_json || !saved_json[0]) return 0; /* no saved job config to compare with */
    job_config saved;
    if (config_load_string(&saved, saved_json, file, NULL, 0)) {
        log_warn("%s: the saved job config does not load (%s); the train section is not compared",
                 file, loom_error());
        return 0;
    }
    resume_fields_before(&saved, saved_json);
    char what[200];
    const char *field = resume_changed_field(&saved, now, what, sizeof what);
    if (!field) return 0;
    if (now->train.allow_change) {
        log_warn("%s: %s changed since the checkpoint (%s); resuming anyway (train.allow_change): "
                 "the data order and schedule differ from the original run", file, field, what);
        return 0;
    }
    return loom_fail("%s: %s changed since the checkpoint (%s): a resume would change the data order "
                     "or the schedule; keep the saved value, or --set train.allow_change=true", file,
                     field, what);
}

int resume_check_tokenizer(const char *file, uint64_t saved_hash, const char *saved_spec, const char *now_spec)
{
    if (!saved_hash) {
        if (strcmp(saved_spec, now_spec) == 0) return 0;
        return loom_fail("%s: the checkpoint records no tokenizer hash and was trained with model.tokenizer \"%s\", "
                         "not \"%s\"", file, saved_spec, now_spec);
    }
    uint64_t now;
    if (tokenizer_hash_of(now_spec, &now)) return -1;
    if (now == saved_hash) return 0;
    return loom_fail("%s: the checkpoint was trained with another tokenizer (hash %016llx) than model.tokenizer %s "
                     "(hash %016llx)", file, (unsigned long long)saved_hash, now_spec, (unsigned long long)now);
}
