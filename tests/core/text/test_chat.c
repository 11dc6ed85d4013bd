/* test_chat.c: chat formats against transformers' apply_chat_template (fixtures from
 * tests/fixtures/tokenizers/chat_fixtures.py): loom's ChatML/Hermes rendering of OpenAI-style
 * conversations gives the same ids, its mask covers exactly the assistant spans, the prompt is a
 * prefix, generated calls read back (the same for Llama 3 and Mistral v0.3, Qwen3's think blocks
 * and Qwen2.5 dropping reasoning); loom's format on multi-turn rows; bad rows fail clearly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "core/text/chat.h"
#include "core/text/pyjson.h"
#include "core/text/sft_data.h"
#include "core/text/tokenizer.h"
#include "core/text/toolcall.h"

#include "tests/check.h"

static const char *fixture(const char *name)
{
    static char path[1024];
    const char *src = getenv("LOOM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/%s", src ? src : ".", name);
    return path;
}

static char *next_line(FILE *f)
{
    static char buf[1 << 16];
    return fgets(buf, sizeof buf, f) ? buf : NULL;
}

/* Every number of v printed as its literal text (pyjson_keep_numbers gave it one): cJSON prints a
 * double, which would turn the row's 30.0 into 30. */
static void numbers_raw(cJSON *v)
{
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v) && v->valuestring) v->type = cJSON_Raw;
        numbers_raw(v->child);
    }
}

/* Conversation k: rendering == the fixture's ids and mask; prompt + extraction. */
static void check_conversation(const chat_template *ct, int k, const char *row, const char *want)
{
    sft_example ex;
    CHECK(chat_example_parse(row, strlen(row), &ex, 0) == 0, "conv %d: parse: %s", k, loom_error());
    cJSON *w = cJSON_Parse(want);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(w, "ids"), *mask = cJSON_GetObjectItemCaseSensitive(w, "mask");
    int n = cJSON_GetArraySize(ids);
    int32_t tok[4096];
    uint8_t m[4096];
    int got = chat_render(ct, &ex, tok, m, 4096);
    int same = 0, same_mask = 0;
    while (same < n && same < got && tok[same] == cJSON_GetArrayItem(ids, same)->valueint) same++;
    while (same_mask < n && same_mask < got && m[same_mask] == cJSON_GetArrayItem(mask, same_mask)->valueint) same_mask++;
    CHECK(got == n && same == n, "conv %d: %d tokens vs transformers' %d, first difference at %d", k, got, n, same);
    CHECK(got == n && same_mask == n, "conv %d: mask differs at %d", k, same_mask);
    /* the prompt is the prefix up to the last assistant turn's content */
    int32_t p[4096];
    int pn = chat_render_prompt(ct, &ex, p, 4096), last = -1;
    for (int t = 0; t < got; t++)
        if (m[t] && (t == 0 || !m[t - 1])) last = t;
    CHECK(pn == last && memcmp(p, tok, (size_t)pn * sizeof *p) == 0, "conv %d: prompt %d, last span at %d", k, pn, last);
    /* Mistral's template writes the system message into the last user turn only when that turn
     * ends the conversation: the fixture's "prompt" is its rendering of the turns before the last
     * assistant turn, which loom gives for a row that stops there */
    const cJSON *hf_prompt = cJSON_GetObjectItemCaseSensitive(w, "prompt");
    if (hf_prompt) {
        cJSON *r = cJSON_Parse(row), *msgs = cJSON_GetObjectItemCaseSensitive(r, "messages");
        CHECK(pyjson_keep_numbers(r, row, strlen(row)) == 0, "conv %d: numbers: %s", k, loom_error());
        numbers_raw(r);
        int cut = 0;
        for (int i = 0; i < cJSON_GetArraySize(msgs); i++)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, i), "role")->valuestring, "assistant"))
                cut = i;
        while (cJSON_GetArraySize(msgs) > cut) cJSON_DeleteItemFromArray(msgs, cut);
        char *text = cJSON_PrintUnformatted(r);
        sft_example pex;
        int32_t q[4096];
        int qn = chat_example_parse(text, strlen(text), &pex, CHAT_PARSE_PROMPT_ONLY) == 0
                     ? chat_render(ct, &pex, q, NULL, 4096)
                     : -1;
        int qs = 0, hn = cJSON_GetArraySize(hf_prompt);
        while (qs < qn && qs < hn && q[qs] == cJSON_GetArrayItem(hf_prompt, qs)->valueint) qs++;
        CHECK(qn == hn && qs == hn, "conv %d: prompt-only row: %d tokens vs transformers' %d, first difference at %d: %s", k,
              qn, hn, qs, loom_error());
        chat_example_free(&pex);
        cJSON_free(text);
        cJSON_Delete(r);
    }
    /* Qwen3: the prompt is what transformers' add_generation_prompt=True gives for the turns before
     * the last assistant turn (enable_thinking unset), and the text is the template's */
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(w, "generation_prompt");
    if (gen) {
        int gs = 0, gn = cJSON_GetArraySize(gen);
        while (gs < pn && gs < gn && p[gs] == cJSON_GetArrayItem(gen, gs)->valueint) gs++;
        CHECK(pn == gn && gs == gn, "conv %d: prompt %d tokens vs transformers' generation prompt %d, first difference at %d",
              k, pn, gn, gs);
    }
    const cJSON *want_text = cJSON_GetObjectItemCaseSensitive(w, "text");
    if (cJSON_IsString(want_text)) {
        static char text[1 << 16];
        tokenizer_decode(ct->tok, tok, (size_t)(got < 4096 ? got : 4096), text, sizeof text, 0);
        size_t d = 0;
        while (text[d] && text[d] == want_text->valuestring[d]) d++;
        CHECK(strcmp(text, want_text->valuestring) == 0, "conv %d: text differs from the template's at byte %zu: ...%.40s",
              k, d, text + d);
    }
    /* what the model would write after the prompt reads back as the answers */
    char calls[4096];
    CHECK(chat_extract_calls(ct, tok + pn, got - pn, calls, sizeof calls) >= 0 &&
              toolcall_match(calls, ex.answers), "conv %d: extracted calls %s do not match", k, calls);
    printf("conv %d: %d tokens equal to transformers': %s, mask: %s\n", k, got, same == n && got == n ? "yes" : "NO",
           same_mask == n ? "yes" : "NO");
    cJSON_Delete(w);
    chat_example_free(&ex);
}

