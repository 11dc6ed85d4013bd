/* test_needle_rows.c: chat format "needle" against Needle's own rendering: every line of
 * tests/fixtures/needle/needle_rows.jsonl (native rows and single-turn chats) gives the ids and
 * mask that needle.model.finetune's read_examples + _encode gave (make_tokenizer_fixtures.py),
 * one by one and through sft_data_load (the length bucket as fit_max_len); lines in neither form
 * are refused naming file:line and the field; calls come back out of a generated target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "core/text/chat.h"
#include "core/text/sft_data.h"
#include "core/text/tokenizer.h"

#include "tests/check.h"

static const char *fixture(const char *name)
{
    static char path[1024];
    const char *src = getenv("LOOM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/needle/%s", src ? src : ".", name);
    return path;
}

/* The lines of a file, each NUL-terminated in place; returns the count. */
static int split_lines(char *all, char **lines, int cap)
{
    int k = 0;
    for (char *p = all; p && *p && k < cap;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        lines[k++] = p;
        p = nl ? nl + 1 : NULL;
    }
    return k;
}

/* tokens[0..len) and mask equal the expected row {"ids", "mask"}. */
static int same_row(const cJSON *want, const int32_t *tokens, const uint8_t *mask, int len)
{
    const cJSON *ids = cJSON_GetObjectItem(want, "ids"), *m = cJSON_GetObjectItem(want, "mask");
    if (cJSON_GetArraySize(ids) != len) return 0;
    int i = 0;
    for (const cJSON *a = ids->child, *b = m->child; a && b; a = a->next, b = b->next, i++)
        if (tokens[i] != a->valueint || mask[i] != b->valueint) return 0;
    return i == len;
}

static int n_prompt(const cJSON *want)
{
    int k = 0;
    for (const cJSON *b = cJSON_GetObjectItem(want, "mask")->child; b && b->valueint == 0; b = b->next) k++;
    return k;
}

/* Each line alone: parse as Needle reads it, render, compare; the prompt is the masked-off prefix. */
static void check_rows(const chat_template *ct, char **rows, int n_rows, char **want, int n_want)
{
    CHECK(n_rows == n_want - 1, "%d rows, %d expected", n_rows, n_want - 1);
    for (int k = 0; k < n_rows && k + 1 < n_want; k++) {
        cJSON *w = cJSON_Parse(want[k + 1]);
        sft_example ex;
        int rc = chat_example_parse(rows[k], strlen(rows[k]), &ex, CHAT_PARSE_NEEDLE);
        CHECK(rc == 0, "row %d: %s", k + 1, loom_error());
        if (rc == 0 && w) {
            int32_t tokens[2048];
            uint8_t mask[2048];
            int n = chat_render(ct, &ex, tokens, mask, 2048);
            CHECK(n > 0 && n < 2048 && same_row(w, tokens, mask, n), "row %d: %d tokens differ from Needle's %d", k + 1, n,
                  cJSON_GetArraySize(cJSON_GetObjectItem(w, "ids")));
            int p = chat_render_prompt(ct, &ex, tokens, 2048);
            CHECK(p == n_prompt(w), "row %d: prompt of %d tokens, Needle's mask has %d", k + 1, p, n_prompt(w));
            CHECK(ex.answers && cJSON_IsArray(ex.answers), "row %d: answers for grading", k + 1);
        }
        chat_example_free(&ex);
        cJSON_Delete(w);
    }
    printf("needle rows: %d rendered as Needle renders them\n", n_rows);
}

/* The same file through sft_data_load: the bucket is fit_max_len, every row as Needle's. */
static void check_load(const chat_template *ct, char **want, int n_want)
{
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "%s", fixture("needle_rows.jsonl"));
    c.max_len = 1024;
    sft_data d;
    int rc = sft_data_load(&d, &c, ct, 7);
    CHECK(rc == 0, "sft_data_load: %s", loom_error());
    if (rc) return;
    cJSON *head = cJSON_Parse(want[0]);
    int fit = cJSON_GetObjectItem(head, "fit_max_len")->valueint;
    CHECK(d.T == fit && d.train.n == n_want - 1, "T %d (Needle's fit_max_len %d), %d rows", d.T, fit, d.train.n);
    for (int i = 0; i < d.train.n && i + 1 < n_want; i++) {
        cJSON *w = cJSON_Parse(want[i + 1]);
        const int32_t *row = d.train.tokens + (size_t)i * d.T;
        CHECK(same_row(w, row, d.train.loss_mask + (size_t)i * d.T, d.train.len[i]) && row[d.T - 1] == 0,
              "loaded row %d differs (padding with id 0)", i + 1);
        cJSON_Delete(w);
    }
    cJSON_Delete(head);
    sft_data_free(&d);
}

