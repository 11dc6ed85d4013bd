/* chat_format.c: the table of chat formats (loom's own; ChatML with the Hermes tool format of
 * Qwen2.5 / SmolLM, and Qwen3's with its think blocks; Llama 3.1+; Mistral v0.3; Needle's, rendered
 * by chat_needle.c), each a renderer with its loss mask and call extractor. Must never turn data
 * text into a marker: markers are special ids placed here (Needle's are text its SentencePiece
 * model matches). */
#include "core/text/chat.h"
#include "core/text/chat_needle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "core/text/pyjson.h"

/* Appends tokens while there is room and counts all of them, so one pass both renders (cut at
 * cap) and measures the full length. Adjacent text of one mask value is encoded in one piece,
 * as a template engine's output would be: pre-tokenization then sees the same text. */
typedef struct chat_writer {
    const chat_template *ct;
    int32_t *tokens;
    uint8_t *mask;
    int cap;
    int n;
    int err;
    char *pend;           /* text not yet encoded, all of mask pend_mask */
    size_t pend_n, pend_cap;
    uint8_t pend_mask;
} chat_writer;

typedef struct chat_format {
    const char *name;
    int (*render)(chat_writer *w, const sft_example *ex, int prompt_only);
} chat_format;

static void chat_emit(chat_writer *w, int32_t id, uint8_t m)
{
    if (w->n < w->cap) {
        if (w->tokens) w->tokens[w->n] = id;
        if (w->mask) w->mask[w->n] = m;
    }
    w->n++;
}

static void chat_flush(chat_writer *w)
{
    if (!w->pend_n) return;
    size_t count;
    /* text after the first token continues the input (no Metaspace "first" prefix there) */
    int32_t *ids = w->n ? tokenizer_encode_alloc_cont(w->ct->tok, w->pend, w->pend_n, &count)
                        : tokenizer_encode_alloc(w->ct->tok, w->pend, w->pend_n, &count);
    w->pend_n = 0;
    if (!ids) { w->err = 1; return; }
    for (size_t i = 0; i < count; i++) chat_emit(w, ids[i], w->pend_mask);
    free(ids);
}

/* A special token (a marker): never produced from text. */
static void chat_put(chat_writer *w, int32_t id, uint8_t m)
{
    chat_flush(w);
    chat_emit(w, id, m);
}

/* Text through the tokenizer: special tokens inside it stay text. */
static void chat_put_text(chat_writer *w, const char *s, uint8_t m)
{
    size_t n = strlen(s);
    if (!n) return;
    if (m != w->pend_mask) chat_flush(w);
    w->pend_mask = m;
    if (w->pend_n + n > w->pend_cap) {
        size_t cap = w->pend_cap ? w->pend_cap : 256;
        while (cap < w->pend_n + n) cap *= 2;
        char *p = realloc(w->pend, cap);
        if (!p) { w->err = 1; return; }
        w->pend = p;
        w->pend_cap = cap;
    }
    memcpy(w->pend + w->pend_n, s, n);
    w->pend_n += n;
}

/* The index of the last assistant turn (the one a prompt stops before), or n_msgs. */
static int chat_last_assistant(const sft_example *ex)
{
    for (int i = ex->n_msgs - 1; i >= 0; i--)
        if (ex->msgs[i].role == CHAT_ASSISTANT) return i;
    return ex->n_msgs;
}

/* ---- loom ---- */

static int loom_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    const chat_template *ct = w->ct;
    int stop = prompt_only ? chat_last_assistant(ex) : ex->n_msgs, first_user = 1;
    for (int i = 0; i < stop; i++) {
        const chat_msg *m = &ex->msgs[i];
        if (m->role == CHAT_TOOL)
            return loom_fail("chat format loom cannot express a tool result (messages[%d]); use "
                             "data.chat_format = chatml", i);
        if (m->role == CHAT_ASSISTANT) {
            chat_put(w, ct->assistant, 0);
            if (m->reasoning) { chat_put(w, ct->think, 1); chat_put_text(w, m->reasoning, 1); }
            if (m->content) chat_put_text(w, m->content, 1);
            char *calls = m->calls ? cJSON_PrintUnformatted(m->calls) : NULL;
            chat_put(w, ct->call, 1);
            chat_put_text(w, calls ? calls : "[]", 1);
            cJSON_free(calls);
            chat_put(w, ct->end, 1);
            continue;
        }
        chat_put(w, m->role == CHAT_SYSTEM ? ct->system : ct->user, 0);
        if (m->role == CHAT_USER && first_user) {
            chat_put(w, ct->tools, 0);
            chat_put_text(w, ex->tools_json ? ex->tools_json : "[]", 0);
            chat_put_text(w, "\n", 0);
            first_user = 0;
        }
        chat_put_text(w, m->content ? m->content : "", 0);
        chat_put(w, ct->end, 0);
    }
    if (prompt_only) chat_put(w, ct->assistant, 0);
    return 0;
}

