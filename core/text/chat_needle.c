/* chat_needle.c: Needle's fine-tune data (needle/model/finetune.py 3.2.8): its two line forms
 * read as read_examples and from_chat read them, the JSON re-printed as json.dumps(separators=
 * (",", ":"), ensure_ascii=False) prints it, and the row rendered and masked as _encode does.
 * Must never differ from Needle on a line Needle renders, and never accept one it cannot. */
#include "core/text/chat_needle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/text/pyjson.h"

/* ---- small pieces ---- */

static char *nd_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}


/* Python's truth of a JSON value (a missing one is falsy). */
static int nd_truthy(const cJSON *v)
{
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != '\0';
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return 1;
}

/* The code point at s and its length. Lines reach here as valid UTF-8 from the loader, but a
 * caller may hand any bytes: a malformed or cut sequence (the NUL is no continuation byte) is
 * its lead byte alone, which is no space. */
static unsigned nd_cp(const unsigned char *s, size_t *len)
{
    unsigned c = s[0];
    size_t want = c < 0x80 ? 1 : c >= 0xC0 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF8 ? 4 : 0;
    *len = 1;
    if (want <= 1) return want ? c : 0xFFFD;
    unsigned cp = c & (want == 2 ? 0x1F : want == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < want; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    *len = want;
    return cp;
}

/* Python's str.isspace, which str.strip() strips. */
static int nd_space(unsigned cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* s.strip() as a malloc'd string, NULL when nothing is left; *err on OOM. */
static char *nd_strip(const char *s, int *err)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s), *last = p;
    size_t len;
    while (p < end && nd_space(nd_cp(p, &len))) p += len;
    for (const unsigned char *q = p; q < end; q += len)
        if (!nd_space(nd_cp(q, &len))) last = q + len;
    if (last <= p) return NULL;
    char *o = malloc((size_t)(last - p) + 1);
    if (!o) { *err = 1; return NULL; }
    memcpy(o, p, (size_t)(last - p));
    o[last - p] = '\0';
    return o;
}

/* A value as render_example writes it: a string verbatim, anything else dumped. */
static char *nd_text(const cJSON *v)
{
    if (cJSON_IsString(v)) return nd_dup(v->valuestring);
    pyjson_buf b = {0};
    pyjson_dump(&b, v, ",", ":", -1); /* json.dumps(v, separators=(",", ":"), ensure_ascii=False) */
    if (b.err) { free(b.s); return NULL; }
    return b.s;
}

/* The value as a cJSON array for grading: itself, a string holding one, else [value]. */
static cJSON *nd_array(const cJSON *v)
{
    if (cJSON_IsArray(v)) return cJSON_Duplicate(v, 1);
    cJSON *p = cJSON_IsString(v) ? cJSON_Parse(v->valuestring) : NULL;
    if (cJSON_IsArray(p)) return p;
    cJSON_Delete(p);
    cJSON *a = cJSON_CreateArray();
    if (a && v) cJSON_AddItemToArray(a, cJSON_Duplicate(v, 1));
    return a;
}

/* ---- the two forms ---- */

/* (example.get(key) or "").strip(): NULL when falsy or blank; a truthy non-string is refused
 * (Needle fails on it). */
static int nd_opt_text(const cJSON *v, const char *what, char **out)
{
    int err = 0;
    *out = NULL;
    if (!nd_truthy(v)) return 0;
    if (!cJSON_IsString(v)) return loom_fail("'%s' must be a string", what);
    *out = nd_strip(v->valuestring, &err);
    return err ? loom_fail("out of memory") : 0;
}

/* A native row: query, tools (default []), answers or else function_calls (default []),
 * reasoning, system. */