/* Every conversation of rows_file rendered in format on tok_file equals want_file's line. */
static void check_fixture(const char *tok_file, const char *format, const char *rows_file, const char *want_file,
                          const char *eot)
{
    tokenizer *tok = tokenizer_open(fixture(tok_file));
    chat_template ct;
    CHECK(tok && chat_template_init(&ct, tok, format) == 0 && ct.eot == tokenizer_special(tok, eot),
          "%s template: %s", format, loom_error());
    CHECK(chat_template_date(&ct, "26 Jul 2024") == 0, "date: %s", loom_error()); /* the fixtures' date_string */
    FILE *rows = fopen(fixture(rows_file), "r");
    FILE *want = fopen(fixture(want_file), "r");
    CHECK(rows && want, "chat fixtures %s", rows_file);
    char *r, row[1 << 16];
    printf("%s:\n", format);
    for (int k = 0; tok && rows && want && (r = next_line(rows)) != NULL; k++) {
        snprintf(row, sizeof row, "%s", r);
        char *wl = next_line(want);
        if (!wl) { CHECK(0, "fewer expected renderings than rows"); break; }
        check_conversation(&ct, k, row, wl);
    }
    if (rows) fclose(rows);
    if (want) fclose(want);
    tokenizer_free(tok);
}

static void check_chatml(void)
{
    check_fixture("qwen2.json", "qwen2.5", "chat.jsonl", "chat_qwen2.5.jsonl", "<|im_end|>");
    /* reasoning: Qwen3 keeps it after the last user query only, Qwen2.5 (and generic ChatML) drops it */
    check_fixture("qwen2.json", "qwen3", "chat_reasoning_rows.jsonl", "chat_qwen3.jsonl", "<|im_end|>");
    check_fixture("qwen3_think.json", "qwen3", "chat_reasoning_rows.jsonl", "chat_qwen3_think.jsonl", "<|im_end|>");
    check_fixture("qwen2.json", "qwen2.5", "chat_reasoning_rows.jsonl", "chat_qwen2.5_reasoning.jsonl", "<|im_end|>");
    check_fixture("llama3.json", "llama3", "chat_llama3_rows.jsonl", "chat_llama3.jsonl", "<|eot_id|>");
    check_fixture("mistral.json", "mistral", "chat_mistral_rows.jsonl", "chat_mistral.jsonl", "</s>");
    tokenizer *tok = tokenizer_open(fixture("qwen2.json"));
    chat_template ct;
    CHECK(tok && chat_template_init(&ct, tok, "qwen2.5") == 0, "qwen2.5: %s", loom_error());
    /* a text reply has no calls: "[]"; two blocks join into one array */
    const char *gen = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                      "{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>";
    int32_t ids[256];
    long n = tok ? tokenizer_encode(tok, gen, strlen(gen), ids, 256) : 0;
    char out[256];
    chat_extract_calls(&ct, ids, (int)n, out, sizeof out);
    cJSON *want2 = cJSON_Parse("[{\"name\":\"a\",\"arguments\":{}},{\"name\":\"b\",\"arguments\":{\"x\":1}}]");
    CHECK(toolcall_match(out, want2), "two calls: %s", out);
    cJSON_Delete(want2);
    n = tok ? tokenizer_encode(tok, "Hello", 5, ids, 256) : 0;
    CHECK(chat_extract_calls(&ct, ids, (int)n, out, sizeof out) == 2 && strcmp(out, "[]") == 0, "no call: %s", out);
    tokenizer_free(tok);
}