/* Jinja's tojson (the templates' form of json.dumps: ", " and ": " on one line). */
static void chat_tojson(pyjson_buf *b, const cJSON *v) { pyjson_dump(b, v, ", ", ": ", -1); }

/* ---- ChatML with Hermes tools (Qwen2.5's template; "chatml" without its default system; "qwen3"
 * with Qwen3's assistant turns) ---- */

static void chatml_open(chat_writer *w, const char *role)
{
    chat_put(w, w->ct->im_start, 0);
    chat_put_text(w, role, 0);
}

static void chatml_system(chat_writer *w, const sft_example *ex, const char *sys)
{
    int tools = ex->tools && cJSON_GetArraySize(ex->tools) > 0;
    if (!tools && !sys) return;
    pyjson_buf b = {0};
    pyjson_str(&b, sys ? sys : "");
    if (tools) {
        pyjson_str(&b, sys ? "\n\n# Tools\n\n" : "# Tools\n\n");
        pyjson_str(&b, "You may call one or more functions to assist with the user query.\n\nYou are "
                    "provided with function signatures within <tools></tools> XML tags:\n<tools>");
        const cJSON *t;
        cJSON_ArrayForEach(t, ex->tools) { pyjson_str(&b, "\n"); chat_tojson(&b, t); }
        pyjson_str(&b, "\n</tools>\n\nFor each function call, return a json object with function name and "
                    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    }
    chatml_open(w, "system\n");
    chat_put_text(w, b.s ? b.s : "", 0);
    chat_put(w, w->ct->im_end, 0);
    chat_put_text(w, "\n", 0);
    free(b.s);
}

/* Each call as a <tool_call> block, a newline before each but the first (and before the first
 * too when nl). */
static void chatml_calls(pyjson_buf *b, const chat_msg *m, int nl)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, m->calls) {
        if (nl || c != m->calls->child) pyjson_str(b, "\n");
        pyjson_str(b, "<tool_call>\n{\"name\": \"");
        pyjson_str(b, cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
        pyjson_str(b, "\", \"arguments\": ");
        chat_tojson(b, cJSON_GetObjectItemCaseSensitive(c, "arguments"));
        pyjson_str(b, "}\n</tool_call>");
    }
}

/* The turn's text (in the loss), then <|im_end|> (in the loss) and its newline (not). */
static void chatml_turn_end(chat_writer *w, pyjson_buf *b)
{
    chat_put_text(w, b->s ? b->s : "", 1);
    chat_put(w, w->ct->im_end, 1);
    chat_put_text(w, "\n", 0);
    free(b->s);
}

/* An assistant turn as Qwen2.5's template writes it: the content, then each call as a <tool_call>
 * block. Reasoning is dropped, as that template (and generic Hermes ChatML) drops it. */
static void chatml_assistant(chat_writer *w, const chat_msg *m)
{
    pyjson_buf b = {0};
    if (m->content) pyjson_str(&b, m->content);
    chatml_calls(&b, m, b.n > 0);
    chatml_turn_end(w, &b);
}

/* ---- Qwen3's think blocks (its template: reasoning only after the last user query) ---- */

static int qwen3_wrapped_result(const char *c)
{
    size_t n = strlen(c), a = strlen("<tool_response>"), z = strlen("</tool_response>");
    return n >= a && n >= z && strncmp(c, "<tool_response>", a) == 0 && strcmp(c + n - z, "</tool_response>") == 0;
}

/* The template's last_query_index: the last user turn that is not a <tool_response> block, or
 * the last message when there is none. */
static int qwen3_last_query(const sft_example *ex)
{
    for (int i = ex->n_msgs - 1; i >= 0; i--)
        if (ex->msgs[i].role == CHAT_USER && !qwen3_wrapped_result(ex->msgs[i].content ? ex->msgs[i].content : ""))
            return i;
    return ex->n_msgs - 1;
}

/* Python's s.strip('\n') / lstrip / rstrip on [s, e): moves the bounds. */
static void nl_strip(const char **s, const char **e, int left, int right)
{
    while (left && *s < *e && **s == '\n') (*s)++;
    while (right && *e > *s && (*e)[-1] == '\n') (*e)--;
}

/* An assistant turn as Qwen3's template writes it. Without reasoning_content, reasoning inside
 * the content is split off: content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
 * .lstrip('\n'), the content then being what follows the last </think>, lstrip('\n'). After the
 * last user query (after_query) the turn opens with <think>\nR\n</think>\n\n (R stripped of
 * newlines) when it has reasoning or is the last message; elsewhere the reasoning is dropped. A
 * newline goes before the first call only when the content (before its lstrip) is not empty. */
