/* test_resume_check.c: what a resume may change (issue 18.10): a differing train field (data order,
 * schedule) or data.val_split / max_len / bucket is named in one line unless train.allow_change; micro_batch,
 * recompute, log_every, max_bad_steps and steps (extending a run) are free. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "core/train/resume_check.h"
#include "core/text/tokenizer.h"
#include "tests/check.h"

static void check_one(const char *set, const char *want_field)
{
    job_config saved, now;
    config_defaults(&saved);
    now = saved;
    CHECK(config_set(&now, set) == 0, "set %s: %s", set, loom_error());
    char what[200] = "";
    const char *field = resume_changed_field(&saved, &now, what, sizeof what);
    if (!want_field) {
        CHECK(!field, "%s: reported %s changed (%s); it may change on a resume", set, field, what);
        return;
    }
    CHECK(field && !strcmp(field, want_field), "%s: want %s named, got %s", set, want_field, field ? field : "none");
}

int main(void)
{
    log_set_quiet(1);
    const char *changed[][2] = {
        {"train.batch_size=16", "train.batch_size"},
        {"train.seq_len=32", "train.seq_len"}, {"train.lr=1e-3", "train.lr"},
        {"train.min_lr=0", "train.min_lr"},  {"train.warmup=3", "train.warmup"},
        {"train.weight_decay=0", "train.weight_decay"}, {"train.beta1=0.8", "train.beta1"},
        {"train.beta2=0.9", "train.beta2"},  {"train.eps=1e-6", "train.eps"},
        {"train.grad_clip=0", "train.grad_clip"}, {"train.seed=7", "train.seed"},
        {"data.val_split=0.2", "data.val_split"}, {"data.max_len=512", "data.max_len"},
        {"data.bucket=false", "data.bucket"}, /* batches by length or not: another data order */
        {"data.date_string=01 Feb 2025", "data.date_string"}, /* Llama 3 renders another text */
    };
    for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) check_one(changed[i][0], changed[i][1]);
    const char *free_fields[] = {"train.steps=40", "train.micro_batch=4", "train.recompute=true", "train.log_every=5",
                                 "train.max_bad_steps=9", "train.allow_change=true", "parallel.zero_stage=2",
                                 "checkpoint.every=3", "data.skip_bad_lines=true"};
    for (size_t i = 0; i < sizeof free_fields / sizeof free_fields[0]; i++) check_one(free_fields[i], NULL);

    /* through the saved JSON, as a checkpoint holds it */
    job_config saved, now;
    config_defaults(&saved);
    char *json = config_to_json(&saved);
    now = saved;
    CHECK(resume_check_job(&now, "ck.h5", json) == 0, "unchanged job refused: %s", loom_error());
    now.train.batch_size = 16;
    CHECK(resume_check_job(&now, "ck.h5", json) != 0 &&
              strstr(loom_error(), "ck.h5: train.batch_size changed since the checkpoint (8 -> 16)") &&
              strstr(loom_error(), "train.allow_change=true") && !strchr(loom_error(), '\n'),
          "changed batch size: %s", loom_error());
    now.train.allow_change = 1;
    CHECK(resume_check_job(&now, "ck.h5", json) == 0, "allow_change refused: %s", loom_error());
    now.train.allow_change = 0;
    CHECK(resume_check_job(&now, "ck.h5", NULL) == 0 && resume_check_job(&now, "ck.h5", "") == 0,
          "a checkpoint without a job config must still load");
    free(json);

    /* a job saved before data.bucket existed ran unbucketed: resuming it with the new default is
     * a change of data order, refused; with data.bucket=false it resumes */
    const char *old_json = "{\"name\": \"old\", \"data\": {\"train\": \"t.jsonl\", \"max_len\": 1024}}";
    config_defaults(&now);
    CHECK(config_load_string(&now, old_json, "old.json", NULL, 0) == 0, "old config: %s", loom_error());
    CHECK(now.data.bucket == 1, "the default is bucketed");
    CHECK(resume_check_job(&now, "old.h5", old_json) != 0 && strstr(loom_error(), "data.bucket changed since the checkpoint"),
          "a pre-bucketing checkpoint resumed bucketed: %s", loom_error());
    now.data.bucket = 0;
    CHECK(resume_check_job(&now, "old.h5", old_json) == 0, "pre-bucketing checkpoint with bucket off: %s", loom_error());

    /* the tokenizer by content: the byte tokenizer's fixed hash; a file that records none keeps
     * the old path comparison */
    CHECK(resume_check_tokenizer("ck.h5", TOKENIZER_BYTE_HASH, "elsewhere", "byte") == 0, "byte: %s", loom_error());
    CHECK(resume_check_tokenizer("ck.h5", 1234, "byte", "byte") != 0 && strstr(loom_error(), "ck.h5: the checkpoint "
              "was trained with another tokenizer (hash 00000000000004d2) than model.tokenizer byte") &&
              !strchr(loom_error(), '\n'), "another tokenizer: %s", loom_error());
    CHECK(resume_check_tokenizer("ck.h5", 0, "a.json", "a.json") == 0, "no hash, same path refused");
    CHECK(resume_check_tokenizer("ck.h5", 0, "a.json", "b.json") != 0 && strstr(loom_error(), "records no tokenizer hash"),
          "no hash, other path: %s", loom_error());
    CHECK(resume_check_tokenizer("ck.h5", 1234, "a", "/nonexistent/tok.json") != 0 &&
              strstr(loom_error(), "/nonexistent/tok.json"), "missing file: %s", loom_error());
    if (failures == 0) printf("test_resume_check: ok\n");
    return failures != 0;
}
