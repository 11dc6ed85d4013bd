/* toolcall.c: extraction, parsing and grading of generated tool calls (see toolcall.h). Treats
 * every input as untrusted model output: any surprise is "no match", never a crash or an error
 * message, since one bad sample must not stop an evaluation. */
#include "core/text/toolcall.h"

#include <string.h>


int toolcall_extract(const chat_template *ct, const int32_t *tokens, int n, char *out, size_t cap)
{
    return chat_extract_calls(ct, tokens, n, out, cap);
}

/* 1 when some object at any depth repeats a key (cJSON keeps duplicates, and cJSON_Compare would
 * then call {"a":1,"a":2} equal to {"a":1}). */
static int toolcall_dup_keys(const cJSON *v, int depth)
{
    if (depth > 64) return 1; /* absurd nesting: not a call we could have trained */
    const cJSON *c, *d;
    cJSON_ArrayForEach(c, v) {
        if (cJSON_IsObject(v))
            for (d = v->child; d != c; d = d->next)
                if (d->string && c->string && strcmp(d->string, c->string) == 0) return 1;
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && toolcall_dup_keys(c, depth + 1)) return 1;
    }
    return 0;
}

static int toolcall_valid_call(const cJSON *c)
{
    if (!cJSON_IsObject(c) || cJSON_GetArraySize(c) != 2) return 0;
    return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "name")) &&
           cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(c, "arguments"));
}

cJSON *toolcall_parse(const char *text)
{
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) return NULL;
    while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
    int ok = end && *end == '\0' && cJSON_IsArray(root) && !toolcall_dup_keys(root, 0);
    const cJSON *c;
    cJSON_ArrayForEach(c, root) ok = ok && toolcall_valid_call(c);
    if (!ok) { cJSON_Delete(root); return NULL; }
    return root;
}

toolcall_grade toolcall_grade_text(const char *generated_json, const cJSON *answers)
{
    toolcall_grade g = {0, 0, 0};
    cJSON *calls = toolcall_parse(generated_json);
    if (!calls) return g;
    g.valid = 1;
    if (cJSON_IsArray(answers) && cJSON_GetArraySize(calls) == cJSON_GetArraySize(answers)) {
        g.names = g.exact = 1;
        const cJSON *a = answers->child;
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            const cJSON *an = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "name") : NULL;
            const cJSON *aa = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "arguments") : NULL;
            const cJSON *cn = cJSON_GetObjectItemCaseSensitive(c, "name");
            if (!cJSON_IsString(an) || strcmp(an->valuestring, cn->valuestring) != 0) g.names = 0;
            if (!aa || !cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c, "arguments"), aa, 1)) g.exact = 0;
            a = a->next;
        }
        g.exact = g.exact && g.names;
    }
    cJSON_Delete(calls);
    return g;
}

int toolcall_match(const char *generated_json, const cJSON *answers)
{
    return toolcall_grade_text(generated_json, answers).exact;
}
