/* test_sft.c: fine-tuning data: exact rendering and loss-mask positions, padding and target
 * shift, the seeded split, length buckets, batch determinism across epochs and rank splits,
 * line-numbered errors, tool-call grading, and the shipped configs/data/tools.jsonl. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text/chat.h"
#include "base/error.h"
#include "core/text/sft_data.h"
#include "core/text/tokenizer.h"

static chat_template g_ct; /* loom's format on the byte tokenizer */
#include "core/text/toolcall.h"
#include "tests/check.h"

#define TOOL_F "{\"name\":\"f\",\"parameters\":{\"x\":\"int\"}}"
#define LINE_OK "{\"query\":\"hi\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\",\"arguments\":{\"x\":1}}]}"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(1); }
    fputs(text, f);
    fclose(f);
}

static data_config make_cfg(const char *train, const char *val, float val_split, int max_len, int skip)
{
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "%s", train);
    snprintf(c.val, sizeof c.val, "%s", val ? val : "");
    c.val_split = val_split;
    c.max_len = max_len;
    c.skip_bad_lines = skip;
    return c;
}

/* Expected-rendering builder. */
typedef struct { int32_t tok[512]; uint8_t mask[512]; int n; } expect;
static void ex_special(expect *e, int32_t id, int m) { e->tok[e->n] = id; e->mask[e->n++] = (uint8_t)m; }
static void ex_text(expect *e, const char *s, int m)
{
    for (; *s; s++) ex_special(e, (unsigned char)*s, m);
}

static void check_render(const char *json, const expect *want, const char *what)
{
    sft_example ex;
    int rc = chat_example_parse(json, strlen(json), &ex, 0);
    CHECK(rc == 0, "%s: parse: %s", what, loom_error());
    if (rc) return;
    int32_t tok[512];
    uint8_t mask[512];
    int n = chat_render(&g_ct, &ex, tok, mask, 512);
    CHECK(n == want->n, "%s: length %d, want %d", what, n, want->n);
    for (int t = 0; t < n && t < want->n; t++) {
        CHECK(tok[t] == want->tok[t], "%s: token %d is %d, want %d", what, t, tok[t], want->tok[t]);
        CHECK(mask[t] == want->mask[t], "%s: mask %d is %d, want %d", what, t, mask[t], want->mask[t]);
    }
    /* the prompt is exactly the prefix through <|assistant|> */
    int32_t ptok[512];
    int pn = chat_render_prompt(&g_ct, &ex, ptok, 512);
    CHECK(pn > 0 && pn <= n && tok[pn - 1] == TOK_ASSISTANT, "%s: prompt length %d", what, pn);
    CHECK(memcmp(ptok, tok, (size_t)pn * sizeof *tok) == 0, "%s: prompt differs from prefix", what);
    for (int t = 0; t < n; t++) CHECK(mask[t] == (t >= pn), "%s: mask %d vs prompt %d", what, t, pn);
    /* a cut rendering: the full length is still reported, nothing past cap written */
    int32_t small[8] = {0};
    small[5] = -7;
    CHECK(chat_render(&g_ct, &ex, small, NULL, 5) == n && small[5] == -7, "%s: cut render", what);
    chat_example_free(&ex);
}

