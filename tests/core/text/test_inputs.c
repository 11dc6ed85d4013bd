/* test_inputs.c: inputs refused in one line (issue 18.9): bad/overlong/surrogate UTF-8 and NULs in
 * JSONL (file:line), a data.max_len with no answer token, unparsable token files (never text), FIFOs,
 * devices, oversized files (never read whole), an unset data.train, parallel.threads past 256. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "core/config/config.h"
#include "core/text/data.h"
#include "core/text/sft_data.h"
#include "tests/check.h"

static tokenizer *g_tok;   /* the byte tokenizer */
static chat_template g_ct; /* loom's format on it */

#define DIR "test_inputs_out"
#define TOOL_F "{\"name\":\"f\",\"parameters\":{\"x\":\"int\"}}"
#define LINE(q) "{\"query\":\"" q "\",\"tools\":[" TOOL_F "],\"answers\":[{\"name\":\"f\",\"arguments\":{\"x\":1}}]}"

static void write_bytes(const char *path, const char *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n) { printf("FAIL: cannot write %s\n", path); exit(1); }
    fclose(f);
}

static data_config data_cfg(const char *train, int max_len, int skip)
{
    data_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.train, sizeof c.train, "%s", train);
    c.val_split = 0.0f;
    c.max_len = max_len;
    c.skip_bad_lines = skip;
    return c;
}

/* A 3-line file whose line 2 holds `bad` (n bytes) inside its query string. */
static void check_bad_line(const char *what, const char *bad, size_t n, const char *want)
{
    char buf[1024];
    size_t k = 0;
    const char *head = LINE("first") "\n{\"query\":\"x", *tail = "\",\"tools\":[" TOOL_F "],\"answers\":[]}\n" LINE("third") "\n";
    memcpy(buf + k, head, strlen(head)), k += strlen(head);
    memcpy(buf + k, bad, n), k += n;
    memcpy(buf + k, tail, strlen(tail)), k += strlen(tail);
    write_bytes(DIR "/bad.jsonl", buf, k);
    data_config c = data_cfg(DIR "/bad.jsonl", 1024, 0);
    sft_data d;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "bad.jsonl:2: ") && strstr(loom_error(), want) &&
              !strchr(loom_error(), '\n'),
          "%s: want \"bad.jsonl:2: ...%s\", got \"%s\"", what, want, loom_error());
    c.skip_bad_lines = 1; /* the line is bad like any malformed line: skippable, counted */
    int rc = sft_data_load(&d, &c, &g_ct, 1);
    CHECK(rc == 0 && d.train.n == 2 && d.bad.count == 1 && d.bad.line[0] == 2, "%s: skip: rc %d n %d bad %d (%s)",
          what, rc, d.train.n, d.bad.count, loom_error());
    if (rc == 0) sft_data_free(&d);
}

static void check_utf8(void)
{
    check_bad_line("0xFF", "\xff", 1, "invalid UTF-8 at byte");
    check_bad_line("stray continuation", "\x80", 1, "invalid UTF-8 at byte");
    check_bad_line("overlong '/' (C0 AF)", "\xc0\xaf", 2, "overlong UTF-8 at byte");
    check_bad_line("overlong 3-byte", "\xe0\x80\xaf", 3, "overlong UTF-8 at byte");
    check_bad_line("overlong 4-byte", "\xf0\x80\x80\xaf", 4, "overlong UTF-8 at byte");
    check_bad_line("surrogate", "\xed\xa0\x80", 3, "UTF-16 surrogate");
    check_bad_line("above U+10FFFF", "\xf4\x90\x80\x80", 4, "above U+10FFFF");
    check_bad_line("cut sequence", "\xe2\x82", 2, "invalid UTF-8");
    check_bad_line("raw NUL", "a\0b", 3, "a raw NUL byte at byte");
    check_bad_line("escaped NUL", "a\\u0000b", 8, "escaped NUL");
    /* valid multi-byte text, an escaped backslash before "u0000" and other escapes still load */
    const char *ok = LINE("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf") "\n"
                     LINE("a\\\\u0000 \\u00e9 \\n") "\n";
    write_bytes(DIR "/ok.jsonl", ok, strlen(ok));
    data_config c = data_cfg(DIR "/ok.jsonl", 1024, 0);
    sft_data d;
    int rc = sft_data_load(&d, &c, &g_ct, 1);
    CHECK(rc == 0 && d.train.n == 2, "valid UTF-8 refused: %s", loom_error());
    if (rc == 0) sft_data_free(&d);
}