/* A folder saved by transformers 5: the template in chat_template.jinja, none in
 * tokenizer_config.json (here: no config at all). */
/* Llama 3's system turn writes data.date_string, by default today's date as strftime_now("%d %b
 * %Y") writes it (never a fixed one); a date with a control character is refused naming the field. */
static void check_llama3_date(void)
{
    tokenizer *tok = tokenizer_open(fixture("llama3.json"));
    chat_template ct;
    if (!tok || chat_template_init(&ct, tok, "llama3")) { CHECK(0, "llama3: %s", loom_error()); tokenizer_free(tok); return; }
    const char *row = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                      "{\"role\": \"assistant\", \"content\": \"yo\"}]}";
    sft_example ex;
    CHECK(chat_example_parse(row, strlen(row), &ex, 0) == 0, "parse: %s", loom_error());
    char today[32], want[64];
    time_t now = time(NULL);
    strftime(today, sizeof today, "%d %b %Y", localtime(&now));
    for (int k = 0; k < 2; k++) {
        if (k) CHECK(chat_template_date(&ct, "01 Feb 2025") == 0, "date: %s", loom_error());
        snprintf(want, sizeof want, "Today Date: %s\n\n", k ? "01 Feb 2025" : today);
        int32_t ids[512];
        static char text[8192];
        int n = chat_render(&ct, &ex, ids, NULL, 512);
        CHECK(n > 0 && n <= 512, "render: %d", n);
        tokenizer_decode(tok, ids, (size_t)(n > 0 ? n : 0), text, sizeof text, 0);
        CHECK(strstr(text, want) != NULL, "llama3 system turn lacks \"%s\": %.200s", want, text);
    }
    CHECK(chat_template_date(&ct, "01\nFeb") != 0 && strstr(loom_error(), "data.date_string"),
          "a newline in the date: %s", loom_error());
    chat_example_free(&ex);
    tokenizer_free(tok);
}