static void test_render(void)
{
    expect e = {.n = 0};
    ex_special(&e, TOK_USER, 0);
    ex_special(&e, TOK_TOOLS, 0);
    ex_text(&e, "[" TOOL_F "]\nhi", 0);
    ex_special(&e, TOK_END, 0);
    ex_special(&e, TOK_ASSISTANT, 0);
    ex_special(&e, TOK_CALL, 1);
    ex_text(&e, "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", 1);
    ex_special(&e, TOK_END, 1);
    check_render(LINE_OK, &e, "plain");

    /* system + reasoning, no call; answer keys normalised to name-then-arguments, argument keys
     * kept in file order, and the tools printed compactly in file order */
    e.n = 0;
    ex_special(&e, TOK_SYSTEM, 0);
    ex_text(&e, "Be brief.", 0);
    ex_special(&e, TOK_END, 0);
    ex_special(&e, TOK_USER, 0);
    ex_special(&e, TOK_TOOLS, 0);
    ex_text(&e, "[{\"name\":\"g\",\"description\":\"d\"}," TOOL_F "]\nq <|end|>", 0);
    ex_special(&e, TOK_END, 0);
    ex_special(&e, TOK_ASSISTANT, 0);
    ex_special(&e, TOK_THINK, 1);
    ex_text(&e, "Use f.", 1);
    ex_special(&e, TOK_CALL, 1);
    ex_text(&e, "[{\"name\":\"f\",\"arguments\":{\"b\":2,\"a\":[1,\"s\"]}}]", 1);
    ex_special(&e, TOK_END, 1);
    check_render("{\"system\": \"Be brief.\", \"query\": \"q <|end|>\", \"reasoning\": \"Use f.\","
                 " \"tools\": [{\"name\": \"g\", \"description\": \"d\"}, " TOOL_F "],"
                 " \"answers\": [{\"arguments\": {\"b\": 2, \"a\": [1, \"s\"]}, \"name\": \"f\"}]}",
                 &e, "system+reasoning");

    e.n = 0;
    ex_special(&e, TOK_USER, 0);
    ex_special(&e, TOK_TOOLS, 0);
    ex_text(&e, "[" TOOL_F "]\nhello", 0);
    ex_special(&e, TOK_END, 0);
    ex_special(&e, TOK_ASSISTANT, 0);
    ex_special(&e, TOK_CALL, 1);
    ex_text(&e, "[]", 1);
    ex_special(&e, TOK_END, 1);
    check_render("{\"query\":\"hello\",\"tools\":[" TOOL_F "],\"answers\":[],\"reasoning\":\"\"}", &e,
                 "no call, empty reasoning");

    /* a prompt-only example (for sampling) parses without answers */
    sft_example ex;
    const char *p = "{\"query\":\"hi\",\"tools\":[]}";
    CHECK(chat_example_parse(p, strlen(p), &ex, 0) != 0 && strstr(loom_error(), "missing field 'answers'"),
          "answers required: %s", loom_error());
    CHECK(chat_example_parse(p, strlen(p), &ex, CHAT_PARSE_PROMPT_ONLY) == 0 && !ex.answers,
          "prompt only: %s", loom_error());
    CHECK(chat_render_prompt(&g_ct, &ex, NULL, 0) == 2 + 2 + 1 + 2 + 2, "prompt-only length");
    chat_example_free(&ex);
}

/* A file of n lines whose queries have lengths that vary with the line. */
static void write_lines(const char *path, int n, int first)
{
    FILE *f = fopen(path, "wb");
    for (int i = first; i < first + n; i++)
        fprintf(f, "{\"query\":\"q%d %.*s\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\","
                   "\"arguments\":{\"x\":%d}}]%s}\n", i, i % 13, "zzzzzzzzzzzzzzzzz", i,
                i % 3 == 0 ? ",\"reasoning\":\"r\"" : "");
    fclose(f);
}

/* Every row of a set against the batch filling rules. */
static void check_rows(const sft_data *d, const sft_set *s, int is_val)
{
    int T = d->T;
    int32_t *tok = malloc((size_t)T * sizeof *tok), *tgt = malloc((size_t)T * sizeof *tgt);
    for (int i = 0; i < s->n; i++) {
        const int32_t *row = s->tokens + (size_t)i * T;
        const uint8_t *mask = s->loss_mask + (size_t)i * T;
        int32_t full[1024];
        uint8_t fmask[1024];
        int n = chat_render(&g_ct, &s->ex[i], full, fmask, 1024);
        CHECK(s->len[i] == (n < T ? n : T), "row %d len %d vs %d", i, s->len[i], n);
        CHECK(memcmp(row, full, (size_t)s->len[i] * sizeof *row) == 0, "row %d tokens", i);
        long want = 0;
        for (int t = 0; t < T; t++) {
            if (t >= s->len[i]) CHECK(row[t] == TOK_PAD && mask[t] == 0, "row %d pad at %d", i, t);
            else CHECK(mask[t] == fmask[t], "row %d mask at %d", i, t);
            want += t >= 1 && mask[t];
        }
        if (!is_val) continue;
        long got = sft_val_batch(d, i, 1, T, tok, tgt);
        CHECK(got == want && sft_count_loss_tokens(tgt, (size_t)T) == want, "val row %d: %ld loss tokens, want %ld", i, got, want);
        for (int t = 0; t < T; t++) {
            CHECK(tok[t] == row[t], "val row %d token %d", i, t);
            int32_t w = t + 1 < T && mask[t + 1] ? row[t + 1] : -1;
            CHECK(tgt[t] == w, "val row %d target %d is %d, want %d", i, t, tgt[t], w);
        }
    }
    free(tok);
    free(tgt);
}

