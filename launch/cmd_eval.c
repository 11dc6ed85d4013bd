/* cmd_eval.c: `loom eval JOB.json [--ckpt PATH]`: validation loss and tool-call accuracy of a
 * fine-tuned checkpoint (or, without --ckpt, of the base model the job starts from), loom's exact
 * match and Needle's exact-call figure; a Needle base's job through finetune_needle_eval. */
#include <stdio.h>

#include "core/train/train.h"
#include "base/log.h"
#include "core/text/text.h"
#include "launch/cli.h"

static void cmd_eval_print(const char *what, int nval, double loss, const eval_result *ev)
{
    /* the result: stdout, also under --quiet */
    log_result("eval %s: %d held-out examples | val loss %.4f | tool-call exact match %.1f%% | "
               "right tool names %.1f%% (%d examples, %ld tokens generated in %.1f s)",
               what, nval, loss, 100.0 * ev->accuracy, 100.0 * ev->names, ev->examples, ev->tokens, ev->seconds);
    /* Needle's figure (finetune.py _score_quantised's rule) on the same generations */
    log_result("eval %s: Needle's exact-call %.1f%% (an output without a call block counts as the answer []) | "
               "answer [] in %.1f%% of the examples | no call block in %.1f%%",
               what, 100.0 * ev->needle, 100.0 * ev->empty, 100.0 * ev->no_call);
}

/* A Needle base (and the adapters of a Needle fine-tune's checkpoint): its own evaluation. */
static int cmd_eval_needle(const job_config *cfg, comm *c, const char *ckpt)
{
    double loss;
    eval_result ev;
    if (finetune_needle_eval(cfg, c, ckpt, &loss, &ev)) return cli_job_failed(c);
    cmd_eval_print(ckpt ? ckpt : cfg->finetune.base, ev.examples, loss, &ev);
    comm_destroy(c);
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    cli_job a;
    job_config cfg;
    if (cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg) ||
        cli_check_inputs(&cfg, CLI_IN_TRAIN | CLI_IN_VAL))
        return cli_fail();
    comm *c = cli_comm(&cfg, &argc, &argv);
    if (!c) return cli_fail();
    if (finetune_needle_base(cfg.finetune.base)) return cmd_eval_needle(&cfg, c, a.ckpt);
    /* the date the checkpoint's rows were rendered with (data.date_string), unless the job sets one */
    const char *date_from;
    if (cli_job_date(&cfg, a.ckpt, &date_from)) return cli_job_failed(c);
    sft_data d;
    data_config dc = cfg.data;
    if (dc.max_len > cfg.model.max_seq) dc.max_len = cfg.model.max_seq;
    tokenizer *tok = tokenizer_open(cfg.model.tokenizer);
    chat_template ct;
    /* data.bucket: the val loss runs each batch at its rows' longest, as the fine-tune's does */
    if (!tok || chat_template_init(&ct, tok, dc.chat_format) || chat_template_date(&ct, dc.date_string) ||
        sft_data_load(&d, &dc, &ct, cfg.train.seed) ||
        sft_data_batching(&d, cfg.train.batch_size, dc.bucket, cfg.train.seed)) {
        tokenizer_free(tok);
        return cli_job_failed(c);
    }
    cli_say_date(&ct, date_from);
    session *s = session_open(&cfg, c, SESSION_INFER, 1, d.T);
    double loss = 0;
    eval_result ev;
    int rc = s ? session_init_or_resume(s, a.ckpt) : -1;
    if (rc == 0) rc = evaluate_loss(s, &d, &loss);
    if (rc == 0) rc = evaluate_accuracy(s, &d, a.ckpt ? "checkpoint" : "base model", &ev);
    if (rc == 0) cmd_eval_print(a.ckpt ? a.ckpt : cfg.finetune.base, d.val.n, loss, &ev);
    session_close(s);
    sft_data_free(&d);
    tokenizer_free(tok);
    if (rc) return cli_job_failed(c);
    comm_destroy(c);
    return 0;
}