/* data.max_len below every rendered prompt: no target anywhere (loss 0, NaN val loss) -> error. */
static void check_max_len(void)
{
    const char *text = LINE("hello") "\n" LINE("a longer query than the first") "\n";
    write_bytes(DIR "/two.jsonl", text, strlen(text));
    data_config c = data_cfg(DIR "/two.jsonl", 16, 0);
    sft_data d;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "data.max_len (16)") &&
              strstr(loom_error(), "two.jsonl:1") && strstr(loom_error(), "shortest rendered prompt"),
          "max_len 16: %s", loom_error());
    /* a cap that keeps answer tokens for some example is fine (the longer one is cut) */
    c.max_len = 1024;
    int rc = sft_data_load(&d, &c, &g_ct, 1);
    int p0 = rc == 0 ? d.train.prompt_len[0] : 0, p1 = rc == 0 ? d.train.prompt_len[1] : 0;
    if (rc == 0) sft_data_free(&d);
    c.max_len = (p0 < p1 ? p0 : p1) + 1;
    rc = sft_data_load(&d, &c, &g_ct, 1);
    CHECK(rc == 0, "max_len one past the shortest prompt (%d) refused: %s", c.max_len, loom_error());
    if (rc == 0) sft_data_free(&d);
    c.max_len = c.max_len - 1;
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "data.max_len"), "max_len == shortest prompt: %s",
          loom_error());
    /* the validation split alone without targets would give a NaN val loss */
    const char *val = LINE("a query long enough that its prompt is longer than the training one, by a lot, really") "\n";
    write_bytes(DIR "/val.jsonl", val, strlen(val));
    c.max_len = (p0 < p1 ? p0 : p1) + 1;
    snprintf(c.val, sizeof c.val, "%s", DIR "/val.jsonl");
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "val.jsonl:1") && strstr(loom_error(), "validation"),
          "val without targets: %s", loom_error());
}