static void test_split(void)
{
    write_lines("sft_t_split.jsonl", 200, 0);
    data_config c = make_cfg("sft_t_split.jsonl", NULL, 0.25f, 1024, 0);
    sft_data a, b, s2;
    CHECK(sft_data_load(&a, &c, &g_ct, 7) == 0, "load: %s", loom_error());
    CHECK(sft_data_load(&b, &c, &g_ct, 7) == 0, "load again: %s", loom_error());
    CHECK(sft_data_load(&s2, &c, &g_ct, 8) == 0, "load seed 8: %s", loom_error());
    CHECK(a.train.n + a.val.n == 200, "split sizes %d + %d", a.train.n, a.val.n);
    CHECK(a.val.n >= 25 && a.val.n <= 75, "val fraction %d / 200", a.val.n);
    char where[201] = {0};
    for (int i = 0; i < a.train.n; i++) where[a.train.ex[i].line] += 1;
    for (int i = 0; i < a.val.n; i++) where[a.val.ex[i].line] += 2;
    for (int l = 1; l <= 200; l++) CHECK(where[l] == 1 || where[l] == 2, "line %d in %d sets", l, where[l]);
    CHECK(b.val.n == a.val.n, "same seed, same split");
    for (int i = 0; i < a.val.n && i < b.val.n; i++) CHECK(a.val.ex[i].line == b.val.ex[i].line, "val %d", i);
    int same = s2.val.n == a.val.n;
    for (int i = 0; same && i < a.val.n; i++) same = a.val.ex[i].line == s2.val.ex[i].line;
    CHECK(!same, "seed 8 gives the same split as seed 7");
    check_rows(&a, &a.train, 0);
    check_rows(&a, &a.val, 1);
    /* rows past the val set are padding only */
    int32_t tok[128], tgt[128];
    CHECK(sft_val_batch(&a, a.val.n, 1, 128, tok, tgt) == 0 && tok[0] == TOK_PAD && tgt[127] == -1, "val pad row");

    /* lines appended later do not move earlier lines between the sets */
    write_lines("sft_t_split2.jsonl", 250, 0);
    data_config c2 = make_cfg("sft_t_split2.jsonl", NULL, 0.25f, 1024, 0);
    sft_data big;
    CHECK(sft_data_load(&big, &c2, &g_ct, 7) == 0, "load 250: %s", loom_error());
    for (int i = 0; i < big.val.n; i++)
        if (big.val.ex[i].line <= 200) CHECK(where[big.val.ex[i].line] == 2, "line %d moved", big.val.ex[i].line);
    sft_data_free(&big);

    /* a separate val file: the training file is used whole */
    write_lines("sft_t_val.jsonl", 9, 500);
    data_config c3 = make_cfg("sft_t_split.jsonl", "sft_t_val.jsonl", 0.5f, 1024, 0);
    sft_data v;
    CHECK(sft_data_load(&v, &c3, &g_ct, 7) == 0 && v.train.n == 200 && v.val.n == 9, "val file: %s", loom_error());
    sft_data_free(&v);
    data_config c4 = make_cfg("sft_t_split.jsonl", NULL, 1.0f, 1024, 0);
    CHECK(sft_data_load(&v, &c4, &g_ct, 7) != 0 && strstr(loom_error(), "all 200 examples went to validation"),
          "val_split 1: %s", loom_error());
    sft_data_free(&a);
    sft_data_free(&b);
    sft_data_free(&s2);
}

/* One example whose query is q_len bytes; returns its rendered length. */
static int write_len_file(const char *path, const int *q_lens, int n)
{
    FILE *f = fopen(path, "wb");
    int longest = 0;
    for (int i = 0; i < n; i++) {
        char q[2048];
        memset(q, 'a' + i % 26, (size_t)q_lens[i]);
        q[q_lens[i]] = '\0';
        char line[2300];
        snprintf(line, sizeof line, "{\"query\":\"%s\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\","
                 "\"arguments\":{\"x\":1}}]}", q);
        fprintf(f, "%s\n", line);
        sft_example ex;
        chat_example_parse(line, strlen(line), &ex, 0);
        int len = chat_render(&g_ct, &ex, NULL, NULL, 0);
        if (len > longest) longest = len;
        chat_example_free(&ex);
    }
    fclose(f);
    return longest;
}