static int nd_native(const cJSON *root, sft_example *ex)
{
    const cJSON *query = pyjson_get(root, "query"), *tools = pyjson_get(root, "tools");
    const cJSON *answers = pyjson_get(root, "answers");
    if (!answers) answers = pyjson_get(root, "function_calls");
    if (!cJSON_IsString(query)) return loom_fail("'query' must be a string");
    if (nd_opt_text(pyjson_get(root, "reasoning"), "reasoning", &ex->reasoning) ||
        nd_opt_text(pyjson_get(root, "system"), "system", &ex->system))
        return -1;
    cJSON *empty = cJSON_CreateArray();
    ex->query = nd_dup(query->valuestring);
    ex->tools_json = nd_text(tools ? tools : empty);
    ex->answers_json = nd_text(answers ? answers : empty);
    ex->tools = cJSON_IsArray(tools) ? cJSON_Duplicate(tools, 1) : cJSON_IsString(tools) ? cJSON_Parse(tools->valuestring) : NULL;
    if (!cJSON_IsArray(ex->tools)) { cJSON_Delete(ex->tools); ex->tools = cJSON_CreateArray(); }
    ex->answers = nd_array(answers ? answers : empty);
    cJSON_Delete(empty);
    return ex->query && ex->tools_json && ex->answers_json && ex->tools && ex->answers ? 0 : loom_fail("out of memory");
}

/* from_chat's tools: [t.get("function", t) if a dict else t for t in tools or []], iterating
 * a dict's keys or a string's characters as Python does; a number or true cannot be iterated. */
static cJSON *nd_chat_tools(const cJSON *tools)
{
    cJSON *out = cJSON_CreateArray();
    if (!out || !nd_truthy(tools)) return out;
    if (cJSON_IsString(tools)) {
        size_t len;
        for (const char *s = tools->valuestring; *s; s += len) {
            char ch[5] = {0};
            nd_cp((const unsigned char *)s, &len);
            memcpy(ch, s, len);
            cJSON_AddItemToArray(out, cJSON_CreateString(ch));
        }
        return out;
    }
    if (!cJSON_IsArray(tools) && !cJSON_IsObject(tools)) {
        cJSON_Delete(out);
        loom_fail("'tools' must be an array");
        return NULL;
    }
    for (const cJSON *t = tools->child; t; t = t->next) {
        if (cJSON_IsObject(tools)) { /* a dict iterates its keys, each once */
            if (pyjson_get(tools, t->string) != t) continue;
            cJSON_AddItemToArray(out, cJSON_CreateString(t->string));
            continue;
        }
        const cJSON *f = cJSON_IsObject(t) ? pyjson_get(t, "function") : NULL;
        cJSON_AddItemToArray(out, cJSON_Duplicate(f ? f : t, 1));
    }
    return out;
}

/* One tool call of the assistant turn as from_chat takes it: {"name": .., "arguments": ..}. */
static cJSON *nd_chat_call(const cJSON *call, int j)
{
    if (!cJSON_IsObject(call)) { loom_fail("tool_calls[%d] must be an object", j); return NULL; }
    const cJSON *fn = pyjson_get(call, "function");
    if (!nd_truthy(fn)) fn = call;
    if (!cJSON_IsObject(fn)) { loom_fail("tool_calls[%d]: 'function' must be an object", j); return NULL; }
    const cJSON *args = pyjson_get(fn, "arguments"), *name = pyjson_get(fn, "name");
    cJSON *parsed = NULL, *c = cJSON_CreateObject();
    int err = 0;
    char *blank = cJSON_IsString(args) ? nd_strip(args->valuestring, &err) : NULL;
    if (cJSON_IsString(args) && blank) { /* json.loads(arguments) */
        const char *s = args->valuestring, *end = NULL;
        parsed = cJSON_ParseWithOpts(s, &end, 0);
        while (parsed && end && *end && strchr(" \t\n\r", *end)) end++; /* JSON's whitespace */
        if (!parsed || (end && *end) || pyjson_keep_numbers(parsed, s, strlen(s))) {
            if (!parsed || (end && *end)) loom_fail("tool_calls[%d]: 'arguments' is a string but not JSON", j);
            free(blank);
            cJSON_Delete(parsed);
            cJSON_Delete(c);
            return NULL;
        }
    }
    free(blank);
    cJSON *a = parsed ? parsed : args && !cJSON_IsString(args) ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
    cJSON_AddItemToObject(c, "name", name ? cJSON_Duplicate(name, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(c, "arguments", a);
    return c;
}

/* The single turn of a chat: system turns aside, one user turn then one assistant turn. */
static int nd_chat_turns(const cJSON *msgs, const cJSON **user, const cJSON **asst, const cJSON **sys)
{
    int i = 0, turns = 0;
    const cJSON *t[2] = {NULL, NULL};
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) return loom_fail("messages[%d] must be an object", i);
        const cJSON *role = pyjson_get(m, "role");
        if (cJSON_IsString(role) && strcmp(role->valuestring, "system") == 0) {
            if (!*sys) *sys = m;
            continue;
        }
        if (turns < 2) t[turns] = m;
        turns++;
    }
    const cJSON *r0 = t[0] ? pyjson_get(t[0], "role") : NULL, *r1 = t[1] ? pyjson_get(t[1], "role") : NULL;
    if (turns != 2 || !cJSON_IsString(r0) || strcmp(r0->valuestring, "user") != 0 || !cJSON_IsString(r1) ||
        strcmp(r1->valuestring, "assistant") != 0)
        return loom_fail("'messages' must be one user turn answered by one assistant turn (system turns aside), as "
                         "Needle's from_chat reads a chat; this line has %d other turns", turns);
    *user = t[0];
    *asst = t[1];
    return 0;
}

