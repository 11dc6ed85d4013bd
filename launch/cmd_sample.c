/* cmd_sample.c: `loom sample JOB.json --ckpt PATH (--prompt TEXT | --query TEXT --tools JSON)
 * [--temperature T] [--top-k K] [--seed S] [--max-new N]`: generate with the KV cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "base/error.h"
#include "core/evaluate.h"
#include "base/log.h"
#include "core/session.h"
#include "core/tokenizer.h"
#include "launch/cli.h"

typedef struct sample_args {
    const char *prompt, *query, *tools;
    float temperature;
    int top_k, max_new;
    unsigned long long seed;
} sample_args;

/* Take the sampling flags out of argv (the rest is a normal job command line). */
static int sample_parse(int *argc, char **argv, sample_args *sa)
{
    int w = 0;
    for (int i = 0; i < *argc; i++) {
        const char *f = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        int used = 1;
        if (strcmp(f, "--prompt") == 0) sa->prompt = v;
        else if (strcmp(f, "--query") == 0) sa->query = v;
        else if (strcmp(f, "--tools") == 0) sa->tools = v;
        else if (strcmp(f, "--temperature") == 0 && v) sa->temperature = strtof(v, NULL);
        else if (strcmp(f, "--top-k") == 0 && v) sa->top_k = atoi(v);
        else if (strcmp(f, "--seed") == 0 && v) sa->seed = strtoull(v, NULL, 10);
        else if (strcmp(f, "--max-new") == 0 && v) sa->max_new = atoi(v);
        else used = 0;
        if (used && !v) return loom_fail("flag %s needs a value", f);
        if (used) i++;
        else argv[w++] = argv[i];
    }
    *argc = w;
    if (!sa->prompt && !sa->query) return loom_fail("sample needs --prompt TEXT or --query TEXT --tools JSON");
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

int cmd_sample(int argc, char **argv)
{
    sample_args sa = {.temperature = 0.0f, .top_k = 0, .max_new = 200, .seed = 1};
    cli_job a;
    job_config cfg;
    if (sample_parse(&argc, argv, &sa) || cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg))
        return cli_fail();
    comm *c = cli_comm(&cfg, &argc, &argv);
    if (!c) return cli_fail();
    int T = cfg.model.max_seq;
    int32_t *tokens = malloc((size_t)T * sizeof(int32_t)), *out = malloc((size_t)T * sizeof(int32_t));
    char *text = malloc((size_t)T * 16 + 1);
    int finetune = cfg.finetune.base[0] != 0;
    tokenizer *tok = tokenizer_open(cfg.model.tokenizer);
    chat_template ct;
    if (tok && chat_template_init(&ct, tok, cfg.data.chat_format)) {
        tokenizer_free(tok);
        tok = NULL;
    }
    session *s = tok && tokens && out && text ? session_open(&cfg, c, SESSION_INFER, finetune, T) : NULL;
    int n = s ? sample_prompt(&sa, &ct, tokens, T) : -1;
    int rc = n > 0 ? session_init_or_resume(s, a.ckpt) : -1;
    int made = rc == 0 ? evaluate_generate(s, &ct, tokens, n, sa.max_new, sa.temperature, sa.top_k, sa.seed, out) : -1;
    if (made >= 0 && c->rank == 0) {
        tokenizer_decode(tok, out, (size_t)made, text, (size_t)T * 16 + 1, 0);
        printf("%s\n", text);
    }
    free(tokens);
    free(out);
    free(text);
    session_close(s);
    tokenizer_free(tok);
    if (made < 0) return cli_job_failed(c);
    comm_destroy(c);
    return 0;
}