/* Paths that name no data: unset, a FIFO, a device, a folder, a file over the cap. */
static void check_paths(void)
{
    sft_data d;
    token_data t;
    data_config c = data_cfg("", 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && !strcmp(loom_error(), "data.train: not set"), "sft unset: %s", loom_error());
    CHECK(token_data_load(&t, "", g_tok, 272) != 0 && !strcmp(loom_error(), "data.train: not set"), "tokens unset: %s", loom_error());
    unlink(DIR "/fifo");
    CHECK(mkfifo(DIR "/fifo", 0600) == 0, "mkfifo");
    const char *odd[] = {DIR "/fifo", "/dev/zero", DIR};
    for (int i = 0; i < 3; i++) { /* a FIFO with no writer blocked open() forever; /dev/zero never ended */
        c = data_cfg(odd[i], 1024, 0);
        CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "not a regular file"), "sft %s: %s", odd[i], loom_error());
        CHECK(token_data_load(&t, odd[i], g_tok, 272) != 0 && strstr(loom_error(), "not a regular file"), "tokens %s: %s", odd[i],
              loom_error());
    }
    /* sparse files past the caps: refused before any byte is read */
    int fd = open(DIR "/huge.jsonl", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)SFT_FILE_MAX + 1) == 0, "sparse jsonl");
    if (fd >= 0) close(fd);
    c = data_cfg(DIR "/huge.jsonl", 1024, 0);
    CHECK(sft_data_load(&d, &c, &g_ct, 1) != 0 && strstr(loom_error(), "huge.jsonl") && strstr(loom_error(), "MiB of JSONL"),
          "huge jsonl: %s", loom_error());
    fd = open(DIR "/huge.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)TOKDATA_TEXT_MAX + 1) == 0, "sparse text");
    if (fd >= 0) close(fd);
    CHECK(token_data_load(&t, DIR "/huge.txt", g_tok, 272) != 0 && strstr(loom_error(), "huge.txt") &&
              strstr(loom_error(), "loom tokenize"),
          "huge text: %s", loom_error());
    unlink(DIR "/huge.jsonl");
    unlink(DIR "/huge.txt");
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A token file's header must parse; text is read only from a *.txt name; token files are mapped. */
static void check_token_files(void)
{
    token_data t;
    static const char hdr[24] = "LOOMTOK1\001\000\000\000\002\000\000\000\004\000\000\000\000\000\000\000";
    char good[32];
    memcpy(good, hdr, 24);
    memcpy(good + 24, "\001\000\002\000\003\000\004\000", 8);
    write_bytes(DIR "/good.dat", good, 32); /* any name but *.txt is a token file */
    int rc = token_data_load(&t, DIR "/good.dat", g_tok, 272);
    CHECK(rc == 0 && t.n == 4 && token_data_at(&t, 3) == 4 && !t.tokens, "token file: %s", loom_error());
    if (rc == 0) token_data_free(&t);
    char off[32];
    memcpy(off, good, 32);
    off[7] = '2'; /* LOOMTOK2: one byte off */
    write_bytes(DIR "/off.bin", off, 32);
    CHECK(token_data_load(&t, DIR "/off.bin", g_tok, 272) != 0 && strstr(loom_error(), "off.bin: not a loom token file"),
          "magic one byte off trained on as text: %s", loom_error());
    char noise[4096];
    srand(7);
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (char)(rand() & 0xff);
    write_bytes(DIR "/noise.bin", noise, sizeof noise);
    CHECK(token_data_load(&t, DIR "/noise.bin", g_tok, 272) != 0 && strstr(loom_error(), "not a loom token file"),
          "random bytes trained on as text: %s", loom_error());
    write_bytes(DIR "/noise.txt", noise, sizeof noise); /* named as text: the job says so */
    rc = token_data_load(&t, DIR "/noise.txt", g_tok, 272);
    CHECK(rc == 0 && t.n == sizeof noise && token_data_at(&t, 5) == (unsigned char)noise[5], "text: %s", loom_error());
    if (rc == 0) token_data_free(&t);
    CHECK(token_data_load_text(&t, DIR "/off.bin", g_tok, 272) == 0 && t.n == 32, "explicit text: %s", loom_error());
    token_data_free(&t);
    /* 512 MiB of (sparse) 2-byte ids: mapped, so the process does not grow by the file's size */
    int fd = open(DIR "/big.bin", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    size_t bytes = (size_t)512 << 20;
    char big[24];
    memcpy(big, hdr, 24);
    unsigned long long count = (bytes - 24) / 2;
    for (int i = 0; i < 8; i++) big[16 + i] = (char)(count >> (8 * i));
    CHECK(fd >= 0 && write(fd, big, 24) == 24 && ftruncate(fd, (off_t)bytes) == 0, "sparse token file");
    if (fd >= 0) close(fd);
    long before = max_rss_kb();
    rc = token_data_load(&t, DIR "/big.bin", g_tok, 65536); /* every 2-byte id fits: no scan */
    int32_t w[9], y[9];
    if (rc == 0) token_data_sample(&t, 1, 123, 8, w, y);
    long grew = max_rss_kb() - before;
    CHECK(rc == 0 && t.n == count && grew < 64 * 1024, "512 MiB token file: rc %d (%s), max RSS grew %ld KiB", rc,
          loom_error(), grew);
    if (rc == 0) token_data_free(&t);
    unlink(DIR "/big.bin");
}

static void check_threads_bound(void)
{
    job_config c;
    config_defaults(&c);
    CHECK(config_set(&c, "parallel.threads=256") == 0, "256 threads refused: %s", loom_error());
    CHECK(config_set(&c, "parallel.threads=257") != 0 && strstr(loom_error(), "parallel.threads"),
          "257 threads accepted: %s", loom_error());
    CHECK(config_set(&c, "parallel.threads=100000") != 0, "100000 threads accepted");
}

int main(void)
{
    g_tok = tokenizer_open("byte");
    if (!g_tok || chat_template_init(&g_ct, g_tok, "loom")) {
        printf("FAIL: byte tokenizer / loom chat format: %s\n", loom_error());
        return 1;
    }
    mkdir(DIR, 0700);
    check_utf8();
    check_max_len();
    check_paths();
    check_token_files();
    check_threads_bound();
    if (failures == 0) printf("test_inputs: ok\n");
    return failures != 0;
}