static void qwen3_assistant(chat_writer *w, const chat_msg *m, int after_query, int last)
{
    const char *c = m->content ? m->content : ""; /* a null content: "" (the template refuses it) */
    const char *ce = c + strlen(c), *r = m->reasoning ? m->reasoning : "", *re = r + strlen(r);
    const char *close = m->reasoning ? NULL : strstr(c, "</think>");
    if (close) {
        r = c, re = close;
        nl_strip(&r, &re, 0, 1);
        for (const char *p = r; (p = strstr(p, "<think>")) != NULL && p + strlen("<think>") <= re; p++)
            r = p + strlen("<think>");
        nl_strip(&r, &re, 1, 0);
        for (const char *p = close; (p = strstr(p, "</think>")) != NULL; p++) c = p + strlen("</think>");
        nl_strip(&c, &ce, 1, 0);
    }
    pyjson_buf b = {0};
    if (after_query && (last || re > r)) {
        const char *cs = c;
        nl_strip(&r, &re, 1, 1);
        nl_strip(&cs, &ce, 1, 0);
        pyjson_str(&b, "<think>\n");
        pyjson_add(&b, r, (size_t)(re - r));
        pyjson_str(&b, "\n</think>\n\n");
        pyjson_add(&b, cs, (size_t)(ce - cs));
    } else {
        pyjson_add(&b, c, (size_t)(ce - c));
    }
    chatml_calls(&b, m, ce > c);
    chatml_turn_end(w, &b);
}

/* ChatML turns: the system turn (dflt when the conversation has none; NULL: none), then each turn;
 * qwen3: assistant turns as Qwen3's template writes them. */
static int chatml_render_sys(chat_writer *w, const sft_example *ex, int prompt_only, const char *dflt, int qwen3)
{
    int stop = prompt_only ? chat_last_assistant(ex) : ex->n_msgs, first = 0, query = qwen3_last_query(ex);
    const char *sys = ex->n_msgs && ex->msgs[0].role == CHAT_SYSTEM ? ex->msgs[0].content : dflt;
    if (ex->n_msgs && ex->msgs[0].role == CHAT_SYSTEM) first = 1;
    chatml_system(w, ex, sys ? sys : NULL);
    for (int i = first; i < stop; i++) {
        const chat_msg *m = &ex->msgs[i];
        if (m->role == CHAT_TOOL) { /* results go in a user turn, consecutive ones together */
            if (i == 0 || ex->msgs[i - 1].role != CHAT_TOOL) chatml_open(w, "user");
            chat_put_text(w, "\n<tool_response>\n", 0); /* Qwen's added tokens match as text */
            chat_put_text(w, m->content ? m->content : "", 0);
            chat_put_text(w, "\n</tool_response>", 0);
            if (i + 1 == stop || ex->msgs[i + 1].role != CHAT_TOOL) {
                chat_put(w, w->ct->im_end, 0);
                chat_put_text(w, "\n", 0);
            }
            continue;
        }
        static const char *const names[] = {"system\n", "user\n", "assistant\n"};
        chatml_open(w, names[m->role]);
        if (m->role == CHAT_ASSISTANT) {
            if (qwen3) qwen3_assistant(w, m, i > query, i == ex->n_msgs - 1);
            else chatml_assistant(w, m);
            continue;
        }
        chat_put_text(w, m->content ? m->content : "", 0);
        chat_put(w, w->ct->im_end, 0);
        chat_put_text(w, "\n", 0);
    }
    if (prompt_only) chatml_open(w, "assistant\n");
    return 0;
}

static int qwen25_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    return chatml_render_sys(w, ex, prompt_only, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", 0);
}

static int chatml_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    return chatml_render_sys(w, ex, prompt_only, NULL, 0);
}

/* Qwen3: no default system; generation starts from "<|im_start|>assistant\n" (the template's
 * default, enable_thinking unset: the model writes its own think block). */
static int qwen3_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    return chatml_render_sys(w, ex, prompt_only, NULL, 1);
}

/* ---- Llama 3.1 / 3.2 (tools in the first user turn, one call per assistant turn) ---- */

/* Jinja's |trim: surrounding whitespace off. */
static char *chat_trim(const char *s)
{
    const char *e = s + strlen(s);
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    char *t = malloc((size_t)(e - s) + 1);
    if (t) { memcpy(t, s, (size_t)(e - s)); t[e - s] = '\0'; }
    return t;
}