/* Lines in neither form (Needle skips them) and malformed ones (Needle fails): one message each. */
static void check_refused(void)
{
    static const struct { const char *row, *want; } cases[] = {
        {"{\"foo\": 1}", "missing field 'query' (a Needle row) or 'messages' (a single-turn chat)"},
        {"[1, 2]", "line is not a JSON object"},
        {"{\"messages\": \"hi\"}", "'messages' must be an array"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", "one user turn answered by one assistant turn"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\"}, {\"role\": \"user\"}]}",
         "has 3 other turns"},
        {"{\"messages\": [{\"role\": \"assistant\"}, {\"role\": \"user\"}]}", "one user turn answered by one assistant"},
        {"{\"messages\": [\"x\", {\"role\": \"user\"}]}", "messages[0] must be an object"},
        {"{\"query\": 5}", "'query' must be a string"},
        {"{\"query\": \"q\", \"reasoning\": 5}", "'reasoning' must be a string"},
        {"{\"query\": \"q\", \"system\": [1]}", "'system' must be a string"},
        {"{\"query\": \"q\", \"answers\": [{\"x\": 01}]}", "invalid JSON"},
        {"{\"query\": \"q\", \"answers\": [{\"x\": 1.}]}", "invalid JSON"},
        {"{\"query\": \"a\x01z\"}", "raw control character"},
        {"{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
         "{\"name\": \"f\", \"arguments\": \"{not json\"}}]}]}", "'arguments' is a string but not JSON"},
        {"{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\", \"tool_calls\": {\"a\": 1}}]}",
         "'tool_calls' must be an array"},
        {"{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}], \"tools\": 5}", "'tools' must be an array"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [1]}, {\"role\": \"assistant\"}]}", "'content' must be a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sft_example ex;
        int rc = chat_example_parse(cases[i].row, strlen(cases[i].row), &ex, CHAT_PARSE_NEEDLE);
        CHECK(rc != 0 && strstr(loom_error(), cases[i].want), "case %zu: want \"%s\", got \"%s\"", i, cases[i].want,
              rc ? loom_error() : "accepted");
        if (rc == 0) chat_example_free(&ex);
    }
}

/* Through the loader: FILE:LINE: and the field, non-zero. */
static void check_load_refused(const chat_template *ct)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/loom-test-needle-rows-%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("{\"query\": \"fine\", \"tools\": [], \"answers\": []}\n{\"question\": \"no\"}\n", f);
    fclose(f);
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "%s", path);
    c.max_len = 1024;
    sft_data d;
    char want[300];
    snprintf(want, sizeof want, "%s:2: missing field 'query'", path);
    CHECK(sft_data_load(&d, &c, ct, 7) != 0 && strstr(loom_error(), want), "loader: got \"%s\"", loom_error());
    unlink(path);
}

/* A generated target: its calls as Needle's _calls_of reads them; none without <tool_call>. */
static void check_extract(const chat_template *ct)
{
    const char *row = "{\"query\": \"q\", \"tools\": [], \"answers\": [{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}]}";
    sft_example ex;
    CHECK(chat_example_parse(row, strlen(row), &ex, CHAT_PARSE_NEEDLE) == 0, "extract row: %s", loom_error());
    int32_t t[512];
    uint8_t m[512];
    int n = chat_render(ct, &ex, t, m, 512), p = chat_render_prompt(ct, &ex, NULL, 0);
    char out[256];
    int len = n > p ? chat_extract_calls(ct, t + p, n - p, out, sizeof out) : -1;
    CHECK(len > 0 && strcmp(out, "[{\"name\":\"f\",\"arguments\":{\"x\":1.0}}]") == 0, "extracted \"%s\"", out);
    int32_t none[2] = {tokenizer_special(ct->tok, "<think>"), tokenizer_eos(ct->tok)};
    len = chat_extract_calls(ct, none, 2, out, sizeof out);
    CHECK(len == -1 && out[0] == '\0', "no <tool_call>: a miss, not \"%s\"", out);
    chat_example_free(&ex);
}

int main(void)
{
    tokenizer *tok = tokenizer_open(fixture("needle.model"));
    CHECK(tok != NULL, "open: %s", loom_error());
    if (!tok) return 1;
    chat_template ct;
    CHECK(chat_template_init(&ct, tok, "") == 0 && strcmp(ct.format, "needle") == 0 && ct.bos == 2 && ct.eot == 1 &&
              ct.pad == 0,
          "the format of a Needle tokenizer: %s", ct.format ? ct.format : loom_error());
    size_t n1, n2;
    char *rows_all = check_read_file(fixture("needle_rows.jsonl"), &n1), *want_all = check_read_file(fixture("needle_rows_expected.jsonl"), &n2);
    CHECK(rows_all && want_all, "fixtures missing");
    if (rows_all && want_all) {
        char *rows[256], *want[257];
        int nr = split_lines(rows_all, rows, 256), nw = split_lines(want_all, want, 257);
        check_rows(&ct, rows, nr, want, nw);
        check_load(&ct, want, nw);
    }
    check_refused();
    check_load_refused(&ct);
    check_extract(&ct);
    tokenizer *byte = tokenizer_open("byte");
    chat_template bt;
    CHECK(chat_template_init(&bt, byte, "needle") != 0 && strstr(loom_error(), "chat format needle"),
          "needle on the byte tokenizer: %s", loom_error());
    tokenizer_free(byte);
    free(rows_all);
    free(want_all);
    tokenizer_free(tok);
    return failures != 0;
}