static void check_template_file(void)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf test_chat_jinja && mkdir test_chat_jinja && cp '%s' test_chat_jinja/tokenizer.json",
             fixture("mistral.json"));
    if (system(cmd) != 0) { CHECK(0, "folder"); return; }
    FILE *f = fopen("test_chat_jinja/chat_template.jinja", "wb");
    if (!f) { CHECK(0, "chat_template.jinja"); return; }
    fputs("{{- bos_token }}\n{%- if tools %}[AVAILABLE_TOOLS] ... [TOOL_CALLS] ...{%- endif %}\n", f);
    fclose(f);
    tokenizer *tok = tokenizer_open("test_chat_jinja");
    chat_template ct;
    CHECK(tok && chat_template_init(&ct, tok, "") == 0 && !strcmp(ct.format, "mistral"),
          "the format is read from chat_template.jinja: %s", tok ? ct.format : loom_error());
    tokenizer_free(tok);
    /* a template no format matches (Gemma's turns) is refused, never rendered in another layout;
     * data.chat_format still picks one */
    f = fopen("test_chat_jinja/chat_template.jinja", "wb");
    if (!f) { CHECK(0, "chat_template.jinja"); return; }
    fputs("{{ bos_token }}\n{%- for message in messages %}<start_of_turn>{{ message['role'] }}\n", f);
    fclose(f);
    tok = tokenizer_open("test_chat_jinja");
    CHECK(tok && chat_template_init(&ct, tok, "") != 0 &&
              strstr(loom_error(), "(\"{{ bos_token }} {%- for message in messages %}<start_of_turn>") &&
              strstr(loom_error(), "data.chat_format") && strstr(loom_error(), "qwen3, chatml, llama3"),
          "an unknown template: %s", loom_error());
    CHECK(tok && chat_template_init(&ct, tok, "mistral") == 0 && !strcmp(ct.format, "mistral"),
          "data.chat_format over an unknown template: %s", loom_error());
    tokenizer_free(tok);
    if (system("rm -rf test_chat_jinja") != 0) CHECK(0, "cleanup");
}

/* Qwen3's real template (chat_template_qwen3.jinja) picks qwen3, Qwen2.5's default system qwen2.5,
 * other ChatML chatml; a Qwen3 reply's calls are read after its think block. */
static void check_qwen3_detect(void)
{
    static const struct { const char *tmpl, *want; } cases[] = {
        {NULL, "qwen3"},
        {"{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}", "qwen2.5"},
        {"{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content }}{%- endfor %}", "chatml"},
    };
    char cmd[2400];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf test_chat_qwen3 && mkdir test_chat_qwen3 && cp '%s' test_chat_qwen3/tokenizer.json",
                 fixture("qwen2.json"));
        if (system(cmd) != 0) { CHECK(0, "folder"); return; }
        if (!cases[i].tmpl) {
            snprintf(cmd, sizeof cmd, "cp '%s' test_chat_qwen3/chat_template.jinja", fixture("chat_template_qwen3.jinja"));
            if (system(cmd) != 0) { CHECK(0, "template"); return; }
        } else {
            FILE *f = fopen("test_chat_qwen3/chat_template.jinja", "wb");
            if (!f) { CHECK(0, "chat_template.jinja"); return; }
            fputs(cases[i].tmpl, f);
            fclose(f);
        }
        tokenizer *tok = tokenizer_open("test_chat_qwen3");
        chat_template ct;
        CHECK(tok && chat_template_init(&ct, tok, "") == 0 && !strcmp(ct.format, cases[i].want),
              "template %zu: want %s, got %s", i, cases[i].want, tok ? ct.format : loom_error());
        if (tok && i == 0) {
            const char *gen = "<think>\nMaybe <tool_call>\n{\"name\": \"no\", \"arguments\": {}}\n</tool_call>?\n</think>\n\n"
                              "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>";
            int32_t ids[256];
            long n = tokenizer_encode(tok, gen, strlen(gen), ids, 256);
            char out[256];
            cJSON *want = cJSON_Parse("[{\"name\":\"a\",\"arguments\":{\"x\":1}}]");
            CHECK(chat_extract_calls(&ct, ids, (int)n, out, sizeof out) > 0 && toolcall_match(out, want),
                  "qwen3: calls after the think block only: %s", out);
            cJSON_Delete(want);
        }
        tokenizer_free(tok);
    }
    if (system("rm -rf test_chat_qwen3") != 0) CHECK(0, "cleanup");
}