static int nd_chat(const cJSON *root, sft_example *ex)
{
    const cJSON *msgs = pyjson_get(root, "messages"), *user = NULL, *asst = NULL, *sys = NULL;
    if (!msgs) return loom_fail("missing field 'query' (a Needle row) or 'messages' (a single-turn chat)");
    if (!cJSON_IsArray(msgs)) return loom_fail("'messages' must be an array");
    if (nd_chat_turns(msgs, &user, &asst, &sys)) return -1;
    const cJSON *content = pyjson_get(user, "content"), *calls = pyjson_get(asst, "tool_calls");
    if (nd_truthy(content) && !cJSON_IsString(content)) return loom_fail("the user turn's 'content' must be a string");
    if (nd_truthy(calls) && !cJSON_IsArray(calls)) return loom_fail("the assistant turn's 'tool_calls' must be an array");
    if (sys && nd_opt_text(pyjson_get(sys, "content"), "content' of the system turn", &ex->system)) return -1;
    ex->answers = cJSON_CreateArray();
    int j = 0;
    for (const cJSON *c = nd_truthy(calls) ? calls->child : NULL; c && ex->answers; c = c->next, j++) {
        cJSON *one = nd_chat_call(c, j);
        if (!one) return -1;
        cJSON_AddItemToArray(ex->answers, one);
    }
    cJSON *tools = nd_chat_tools(pyjson_get(root, "tools"));
    if (!tools) return -1;
    ex->query = nd_dup(nd_truthy(content) ? content->valuestring : "");
    ex->tools_json = nd_text(tools);
    ex->answers_json = ex->answers ? nd_text(ex->answers) : NULL;
    ex->tools = tools;
    return ex->query && ex->tools_json && ex->answers_json ? 0 : loom_fail("out of memory");
}

int chat_needle_parse(cJSON *root, const char *text, size_t n, sft_example *ex)
{
    if (!cJSON_IsObject(root)) return loom_fail("line is not a JSON object");
    if (pyjson_keep_numbers(root, text, n)) return -1;
    return pyjson_get(root, "query") ? nd_native(root, ex) : nd_chat(root, ex);
}

/* ---- rendering (render_example, _encode) ---- */

/* The fields of a row render_example reads; for a conversation parsed the loom way (no query),
 * its [system] user [assistant] turns. */
typedef struct nd_row {
    const char *system, *query, *tools, *reasoning, *answers;
} nd_row;

static int nd_row_of(const sft_example *ex, nd_row *r)
{
    *r = (nd_row){ex->system, ex->query, ex->tools_json ? ex->tools_json : "[]", ex->reasoning,
                  ex->answers_json ? ex->answers_json : "[]"};
    if (ex->query) return 0;
    int i = 0, k = ex->n_msgs;
    if (i < k && ex->msgs[i].role == CHAT_SYSTEM) r->system = ex->msgs[i++].content;
    if (i < k && ex->msgs[i].role == CHAT_USER) r->query = ex->msgs[i].content ? ex->msgs[i].content : "", i++;
    if (i < k && ex->msgs[i].role == CHAT_ASSISTANT) r->reasoning = ex->msgs[i++].reasoning;
    if (!r->query || i != k)
        return loom_fail("chat format needle renders one user turn answered by one assistant turn (Needle's from_chat); "
                         "this conversation has %d turns", k);
    return 0;
}