static void test_buckets(void)
{
    /* the fixed part of a rendering here: 2 + 39 + 1 + 2 + 1 + 34 + 1 = 80 tokens around the query */
    int shortq[] = {5, 10, 20};
    int longq[] = {5, 100, 60};
    int hugeq[] = {5, 300, 250, 10, 400};
    sft_data d;
    struct { int *q; int n, max_len, want_T, want_cut; const char *what; } cases[] = {
        {shortq, 3, 1024, 128, 0, "short -> 128"},
        {longq, 3, 1024, 256, 0, "longest 180 -> 256"},
        {hugeq, 5, 1024, 512, 0, "longest 480 -> 512"},
        {hugeq, 5, 256, 256, 3, "cap 256 cuts 3"},
        {hugeq, 5, 200, 200, 3, "cap 200 (not a power of two)"},
        {shortq, 3, 64, 64, 3, "cap below 128"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int longest = write_len_file("sft_t_len.jsonl", cases[k].q, cases[k].n);
        data_config c = make_cfg("sft_t_len.jsonl", NULL, 0.0f, cases[k].max_len, 0);
        CHECK(sft_data_load(&d, &c, &g_ct, 1) == 0, "%s: %s", cases[k].what, loom_error());
        CHECK(d.T == cases[k].want_T, "%s: T %d", cases[k].what, d.T);
        CHECK(d.n_truncated == cases[k].want_cut, "%s: truncated %d", cases[k].what, d.n_truncated);
        CHECK(d.longest == longest, "%s: longest %d vs %d", cases[k].what, d.longest, longest);
        check_rows(&d, &d.train, 0);
        sft_data_free(&d);
    }
    /* an 11-token example still gets the minimum bucket */
    write_file("sft_t_len.jsonl", "{\"query\":\"\",\"tools\":[],\"answers\":[]}\n");
    data_config c = make_cfg("sft_t_len.jsonl", NULL, 0.0f, 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) == 0 && d.longest == 11 && d.T == SFT_MIN_LEN, "tiny: T %d longest %d (%s)",
          d.T, d.longest, loom_error());
    sft_data_free(&d);
}

static void test_batches(void)
{
    write_lines("sft_t_batch.jsonl", 37, 0);
    data_config c = make_cfg("sft_t_batch.jsonl", NULL, 0.0f, 1024, 0);
    sft_data d;
    if (sft_data_load(&d, &c, &g_ct, 3) != 0) { CHECK(0, "load: %s", loom_error()); return; }
    int n = d.train.n, T = d.T;
    CHECK(n == 37 && T == 128, "n %d T %d", n, T);
    /* each epoch is a permutation, and epochs differ */
    int order[2][37], seen[37];
    for (int e = 0; e < 2; e++) {
        memset(seen, 0, sizeof seen);
        for (int g = 0; g < n; g++) seen[order[e][g] = sft_sample_index(&d, 11, e, (uint64_t)g)]++;
        for (int i = 0; i < n; i++) CHECK(seen[i] == 1, "epoch %d: example %d seen %d times", e, i, seen[i]);
    }
    CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0, "epochs 0 and 1 in the same order");
    /* (e, g) and (e + 1, g - n) are the same sample; the seed changes the order */
    CHECK(sft_sample_index(&d, 11, 0, (uint64_t)n + 5) == order[1][5], "running index into epoch 1");
    int diff = 0;
    for (int g = 0; g < n; g++) diff += sft_sample_index(&d, 12, 0, (uint64_t)g) != order[0][g];
    CHECK(diff > 0, "seed 12 gives the order of seed 11");

    /* a global batch of 12 straddling the epoch boundary == any split over "ranks" */
    enum { B = 12 };
    uint64_t g0 = 31;
    int32_t *tok = malloc((size_t)B * T * sizeof *tok), *tgt = malloc((size_t)B * T * sizeof *tgt);
    int32_t *tok2 = malloc((size_t)B * T * sizeof *tok), *tgt2 = malloc((size_t)B * T * sizeof *tgt);
    long count = sft_batch(&d, 11, 0, g0, B, T, tok, tgt);
    CHECK(count == sft_count_loss_tokens(tgt, (size_t)B * T) && count > 0, "count %ld", count);
    CHECK(sft_batch_loss_tokens(&d, 11, 0, g0, B, T) == count, "loss tokens without a batch");
    int splits[][4] = {{12, 0, 0, 0}, {6, 6, 0, 0}, {4, 4, 4, 0}, {3, 3, 3, 3}, {5, 1, 6, 0}};
    for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
        long sum = 0;
        memset(tok2, 0, (size_t)B * T * sizeof *tok2);
        /* fill the ranks in reverse so the order cache sees epochs out of turn */
        int starts[4], k = 0, at = 0;
        for (; k < 4 && splits[s][k]; k++) { starts[k] = at; at += splits[s][k]; }
        for (int r = k - 1; r >= 0; r--)
            sum += sft_batch(&d, 11, 0, g0 + (uint64_t)starts[r], splits[s][r], T,
                             tok2 + (size_t)starts[r] * T, tgt2 + (size_t)starts[r] * T);
        CHECK(sum == count, "split %zu: %ld loss tokens vs %ld", s, sum, count);
        CHECK(memcmp(tok, tok2, (size_t)B * T * sizeof *tok) == 0, "split %zu: tokens differ", s);
        CHECK(memcmp(tgt, tgt2, (size_t)B * T * sizeof *tgt) == 0, "split %zu: targets differ", s);
    }
    /* the rows are the examples named by sft_sample_index, with the shift */
    for (int i = 0; i < B; i++) {
        int idx = sft_sample_index(&d, 11, 0, g0 + (uint64_t)i);
        const int32_t *row = d.train.tokens + (size_t)idx * T;
        CHECK(memcmp(tok + (size_t)i * T, row, (size_t)T * sizeof *row) == 0, "row %d tokens", i);
    }
    /* same arguments, same batch; a different epoch, a different batch */
    sft_batch(&d, 11, 0, g0, B, T, tok2, tgt2);
    CHECK(memcmp(tok, tok2, (size_t)B * T * sizeof *tok) == 0, "repeat differs");
    sft_batch(&d, 11, 1, g0, B, T, tok2, tgt2);
    CHECK(memcmp(tok, tok2, (size_t)B * T * sizeof *tok) != 0, "epoch 1 batch equals epoch 0 batch");
    /* a longer T than the rows pads; a shorter one cuts but keeps the shift */
    int32_t wide[300], wtgt[300];
    sft_batch(&d, 11, 0, 0, 1, 300, wide, wtgt);
    CHECK(wide[299] == TOK_PAD && wtgt[299] == -1 && wtgt[T - 1] == -1, "wide row padding");
    CHECK(memcmp(wide, d.train.tokens + (size_t)order[0][0] * T, (size_t)T * sizeof *wide) == 0, "wide row");
    CHECK(sft_steps_per_epoch(&d, 8) == 5 && sft_steps_per_epoch(&d, 37) == 1, "steps per epoch");
    free(tok); free(tgt); free(tok2); free(tgt2);
    sft_data_free(&d);
}