static void llama3_header(chat_writer *w, const char *role)
{
    chat_put(w, tokenizer_special(w->ct->tok, "<|start_header_id|>"), 0);
    chat_put_text(w, role, 0);
    chat_put(w, tokenizer_special(w->ct->tok, "<|end_header_id|>"), 0);
    chat_put_text(w, "\n\n", 0);
}

static void llama3_system(chat_writer *w, const sft_example *ex, const char *sys)
{
    int tools = ex->tools && cJSON_GetArraySize(ex->tools) > 0;
    chat_put(w, tokenizer_special(w->ct->tok, "<|begin_of_text|>"), 0);
    llama3_header(w, "system");
    if (tools) chat_put_text(w, "Environment: ipython\n", 0);
    chat_put_text(w, "Cutting Knowledge Date: December 2023\nToday Date: ", 0);
    chat_put_text(w, w->ct->date, 0);
    chat_put_text(w, "\n\n", 0);
    char *t = sys ? chat_trim(sys) : NULL;
    chat_put_text(w, t ? t : "", 0);
    free(t);
    chat_put(w, w->ct->eot, 0);
}

static void llama3_tools_turn(chat_writer *w, const sft_example *ex, const char *first_user)
{
    pyjson_buf b = {0};
    pyjson_str(&b, "Given the following functions, please respond with a JSON for a function call with its "
                "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
                "function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, ex->tools) { pyjson_dump(&b, t, ",", ": ", 4); pyjson_str(&b, "\n\n"); }
    char *u = chat_trim(first_user ? first_user : "");
    if (u) pyjson_str(&b, u);
    free(u);
    llama3_header(w, "user");
    chat_put_text(w, b.s ? b.s : "", 0);
    chat_put(w, w->ct->eot, 0);
    free(b.s);
}

static int llama3_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    int stop = prompt_only ? chat_last_assistant(ex) : ex->n_msgs, i = 0;
    int tools = ex->tools && cJSON_GetArraySize(ex->tools) > 0;
    const char *sys = ex->n_msgs && ex->msgs[0].role == CHAT_SYSTEM ? ex->msgs[i++].content : NULL;
    llama3_system(w, ex, sys);
    if (tools) {
        if (i >= ex->n_msgs || ex->msgs[i].role != CHAT_USER)
            return loom_fail("chat format llama3 puts the tools in the first user turn, and there is none");
        llama3_tools_turn(w, ex, ex->msgs[i++].content);
    }
    for (; i < stop; i++) {
        const chat_msg *m = &ex->msgs[i];
        if (m->role == CHAT_ASSISTANT && m->calls && cJSON_GetArraySize(m->calls) > 0) {
            if (cJSON_GetArraySize(m->calls) != 1)
                return loom_fail("chat format llama3 has one tool call per assistant turn; messages[%d] has %d", i,
                                 cJSON_GetArraySize(m->calls));
            const cJSON *c = m->calls->child;
            pyjson_buf b = {0};
            pyjson_str(&b, "{\"name\": \"");
            pyjson_str(&b, cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
            pyjson_str(&b, "\", \"parameters\": ");
            chat_tojson(&b, cJSON_GetObjectItemCaseSensitive(c, "arguments"));
            pyjson_str(&b, "}");
            llama3_header(w, "assistant");
            chat_put_text(w, b.s ? b.s : "", 1);
            chat_put(w, w->ct->eot, 1);
            free(b.s);
            continue;
        }
        static const char *const names[] = {"system", "user", "assistant", "ipython"};
        int a = m->role == CHAT_ASSISTANT;
        llama3_header(w, names[m->role]);
        if (m->role == CHAT_TOOL) { /* the template's `content is iterable` holds for a string: tojson */
            pyjson_buf q = {0};
            pyjson_string(&q, m->content ? m->content : "");
            chat_put_text(w, q.s ? q.s : "", 0);
            free(q.s);
        } else { /* the template writes message['content'] | trim */
            char *t = chat_trim(m->content ? m->content : "");
            chat_put_text(w, t ? t : "", (uint8_t)a);
            free(t);
        }
        chat_put(w, w->ct->eot, (uint8_t)a);
    }
    if (prompt_only) llama3_header(w, "assistant");
    return 0;
}

/* ---- Mistral v0.3 (Mistral-7B-Instruct-v0.3's template: tools before the last user turn) ---- */

static int mistral_has_calls(const chat_msg *m)
{
    return m->role == CHAT_ASSISTANT && m->calls && cJSON_GetArraySize(m->calls) > 0;
}

/* Jinja's |length of a string: characters, not bytes. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* The template's checks: after the optional system message, the turns that are neither tool
 * results nor calls alternate user, assistant, user, ...; a later system message is refused. */
static int mistral_check(const sft_example *ex, int from)
{
    static const char *const names[] = {"system", "user", "assistant", "tool"};
    for (int i = from, k = 0; i < ex->n_msgs; i++) {
        const chat_msg *m = &ex->msgs[i];
        if (m->role == CHAT_TOOL || mistral_has_calls(m)) continue;
        if (m->role == CHAT_SYSTEM)
            return loom_fail("chat format mistral has a system message only as the first turn (messages[%d])", i);
        if ((m->role == CHAT_USER) != (k++ % 2 == 0))
            return loom_fail("chat format mistral needs turns that alternate user/assistant after the optional system "
                             "message (messages[%d] is %s)", i, names[m->role]);
    }
    return 0;
}

/* [AVAILABLE_TOOLS] [{"type": "function", "function": {..}}, ..][/AVAILABLE_TOOLS]: the function's
 * fields in their order but "return", strings written as they are (the template does not escape
 * them), other values as tojson. A Needle tool (no "function" wrapper) is its own function. */
static void mistral_tools(chat_writer *w, const sft_example *ex)
{
    pyjson_buf b = {0};
    pyjson_str(&b, " [");
    const cJSON *t, *kv;
    cJSON_ArrayForEach(t, ex->tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(f)) f = t;
        int first = 1;
        pyjson_str(&b, "{\"type\": \"function\", \"function\": {");
        cJSON_ArrayForEach(kv, f) {
            if (strcmp(kv->string, "return") == 0) continue;
            pyjson_str(&b, first ? "\"" : ", \"");
            first = 0;
            pyjson_str(&b, kv->string);
            pyjson_str(&b, "\": ");
            if (cJSON_IsString(kv)) { pyjson_str(&b, "\""); pyjson_str(&b, kv->valuestring); pyjson_str(&b, "\""); }
            else chat_tojson(&b, kv);
        }
        pyjson_str(&b, t->next ? "}}, " : "}}]");
    }
    chat_put(w, w->ct->tools, 0);
    chat_put_text(w, b.s ? b.s : "", 0);
    chat_put(w, w->ct->tools_end, 0);
    free(b.s);
}