/* Mistral: picked from a folder's chat_template by its markers; a text reply has no calls; rows
 * its template refuses fail in one line naming file:line. */
static void check_mistral(void)
{
    FILE *f = fopen("test_chat_mistral/tokenizer_config.json", "wb");
    if (!f) {
        if (system("mkdir -p test_chat_mistral") != 0) { CHECK(0, "mkdir"); return; }
        f = fopen("test_chat_mistral/tokenizer_config.json", "wb");
    }
    FILE *src = fopen(fixture("mistral.json"), "rb"), *dst = fopen("test_chat_mistral/tokenizer.json", "wb");
    if (!f || !src || !dst) { CHECK(0, "mistral folder"); return; }
    fputs("{\"eos_token\": \"</s>\", \"chat_template\": \"{{- bos_token }}[AVAILABLE_TOOLS] ... [TOOL_CALLS] ...\"}", f);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, src)) > 0) fwrite(buf, 1, n, dst);
    fclose(f), fclose(src), fclose(dst);
    tokenizer *tok = tokenizer_open("test_chat_mistral");
    chat_template ct;
    CHECK(tok && chat_template_init(&ct, tok, "") == 0 && !strcmp(ct.format, "mistral") &&
              ct.eot == tokenizer_special(tok, "</s>"), "mistral detected from the chat_template: %s",
          tok ? loom_error() : "tokenizer");
    if (!tok) return;
    int32_t ids[64];
    long k = tokenizer_encode(tok, " Hello there", 12, ids, 64);
    char out[256];
    CHECK(chat_extract_calls(&ct, ids, (int)k, out, sizeof out) == 2 && !strcmp(out, "[]"), "no call: %s", out);
    f = fopen("test_chat_mistral/rows.jsonl", "wb");
    if (!f) { CHECK(0, "rows"); tokenizer_free(tok); return; }
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}, "
          "{\"role\": \"assistant\", \"content\": \"c\"}]}\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"tool_calls\": "
          "[{\"id\": \"call_1\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}], \"tools\": [{\"name\": \"f\"}]}\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"s\"}, "
          "{\"role\": \"assistant\", \"content\": \"c\"}]}\n", f);
    fclose(f);
    static const char *const want[] = {
        "rows.jsonl:2: chat format mistral needs turns that alternate user/assistant after the optional system message "
        "(messages[1] is user)",
        "rows.jsonl:2: chat format mistral needs tool call ids of 9 characters; messages[1] has \"call_1\"",
        "rows.jsonl:2: chat format mistral has a system message only as the first turn (messages[1])",
    };
    data_config dc;
    memset(&dc, 0, sizeof dc);
    snprintf(dc.train, sizeof dc.train, "test_chat_mistral/rows.jsonl");
    dc.max_len = 1024;
    for (int bad = 0; bad < 3; bad++) {
        sft_data d;
        CHECK(sft_data_load(&d, &dc, &ct, 1) != 0 && strstr(loom_error(), want[bad]) && !strchr(loom_error(), '\n'),
              "mistral bad row %d: %s", bad, loom_error());
        /* drop the row just refused (line 2): the next bad one moves up to line 2 */
        FILE *in = fopen(dc.train, "rb");
        char lines[4][512];
        int nl = 0;
        while (in && nl < 4 && fgets(lines[nl], sizeof lines[nl], in)) nl++;
        if (in) fclose(in);
        FILE *o = fopen(dc.train, "wb");
        for (int i = 0; o && i < nl; i++)
            if (i != 1) fputs(lines[i], o);
        if (o) fclose(o);
    }
    sft_data d;
    CHECK(sft_data_load(&d, &dc, &ct, 1) == 0 && d.train.n == 1, "the good row loads: %s", loom_error());
    if (d.train.n == 1) sft_data_free(&d);
    tokenizer_free(tok);
    if (system("rm -rf test_chat_mistral") != 0) CHECK(0, "cleanup");
}

