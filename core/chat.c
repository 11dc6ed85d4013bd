/* chat.c: parsing one tool-calling example from JSON and rendering it with chat markers and the
 * assistant-only loss mask (layout in chat.h and docs/finetune-data.md). Never reads a file and
 * never logs: errors go to loom_fail without a location, the loader adds "file:line: ". */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static char *chat_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* An optional string field: 0 with *out NULL when absent or "", -1 when not a string. */
static int chat_opt_string(const cJSON *obj, const char *key, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsString(v)) return loom_fail("'%s' must be a string", key);
    if (v->valuestring[0] == '\0') return 0;
    *out = chat_strdup(v->valuestring);
    return *out ? 0 : loom_fail("out of memory");
}

/* Each tool: an object with a non-empty string 'name' (unique), optional string 'description',
 * optional object 'parameters'. The schema dialect of 'parameters' is the data's business. */
static int chat_check_tools(const cJSON *tools)
{
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        if (!cJSON_IsObject(t)) return loom_fail("tools[%d] must be an object", i);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (!name) return loom_fail("tools[%d]: missing 'name'", i);
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return loom_fail("tools[%d]: 'name' must be a non-empty string", i);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (desc && !cJSON_IsString(desc)) return loom_fail("tools[%d]: 'description' must be a string", i);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        if (params && !cJSON_IsObject(params))
            return loom_fail("tools[%d]: 'parameters' must be an object", i);
        const cJSON *u;
        cJSON_ArrayForEach(u, tools) {
            if (u == t) break;
            const cJSON *un = cJSON_GetObjectItemCaseSensitive(u, "name");
            if (strcmp(un->valuestring, name->valuestring) == 0)
                return loom_fail("tool '%s' appears twice in 'tools'", name->valuestring);
        }
        i++;
    }
    return 0;
}

static int chat_tool_known(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
        if (strcmp(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring, name) == 0) return 1;
    return 0;
}

/* Validate the answers against the tools and build the normalised array: each call becomes
 * exactly {"name":..,"arguments":{..}} in that key order (arguments keep their file order). */
static cJSON *chat_normalise_answers(const cJSON *answers, const cJSON *tools)
{
    cJSON *out = cJSON_CreateArray();
    if (!out) { loom_fail("out of memory"); return NULL; }
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, answers) {
        const cJSON *name = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "name") : NULL;
        const cJSON *args = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "arguments") : NULL;
        int rc = 0;
        if (!cJSON_IsObject(a)) rc = loom_fail("answers[%d] must be an object", i);
        else if (!name) rc = loom_fail("answers[%d]: missing 'name'", i);
        else if (!cJSON_IsString(name)) rc = loom_fail("answers[%d]: 'name' must be a string", i);
        else if (!args) rc = loom_fail("answers[%d]: missing 'arguments'", i);
        else if (!cJSON_IsObject(args)) rc = loom_fail("answers[%d]: 'arguments' must be an object", i);
        else if (!chat_tool_known(tools, name->valuestring))
            rc = loom_fail("answer names tool '%s' which is not in 'tools'", name->valuestring);
        cJSON *call = rc ? NULL : cJSON_CreateObject();
        if (!rc && (!call || !cJSON_AddStringToObject(call, "name", name->valuestring) ||
                    !cJSON_AddItemToObject(call, "arguments", cJSON_Duplicate(args, 1)) ||
                    !cJSON_AddItemToArray(out, call)))
            rc = loom_fail("out of memory");
        if (rc) { cJSON_Delete(call); cJSON_Delete(out); return NULL; }
        i++;
    }
    return out;
}

/* The top-level object: the syntax (one JSON object, nothing after it) and the fields. */
static int chat_parse_fields(const cJSON *root, sft_example *ex, int flags)
{
    const cJSON *query = cJSON_GetObjectItemCaseSensitive(root, "query");
    if (!query) return loom_fail("missing field 'query'");
    if (!cJSON_IsString(query)) return loom_fail("'query' must be a string");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools) return loom_fail("missing field 'tools'");
    if (!cJSON_IsArray(tools)) return loom_fail("'tools' must be an array");
    if (chat_check_tools(tools)) return -1;
    const cJSON *answers = cJSON_GetObjectItemCaseSensitive(root, "answers");
    if (!answers && !(flags & CHAT_PARSE_PROMPT_ONLY)) return loom_fail("missing field 'answers'");
    if (answers && !cJSON_IsArray(answers)) return loom_fail("'answers' must be an array");
    if (chat_opt_string(root, "system", &ex->system) || chat_opt_string(root, "reasoning", &ex->reasoning))
        return -1;
    ex->query = chat_strdup(query->valuestring);
    ex->tools_json = cJSON_PrintUnformatted(tools);
    if (!ex->query || !ex->tools_json) return loom_fail("out of memory");
    if (!answers) return 0;
    ex->answers = chat_normalise_answers(answers, tools);
    if (!ex->answers) return -1;
    ex->answers_json = cJSON_PrintUnformatted(ex->answers);
    return ex->answers_json ? 0 : loom_fail("out of memory");
}

