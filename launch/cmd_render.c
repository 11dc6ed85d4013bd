/* cmd_render.c: `loom render JOB.json [--set ...] [--limit N] [--json]`: what a fine-tune trains
 * on, as the job renders it (its tokenizer, chat format, data.max_len, validation split): each
 * example's text with the loss-masked spans (the tokens that are targets) between ⟦ and ⟧, or
 * with --json one line per example {"split", "ids", "mask", "text"}. Nothing is trained. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/log.h"
#include "core/text/text.h"
#include "launch/cli.h"

typedef struct render_args {
    long limit; /* examples to print, < 0: all */
    int json;
} render_args;

/* Take --limit N and --json out of argv (the rest is a normal job command line). */
static int render_parse(int *argc, char **argv, render_args *ra)
{
    int w = 0;
    ra->limit = -1, ra->json = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--json") == 0) { ra->json = 1; continue; }
        if (strcmp(argv[i], "--limit") == 0) {
            if (cli_long(argv[i], i + 1 < *argc ? argv[i + 1] : "", 0, LONG_MAX, &ra->limit)) return -1;
            i++;
            continue;
        }
        argv[w++] = argv[i];
    }
    *argc = w;
    return 0;
}

/* A growing text buffer. */
typedef struct render_buf {
    char *p;
    size_t len, cap;
} render_buf;

static int render_reserve(render_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = 2 * (b->len + extra + 1);
    char *p = realloc(b->p, cap);
    if (!p) return loom_fail("out of memory");
    b->p = p, b->cap = cap;
    return 0;
}

static int render_str(render_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (render_reserve(b, n)) return -1;
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
    return 0;
}

/* Decoded text of ids[0..n) (special tokens by name) appended; a token decodes to at most a few
 * hundred bytes (the longest special token's name). */
static int render_text(const tokenizer *tok, const int32_t *ids, int n, render_buf *b)
{
    if (render_reserve(b, 512 * (size_t)n + 1)) return -1;
    b->len += tokenizer_decode(tok, ids, (size_t)n, b->p + b->len, b->cap - b->len, 0);
    return 0;
}

/* One example: text with its loss-masked runs marked, or its JSON line. */
static int render_one(const tokenizer *tok, const sft_set *s, int i, int T, const char *split, int json)
{
    const int32_t *ids = s->tokens + (size_t)i * T;
    const uint8_t *m = s->loss_mask + (size_t)i * T;
    const int n = s->len[i];
    render_buf b = {0};
    int rc = render_str(&b, ""), trained = 0;
    for (int a = 0; a < n && rc == 0;) { /* runs of one mask value */
        int e = a;
        while (e < n && m[e] == m[a]) e++;
        if (m[a] && !json) rc = render_str(&b, "\u27e6");
        if (rc == 0) rc = render_text(tok, ids + a, e - a, &b);
        if (rc == 0 && m[a] && !json) rc = render_str(&b, "\u27e7");
        trained += m[a] ? e - a : 0;
        a = e;
    }
    if (rc == 0 && !json) {
        printf("=== %s example %d: %d tokens, %d trained%s ===\n%s\n", split, i + 1, n, trained,
               s->prompt_len[i] > T ? " (cut at data.max_len)" : "", b.p);
    } else if (rc == 0) {
        cJSON *o = cJSON_CreateObject(), *jid = cJSON_CreateArray(), *jm = cJSON_CreateArray();
        for (int t = 0; t < n; t++) {
            cJSON_AddItemToArray(jid, cJSON_CreateNumber(ids[t]));
            cJSON_AddItemToArray(jm, cJSON_CreateNumber(m[t]));
        }
        cJSON_AddStringToObject(o, "split", split);
        cJSON_AddItemToObject(o, "ids", jid);
        cJSON_AddItemToObject(o, "mask", jm);
        cJSON_AddStringToObject(o, "text", b.p);
        char *line = cJSON_PrintUnformatted(o);
        if (line) printf("%s\n", line);
        else rc = loom_fail("out of memory");
        cJSON_free(line);
        cJSON_Delete(o);
    }
    free(b.p);
    return rc;
}

int cmd_render(int argc, char **argv)
{
    render_args ra;
    cli_job a;
    job_config cfg;
    if (render_parse(&argc, argv, &ra) || cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg) ||
        cli_check_inputs(&cfg, CLI_IN_TRAIN | CLI_IN_VAL))
        return cli_fail();
    data_config dc = cfg.data;
    if (dc.max_len > cfg.model.max_seq) dc.max_len = cfg.model.max_seq;
    tokenizer *tok = tokenizer_open(cfg.model.tokenizer);
    chat_template ct;
    sft_data d;
    if (!tok || chat_template_init(&ct, tok, dc.chat_format) || chat_template_date(&ct, dc.date_string) ||
        sft_data_load(&d, &dc, &ct, cfg.train.seed)) {
        tokenizer_free(tok);
        return cli_fail();
    }
    if (!ra.json)
        log_info("render: %d training and %d held-out examples, chat format %s, rows of at most %d tokens; "
                 "the trained tokens (loss mask 1) between \u27e6 and \u27e7", d.train.n, d.val.n, ct.format, d.T);
    int rc = 0;
    long shown = 0;
    const sft_set *sets[2] = {&d.train, &d.val};
    const char *names[2] = {"train", "val"};
    for (int k = 0; k < 2 && rc == 0; k++)
        for (int i = 0; i < sets[k]->n && rc == 0 && (ra.limit < 0 || shown < ra.limit); i++, shown++)
            rc = render_one(tok, sets[k], i, d.T, names[k], ra.json);
    sft_data_free(&d);
    tokenizer_free(tok);
    return rc ? cli_fail() : 0;
}