/* loom's format renders OpenAI rows too; every assistant turn is in the loss. */
static void check_loom_multiturn(void)
{
    tokenizer *tok = tokenizer_open("byte");
    chat_template ct;
    if (!tok || chat_template_init(&ct, tok, "loom")) { CHECK(0, "loom template: %s", loom_error()); return; }
    const char *row = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"},"
                      " {\"role\": \"user\", \"content\": \"c\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"type\": "
                      "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}],"
                      " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";
    sft_example ex;
    CHECK(chat_example_parse(row, strlen(row), &ex, 0) == 0, "multi-turn parse: %s", loom_error());
    int32_t t[256];
    uint8_t m[256];
    int n = chat_render(&ct, &ex, t, m, 256), spans = 0, masked = 0;
    for (int i = 0; i < n; i++) {
        spans += m[i] && (i == 0 || !m[i - 1]);
        masked += m[i];
    }
    /* b<|call|>[]<|end|> = 1+1+2+1, then <|call|>[{"name":"f","arguments":{"x":1}}]<|end|> */
    CHECK(spans == 2 && masked == 5 + 1 + 34 + 1, "two assistant spans: %d spans, %d masked", spans, masked);
    CHECK(ex.answers && toolcall_match("[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", ex.answers), "answers: last turn");
    chat_example_free(&ex);
    /* a tool result cannot be written in loom's format: one line */
    const char *tool = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"r\"},"
                       " {\"role\": \"assistant\", \"content\": \"b\"}]}";
    CHECK(chat_example_parse(tool, strlen(tool), &ex, 0) == 0, "tool row parses");
    CHECK(chat_render(&ct, &ex, t, m, 256) < 0 && strstr(loom_error(), "cannot express a tool result"),
          "loom + tool role: %s", loom_error());
    chat_example_free(&ex);
    tokenizer_free(tok);
}