/* A tool call id, when the data has one, must be 9 characters (the template refuses others);
 * without one the call is written without "id" (Needle rows have none; the template refuses). */
static int mistral_id(pyjson_buf *b, const char *key, const cJSON *id, int i)
{
    if (!cJSON_IsString(id)) return 0;
    if (utf8_chars(id->valuestring) != 9)
        return loom_fail("chat format mistral needs tool call ids of 9 characters; messages[%d] has \"%s\"", i,
                         id->valuestring);
    pyjson_str(b, key);
    pyjson_str(b, id->valuestring);
    pyjson_str(b, "\"");
    return 0;
}

/* [TOOL_CALLS] [{"name": .., "arguments": {..}, "id": ".."}, ..]</s>, content dropped as the
 * template drops it. */
static int mistral_calls(chat_writer *w, const chat_msg *m, int i)
{
    pyjson_buf b = {0};
    pyjson_str(&b, " [");
    int j = 0, rc = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, m->calls) {
        pyjson_str(&b, "{\"name\": ");
        pyjson_string(&b, cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
        pyjson_str(&b, ", \"arguments\": ");
        chat_tojson(&b, cJSON_GetObjectItemCaseSensitive(c, "arguments"));
        if (!rc) rc = mistral_id(&b, ", \"id\": \"", m->call_ids ? cJSON_GetArrayItem(m->call_ids, j) : NULL, i);
        pyjson_str(&b, c->next ? "}, " : "}]");
        j++;
    }
    if (!rc) {
        chat_put(w, w->ct->call, 1);
        chat_put_text(w, b.s ? b.s : "", 1);
        chat_put(w, w->ct->eot, 1);
    }
    free(b.s);
    return rc;
}

/* [TOOL_RESULTS] {"content": RESULT, "call_id": ".."}[/TOOL_RESULTS], the result as written. */
static int mistral_result(chat_writer *w, const chat_msg *m, int i)
{
    pyjson_buf b = {0};
    pyjson_str(&b, " {\"content\": ");
    pyjson_str(&b, m->content ? m->content : "");
    cJSON *id = m->call_id ? cJSON_CreateString(m->call_id) : NULL;
    int rc = mistral_id(&b, ", \"call_id\": \"", id, i);
    cJSON_Delete(id);
    pyjson_str(&b, "}");
    if (!rc) {
        chat_put(w, w->ct->results, 0);
        chat_put_text(w, b.s, 0);
        chat_put(w, w->ct->results_end, 0);
    }
    free(b.s);
    return rc;
}

/* The template's "last" user turn and last message are the whole conversation's, so that the
 * prompt is a prefix of the full rendering (for a prompt-only row they are the template's own). */
