/* chat.h: one tool-calling example (query, tools, answers, optional reasoning and system text)
 * and its rendering into tokens with chat markers plus a loss mask over the assistant turn only.
 * Must never turn user text into a marker: every marker is a special token placed here. */
#ifndef LOOM_CHAT_H
#define LOOM_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/tokenizer.h"

/* Layout (docs/finetune-data.md), markers are single special tokens, the rest is UTF-8 bytes:
 *
 *   [<|system|>SYSTEM<|end|>]<|user|><|tools|>TOOLS\nQUERY<|end|>
 *   <|assistant|>[<|think|>REASONING]<|call|>ANSWERS<|end|>
 *
 * TOOLS and ANSWERS are compact JSON arrays (cJSON_PrintUnformatted, keys in file order); each
 * answer is rendered as {"name":..,"arguments":{..}}; no call renders as "[]". The loss mask is 1
 * on every token after <|assistant|> up to and including the final <|end|>, and 0 elsewhere. */

typedef struct sft_example {
    char *system;         /* NULL when absent */
    char *query;
    char *tools_json;     /* compact JSON array of the tool schemas, as given */
    char *reasoning;      /* NULL when absent */
    char *answers_json;   /* compact JSON array of {"name","arguments"}; NULL for a prompt only */
    cJSON *answers;       /* the same, parsed (for toolcall_match); NULL for a prompt only */
    int line;             /* 1-based line in the source file, 0 when not from a file */
} sft_example;            /* owns every pointer; free with chat_example_free */

enum {
    CHAT_PARSE_PROMPT_ONLY = 1 /* 'answers' may be absent (generation from a query + tools) */
};

/* Parse one JSON object (text of n bytes) into ex. On error: -1 + loom_fail with the problem
 * only, no location ("missing field 'answers'", "answer names tool 'foo' which is not in
 * 'tools'"): the caller prefixes "file:line: ". ex is left empty on error. */
int chat_example_parse(const char *text, size_t n, sft_example *ex, int flags);

/* Free what ex owns and zero it (safe on a zeroed or already freed example). */
void chat_example_free(sft_example *ex);

/* How examples become tokens: a tokenizer and a chat format with its marker ids resolved. */
typedef struct chat_template {
    tokenizer *tok;          /* not owned */
    const char *format;      /* "loom" */
    int32_t system, user, assistant, end, tools, call, think; /* loom's markers */
    int32_t eot;             /* generation stops at this id (end of the assistant turn) */
    int32_t pad;             /* padding id (never a target) */
} chat_template;

/* Resolve format ("" or "loom") on tok: -1 + loom_fail naming a marker the tokenizer lacks. */
int chat_template_init(chat_template *ct, tokenizer *tok, const char *format);

/* Render the whole example. Writes the first min(len, cap) tokens to tokens and their mask bits to
 * loss_mask (either may be NULL to only measure) and returns the full length len, which may
 * exceed cap (then the rendering was cut at cap), or -1 + loom_fail (the tokenizer failed).
 * Requires ex->answers_json. */
int chat_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *loss_mask, int cap);

/* Render the prompt: everything up to and including <|assistant|> (what generation starts
 * from). Same conventions as chat_render; needs no answers. */
int chat_render_prompt(const chat_template *ct, const sft_example *ex, int32_t *tokens, int cap);

#endif