static void check_bad_rows(void)
{
    static const struct { const char *row, *want; } cases[] = {
        {"{\"messages\": []}", "'messages' must be a non-empty array"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", "no assistant turn"},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}", "messages[0]: 'role' must be"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages[0]: 'content' must be a string"},
        {"{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"g\", \"arguments\": {}}}]}],"
         " \"tools\": [{\"name\": \"f\"}]}", "messages[0].tool_calls: answer names tool 'g' which is not in 'tools'"},
        {"{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"[1\"}}]}],"
         " \"tools\": [{\"name\": \"f\"}]}", "'arguments' must be an object or a JSON string of one"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sft_example ex;
        CHECK(chat_example_parse(cases[i].row, strlen(cases[i].row), &ex, 0) != 0 && strstr(loom_error(), cases[i].want),
              "bad row %zu: want \"%s\", got \"%s\"", i, cases[i].want, loom_error());
    }
}

/* OpenAI rows load through sft_data like Needle rows; the padding share is what the rows waste. */
static void check_load_and_padding(void)
{
    tokenizer *tok = tokenizer_open("byte");
    chat_template ct;
    if (!tok || chat_template_init(&ct, tok, "loom")) { CHECK(0, "loom: %s", loom_error()); return; }
    FILE *f = fopen("test_chat_rows.jsonl", "wb");
    if (!f) { CHECK(0, "write rows"); return; }
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n"
          "{\"query\": \"q\", \"tools\": [], \"answers\": []}\n"
          "{\"messages\": [{\"role\": \"user\"}]}\n", f);
    fclose(f);
    data_config dc;
    memset(&dc, 0, sizeof dc);
    snprintf(dc.train, sizeof dc.train, "test_chat_rows.jsonl");
    dc.max_len = 1024;
    sft_data d;
    CHECK(sft_data_load(&d, &dc, &ct, 1) != 0 && strstr(loom_error(), "test_chat_rows.jsonl:3: 'messages' has no assistant turn"),
          "bad OpenAI row named by line: %s", loom_error());
    dc.skip_bad_lines = 1;
    CHECK(sft_data_load(&d, &dc, &ct, 1) == 0 && d.train.n == 2 && d.bad.count == 1, "load: %s", loom_error());
    if (d.train.n == 2) {
        double want = 1.0 - (double)(d.train.len[0] + d.train.len[1]) / (2.0 * d.T);
        double got = sft_padding_share(&d, 1, 0, 2);
        CHECK(got > want - 1e-12 && got < want + 1e-12, "padding share %g, want %g", got, want);
        sft_data_free(&d);
    }
    remove("test_chat_rows.jsonl");
    tokenizer_free(tok);
}

/* pyjson_dump in the three forms the templates use, on a dict with a repeated key (json.loads
 * keeps its first place and its last value), nested and empty containers, the number forms and
 * a string with escapes and UTF-8. Expected: what Python 3's json.dumps printed for
 * json.loads(row) with ensure_ascii=False and the same separators / indent. */
static void check_pyjson_dump(void)
{
    const char *row = "{\"b\": 1, \"a\": [1.0, 2, 1e5, -0, \"x\\ty\\u0001\\u00e9\"], "
                      "\"b\": {\"k\": null, \"e\": {}, \"l\": [], \"t\": true}}";
    const char *want_tojson = "{\"b\": {\"k\": null, \"e\": {}, \"l\": [], \"t\": true}, "
                              "\"a\": [1.0, 2, 100000.0, 0, \"x\\ty\\u0001\xc3\xa9\"]}";
    const char *want_compact = "{\"b\":{\"k\":null,\"e\":{},\"l\":[],\"t\":true},"
                               "\"a\":[1.0,2,100000.0,0,\"x\\ty\\u0001\xc3\xa9\"]}";
    const char *want_indent = "{\n    \"b\": {\n        \"k\": null,\n        \"e\": {},\n        \"l\": [],\n"
                              "        \"t\": true\n    },\n    \"a\": [\n        1.0,\n        2,\n"
                              "        100000.0,\n        0,\n        \"x\\ty\\u0001\xc3\xa9\"\n    ]\n}";
    cJSON *v = cJSON_Parse(row);
    CHECK(v && pyjson_keep_numbers(v, row, strlen(row)) == 0, "pyjson: parse: %s", loom_error());
    if (!v) return;
    const struct { const char *item, *key, *want; int indent; } form[] = {
        {", ", ": ", want_tojson, -1}, {",", ":", want_compact, -1}, {",", ": ", want_indent, 4}};
    for (int k = 0; k < 3; k++) {
        pyjson_buf b = {0};
        pyjson_dump(&b, v, form[k].item, form[k].key, form[k].indent);
        CHECK(!b.err && b.s && strcmp(b.s, form[k].want) == 0, "pyjson_dump form %d:\n%s\nwant\n%s", k,
              b.s ? b.s : "(null)", form[k].want);
        free(b.s);
    }
    CHECK(cJSON_IsObject(pyjson_get(v, "b")), "pyjson_get: the last of a repeated key");
    cJSON_Delete(v);
}

int main(void)
{
    check_pyjson_dump();
    check_load_and_padding();
    check_chatml();
    check_loom_multiturn();
    check_mistral();
    check_template_file();
    check_llama3_date();
    check_qwen3_detect();
    check_bad_rows();
    if (failures) { printf("%d checks failed\n", failures); return 1; }
    printf("test_chat: all checks passed\n");
    return 0;
}