static int mistral_render(chat_writer *w, const sft_example *ex, int prompt_only)
{
    const chat_template *ct = w->ct;
    int stop = prompt_only ? chat_last_assistant(ex) : ex->n_msgs, from = 0, last_user = -1;
    const char *sys = NULL;
    if (ex->n_msgs && ex->msgs[0].role == CHAT_SYSTEM) sys = ex->msgs[from++].content;
    if (mistral_check(ex, from)) return -1;
    for (int i = from; i < ex->n_msgs; i++)
        if (ex->msgs[i].role == CHAT_USER) last_user = i;
    const char *last_text = last_user >= 0 && ex->msgs[last_user].content ? ex->msgs[last_user].content : "";
    int tools = ex->tools && cJSON_GetArraySize(ex->tools) > 0;
    chat_put(w, ct->bos, 0);
    for (int i = from; i < stop; i++) {
        const chat_msg *m = &ex->msgs[i];
        const char *text = m->content ? m->content : "";
        if (m->role == CHAT_USER) { /* the template compares the messages: the same text is the same turn */
            if (tools && strcmp(text, last_text) == 0) mistral_tools(w, ex);
            chat_put(w, ct->inst, 0);
            chat_put_text(w, " ", 0);
            if (i == ex->n_msgs - 1 && sys) { chat_put_text(w, sys, 0); chat_put_text(w, "\n\n", 0); }
            chat_put_text(w, text, 0);
            chat_put(w, ct->inst_end, 0);
        } else if (mistral_has_calls(m)) {
            if (mistral_calls(w, m, i)) return -1;
        } else if (m->role == CHAT_ASSISTANT) {
            char *t = chat_trim(text);
            chat_put_text(w, " ", 1);
            chat_put_text(w, t ? t : "", 1);
            chat_put(w, ct->eot, 1);
            free(t);
        } else if (mistral_result(w, m, i)) {
            return -1;
        }
    }
    return 0;
}

static const chat_format chat_formats[] = {
    {"loom", loom_render},
    {"qwen2.5", qwen25_render},
    {"qwen3", qwen3_render},
    {"chatml", chatml_render},
    {"llama3", llama3_render},
    {"mistral", mistral_render},
    {"needle", NULL}, /* chat_needle_render: two encodes, no writer */
};

/* ---- the template ---- */

static int chat_need(chat_template *ct, int32_t *id, const char *name)
{
    *id = tokenizer_special(ct->tok, name);
    if (*id >= 0) return 0;
    return loom_fail("chat format %s: the tokenizer (%s) has no token %s", ct->format,
                     tokenizer_describe(ct->tok), name);
}

/* The format a model folder's chat_template asks for, recognised by its markers; Needle's for a
 * SentencePiece model with Needle's markers. */
static const char *chat_detect(const tokenizer *tok)
{
    const char *t = tokenizer_chat_template(tok);
    if (strcmp(tokenizer_kind(tok), "sentencepiece") == 0 && tokenizer_special(tok, "<|im_start|>") >= 0 &&
        tokenizer_special(tok, "<tool_call>") >= 0 && tokenizer_special(tok, "<tools>") >= 0)
        return "needle";
    if (t && strstr(t, "<|im_start|>") && strstr(t, "last_query_index") && strstr(t, "<think>")) return "qwen3";
    if (t && strstr(t, "<|im_start|>")) return strstr(t, "You are Qwen, created by Alibaba Cloud") ? "qwen2.5" : "chatml";
    if (t && strstr(t, "<|start_header_id|>")) return "llama3";
    if (t && strstr(t, "[AVAILABLE_TOOLS]") && strstr(t, "[TOOL_CALLS]")) return "mistral";
    return t && t[strspn(t, " \t\r\n")] ? NULL : "loom"; /* a template loom does not know: refused */
}

/* The refusal of a chat_template no format matches: its start on one line, the formats, the field. */
static int chat_unknown_template(const tokenizer *tok)
{
    char start[72];
    size_t k = 0;
    for (const char *c = tokenizer_chat_template(tok); *c && k + 4 < sizeof start; c++)
        if (*c == '\n' || *c == '\r' || *c == '\t') {
            if (k && start[k - 1] != ' ') start[k++] = ' ';
        } else start[k++] = *c;
    start[k] = '\0';
    return loom_fail("%s: its chat_template (\"%s...\") is none loom renders (qwen2.5, qwen3, chatml, llama3, "
                     "mistral, needle, loom): set data.chat_format to the one whose layout the model was trained "
                     "on, or convert the data (docs/finetune-data.md)", tokenizer_describe(tok), start);
}