/* One bad line at line 4 after two good lines and a blank line. */
static void check_bad(const char *bad, const char *want)
{
    char text[2048];
    snprintf(text, sizeof text, "%s\n%s\n\n%s\n%s\n", LINE_OK, LINE_OK, bad, LINE_OK);
    write_file("sft_t_bad.jsonl", text);
    data_config c = make_cfg("sft_t_bad.jsonl", NULL, 0.0f, 1024, 0);
    sft_data d;
    char full[256];
    snprintf(full, sizeof full, "sft_t_bad.jsonl:4: %s", want);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), full), "want \"%s\", got \"%s\"", full, loom_error());
    c.skip_bad_lines = 1;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) == 0, "skip: %s", loom_error());
    CHECK(d.train.n == 3 && d.bad.count == 1 && d.bad.line[0] == 4 && strstr(d.bad.first, full),
          "skip: %d examples, %d bad (line %d: %s)", d.train.n, d.bad.count, d.bad.line[0], d.bad.first);
    sft_data_free(&d);
}

static void test_bad_lines(void)
{
    const char *T2 = "\"tools\":[" TOOL_F "]";
    char b[8][256];
    snprintf(b[0], 256, "{\"query\":\"hi\",%s,\"answers\":[}", T2);
    snprintf(b[1], 256, "{\"query\":\"hi\",%s}", T2);
    snprintf(b[2], 256, "{\"query\":\"hi\",\"tools\":{},\"answers\":[]}");
    snprintf(b[3], 256, "{\"query\":\"hi\",%s,\"answers\":[{\"name\":\"foo\",\"arguments\":{}}]}", T2);
    snprintf(b[4], 256, "{%s,\"answers\":[]}", T2);
    snprintf(b[5], 256, "{\"query\":\"hi\",%s,\"answers\":[{\"name\":\"f\",\"arguments\":[]}]}", T2);
    snprintf(b[6], 256, "[1, 2]");
    snprintf(b[7], 256, "{\"query\":\"hi\",%s,\"answers\":[]} x", T2);
    const char *want[8] = {"invalid JSON", "missing field 'answers'", "'tools' must be an array",
                           "answer names tool 'foo' which is not in 'tools'", "missing field 'query'",
                           "answers[0]: 'arguments' must be an object", "line is not a JSON object",
                           "invalid JSON (extra text"};
    for (int i = 0; i < 8; i++) check_bad(b[i], want[i]);
    check_bad("{\"query\":\"hi\",\"tools\":[" TOOL_F "," TOOL_F "],\"answers\":[]}", "tool 'f' appears twice");
    check_bad("{\"query\":\"hi\",\"tools\":[{\"parameters\":{}}],\"answers\":[]}", "tools[0]: missing 'name'");
    check_bad("{\"query\":\"hi\",\"tools\":[],\"answers\":[],\"reasoning\":3}", "'reasoning' must be a string");

    /* several bad lines, skipped and listed; CRLF line ends and a BOM are fine */
    char text[4096];
    snprintf(text, sizeof text, "\xEF\xBB\xBF%s\r\n\r\n%s\n%s\n%s\n%s\n%s\r\n", LINE_OK, b[0], b[1], b[2], b[3], LINE_OK);
    write_file("sft_t_bad.jsonl", text);
    data_config c = make_cfg("sft_t_bad.jsonl", NULL, 0.0f, 1024, 1);
    sft_data d;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) == 0, "skip several: %s", loom_error());
    CHECK(d.train.n == 2 && d.bad.count == 4, "skip several: %d good %d bad", d.train.n, d.bad.count);
    for (int i = 0; i < 4 && i < d.bad.count; i++) CHECK(d.bad.line[i] == 3 + i, "bad line %d is %d", i, d.bad.line[i]);
    CHECK(strstr(d.bad.first, "sft_t_bad.jsonl:3: invalid JSON") != NULL, "first: %s", d.bad.first);
    CHECK(d.train.n == 2 && d.train.ex[1].line == 7, "line of the last example");
    sft_data_free(&d);
    c.skip_bad_lines = 0;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "sft_t_bad.jsonl:3: invalid JSON"),
          "no skip: %s", loom_error());

    /* empty, blank-only, all-bad and missing files */
    write_file("sft_t_empty.jsonl", "");
    c = make_cfg("sft_t_empty.jsonl", NULL, 0.1f, 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "sft_t_empty.jsonl: no examples"), "empty: %s", loom_error());
    write_file("sft_t_empty.jsonl", "\n  \n\n");
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "sft_t_empty.jsonl: no examples"), "blank: %s", loom_error());
    write_file("sft_t_empty.jsonl", "{\n[\n");
    c.skip_bad_lines = 1;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "no valid examples (2 bad lines skipped")
          && d.bad.count == 2, "all bad: %s", loom_error());
    c = make_cfg("sft_t_split.jsonl", "sft_t_empty.jsonl", 0.1f, 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "sft_t_empty.jsonl:1: invalid JSON"),
          "bad val file: %s", loom_error());
    c = make_cfg("sft_t_does_not_exist.jsonl", NULL, 0.1f, 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "sft_t_does_not_exist.jsonl: cannot open"),
          "missing: %s", loom_error());
}