/* prompt: [<|im_start|>system\nSYSTEM<|im_end|>\n]<|im_start|>user\n<tools>TOOLS</tools>\nQUERY
 * <|im_end|>\n<|im_start|>assistant\n; target: [<think>\nREASONING\n</think>\n]<tool_call>
 * ANSWERS</tool_call><|im_end|>. The markers are text: the tokenizer matches them. */
static int nd_texts(const nd_row *r, pyjson_buf *prompt, pyjson_buf *target)
{
    int err = 0;
    char *sys = r->system ? nd_strip(r->system, &err) : NULL, *why = r->reasoning ? nd_strip(r->reasoning, &err) : NULL;
    if (sys) { pyjson_str(prompt, "<|im_start|>system\n"); pyjson_str(prompt, sys); pyjson_str(prompt, "<|im_end|>\n"); }
    pyjson_str(prompt, "<|im_start|>user\n<tools>");
    pyjson_str(prompt, r->tools);
    pyjson_str(prompt, "</tools>\n");
    pyjson_str(prompt, r->query);
    pyjson_str(prompt, "<|im_end|>\n<|im_start|>assistant\n");
    if (why) { pyjson_str(target, "<think>\n"); pyjson_str(target, why); pyjson_str(target, "\n</think>\n"); }
    pyjson_str(target, "<tool_call>");
    pyjson_str(target, r->answers);
    pyjson_str(target, "</tool_call><|im_end|>");
    free(sys);
    free(why);
    return err || prompt->err || target->err ? loom_fail("out of memory") : 0;
}

typedef struct nd_out {
    int32_t *tokens;
    uint8_t *mask;
    int cap, n;
} nd_out;

static void nd_emit(nd_out *o, int32_t id, uint8_t m)
{
    if (o->n < o->cap) {
        if (o->tokens) o->tokens[o->n] = id;
        if (o->mask) o->mask[o->n] = m;
    }
    o->n++;
}

/* One encode call of the tokenizer (its own dummy prefix), every id with mask m. */
static int nd_encode(const chat_template *ct, const pyjson_buf *text, nd_out *o, uint8_t m)
{
    size_t count;
    int32_t *ids = tokenizer_encode_alloc(ct->tok, text->s ? text->s : "", text->n, &count);
    if (!ids) return -1;
    for (size_t i = 0; i < count; i++) nd_emit(o, ids[i], m);
    free(ids);
    return 0;
}

int chat_needle_render(const chat_template *ct, const sft_example *ex, int32_t *tokens, uint8_t *mask, int cap,
                       int prompt_only)
{
    nd_row r;
    pyjson_buf prompt = {0}, target = {0};
    nd_out o = {tokens, mask, cap, 0};
    int rc = nd_row_of(ex, &r);
    if (rc == 0) rc = nd_texts(&r, &prompt, &target);
    if (rc == 0) {
        nd_emit(&o, ct->bos, 0);
        rc = nd_encode(ct, &prompt, &o, 0);
        if (rc == 0 && !prompt_only) {
            rc = nd_encode(ct, &target, &o, 1);
            nd_emit(&o, ct->eot, 1);
        }
    }
    free(prompt.s);
    free(target.s);
    return rc ? -1 : o.n;
}

int chat_needle_extract(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap)
{
    int end = 0;
    while (end < n && tokens[end] != ct->eot) end++;
    size_t tcap = (size_t)end * 64 + 16;
    char *text = malloc(tcap);
    if (!text) return -1;
    tokenizer_decode(ct->tok, tokens, (size_t)end, text, tcap, 1);
    const char *p = strstr(text, "<tool_call>"), *q;
    if (!p) { /* no call block: a miss for loom's metric (Needle's credits it as "[]") */
        free(text);
        return -1;
    }
    p += strlen("<tool_call>");
    q = strstr(p, "</tool_call>");
    if (!q) q = p + strlen(p);
    size_t len = (size_t)(q - p) < cap ? (size_t)(q - p) : cap - 1;
    memcpy(out, p, len);
    out[len] = '\0';
    free(text);
    return (int)len;
}