void chat_date_today(char *out, size_t len)
{
    static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) gmtime_r(&now, &tm);
    snprintf(out, len, "%02d %s %d", tm.tm_mday, mon[tm.tm_mon % 12], tm.tm_year + 1900);
}

int chat_template_date(chat_template *ct, const char *date)
{
    if (!date || !date[0]) return 0;
    if (strlen(date) >= sizeof ct->date)
        return loom_fail("data.date_string \"%.40s...\": at most %zu bytes", date, sizeof ct->date - 1);
    for (const char *c = date; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return loom_fail("data.date_string: a control character at byte %d", (int)(c - date));
    snprintf(ct->date, sizeof ct->date, "%s", date);
    return 0;
}

int chat_template_init(chat_template *ct, tokenizer *tok, const char *format)
{
    memset(ct, 0, sizeof *ct);
    ct->tok = tok;
    chat_date_today(ct->date, sizeof ct->date);
    if ((!format || !format[0]) && !(format = chat_detect(tok))) return chat_unknown_template(tok);
    for (size_t i = 0; i < sizeof chat_formats / sizeof *chat_formats; i++)
        if (strcmp(chat_formats[i].name, format) == 0) ct->fmt = &chat_formats[i];
    if (!ct->fmt) return loom_fail("data.chat_format: unknown format \"%s\" (known: loom, qwen2.5, qwen3, chatml, llama3, mistral, needle)", format);
    ct->format = ct->fmt->name;
    ct->pad = tokenizer_pad(tok);
    if (!ct->fmt->render) { /* Needle's: BOS, EOS and the markers as user-defined pieces */
        int32_t id;
        ct->bos = tokenizer_bos(tok);
        ct->eot = tokenizer_eos(tok);
        ct->call = -1;
        if (ct->bos < 0 || ct->eot < 0)
            return loom_fail("chat format needle: the tokenizer (%s) has no BOS or EOS (Needle's SentencePiece "
                             "model has <s> and </s>)", tokenizer_describe(tok));
        return chat_need(ct, &id, "<|im_start|>") || chat_need(ct, &id, "<|im_end|>") || chat_need(ct, &id, "<tools>") ||
                       chat_need(ct, &id, "<tool_call>") || chat_need(ct, &id, "</tool_call>")
                   ? -1
                   : 0;
    }
    if (ct->fmt->render == loom_render) {
        if (chat_need(ct, &ct->system, "<|system|>") || chat_need(ct, &ct->user, "<|user|>") ||
            chat_need(ct, &ct->assistant, "<|assistant|>") || chat_need(ct, &ct->end, "<|end|>") ||
            chat_need(ct, &ct->tools, "<|tools|>") || chat_need(ct, &ct->call, "<|call|>") ||
            chat_need(ct, &ct->think, "<|think|>"))
            return -1;
        ct->eot = ct->end;
        return 0;
    }
    if (ct->fmt->render == llama3_render) {
        int32_t id;
        if (chat_need(ct, &id, "<|begin_of_text|>") || chat_need(ct, &id, "<|start_header_id|>") ||
            chat_need(ct, &id, "<|end_header_id|>") || chat_need(ct, &ct->eot, "<|eot_id|>"))
            return -1;
        ct->call = -1;
        return 0;
    }
    if (ct->fmt->render == mistral_render)
        return chat_need(ct, &ct->bos, "<s>") || chat_need(ct, &ct->eot, "</s>") || chat_need(ct, &ct->inst, "[INST]") ||
                       chat_need(ct, &ct->inst_end, "[/INST]") || chat_need(ct, &ct->call, "[TOOL_CALLS]") ||
                       chat_need(ct, &ct->tools, "[AVAILABLE_TOOLS]") ||
                       chat_need(ct, &ct->tools_end, "[/AVAILABLE_TOOLS]") ||
                       chat_need(ct, &ct->results, "[TOOL_RESULTS]") ||
                       chat_need(ct, &ct->results_end, "[/TOOL_RESULTS]")
                   ? -1
                   : 0;
    if (chat_need(ct, &ct->im_start, "<|im_start|>") || chat_need(ct, &ct->im_end, "<|im_end|>")) return -1;
    ct->eot = ct->im_end;
    ct->call = -1;
    return 0;
}

static int chat_render_any(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *mask,
                           int cap, int prompt_only)
{
    if (!ct->fmt->render) return chat_needle_render(ct, ex, tokens, mask, cap, prompt_only);
    chat_writer w = {ct, tokens, mask, cap, 0, 0, NULL, 0, 0, 0};
    int rc = ct->fmt->render(&w, ex, prompt_only);
    chat_flush(&w);
    free(w.pend);
    return rc || w.err ? -1 : w.n;
}

int chat_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *loss_mask, int cap)
{
    return chat_render_any(ct, ex, tokens, loss_mask, cap, 0);
}