static void test_toolcall(void)
{
    cJSON *ans = cJSON_Parse("[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}},"
                             "{\"name\":\"g\",\"arguments\":{}}]");
    struct { const char *gen; int valid, names, exact; } cases[] = {
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}]", 1, 1, 1},
        {" [{\"arguments\":{\"l\":[1,2],\"s\":\"Ab\",\"x\":1.0},\"name\":\"f\"},{\"name\":\"g\",\"arguments\":{}}]\n", 1, 1, 1},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":2,\"s\":\"Ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}]", 1, 1, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}]", 1, 1, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[2,1]}},{\"name\":\"g\",\"arguments\":{}}]", 1, 1, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\"}},{\"name\":\"g\",\"arguments\":{}}]", 1, 1, 0},
        {"[{\"name\":\"g\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}}]", 1, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}}]", 1, 0, 0},
        {"[]", 1, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}]", 0, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]},\"id\":1},{\"name\":\"g\",\"arguments\":{}}]", 0, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}] x", 0, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"s\":\"Ab\",\"l\":[1,2]}},{\"name\":\"g\",\"arguments\":{}}", 0, 0, 0},
        {"[{\"name\":1,\"arguments\":{}}]", 0, 0, 0},
        {"{\"name\":\"g\",\"arguments\":{}}", 0, 0, 0},
        {"[1]", 0, 0, 0}, {"", 0, 0, 0}, {"[", 0, 0, 0}, {"\xff\xfe", 0, 0, 0}, {NULL, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        toolcall_grade g = toolcall_grade_text(cases[i].gen, ans);
        CHECK(g.valid == cases[i].valid && g.names == cases[i].names && g.exact == cases[i].exact,
              "case %zu (%s): %d %d %d", i, cases[i].gen ? cases[i].gen : "NULL", g.valid, g.names, g.exact);
        CHECK(toolcall_match(cases[i].gen, ans) == cases[i].exact, "match case %zu", i);
    }
    cJSON *none = cJSON_Parse("[]");
    CHECK(toolcall_match("[]", none) && !toolcall_match("[{\"name\":\"g\",\"arguments\":{}}]", none), "no call");
    CHECK(!toolcall_match("[]", NULL), "NULL answers");
    cJSON_Delete(none);
    cJSON_Delete(ans);

    /* extraction from generated tokens */
    int32_t gen[32];
    int n = 0;
    gen[n++] = TOK_THINK; gen[n++] = 'x'; gen[n++] = TOK_CALL;
    for (const char *s = "[1]"; *s; s++) gen[n++] = *s;
    gen[n++] = TOK_END; gen[n++] = 'z';
    char out[16];
    CHECK(toolcall_extract(&g_ct, gen, n, out, sizeof out) == 3 && strcmp(out, "[1]") == 0, "extract: %s", out);
    CHECK(toolcall_extract(&g_ct, gen, n - 2, out, sizeof out) == 3 && strcmp(out, "[1]") == 0, "extract to the end");
    CHECK(toolcall_extract(&g_ct, gen, n, out, 3) == 2 && strcmp(out, "[1") == 0, "extract cut: %s", out);
    CHECK(toolcall_extract(&g_ct, gen, 2, out, sizeof out) == -1 && out[0] == '\0', "no call token");
}

