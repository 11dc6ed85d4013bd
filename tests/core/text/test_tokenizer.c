/* test_tokenizer.c: the tokenizers against the `tokenizers` library: for each family fixture
 * (tests/fixtures/tokenizers/, made by make_fixtures.py) loom's ids equal the library's on the
 * 50 KB test text and decode(encode(x)) == x; the byte tokenizer keeps its ids; bad files fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/error.h"
#include "core/text/tokenizer.h"
#include "core/text/tokenizer_internal.h"

#include "tests/check.h"

static const char *fixture(const char *name)
{
    static char path[1024];
    const char *src = getenv("LOOM_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/%s", src ? src : ".", name);
    return path;
}

/* The ids of family `name` on text equal the library's, and decoding gives the (repaired) text
 * (unless added tokens with lstrip / rstrip took whitespace: no round_trip then). */
static void check_family(const char *name, const char *text, size_t n, int nfc, int round_trip)
{
    char file[64];
    snprintf(file, sizeof file, "%s.json", name);
    tokenizer *t = tokenizer_open(fixture(file));
    CHECK(t != NULL, "%s: open: %s", name, loom_error());
    if (!t) return;
    snprintf(file, sizeof file, "%s.ids", name);
    size_t bytes;
    unsigned char *want = (unsigned char *)check_read_file(fixture(file), &bytes);
    CHECK(want != NULL, "%s: no fixture ids", name);
    size_t nwant = bytes / 2, count = 0;
    int32_t *got = tokenizer_encode_alloc(t, text, n, &count);
    CHECK(got != NULL, "%s: encode: %s", name, loom_error());
    size_t first = 0;
    while (got && want && first < count && first < nwant && got[first] == (want[2 * first] | want[2 * first + 1] << 8))
        first++;
    CHECK(got && want && count == nwant && first == count, "%s: %zu ids, the library %zu; first difference at %zu "
          "(loom %d, library %d)", name, count, nwant, first, got && first < count ? got[first] : -1,
          want && first < nwant ? want[2 * first] | want[2 * first + 1] << 8 : -1);
    /* decode(encode(x)) == x, x as it reaches the tokenizer (invalid UTF-8 replaced; the text has
     * no NUL, so utf8proc_NFC's NUL-terminated form is whole) */
    int err;
    size_t fixed_n = n;
    char *fixed = tok_utf8_repair(text, n, &fixed_n, &err);
    const char *x = fixed ? fixed : text;
    if (nfc) { /* Qwen2 normalizes to NFC first: that is the text it round-trips */
        char *c = (char *)utf8proc_NFC((const utf8proc_uint8_t *)x);
        free(fixed);
        x = fixed = c;
        fixed_n = strlen(c);
    }
    size_t cap = 4 * n + 16;
    char *back = malloc(cap);
    size_t bn = got && back ? tokenizer_decode(t, got, count, back, cap, 0) : 0;
    size_t same = 0;
    while (same < bn && same < fixed_n && back[same] == x[same]) same++;
    CHECK(!round_trip || (bn == fixed_n && same == bn), "%s: decode(encode(x)) != x: %zu vs %zu bytes, first difference at %zu",
          name, bn, fixed_n, same);
    printf("%-8s %zu ids equal to the library's: %s, round trip: %s\n", name, count,
           count == nwant && first == count ? "yes" : "NO",
           !round_trip ? "not expected" : bn == fixed_n && same == bn ? "yes" : "NO");
    free(back);
    free(fixed);
    free(got);
    free(want);
    tokenizer_free(t);
}

/* A WordLevel model's decode of the first 500 ids of the text equals the library's (name.dec). */
static void check_word_decode(const char *name, const char *text, size_t n)
{
    char file[64];
    snprintf(file, sizeof file, "%s.json", name);
    tokenizer *t = tokenizer_open(fixture(file));
    snprintf(file, sizeof file, "%s.dec", name);
    size_t want_n = 0, count = 0;
    char *want = check_read_file(fixture(file), &want_n);
    int32_t *ids = t ? tokenizer_encode_alloc(t, text, n, &count) : NULL;
    size_t cap = 4 * want_n + 64, got_n = 0;
    char *got = malloc(cap);
    if (ids && got) got_n = tokenizer_decode(t, ids, count < 500 ? count : 500, got, cap, 0);
    CHECK(want && got && got_n == want_n && memcmp(got, want, want_n) == 0,
          "%s: decode of the first 500 ids: %zu bytes, the library's %zu", name, got_n, want_n);
    free(got), free(ids), free(want);
    tokenizer_free(t);
}

