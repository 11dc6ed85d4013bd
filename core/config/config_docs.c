/* config_docs.c: docs/config.md, generated from the field table (config_table.c) and the model
 * presets applied through the parser (config.c). The top of the config module: nothing in it
 * calls back here. Must never describe a field in words of its own: every row is the table's. */
#include "core/config/config.h"
#include "core/config/config_table.h"
#include "base/error.h"
#include "core/config/presets.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- docs/config.md ---- */

typedef struct strbuf { char *p; size_t len, cap; int oom; } strbuf;

static void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *sb, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(sb->p ? sb->p + sb->len : NULL, sb->p ? sb->cap - sb->len : 0, fmt, ap);
        va_end(ap);
        if (w < 0 || sb->oom) { sb->oom = 1; return; }
        if (sb->p && sb->len + (size_t)w < sb->cap) { sb->len += (size_t)w; return; }
        size_t cap = 2 * (sb->cap + (size_t)w) + 256;
        char *np = realloc(sb->p, cap);
        if (!np) { sb->oom = 1; return; }
        sb->p = np;
        sb->cap = cap;
    }
}

static const char *type_name(config_type t)
{
    switch (t) {
    case CFG_INT: return "int";
    case CFG_FLOAT: return "float";
    case CFG_BOOL: return "bool";
    case CFG_STRING: return "string";
    case CFG_U64: return "uint64";
    }
    return "?";
}

static void md_intro(strbuf *sb)
{
    sb_printf(sb, "%s",
"# Job configuration\n\n"
"<!-- Generated from the field table in core/config/config_table.c by loom_config_docs (build target\n"
"     config_docs); do not edit. The test config_docs_drift fails when this file is stale. -->\n\n"
"A job is one JSON object. Every field has a default, so `{}` is a complete job. An unknown\n"
"field is an error that names it and suggests the nearest known one. The effective\n"
"configuration is built in this order, later steps winning:\n\n"
"1. the defaults listed below;\n"
"2. the model preset named by `\"model\": \"NAME\"` or `\"model\": {\"preset\": \"NAME\", ...}`,\n"
"   or by `--set model.preset=NAME` (which wins over the file); `tiny` when none is named;\n"
"3. the fields of the job file (for example `\"model\": {\"preset\": \"gpt2-124m\", \"n_layer\": 6}`\n"
"   is GPT-2 124M with 6 layers);\n"
"4. the `--set a.b=v` overrides on the command line, in order.\n\n"
"`--set` takes a dotted field path and a value: `--set train.lr=6e-4`,\n"
"`--set train.recompute=true`, `--set data.train=data/tiny.bin`. The value is read as JSON\n"
"when it is valid JSON (numbers, `true`/`false`, `\"quoted strings\"`); a string field takes\n"
"anything else as the bare text. `--set model=NAME` is short for `--set model.preset=NAME`.\n\n"
"Then the fields are checked together: `d_model % n_head == 0`, `n_head % n_kv_head == 0`, an\n"
"even head dim with RoPE, `seq_len <= max_seq`, `micro_batch` divides `batch_size`,\n"
"`min_lr <= lr`, warmup within `steps`, known LoRA targets. Every error is one line naming the\n"
"file (or `--set`) and the field, e.g.\n"
"`job.json: unknown field 'train.lrr' (did you mean 'train.lr'?)`.\n\n"
"**Paths.** `data.train`, `data.val`, `finetune.base`, `model.tokenizer`, `out` and\n"
"`checkpoint.dir` follow one rule: a relative path written in the job file is taken from the job\n"
"file's folder (`configs/demo.json`'s `\"data/corpus.txt\"` is `configs/data/corpus.txt`, from any\n"
"directory), one given on the command line (`--set`, `--out`, `--init`, `--resume`, `--ckpt`) from\n"
"the current directory, as a shell argument is; an absolute path is used as it is. A missing input\n"
"is one line naming the field and the path as resolved, e.g.\n"
"`data.train: configs/data/corpus.txt: No such file or directory`. The defaults are not paths\n"
"of the file: `out` `\"\"` is `runs/<name>` in the current directory.\n\n"
"```json\n"
"{\n"
"  \"name\": \"small6\",\n"
"  \"model\": {\"preset\": \"gpt2-small6\", \"max_seq\": 256},\n"
"  \"train\": {\"steps\": 2000, \"batch_size\": 32, \"seq_len\": 256, \"lr\": 6e-4},\n"
"  \"data\": {\"train\": \"data/shakespeare.bin\"}\n"
"}\n"
"```\n\n");
}

static void md_presets(strbuf *sb)
{
    sb_printf(sb, "## Model presets\n\n"
        "The files `configs/models/NAME.json`, built into the binary. A preset sets the model\n"
        "fields it lists (these list them all); any it leaves out keep the defaults below.\n\n"
        "| preset | vocab | d_model | n_layer | n_head | n_kv_head | d_ff | norm | mlp | "
        "positions | tied | bias | max_seq |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const preset_file *p = loom_presets; p->name; p++) {
        model_config m;
        if (config_apply_preset(&m, p->name)) {
            sb_printf(sb, "| `%s` | invalid: %s |||||||||||\n", p->name, loom_error());
            continue;
        }
        sb_printf(sb, "| `%s` | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %d |\n",
                  p->name, m.vocab, m.d_model, m.n_layer, m.n_head, m.n_kv_head, m.d_ff, m.norm,
                  m.mlp, m.positions, m.tied_embeddings ? "yes" : "no", m.bias ? "yes" : "no",
                  m.max_seq);
    }
    sb_printf(sb, "\n");
}

static void md_section(strbuf *sb, int s)
{
    const config_section *cs = config_section_of(s);
    const char *sec = cs->name;
    int nfields;
    const config_field *fields = config_fields(&nfields);
    size_t sl = strlen(sec);
    sb_printf(sb, "## %s%s%s\n\n%s\n\n| field | type | default | meaning |\n|---|---|---|---|\n",
              sl ? "`" : "", cs->title, sl ? "`" : "", cs->doc);
    for (int i = 0; i < nfields; i++) {
        const char *path = fields[i].path, *dot = strchr(path, '.');
        int in = sl ? (dot && (size_t)(dot - path) == sl && strncmp(path, sec, sl) == 0) : !dot;
        if (!in) continue;
        char rule[160];
        config_rule_text(i, rule, sizeof rule);
        sb_printf(sb, "| `%s` | %s%s%s | `%s` | %s |\n", path, type_name(fields[i].type),
                  rule[0] ? ", " : "", rule, fields[i].default_value, fields[i].doc);
    }
    sb_printf(sb, "\n");
}

char *config_markdown(void)
{
    strbuf sb = {0};
    md_intro(&sb);
    md_presets(&sb);
    for (int s = 0; config_section_of(s); s++) md_section(&sb, s);
    if (sb.oom || !sb.p) {
        free(sb.p);
        loom_fail("config: out of memory writing the docs");
        return NULL;
    }
    return sb.p;
}
