/* resume_check.h: what a resume may change. The fields that decide the data order and the
 * optimizer's math must match the checkpoint's saved job config, or the resumed run would go on
 * silently different from the one that was saved. Never reads a checkpoint itself. */
#ifndef LOOM_RESUME_CHECK_H
#define LOOM_RESUME_CHECK_H

#include "core/config/config.h"

/* The first field that may not change on a resume and differs between saved and now, or NULL.
 * Compared: every train.* field but steps (a run may be extended), micro_batch (any split gives
 * the same rows), recompute, log_every, max_bad_steps and allow_change; and data.val_split,
 * data.max_len, data.bucket, data.date_string. *what gets
 * "A -> B" (the saved and the new value) when a field differs. */
const char *resume_changed_field(const job_config *saved, const job_config *now, char *what, size_t len);

/* The data.date_string a checkpoint's job rendered with: the saved job config's, or for one saved
 * before the field (or unreadable) "26 Jul 2024", the date loom's Llama 3 format then wrote. A
 * job's "" matches any saved date (it means the checkpoint's: session_resolve_date). */
void resume_saved_date(const char *saved_json, char *date, size_t len);

/* Compare the job config saved in checkpoint `file` (JSON, NULL/"" for none) with `now`:
 * a changed field is one line naming it (-1 + loom_fail), unless now->train.allow_change,
 * which only warns. A saved config that does not parse is a warning: it cannot be compared. */
int resume_check_job(const job_config *now, const char *file, const char *saved_json);

/* The tokenizer a checkpoint was trained with against now_spec (the job's model.tokenizer), by
 * content: saved_hash is the checkpoint's tokenizer_hash (tokenizer_hash_of when saved), so the
 * same tokenizer.json moved elsewhere resumes and another one at the same path is refused in one
 * line naming file, both hashes and the path. saved_hash 0 (a file that predates the hash): the
 * saved path saved_spec must equal now_spec, as before. -1 + loom_fail; 0 when they match. */
int resume_check_tokenizer(const char *file, uint64_t saved_hash, const char *saved_spec, const char *now_spec);

#endif
