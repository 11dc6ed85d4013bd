/* chat_needle.h: Needle's data, read and rendered as needle/model/finetune.py does it (3.2.8:
 * read_examples, from_chat, render_example, _encode). Private to chat.c (parsing) and
 * chat_format.c (the "needle" row of its format table): nothing else may include it. */
#ifndef LOOM_CHAT_NEEDLE_H
#define LOOM_CHAT_NEEDLE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/text/chat.h"

/* root (parsed from text, n bytes) as Needle reads a line: a native row ("query" present:
 * tools, answers or function_calls, reasoning, system) or a single-turn chat (messages with one
 * user turn and one assistant turn besides system turns, OpenAI tools and tool_calls), into
 * ex's query, system and reasoning (stripped as Python's str.strip; NULL when empty),
 * tools_json and answers_json (json.dumps(separators=(",", ":"), ensure_ascii=False) of the
 * values, numbers as written; a string inserted verbatim), tools and answers (cJSON arrays for
 * grading). The caller builds ex->msgs and frees ex on error. -1 + loom_fail naming the field
 * (Needle skips the lines in neither form and crashes on malformed ones: loom refuses both). */
int chat_needle_parse(cJSON *root, const char *text, size_t n, sft_example *ex);

/* [BOS] encode(prompt) encode(target) [EOS], the prompt and the target each encoded on its own
 * (each with the dummy prefix), the mask 0 on BOS and the prompt, 1 on the target and EOS; the
 * prompt alone (with BOS) when prompt_only. Conventions of chat_render. */
int chat_needle_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *mask, int cap,
                       int prompt_only);

/* The calls of generated tokens as Needle's _calls_of reads them: the decoded text between the
 * first <tool_call> and the next </tool_call> (or the end); -1 when there is no <tool_call>, a
 * miss for loom's metric (Needle's _calls_of credits it as an empty answer: a caller computing
 * Needle's metric reads -1 as "[]"). Conventions of chat_extract_calls. */
int chat_needle_extract(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap);

#endif
