/* chat.c: parsing one tool-calling example from JSON (a Needle row or an OpenAI-style
 * conversation) into an sft_example; chat_format.c renders it. Never reads a file and never
 * logs: errors go to loom_fail without a location, the loader adds "file:line: ". */
#include "core/text/chat.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/text/chat_needle.h"
#include "core/text/pyjson.h"

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

/* A tool's own object: t itself, or t.function in the OpenAI form {"type": "function",
 * "function": {...}}. */
static const cJSON *chat_tool_fn(const cJSON *t)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
    return cJSON_IsObject(f) ? f : t;
}

/* Each tool: an object with a non-empty string 'name' (unique), optional string 'description',
 * optional object 'parameters'. The schema dialect of 'parameters' is the data's business. */
static int chat_check_tools(const cJSON *tools)
{
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        if (!cJSON_IsObject(t)) return loom_fail("tools[%d] must be an object", i);
        const cJSON *f = chat_tool_fn(t);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!name) return loom_fail("tools[%d]: missing 'name'", i);
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return loom_fail("tools[%d]: 'name' must be a non-empty string", i);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(f, "description");
        if (desc && !cJSON_IsString(desc)) return loom_fail("tools[%d]: 'description' must be a string", i);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        if (params && !cJSON_IsObject(params))
            return loom_fail("tools[%d]: 'parameters' must be an object", i);
        const cJSON *u;
        cJSON_ArrayForEach(u, tools) {
            if (u == t) break;
            const cJSON *un = cJSON_GetObjectItemCaseSensitive(chat_tool_fn(u), "name");
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
        if (strcmp(cJSON_GetObjectItemCaseSensitive(chat_tool_fn(t), "name")->valuestring, name) == 0) return 1;
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

static int chat_push(sft_example *ex, int role, const char *content, const char *reasoning, const cJSON *calls)
{
    chat_msg *m = realloc(ex->msgs, (size_t)(ex->n_msgs + 1) * sizeof *m);
    if (!m) return loom_fail("out of memory");
    ex->msgs = m;
    m += ex->n_msgs++;
    memset(m, 0, sizeof *m);
    m->role = role;
    m->content = content ? chat_strdup(content) : NULL;
    m->reasoning = reasoning ? chat_strdup(reasoning) : NULL;
    m->calls = calls ? cJSON_Duplicate(calls, 1) : NULL;
    if ((content && !m->content) || (reasoning && !m->reasoning) || (calls && !m->calls)) return loom_fail("out of memory");
    return 0;
}

/* A Needle row as a conversation: [system], user (the query), assistant (reasoning + calls). */
static int chat_needle_msgs(sft_example *ex)
{
    if ((ex->system && chat_push(ex, CHAT_SYSTEM, ex->system, NULL, NULL)) ||
        chat_push(ex, CHAT_USER, ex->query, NULL, NULL))
        return -1;
    return ex->answers ? chat_push(ex, CHAT_ASSISTANT, NULL, ex->reasoning, ex->answers) : 0;
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
    ex->tools = cJSON_Duplicate(tools, 1);
    if (!ex->query || !ex->tools_json || !ex->tools) return loom_fail("out of memory");
    if (answers) {
        ex->answers = chat_normalise_answers(answers, tools);
        if (!ex->answers) return -1;
        ex->answers_json = cJSON_PrintUnformatted(ex->answers);
        if (!ex->answers_json) return loom_fail("out of memory");
    }
    return chat_needle_msgs(ex);
}

/* An OpenAI tool call: {"function": {"name", "arguments"}} (arguments an object or a JSON
 * string holding one), or {"name", "arguments"} directly. */
static cJSON *chat_openai_call(const cJSON *c, int i, int j)
{
    const cJSON *f = cJSON_IsObject(c) ? chat_tool_fn(c) : NULL;
    const cJSON *args = f ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL, *call = cJSON_CreateArray();
    if (parsed && pyjson_keep_numbers(parsed, args->valuestring, strlen(args->valuestring))) {
        cJSON_Delete(parsed), cJSON_Delete(call);
        loom_fail("messages[%d].tool_calls[%d]: 'arguments': %s", i, j, loom_error());
        return NULL;
    }
    if (parsed) args = parsed;
    if (!f) loom_fail("messages[%d].tool_calls[%d] must be an object", i, j);
    else if (!cJSON_IsObject(args))
        loom_fail("messages[%d].tool_calls[%d]: 'arguments' must be an object or a JSON string of one", i, j);
    else if (call) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToArray(call, one);
        cJSON_AddItemToObject(one, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(f, "name"), 1));
        cJSON_AddItemToObject(one, "arguments", cJSON_Duplicate(args, 1));
    }
    cJSON_Delete(parsed);
    if (!f || !cJSON_IsObject(args)) { cJSON_Delete(call); return NULL; }
    return call; /* [{"name": .., "arguments": {..}}], checked by chat_normalise_answers */
}

/* The tool_calls of messages[i] as [{"name","arguments"}], checked against tools. */
static cJSON *chat_openai_calls(const cJSON *tcs, const cJSON *tools, int i)
{
    cJSON *flat = cJSON_CreateArray();
    int j = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tcs) {
        cJSON *one = chat_openai_call(c, i, j++);
        if (!one) { cJSON_Delete(flat); return NULL; }
        cJSON_AddItemToArray(flat, cJSON_DetachItemFromArray(one, 0));
        cJSON_Delete(one);
    }
    cJSON *out = chat_normalise_answers(flat, tools);
    cJSON_Delete(flat);
    if (!out) loom_fail("messages[%d].tool_calls: %s", i, loom_error());
    return out;
}

