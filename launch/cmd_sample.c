/* cmd_sample.c: `loom sample JOB.json (--ckpt PATH | --random) (--prompt TEXT | --query TEXT --tools JSON)
 * [--temperature T] [--top-k K] [--seed S] [--max-new N] [--batch N]`: generate with the KV cache;
 * --batch N decodes N continuations of the prompt together (sample r seeded with seed + r). The
 * continuations are the only thing on stdout (logs go to stderr); every flag value is checked. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text/text.h"
#include "base/error.h"
#include "core/train/train.h"
#include "base/log.h"
#include "launch/cli.h"

typedef struct sample_args {
    const char *prompt, *query, *tools;
    float temperature;
    int top_k, max_new, batch;
    unsigned long long seed;
    int random; /* --random: sample from the initial weights, no --ckpt and no finetune.base */
} sample_args;

/* Strict numbers: the whole value must parse ("abc", "5x", "" and out-of-range are errors). */
static int sample_float(const char *flag, const char *v, float *out)
{
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(x) || x < 0.0f)
        return loom_fail("%s '%s': want a finite number >= 0 (0 = greedy)", flag, v);
    *out = x;
    return 0;
}

/* One sampling flag and its value v; 1 if f is not a sampling flag, -1 + loom_fail if v is bad. */
static int sample_flag(const char *f, const char *v, sample_args *sa)
{
    long x = 0;
    int rc = 0;
    if (strcmp(f, "--prompt") == 0) sa->prompt = v;
    else if (strcmp(f, "--query") == 0) sa->query = v;
    else if (strcmp(f, "--tools") == 0) sa->tools = v;
    else if (strcmp(f, "--temperature") == 0) rc = sample_float(f, v, &sa->temperature);
    else if (strcmp(f, "--top-k") == 0) { rc = cli_long(f, v, 0, INT_MAX, &x); sa->top_k = (int)x; }
    else if (strcmp(f, "--max-new") == 0) { rc = cli_long(f, v, 1, INT_MAX, &x); sa->max_new = (int)x; }
    else if (strcmp(f, "--batch") == 0) { rc = cli_long(f, v, 1, 4096, &x); sa->batch = (int)x; }
    else if (strcmp(f, "--seed") == 0) {
        char *end;
        errno = 0;
        sa->seed = strtoull(v, &end, 10);
        if (end == v || *end || errno == ERANGE || v[0] == '-')
            rc = loom_fail("--seed '%s': want a whole number in 0..2^64-1", v);
    } else return 1;
    return rc;
}

/* Take the sampling flags out of argv (the rest is a normal job command line). */
static int sample_parse(int *argc, char **argv, sample_args *sa)
{
    int w = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--random") == 0) { sa->random = 1; continue; }
        const char *v = i + 1 < *argc ? argv[i + 1] : NULL;
        int rc = sample_flag(argv[i], v ? v : "", sa);
        if (rc == 1) { argv[w++] = argv[i]; continue; }
        if (!v) return loom_fail("flag %s needs a value", argv[i]);
        if (rc) return -1;
        i++;
    }
    *argc = w;
    if (!sa->prompt && !sa->query) return loom_fail("sample needs --prompt TEXT or --query TEXT --tools JSON");
    if (sa->prompt && !sa->prompt[0]) return loom_fail("--prompt is empty: give the text to continue");
    return 0;
}

/* The prompt's tokens: raw text, or the chat rendering of a query + tools up to <|assistant|>. */
static int sample_prompt(const sample_args *sa, const chat_template *ct, int32_t *tokens, int cap)
{
    if (sa->prompt) {
        long n = tokenizer_encode(ct->tok, sa->prompt, strlen(sa->prompt), tokens, (size_t)cap);
        return n > cap ? cap : (int)n;
    }
    char json[8192];
    snprintf(json, sizeof json, "{\"query\": %s, \"tools\": %s}", "\"\"", sa->tools ? sa->tools : "[]");
    sft_example ex;
    /* the query goes in through cJSON so any text is escaped correctly */
    cJSON *o = cJSON_Parse(json);
    if (!o) return loom_fail("--tools is not a JSON array");
    cJSON_ReplaceItemInObject(o, "query", cJSON_CreateString(sa->query));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int rc = chat_example_parse(text, strlen(text), &ex, CHAT_PARSE_PROMPT_ONLY);
    free(text);
    if (rc) return -1;
    int n = chat_render_prompt(ct, &ex, tokens, cap);
    chat_example_free(&ex);
    return n;
}

/* Continuation r of B on stdout, every byte (a generated 0x00 included: fwrite, not "%s"), under a
 * "--- sample r ---" line when B > 1; logs go to stderr. text: cap bytes for the decoded text. */
static int sample_print(const tokenizer *tok, int B, int r, const int32_t *ids, int made, char *text, size_t cap)
{
    size_t len = tokenizer_decode(tok, ids, (size_t)made, text, cap, 0);
    if ((B > 1 && printf("--- sample %d ---\n", r) < 0) || fwrite(text, 1, len, stdout) != len ||
        fputc('\n', stdout) == EOF || fflush(stdout) != 0)
        return loom_fail("cannot write the sample to stdout: %s", strerror(errno));
    return 0;
}

