/* chat.h: one tool-calling example (a Needle row or an OpenAI-style conversation) and its
 * rendering into tokens in a chat format, with a loss mask over the assistant turns only.
 * Must never turn user text into a marker: every marker is a special token placed here. */
#ifndef LOOM_CHAT_H
#define LOOM_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/text/tokenizer.h"

/* loom's layout (docs/finetune-data.md), markers are single special tokens, the rest is text:
 *
 *   [<|system|>SYSTEM<|end|>]<|user|><|tools|>TOOLS\nQUERY<|end|>
 *   <|assistant|>[<|think|>REASONING]<|call|>ANSWERS<|end|>
 *
 * TOOLS and ANSWERS are compact JSON arrays (cJSON_PrintUnformatted, keys in file order); each
 * answer is rendered as {"name":..,"arguments":{..}}; no call renders as "[]". The loss mask is 1
 * on every token after <|assistant|> up to and including the final <|end|>, and 0 elsewhere.
 * Every format masks every assistant turn's content (with Qwen3's think block and the calls, as
 * the turn is written) and its end-of-turn marker, nothing else. */

enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

/* One turn of a conversation. */
typedef struct chat_msg {
    int role;             /* CHAT_SYSTEM .. CHAT_TOOL */
    char *content;        /* NULL when absent */
    char *reasoning;      /* assistant: NULL when absent */
    cJSON *calls;         /* assistant: [{"name","arguments"}] normalised; NULL when none */
    cJSON *call_ids;      /* assistant: each call's "id" (a string, or null when it has none), in
                             the order of calls; NULL when no call has one (Needle rows) */
    char *call_id;        /* tool: its "tool_call_id"; NULL when absent */
} chat_msg;

typedef struct sft_example {
    char *system;         /* NULL when absent */
    char *query;          /* Needle rows: the user turn; NULL for OpenAI rows */
    char *tools_json;     /* compact JSON array of the tool schemas, as given */
    char *reasoning;      /* NULL when absent */
    char *answers_json;   /* compact JSON array of {"name","arguments"}; NULL for a prompt only */
    cJSON *answers;       /* the last assistant turn's calls, parsed (for toolcall_match); NULL
                             for a prompt only */
    cJSON *tools;         /* the tools array as given (formats re-print it their way) */
    chat_msg *msgs;       /* the conversation: Needle rows become [system], user, [assistant] */
    int n_msgs;
    int line;             /* 1-based line in the source file, 0 when not from a file */
} sft_example;            /* owns every pointer; free with chat_example_free */

enum {
    CHAT_PARSE_PROMPT_ONLY = 1, /* 'answers' may be absent (generation from a query + tools) */
    CHAT_PARSE_NEEDLE = 2       /* the line as Needle reads it (chat format "needle"; see below) */
};

/* Parse one JSON object (text of n bytes) into ex: a Needle row {"query", "tools", "answers",
 * "reasoning"?, "system"?} or an OpenAI-style row {"messages": [...], "tools"?: [...]} whose
 * assistant turns may carry "tool_calls" ([{"function": {"name", "arguments"}}], arguments an
 * object or a JSON string) and "reasoning_content", and whose "tool" turns carry results. On error: -1 + loom_fail with the problem
 * only, no location ("missing field 'answers'", "answer names tool 'foo' which is not in
 * 'tools'"): the caller prefixes "file:line: ". ex is left empty on error. */
int chat_example_parse(const char *text, size_t n, sft_example *ex, int flags);

/* Free what ex owns and zero it (safe on a zeroed or already freed example). */
void chat_example_free(sft_example *ex);

/* How examples become tokens: a tokenizer and a chat format (one row of chat_format.c's table)
 * with its marker ids resolved. */
typedef struct chat_template {
    tokenizer *tok;          /* not owned */
    const struct chat_format *fmt;
    const char *format;      /* its name: "loom", "qwen2.5", "qwen3", "chatml", "llama3", "mistral", "needle" */
    int32_t system, user, assistant, end, tools, call, think; /* loom's markers */
    int32_t im_start, im_end; /* ChatML's */
    int32_t bos, inst, inst_end, tools_end, results, results_end; /* Mistral's ([TOOL_CALLS] is call,
                             [AVAILABLE_TOOLS] tools); bos is also Needle's BOS */
    int32_t eot;             /* generation stops at this id (end of the assistant turn) */
    int32_t pad;             /* padding id (never a target) */
    char date[32];           /* llama3's "Today Date": chat_template_init puts today's
                                (chat_date_today), chat_template_date another */
} chat_template;

/* Resolve format on tok: "loom", "qwen2.5" (ChatML, Hermes tools, Qwen2.5's default system,
 * reasoning dropped), "qwen3" (no default system, think blocks after the last user query, as
 * Qwen3's template), "chatml" (qwen2.5 without a default system: SmolLM, Hermes), "llama3" (Llama 3.1+), "mistral"
 * (Mistral-7B-Instruct-v0.3: [AVAILABLE_TOOLS], [INST], [TOOL_CALLS], [TOOL_RESULTS]), "needle"
 * (Needle's finetune.py: [BOS] prompt target [EOS], prompt and target encoded apart; its eot is
 * EOS), or "" = "needle" for a SentencePiece tokenizer with Needle's chat markers, else picked
 * from the model folder's chat_template by its markers, else loom's. -1 + loom_fail naming a marker the
 * tokenizer lacks or an unknown format. */
int chat_template_init(chat_template *ct, tokenizer *tok, const char *format);

/* Today's date as Llama 3's template writes it, strftime_now("%d %b %Y") in the C locale and
 * local time ("26 Jul 2024"), into out (NUL-terminated, cut before len). */
void chat_date_today(char *out, size_t len);

/* The date llama3's system turn writes (data.date_string): "" or NULL keeps today's. -1 +
 * loom_fail naming data.date_string when it does not fit or holds a control character. */
int chat_template_date(chat_template *ct, const char *date);

/* Render the whole example. Writes the first min(len, cap) tokens to tokens and their mask bits to
 * loss_mask (either may be NULL to only measure) and returns the full length len, which may
 * exceed cap (then the rendering was cut at cap), or -1 + loom_fail (the tokenizer failed).
 * Requires ex->answers_json. */
int chat_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *loss_mask, int cap);

/* Render the prompt: everything before the last assistant turn's content, with the assistant
 * opener (what generation starts from). Same conventions as chat_render; needs no answers. */
int chat_render_prompt(const chat_template *ct, const sft_example *ex, int32_t *tokens, int cap);

/* The calls of generated tokens (what followed the assistant opener) as a JSON array text in
 * out (NUL-terminated, cut before cap): loom: the text after <|call|> up to the next special
 * token; ChatML: the <tool_call> blocks joined into "[..,..]" ("[]" when there are none);
 * Mistral: the array after [TOOL_CALLS] with each call's "id" dropped ("[]" without one); Needle:
 * the text between <tool_call> and </tool_call>. Returns its length, or -1 when loom's <|call|>
 * or Needle's <tool_call> is missing (Needle's own metric credits the latter as "[]"). */
int chat_extract_calls(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap);

#endif