/* The calls' "id"s into msg->call_ids ([string or null, ...]; left NULL when none has one) and a
 * tool turn's "tool_call_id": the ids that tie calls and results together in Mistral's format. */
static int chat_openai_ids(chat_msg *msg, const cJSON *m, const cJSON *tcs, int i)
{
    const cJSON *tid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
    if (tid && !cJSON_IsNull(tid) && !cJSON_IsString(tid))
        return loom_fail("messages[%d]: 'tool_call_id' must be a string", i);
    if (msg->role == CHAT_TOOL && cJSON_IsString(tid) && !(msg->call_id = chat_strdup(tid->valuestring)))
        return loom_fail("out of memory");
    if (!msg->calls) return 0;
    cJSON *ids = cJSON_CreateArray();
    int any = 0, j = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tcs) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (id && !cJSON_IsNull(id) && !cJSON_IsString(id)) {
            cJSON_Delete(ids);
            return loom_fail("messages[%d].tool_calls[%d]: 'id' must be a string", i, j);
        }
        any |= cJSON_IsString(id);
        cJSON_AddItemToArray(ids, cJSON_IsString(id) ? cJSON_CreateString(id->valuestring) : cJSON_CreateNull());
        j++;
    }
    if (any) msg->call_ids = ids;
    else cJSON_Delete(ids);
    return 0;
}

static int chat_openai_msg(sft_example *ex, const cJSON *m, const cJSON *tools, int i)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!cJSON_IsObject(m)) return loom_fail("messages[%d] must be an object", i);
    int r = -1;
    for (int k = 0; k < 4; k++)
        if (cJSON_IsString(role) && strcmp(role->valuestring, roles[k]) == 0) r = k;
    if (r < 0) return loom_fail("messages[%d]: 'role' must be system, user, assistant or tool", i);
    if (content && !cJSON_IsNull(content) && !cJSON_IsString(content))
        return loom_fail("messages[%d]: 'content' must be a string (or null)", i);
    if (reasoning && !cJSON_IsNull(reasoning) && !cJSON_IsString(reasoning))
        return loom_fail("messages[%d]: 'reasoning_content' must be a string", i);
    if (tcs && !cJSON_IsNull(tcs) && (r != CHAT_ASSISTANT || !cJSON_IsArray(tcs)))
        return loom_fail("messages[%d]: 'tool_calls' must be an array on an assistant turn", i);
    cJSON *calls = NULL;
    if (cJSON_IsArray(tcs) && cJSON_GetArraySize(tcs) > 0 && !(calls = chat_openai_calls(tcs, tools, i))) return -1;
    const char *c = cJSON_IsString(content) ? content->valuestring : NULL;
    const char *rs = cJSON_IsString(reasoning) && reasoning->valuestring[0] ? reasoning->valuestring : NULL;
    int rc = chat_push(ex, r, c, r == CHAT_ASSISTANT ? rs : NULL, calls);
    cJSON_Delete(calls);
    return rc ? rc : chat_openai_ids(&ex->msgs[ex->n_msgs - 1], m, tcs, i);
}

/* {"messages": [...], "tools"?: [...]}: the answers are the last assistant turn's calls. */
static int chat_parse_messages(const cJSON *root, sft_example *ex, int flags)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) return loom_fail("'messages' must be a non-empty array");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) return loom_fail("'tools' must be an array");
    ex->tools = cJSON_IsArray(tools) ? cJSON_Duplicate(tools, 1) : cJSON_CreateArray();
    if (!ex->tools || chat_check_tools(ex->tools)) return ex->tools ? -1 : loom_fail("out of memory");
    ex->tools_json = cJSON_PrintUnformatted(ex->tools);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) if (chat_openai_msg(ex, m, ex->tools, i++)) return -1;
    const chat_msg *last = NULL;
    for (int k = 0; k < ex->n_msgs; k++)
        if (ex->msgs[k].role == CHAT_ASSISTANT) last = &ex->msgs[k];
    if (!last && !(flags & CHAT_PARSE_PROMPT_ONLY)) return loom_fail("'messages' has no assistant turn");
    if (!last) return 0;
    ex->answers = last->calls ? cJSON_Duplicate(last->calls, 1) : cJSON_CreateArray();
    ex->answers_json = ex->answers ? cJSON_PrintUnformatted(ex->answers) : NULL;
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
    else if (flags & CHAT_PARSE_NEEDLE)
        rc = chat_needle_parse(root, text, n, ex) ? -1 : chat_needle_msgs(ex);
    else if (pyjson_keep_numbers(root, text, n)) /* tojson renders them as Python read them */
        rc = -1;
    else if (cJSON_GetObjectItemCaseSensitive(root, "messages"))
        rc = chat_parse_messages(root, ex, flags);
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
    cJSON_Delete(ex->tools);
    for (int i = 0; i < ex->n_msgs; i++) {
        free(ex->msgs[i].content);
        free(ex->msgs[i].reasoning);
        cJSON_Delete(ex->msgs[i].calls);
        cJSON_Delete(ex->msgs[i].call_ids);
        free(ex->msgs[i].call_id);
    }
    free(ex->msgs);
    memset(ex, 0, sizeof *ex);
}