/* Needle's exact-call rule (toolcall_needle_match): every expectation is what needle/model/finetune.py
 * _calls_of(generated) == _calls_of(answers) gave (cactus-needle 3.2.8), a NULL generation being an
 * output without a call block. */
static void test_toolcall_needle(void)
{
    static const struct { const char *gen, *answers; int match; } cases[] = {
        {NULL, "[]", 1},
        {NULL, "[{\"name\":\"f\",\"arguments\":{}}]", 0},
        {"[]", "[]", 1},
        {"[]", "[{\"name\":\"f\",\"arguments\":{}}]", 0},
        {"[{\"arguments\":{\"b\":2,\"a\":1},\"name\":\"f\"}]", "[{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":2}}]", 1},
        {"[{\"name\":\"g\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{}}]", "[{\"name\":\"f\",\"arguments\":{}},{\"name\":\"g\",\"arguments\":{}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1.0}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1.00,\"y\":1e2}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1.0,\"y\":100.0}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{},\"id\":\"c1\"}]", "[{\"name\":\"f\",\"arguments\":{}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":null},{\"name\":\"f\"},{\"name\":\"f\",\"arguments\":0},{\"name\":\"f\",\"arguments\":\"\"},{\"name\":\"f\",\"arguments\":[]}]", "[{\"name\":\"f\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{}},{\"name\":\"f\",\"arguments\":{}}]", 1},
        {"[1,\"x\",{\"name\":\"f\",\"arguments\":{}},null]", "[{\"name\":\"f\",\"arguments\":{}}]", 1},
        {"[{", "[]", 0},
        {"{\"name\":\"f\",\"arguments\":{}}", "[]", 0},
        {"[] x", "[]", 0},
        {"", "[]", 0},
        {"[{\"name\":5,\"arguments\":{}}]", "[{\"name\":\"5\",\"arguments\":{}}]", 1},
        {"[{\"arguments\":{}}]", "[{\"name\":\"None\",\"arguments\":{}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"a\":{\"d\":1,\"c\":[2,{\"z\":0,\"y\":1}]}}}]", "[{\"name\":\"f\",\"arguments\":{\"a\":{\"c\":[2,{\"y\":1,\"z\":0}],\"d\":1}}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"a\":[1,2]}}]", "[{\"name\":\"f\",\"arguments\":{\"a\":[2,1]}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1,\"x\":2}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":2}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"s\":\"\\u00e9\\ud83d\\ude00\"}}]", "[{\"name\":\"f\",\"arguments\":{\"s\":\"\303\251\360\237\230\200\"}}]", 1},
        {" \n[ ] \t", "[]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":NaN,\"y\":-Infinity}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":NaN,\"y\":-Infinity}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":-0}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":0}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":-0.0}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":0.0}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":01}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"s\":\"a\tb\"}}]", "[{\"name\":\"f\",\"arguments\":{\"s\":\"a\\tb\"}}]", 0},
        {"\357\273\277[]", "[]", 0},
        {"[{\"name\":\"F\",\"arguments\":{}}]", "[{\"name\":\"f\",\"arguments\":{}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":\"1\"}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":true}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]", 0},
        {"[{\"name\":[\"f\"],\"arguments\":{}}]", "[{\"name\":\"['f']\",\"arguments\":{}}]", 1},
        {"[{\"name\":{\"a\":\"it's\"},\"arguments\":{}}]", "[{\"name\":\"{'a': \\\"it's\\\"}\",\"arguments\":{}}]", 1},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":12345678901234567890123}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":12345678901234567890124}}]", 0},
        {"nope", "\"a string\"", 1},
        /* a "</tool_call>" inside the answers cuts Needle's reference as it cuts the output */
        {"[{\"name\":\"f\",\"arguments\":{\"s\":\"", "[{\"name\":\"f\",\"arguments\":{\"s\":\"</tool_call>\"}}]", 1},
        {NULL, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(toolcall_needle_match(cases[i].gen, cases[i].answers) == cases[i].match, "needle case %zu: %s vs %s", i,
              cases[i].gen ? cases[i].gen : "NULL (no call block)", cases[i].answers ? cases[i].answers : "NULL");
    /* where it parts from loom's rule: 1 == 1.0 for loom, not for Needle; no call block */
    cJSON *one = cJSON_Parse("[{\"name\":\"f\",\"arguments\":{\"x\":1}}]"), *none = cJSON_Parse("[]");
    CHECK(toolcall_match("[{\"name\":\"f\",\"arguments\":{\"x\":1.0}}]", one) &&
          !toolcall_needle_match("[{\"name\":\"f\",\"arguments\":{\"x\":1.0}}]", "[{\"name\":\"f\",\"arguments\":{\"x\":1}}]"),
          "1.0 against 1");
    CHECK(toolcall_needle_match(NULL, "[]") && toolcall_match("[]", none), "an empty answer");
    cJSON_Delete(one);
    cJSON_Delete(none);
    /* the pairs as json.dumps writes them (Python printed the second column) */
    static const struct { const char *text, *want; } forms[] = {
        {"[{\"name\":\"f\",\"arguments\":{\"b\":[1,2.50],\"a\":\"\\u00e9\"}}]",
         "\"f\" {\"a\": \"\\u00e9\", \"b\": [1, 2.5]}\n"},
        {"[{\"name\":\"f\",\"arguments\":[0.1,1e16,1e-5,100.0,1.5e300,0.0001,123.456,-0.0,1e400,5e-324,"
         "1234567890123456.0,12345678901234567.0,0.00012]}]",
         "\"f\" [0.1, 1e+16, 1e-05, 100.0, 1.5e+300, 0.0001, 123.456, -0.0, Infinity, 5e-324, 1234567890123456.0, "
         "1.2345678901234568e+16, 0.00012]\n"},
        {"[{\"name\":\"f\\n\\\"\",\"arguments\":{\"k\":\"\\u0001\\u007f\"}},{\"name\":true,\"arguments\":\"s\"}]",
         "\"f\\n\\\"\" {\"k\": \"\\u0001\\u007f\"}\n\"True\" \"s\"\n"},
        {"[]", ""},
    };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        char *out = NULL;
        int rc = toolcall_needle_calls(forms[i].text, &out);
        CHECK(rc == 1 && out && strcmp(out, forms[i].want) == 0, "needle form %zu: %s", i, out ? out : "None");
        free(out);
    }
    char *out = NULL;
    CHECK(toolcall_needle_calls("[1", &out) == 0 && !out, "not JSON: None");
    CHECK(toolcall_needle_calls(NULL, &out) == 1 && out && out[0] == '\0', "no call block: []");
    free(out);
}