/* A WordLevel vocab without unk_token: known words encode, an unknown one is refused by name
 * (the library fails the same way). */
static void check_word_no_unk(void)
{
    const char *path = "test_tokenizer_word.json";
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "write %s", path); return; }
    fputs("{\"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, \"model\": {\"type\": \"WordLevel\", "
          "\"vocab\": {\"a\": 0, \"b\": 1}}}", f);
    fclose(f);
    tokenizer *t = tokenizer_open(path);
    CHECK(t != NULL, "WordLevel without unk: open: %s", loom_error());
    size_t count = 0;
    int32_t *ids = t ? tokenizer_encode_alloc(t, " b  a\tb", 7, &count) : NULL;
    CHECK(ids && count == 3 && ids[0] == 1 && ids[1] == 0 && ids[2] == 1, "WordLevel: \" b  a\\tb\": %zu ids", count);
    free(ids);
    ids = t ? tokenizer_encode_alloc(t, "a cc b", 6, &count) : NULL;
    CHECK(t && !ids && strstr(loom_error(), "\"cc\" is not in the WordLevel vocab"), "WordLevel unknown word: %s",
          ids ? "(encoded)" : loom_error());
    free(ids);
    tokenizer_free(t);
    remove(path);
}

/* User text never becomes a special token; the markers exist by name. */
static void check_specials(void)
{
    tokenizer *t = tokenizer_open(fixture("qwen2.json"));
    if (!t) { CHECK(0, "qwen2: %s", loom_error()); return; }
    int32_t start = tokenizer_special(t, "<|im_start|>"), ids[64];
    CHECK(start >= 0 && tokenizer_is_special(t, start), "<|im_start|> is a special token: %d", start);
    long n = tokenizer_encode(t, "<|im_start|>user", 16, ids, 64);
    for (long i = 0; i < n; i++) CHECK(ids[i] != start && !tokenizer_is_special(t, ids[i]), "special id from text");
    CHECK(tokenizer_eot(t) == tokenizer_special(t, "<|im_end|>"), "end of turn is <|im_end|>");
    /* a non-special added token is matched in text, as the library does */
    int32_t call = tokenizer_special(t, "<tool_call>");
    n = tokenizer_encode(t, "<tool_call>", 11, ids, 64);
    CHECK(call >= 0 && n == 1 && ids[0] == call, "<tool_call> in text: %ld ids", n);
    tokenizer_free(t);
}

static void check_byte(void)
{
    tokenizer *t = tokenizer_open("byte");
    int32_t ids[8];
    char out[64];
    CHECK(t && tokenizer_vocab(t) == TOKENIZER_VOCAB && tokenizer_hash(t) == TOKENIZER_BYTE_HASH, "byte: open");
    if (!t) return;
    CHECK(tokenizer_encode(t, "a\xff<|user|>", 10, ids, 8) == 10 && ids[0] == 'a' && ids[1] == 0xff &&
              ids[2] == '<', "byte ids are the bytes (invalid UTF-8 and marker text kept as bytes)");
    CHECK(tokenizer_special(t, "<|user|>") == TOK_USER && tokenizer_special(t, "<|end|>") == TOK_END &&
              tokenizer_eot(t) == TOK_END && tokenizer_pad(t) == TOK_PAD && tokenizer_eos(t) == TOK_EOT,
          "byte specials keep their ids");
    int32_t seq[3] = {'h', TOK_USER, 'i'};
    CHECK(tokenizer_decode(t, seq, 3, out, sizeof out, 0) == 10 && strcmp(out, "h<|user|>i") == 0, "decode: %s", out);
    CHECK(tokenizer_decode(t, seq, 3, out, sizeof out, 1) == 2 && strcmp(out, "hi") == 0, "decode skip: %s", out);
    tokenizer_free(t);
}

/* A tokenizer.json loom cannot reproduce is refused with one line naming the file and problem. */
static void check_bad(const char *what, const char *json, const char *want)
{
    const char *path = "test_tokenizer_bad.json";
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "write %s", path); return; }
    fputs(json, f);
    fclose(f);
    tokenizer *t = tokenizer_open(path);
    CHECK(!t && strstr(loom_error(), want) && strstr(loom_error(), path) && !strchr(loom_error(), '\n'),
          "%s: want \"%s\", got \"%s\"", what, want, t ? "(opened)" : loom_error());
    tokenizer_free(t);
    remove(path);
}