int chat_example_parse(const char *text, size_t n, sft_example *ex, int flags)
{
    memset(ex, 0, sizeof *ex);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        long col = end ? (long)(end - text) + 1 : 1;
        return loom_fail("invalid JSON (near column %ld)", col);
    }
    int rc = 0;
    while (end < text + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
    if (end < text + n)
        rc = loom_fail("invalid JSON (extra text after the object at column %ld)", (long)(end - text) + 1);
    else if (!cJSON_IsObject(root))
        rc = loom_fail("line is not a JSON object");
    else
        rc = chat_parse_fields(root, ex, flags);
    cJSON_Delete(root);
    if (rc) chat_example_free(ex);
    return rc;
}

void chat_example_free(sft_example *ex)
{
    free(ex->system);
    free(ex->query);
    cJSON_free(ex->tools_json);
    free(ex->reasoning);
    cJSON_free(ex->answers_json);
    cJSON_Delete(ex->answers);
    memset(ex, 0, sizeof *ex);
}

int chat_template_init(chat_template *ct, tokenizer *tok, const char *format)
{
    static const char *const names[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
                                        "<|tools|>", "<|call|>", "<|think|>"};
    memset(ct, 0, sizeof *ct);
    ct->tok = tok;
    if (format && format[0] && strcmp(format, "loom") != 0)
        return loom_fail("data.chat_format: unknown format \"%s\" (known: loom)", format);
    ct->format = "loom";
    int32_t *ids[] = {&ct->system, &ct->user, &ct->assistant, &ct->end, &ct->tools, &ct->call, &ct->think};
    for (int i = 0; i < 7; i++) {
        *ids[i] = tokenizer_special(tok, names[i]);
        if (*ids[i] < 0)
            return loom_fail("chat format loom: the tokenizer (%s) has no special token %s",
                             tokenizer_describe(tok), names[i]);
    }
    ct->eot = ct->end;
    ct->pad = tokenizer_pad(tok);
    return 0;
}

/* Appends tokens while there is room and counts all of them, so one pass both renders (cut at
 * cap) and measures the full length. */
typedef struct chat_writer {
    const chat_template *ct;
    int32_t *tokens;
    uint8_t *mask;
    int cap;
    int n;
    int err;
} chat_writer;

static void chat_put(chat_writer *w, int32_t id, uint8_t m)
{
    if (w->n < w->cap) {
        if (w->tokens) w->tokens[w->n] = id;
        if (w->mask) w->mask[w->n] = m;
    }
    w->n++;
}

/* Text through the tokenizer: special tokens inside it stay text. */
static void chat_put_text(chat_writer *w, const char *s, uint8_t m)
{
    size_t count;
    int32_t *ids = tokenizer_encode_alloc(w->ct->tok, s, strlen(s), &count);
    if (!ids) { w->err = 1; return; }
    for (size_t i = 0; i < count; i++) chat_put(w, ids[i], m);
    free(ids);
}

/* Everything through <|assistant|>: never in the loss. */
static void chat_write_prompt(chat_writer *w, const sft_example *ex)
{
    const chat_template *ct = w->ct;
    if (ex->system) {
        chat_put(w, ct->system, 0);
        chat_put_text(w, ex->system, 0);
        chat_put(w, ct->end, 0);
    }
    chat_put(w, ct->user, 0);
    chat_put(w, ct->tools, 0);
    chat_put_text(w, ex->tools_json ? ex->tools_json : "[]", 0);
    chat_put_text(w, "\n", 0);
    chat_put_text(w, ex->query ? ex->query : "", 0);
    chat_put(w, ct->end, 0);
    chat_put(w, ct->assistant, 0);
}

int chat_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *loss_mask, int cap)
{
    chat_writer w = {ct, tokens, loss_mask, cap, 0, 0};
    chat_write_prompt(&w, ex);
    if (ex->reasoning) {
        chat_put(&w, ct->think, 1);
        chat_put_text(&w, ex->reasoning, 1);
    }
    chat_put(&w, ct->call, 1);
    chat_put_text(&w, ex->answers_json ? ex->answers_json : "[]", 1);
    chat_put(&w, ct->end, 1);
    return w.err ? -1 : w.n;
}

int chat_render_prompt(const chat_template *ct, const sft_example *ex, int32_t *tokens, int cap)
{
    chat_writer w = {ct, tokens, NULL, cap, 0, 0};
    chat_write_prompt(&w, ex);
    return w.err ? -1 : w.n;
}
