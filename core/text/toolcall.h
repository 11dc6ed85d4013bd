/* toolcall.h: reading the tool calls out of a generated assistant turn and grading them against
 * an example's answers (exact match is the fine-tuning eval metric). Must never crash or fail on
 * malformed model output: that is a miss, not an error, and sets no loom_fail message. */
#ifndef LOOM_TOOLCALL_H
#define LOOM_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/text/chat.h"

/* How a generation compares with the answers. Each level implies the one before. */
typedef struct toolcall_grade {
    int valid;  /* a JSON array of {"name": string, "arguments": object}, nothing else */
    int names;  /* valid, and the same tool names in the same order as the answers */
    int exact;  /* names, and each call's arguments equal to the answer's as JSON values */
} toolcall_grade;

/* The calls of generated tokens (what followed the assistant opener) as JSON array text, in
 * the template's format: see chat_extract_calls. -1 when loom's <|call|> is missing. */
int toolcall_extract(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap);

/* Parse call text (surrounding whitespace allowed) into a cJSON array of calls, or NULL when it
 * is not a valid call list (see toolcall_grade.valid; duplicate object keys are invalid too).
 * The caller owns the result: cJSON_Delete. */
cJSON *toolcall_parse(const char *text);

/* Grade call text against answers (an array of {"name","arguments"}, e.g. sft_example.answers).
 * Equality: cJSON_Compare, case-sensitive: object key order irrelevant, numbers compared as values
 * (1 == 1.0), arrays in order; the order of the calls matters. NULL arguments grade all zero. */
toolcall_grade toolcall_grade_text(const char *generated_json, const cJSON *answers);

/* toolcall_grade_text(...).exact: 1 on an exact match, else 0. */
int toolcall_match(const char *generated_json, const cJSON *answers);

/* Needle's exact-call rule (needle/model/finetune.py _calls_of, _score_quantised), which
 * `loom eval` reports next to loom's exact match. Needle reads call text with json.loads: not a
 * JSON array -> None (a miss; but None equals None); else each object element (others are
 * skipped) becomes (str(name), json.dumps(arguments or {}, sort_keys=True)), and two lists are
 * equal when these pairs are, in order. So key order is irrelevant, 1 and 1.0 differ, extra keys
 * besides name and arguments are ignored, and a null, missing, empty or zero arguments is {}.
 * An output with no call block reads as [] (a correct empty answer).
 *
 * toolcall_needle_calls: the pairs of call text (NULL: no call block) into *out, one line each,
 * `"<str(name)>" <json.dumps(arguments or {})>` with the name as a JSON string ("" for []); the
 * caller frees *out. 1 for a list, 0 for Needle's None (*out NULL), -1 out of memory. Reads
 * strings as code points (\ud83d\ude00 is one), NaN/Infinity as Python does; the repr of a
 * non-string name ([..] or {..}) escapes the usual non-printable characters, not Python's full
 * Unicode table. Checked against Needle's _calls_of on 20,000 random call texts. */
int toolcall_needle_calls(const char *text, char **out);

/* 1 when generated (the extracted call text; NULL when the output has no call block) equals the
 * answers (answers_json, e.g. sft_example.answers_json; NULL reads as []) under Needle's rule. */
int toolcall_needle_match(const char *generated, const char *answers_json);

#endif