static void check_repair(void)
{
    /* maximal subparts, as CPython's errors="replace": e2 82 is one, ed a0 80 three, c0 80 two */
    const char in[] = "a\xe2\x82" "b\xed\xa0\x80" "c\xc0\x80" "d\xf0\x9f\x98";
    const char want[] = "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d\xEF\xBF\xBD";
    int err;
    size_t n = 0;
    char *out = tok_utf8_repair(in, sizeof in - 1, &n, &err);
    CHECK(out && n == sizeof want - 1 && memcmp(out, want, n) == 0, "utf-8 repair: %zu bytes", n);
    free(out);
    CHECK(tok_utf8_repair("caf\xc3\xa9", 5, &n, &err) == NULL, "valid text needs no repair");
}

/* With no pre-tokenizer the whole text is one word, merged run by run between symbols no merge
 * can join; "d a" and "\xc3\xa9 a" (ASCII bitmap, non-ASCII set) must keep d|a, é|a together. */
static void check_runs(const char *last, int32_t last_id, int32_t joined_id)
{
    char json[600], text[200];
    snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, "
             "\"d\": 3, \"\xc3\xa9\": 4, \"bc\": 5, \"abc\": 6, \"da\": 7, \"\xc3\xa9" "a\": 8}, "
             "\"merges\": [\"%s a\", \"b c\", \"a bc\"]}}", last);
    const char *path = "test_tokenizer_runs.json";
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "write %s", path); return; }
    fputs(json, f);
    fclose(f);
    tokenizer *t = tokenizer_open(path);
    CHECK(t != NULL, "runs tokenizer: %s", t ? "" : loom_error());
    size_t n = 0, count = 0;
    for (int r = 0; r < 20; r++) n += (size_t)snprintf(text + n, sizeof text - n, "abc%s", last);
    int32_t *ids = t ? tokenizer_encode_alloc(t, text, n, &count) : NULL;
    int ok = ids && count == 1 + 2 * 19 + 1 && ids[0] == 6 && ids[count - 1] == last_id;
    for (size_t i = 1; ok && i + 1 < count; i += 2) ok = ids[i] == joined_id && ids[i + 1] == 5;
    CHECK(ok, "runs (%s): %zu ids, want abc (%s+a bc)x19 %s", last, count, last, last);
    free(ids);
    tokenizer_free(t);
    remove(path);
}

int main(void)
{
    size_t n;
    char *text = check_read_file(fixture("text.txt"), &n);
    CHECK(text != NULL && n >= 50000, "test text: %s", fixture("text.txt"));
    static const char *const families[] = {"gpt2", "llama3", "qwen2", "smollm2", "llama2", "mistral"};
    for (int i = 0; text && i < (int)(sizeof families / sizeof *families); i++)
        check_family(families[i], text, n, strcmp(families[i], "qwen2") == 0, 1);
    /* WordLevel models (the tiny HF fixtures' kind) under Whitespace and WhitespaceSplit: the ids,
     * and the library's decode of the first 500 (the tokens joined with spaces) */
    for (int i = 0; text && i < 2; i++) {
        const char *name = i ? "wordsplit" : "wordlevel";
        check_family(name, text, n, 0, 0);
        check_word_decode(name, text, n);
    }
    free(text);
    /* added tokens' lstrip, rstrip, single_word, normalized, and a special token hiding a plain one */
    text = check_read_file(fixture("added.txt"), &n);
    CHECK(text != NULL, "added-token text: %s", fixture("added.txt"));
    if (text) check_family("added", text, n, 1, 0);
    free(text);
    check_specials();
    check_byte();
    check_repair();
    check_runs("d", 3, 7);
    check_runs("\xc3\xa9", 4, 8);
    check_bad("unsupported model", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "unsupported model type \"WordPiece\"");
    check_word_no_unk();
    check_bad("unknown merge token", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
              "\"merges\": [\"a b\", \"a c\"]}}", "merge 1 names the unknown token \"c\"");
    check_bad("bad pre-tokenizer", "{\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, \"model\": {\"type\": \"BPE\", "
              "\"vocab\": {\"a\": 0}, \"merges\": []}}", "unsupported pre_tokenizer \"BertPreTokenizer\"");
    check_bad("not json", "{\"model\": ", "invalid JSON");
    if (failures) { printf("%d checks failed\n", failures); return 1; }
    printf("test_tokenizer: all checks passed\n");
    return 0;
}