int chat_render_prompt(const chat_template *ct, const sft_example *ex, int32_t *tokens, int cap)
{
    return chat_render_any(ct, ex, tokens, NULL, cap, 1);
}

/* ---- reading calls back ---- */

/* Llama 3: the turn is one {"name": .., "parameters": {..}} object, or text (no call). */
static int llama3_extract(char *text, char *out, size_t cap)
{
    cJSON *o = cJSON_Parse(text), *arr = cJSON_CreateArray();
    free(text);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (cJSON_IsObject(o) && cJSON_IsString(name) && params && cJSON_GetArraySize(o) == 2) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToObject(c, "name", cJSON_Duplicate(name, 1));
        cJSON_AddItemToObject(c, "arguments", cJSON_Duplicate(params, 1));
        cJSON_AddItemToArray(arr, c);
    } else if (o) {
        cJSON_AddItemToArray(arr, cJSON_CreateString("not a call")); /* JSON, but not a call: a miss */
    }
    char *s = cJSON_PrintUnformatted(arr);
    cJSON_Delete(o);
    cJSON_Delete(arr);
    size_t len = s ? strlen(s) : 0;
    if (len >= cap) len = cap - 1;
    if (s) memcpy(out, s, len);
    out[len] = '\0';
    cJSON_free(s);
    return (int)len;
}

/* Mistral: the array after [TOOL_CALLS], each call without its "id"; "[]" when there is none.
 * Text that does not parse is passed on as it is (the grader calls it invalid). */
static int mistral_extract(const chat_template *ct, const int32_t *tokens, int end, char *text, char *out, size_t cap)
{
    int start = -1;
    for (int i = 0; i < end && start < 0; i++)
        if (tokens[i] == ct->call) start = i + 1;
    size_t tcap = (size_t)end * 64 + 16;
    if (start >= 0) tokenizer_decode(ct->tok, tokens + start, (size_t)(end - start), text, tcap, 1);
    else snprintf(text, tcap, "[]");
    cJSON *arr = cJSON_Parse(text), *c;
    if (!cJSON_IsArray(arr)) { cJSON_Delete(arr); arr = NULL; }
    cJSON_ArrayForEach(c, arr)
        if (cJSON_IsObject(c)) cJSON_DeleteItemFromObjectCaseSensitive(c, "id");
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    const char *src = s ? s : text;
    size_t len = strlen(src) < cap ? strlen(src) : cap - 1;
    memcpy(out, src, len);
    out[len] = '\0';
    cJSON_free(s);
    cJSON_Delete(arr);
    free(text);
    return (int)len;
}

int chat_extract_calls(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap)
{
    if (cap) out[0] = '\0';
    if (cap == 0) return -1;
    if (!ct->fmt->render) return chat_needle_extract(ct, tokens, n, out, cap);
    if (ct->fmt->render == loom_render) {
        int start = -1, end;
        for (int i = 0; i < n && start < 0; i++)
            if (tokens[i] == ct->call) start = i + 1;
        if (start < 0) return -1;
        for (end = start; end < n && tokens[end] >= 0 && !tokenizer_is_special(ct->tok, tokens[end]); end++)
            continue;
        return (int)tokenizer_decode(ct->tok, tokens + start, (size_t)(end - start), out, cap, 1);
    }
    int end = 0;
    while (end < n && tokens[end] != ct->eot) end++;
    size_t tcap = (size_t)end * 64 + 16;
    char *text = malloc(tcap);
    if (!text) return -1;
    tokenizer_decode(ct->tok, tokens, (size_t)end, text, tcap, 1);
    if (ct->fmt->render == llama3_render) return llama3_extract(text, out, cap);
    if (ct->fmt->render == mistral_render) return mistral_extract(ct, tokens, end, text, out, cap);
    pyjson_buf b = {0};
    pyjson_str(&b, "[");
    int k = 0;
    const char *from = ct->fmt->render == qwen3_render ? strstr(text, "</think>") : NULL; /* not in the reasoning */
    for (const char *p = strstr(from ? from : text, "<tool_call>"); p; p = strstr(p, "<tool_call>")) {
        const char *q = strstr(p, "</tool_call>");
        p += strlen("<tool_call>");
        if (!q) q = p + strlen(p);
        if (k++) pyjson_str(&b, ",");
        pyjson_add(&b, p, (size_t)(q - p));
        p = q;
    }
    pyjson_str(&b, "]");
    free(text);
    size_t len = b.s ? (b.n < cap ? b.n : cap - 1) : 0;
    if (b.s) memcpy(out, b.s, len);
    out[len] = '\0';
    free(b.s);
    return (int)len;
}