static void test_shipped(void)
{
    const char *src = getenv("LOOM_SOURCE_DIR");
    if (!src) { CHECK(0, "LOOM_SOURCE_DIR is not set (set by CTest)"); return; }
    data_config c = make_cfg("", NULL, 0.1f, 1024, 0);
    snprintf(c.train, sizeof c.train, "%s/configs/data/tools.jsonl", src);
    sft_data d;
    if (sft_data_load(&d, &c, &g_ct, 1234) != 0) { CHECK(0, "shipped data: %s", loom_error()); return; }
    CHECK(d.bad.count == 0 && d.train.n + d.val.n >= 500, "%d + %d examples", d.train.n, d.val.n);
    CHECK(d.T <= 512 && d.n_truncated == 0, "T %d (longest %d), %d cut", d.T, d.longest, d.n_truncated);
    int calls = 0, empty = 0;
    for (int i = 0; i < d.train.n + d.val.n; i++) {
        const sft_example *e = i < d.train.n ? &d.train.ex[i] : &d.val.ex[i - d.train.n];
        CHECK(toolcall_match(e->answers_json, e->answers), "line %d does not grade itself", e->line);
        calls += cJSON_GetArraySize(e->answers) > 0;
        empty += cJSON_GetArraySize(e->answers) == 0;
    }
    CHECK(calls > 0 && empty > 0, "%d examples with calls, %d without", calls, empty);
    printf("shipped tools.jsonl: %d train, %d val, T %d, longest %d\n", d.train.n, d.val.n, d.T, d.longest);
    sft_data_free(&d);
}

int main(void)
{
    tokenizer *tok = tokenizer_open("byte");
    if (!tok || chat_template_init(&g_ct, tok, "loom")) { printf("template: %s\n", loom_error()); return 1; }
    test_render();
    test_split();
    test_buckets();
    test_batches();
    test_bad_lines();
    test_toolcall();
    test_toolcall_needle();
    test_shipped();
    tokenizer_free(tok);
    if (failures) { printf("%d checks failed\n", failures); return 1; }
    printf("test_sft: all checks passed\n");
    return 0;
}