/* sa->batch continuations of the prompt, decoded together; printed one after another. */
static int sample_batch(session *s, const chat_template *ct, const sample_args *sa, const int32_t *tokens,
                        int n, int T, char *text)
{
    int B = sa->batch, rc = -1;
    const int32_t **prompts = malloc((size_t)B * sizeof *prompts);
    int *lens = malloc((size_t)B * sizeof(int)), *max_new = malloc((size_t)B * sizeof(int));
    int *made = malloc((size_t)B * sizeof(int));
    int32_t **out = malloc((size_t)B * sizeof *out), *outs = malloc((size_t)B * T * sizeof(int32_t));
    if (prompts && lens && max_new && made && out && outs) {
        for (int r = 0; r < B; r++)
            prompts[r] = tokens, lens[r] = n, max_new[r] = sa->max_new, out[r] = outs + (size_t)r * T;
        rc = evaluate_generate_batch(s, ct, B, prompts, lens, max_new, sa->temperature, sa->top_k, sa->seed, out, made);
    } else {
        loom_fail("sample: out of host memory");
    }
    for (int r = 0; rc == 0 && r < B && s->comm->rank == 0; r++)
        rc = sample_print(ct->tok, B, r, out[r], made[r], text, (size_t)T * 16 + 1);
    free(prompts), free(lens), free(max_new), free(made), free(out), free(outs);
    return rc;
}

/* A Needle base (finetune.base NAME.safetensors): its own decoder (finetune_needle_sample), the
 * prompt after Needle's BOS as run.generate puts it; the continuations printed as sample_batch does. */
static int sample_needle(const job_config *cfg, comm *c, const char *ckpt, const sample_args *sa)
{
    tokenizer *tok = tokenizer_open(cfg->model.tokenizer);
    chat_template ct;
    if (!tok || chat_template_init(&ct, tok, "needle")) return tokenizer_free(tok), -1;
    /* room for any prompt, never cut here (finetune_needle_sample refuses one the model's
     * max_seq_len cannot hold): 3 tokens a byte at most (an invalid byte becomes U+FFFD, 3 bytes,
     * each a byte-fallback token at worst), plus Needle's rendering around a query */
    const size_t text_len = sa->prompt ? strlen(sa->prompt)
                                       : strlen(sa->query ? sa->query : "") + strlen(sa->tools ? sa->tools : "");
    const int T = 3 * (int)(text_len < 1u << 26 ? text_len : 1u << 26) + 1024, R = sa->batch;
    int32_t *tokens = malloc((size_t)T * sizeof(int32_t)), *out = malloc((size_t)R * sa->max_new * sizeof(int32_t));
    int *made = malloc((size_t)R * sizeof(int));
    char *text = malloc((size_t)sa->max_new * 16 + 1);
    int rc = tokens && out && made && text ? 0 : loom_fail("sample: out of host memory"), n = 0;
    if (rc == 0 && sa->prompt) { /* raw text: [BOS] + its ids, as run.generate */
        tokens[0] = ct.bos;
        long m = tokenizer_encode(tok, sa->prompt, strlen(sa->prompt), tokens + 1, (size_t)T - 1);
        n = m < 0 ? -1 : m > T - 1 ? loom_fail("sample: the prompt is %ld tokens, more than %d", m, T - 1) : 1 + (int)m;
    } else if (rc == 0) {
        n = sample_prompt(sa, &ct, tokens, T);
    }
    if (rc == 0 && n <= 0) rc = -1;
    if (rc == 0)
        rc = finetune_needle_sample(cfg, c, ckpt, &ct, tokens, n, R, sa->max_new, sa->temperature, sa->top_k, sa->seed,
                                    out, made);
    for (int r = 0; rc == 0 && r < R && c->rank == 0; r++)
        rc = sample_print(tok, R, r, out + (size_t)r * sa->max_new, made[r], text, (size_t)sa->max_new * 16 + 1);
    free(tokens), free(out), free(made), free(text);
    tokenizer_free(tok);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    sample_args sa = {.temperature = 0.0f, .top_k = 0, .max_new = 200, .seed = 1, .batch = 1};
    cli_job a;
    job_config cfg;
    if (sample_parse(&argc, argv, &sa) || cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg))
        return cli_fail();
    if (!a.ckpt && !cfg.finetune.base[0] && !sa.random) {
        loom_fail("sample: no --ckpt and no finetune.base, so the model would be its random initial weights: "
                  "give --ckpt CKPT (or --random to sample from them anyway)");
        return cli_fail();
    }
    comm *c = cli_comm(&cfg, &argc, &argv);
    if (!c) return cli_fail();
    if (finetune_needle_base(cfg.finetune.base)) {
        if (sample_needle(&cfg, c, a.ckpt, &sa)) return cli_job_failed(c);
        comm_destroy(c);
        return 0;
    }
    /* the date the checkpoint was trained with (data.date_string), unless the job sets one */
    const char *date_from;
    if (cli_job_date(&cfg, a.ckpt, &date_from)) return cli_job_failed(c);
    int T = cfg.model.max_seq;
    int32_t *tokens = malloc((size_t)T * sizeof(int32_t));
    char *text = malloc((size_t)T * 16 + 1);
    int finetune = cfg.finetune.base[0] != 0;
    tokenizer *tok = tokenizer_open(cfg.model.tokenizer);
    chat_template ct;
    if (tok && (chat_template_init(&ct, tok, cfg.data.chat_format) || chat_template_date(&ct, cfg.data.date_string))) {
        tokenizer_free(tok);
        tok = NULL;
    }
    if (tok) cli_say_date(&ct, date_from);
    session *s = tok && tokens && text ? session_open(&cfg, c, SESSION_INFER, finetune, T) : NULL;
    int n = s ? sample_prompt(&sa, &ct, tokens, T) : -1;
    int rc = n > 0 ? session_init_or_resume(s, a.ckpt) : -1;
    if (rc == 0) rc = sample_batch(s, &ct, &sa, tokens, n, T, text);
    free(tokens);
    free(text);
    session_close(s);
    tokenizer_free(tok);
    if (rc) return cli_job_failed(c);
    comm_destroy(c);
    return 0;
}
