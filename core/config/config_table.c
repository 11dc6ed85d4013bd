/* config_table.c: the one table of job_config fields (path, type, default, allowed values, doc)
 * and what is read straight from it: lookups and JSON output (docs/config.md: config_docs.c).
 * Must never hold a second description of a field: parsing and validation read this table. */
#include "core/config/config.h"
#include "core/config/config_table.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allowed values per field. Numbers: lo/hi bounds (open or closed); strings: "a|b|c". */
#define ANY         {-HUGE_VAL, HUGE_VAL, 0, 0, NULL}
#define POS         {0, HUGE_VAL, 1, 0, NULL}
#define NONNEG      {0, HUGE_VAL, 0, 0, NULL}
#define UNIT        {0, 1, 0, 1, NULL}
#define RANGE(a, b) {a, b, 0, 0, NULL}
#define ONE_OF(s)   {0, 0, 0, 0, s}

/* X(path, type, member of job_config, default as JSON, allowed, doc). Model defaults are the
 * values of configs/models/tiny.json (test_config checks that they agree). */
#define CONFIG_TABLE(X) \
    X("name", CFG_STRING, name, "\"job\"", ANY, \
      "Job name: non-empty UTF-8 text without `/` or control characters, not `.` or `..`; names the output folder.") \
    X("out", CFG_STRING, out, "\"\"", ANY, \
      "Output folder for the metrics file, logs and checkpoints; `\"\"` = `runs/<name>`.") \
    X("backend", CFG_STRING, backend, "\"\"", ANY, \
      "Compute backend by name (`cpu`, `cuda`, `metal`); `\"\"` = the best one available.") \
    X("precision", CFG_STRING, precision, "\"fp32\"", ONE_OF("fp32|tf32|bf16"), \
      "Matmul precision (docs/precision.md). `fp32`: all fp32. `tf32` (GPU): matmul and " \
      "attention inputs rounded to TF32, fp32 accumulate. `bf16` (GPU, and CPUs with AMX " \
      "through oneDNN): matmul inputs bf16, fp32 accumulate; elsewhere fp32, and the " \
      "start line says so. Weights, gradients, optimizer " \
      "state, activations, loss/softmax/norm statistics and checkpoints stay fp32 in every mode.") \
    X("model.preset", CFG_STRING, model.preset, "\"tiny\"", ANY, \
      "Preset the model fields start from (see Model presets); `\"\"` = the defaults below.") \
    X("model.vocab", CFG_INT, model.vocab, "320", POS, \
      "Token embedding rows; every token id must be below it (may be padded, e.g. 50304).") \
    X("model.d_model", CFG_INT, model.d_model, "64", POS, "Width of the residual stream.") \
    X("model.n_layer", CFG_INT, model.n_layer, "2", POS, "Number of transformer blocks.") \
    X("model.layers", CFG_INT, model.layers, "0", NONNEG, \
      "A Needle base's ladder rung: 0 = its full depth; N trains Needle's nested subset of N " \
      "layers, as `needle build --layers N` cuts it (docs/needle.md section 5). Needle bases only.") \
    X("model.n_head", CFG_INT, model.n_head, "4", POS, \
      "Query heads; must divide `d_model` (head dim = d_model / n_head).") \
    X("model.n_kv_head", CFG_INT, model.n_kv_head, "2", POS, \
      "Key/value heads (grouped-query attention); must divide `n_head`.") \
    X("model.head_dim", CFG_INT, model.head_dim, "0", NONNEG, \
      "Width of each attention head; 0 = d_model / n_head. Queries span n_head * head_dim.") \
    X("model.d_ff", CFG_INT, model.d_ff, "256", POS, "Hidden width of the MLP.") \
    X("model.norm", CFG_STRING, model.norm, "\"layernorm\"", ONE_OF("layernorm|rmsnorm"), \
      "Normalisation before attention, before the MLP and at the end.") \
    X("model.mlp", CFG_STRING, model.mlp, "\"gelu\"", ONE_OF("gelu|swiglu"), \
      "MLP kind: `gelu` (fc, proj) or `swiglu` (gate, up, down).") \
    X("model.positions", CFG_STRING, model.positions, "\"learned\"", ONE_OF("learned|rope"), \
      "Position encoding: a learned table of `max_seq` rows, or rotary (RoPE).") \
    X("model.rope_theta", CFG_FLOAT, model.rope_theta, "10000", POS, \
      "RoPE base: pair i rotates by pos * theta^(-2i/head_dim). Used with `rope` only.") \
    X("model.rope_scaling", CFG_STRING, model.rope_scaling, "\"none\"", ONE_OF("none|llama3"), \
      "RoPE frequency scaling: `llama3` rescales the long wavelengths as Llama 3.1+ do.") \
    X("model.rope_factor", CFG_FLOAT, model.rope_factor, "8", POS, \
      "llama3 scaling: long wavelengths are divided by this factor.") \
    X("model.rope_low_freq_factor", CFG_FLOAT, model.rope_low_freq_factor, "1", POS, \
      "llama3 scaling: wavelengths above original_max_seq / this are fully scaled.") \
    X("model.rope_high_freq_factor", CFG_FLOAT, model.rope_high_freq_factor, "4", POS, \
      "llama3 scaling: wavelengths below original_max_seq / this are left as they are.") \
    X("model.rope_original_max_seq", CFG_INT, model.rope_original_max_seq, "8192", POS, \
      "llama3 scaling: the context length the model was pretrained with.") \
    X("model.qkv_bias", CFG_BOOL, model.qkv_bias, "false", ANY, \
      "The q, k and v projections carry biases even when `bias` is off (Qwen2).") \
    X("model.qk_norm", CFG_BOOL, model.qk_norm, "false", ANY, \
      "Per-head RMSNorm on q and k (a weight of head_dim each) before RoPE (Qwen3).") \
    X("model.tied_embeddings", CFG_BOOL, model.tied_embeddings, "true", ANY, \
      "The LM head reuses the token embedding matrix.") \
    X("model.bias", CFG_BOOL, model.bias, "true", ANY, \
      "Linear layers and norms carry biases (GPT-2 style).") \
    X("model.max_seq", CFG_INT, model.max_seq, "128", POS, \
      "Longest sequence the model accepts; `train.seq_len` must not exceed it.") \
    X("model.norm_eps", CFG_FLOAT, model.norm_eps, "1e-5", POS, \
      "Epsilon added to the variance (or mean square) inside the norms.") \
    X("model.init_std", CFG_FLOAT, model.init_std, "0.02", POS, \
      "Weights start as N(0, init_std); output projections use init_std / sqrt(2 n_layer).") \
    X("model.tokenizer", CFG_STRING, model.tokenizer, "\"byte\"", ANY, \
      "Tokenizer: `byte` (ids 0-255 + loom's specials) or a `tokenizer.json` file or a model " \
      "folder holding one (docs/tokenizers.md); a relative path is taken from the job file's folder " \
      "(see Paths above).") \
    X("train.steps", CFG_INT, train.steps, "20", POS, "Optimizer steps to run (a fine-tune: finetune.epochs decide, unless the job names train.steps).") \
    X("train.batch_size", CFG_INT, train.batch_size, "8", POS, \
      "Global batch: sequences per optimizer step, summed over ranks and micro-batches.") \
    X("train.micro_batch", CFG_INT, train.micro_batch, "0", NONNEG, \
      "Sequences per forward/backward on one rank; fewer than batch_size / ranks " \
      "accumulates gradients. 0 = batch_size / ranks. Must divide batch_size. The step's loss is " \
      "one mean over every target of the global batch, whatever the split: in PyTorch, each " \
      "micro-batch's summed loss divided by the global batch's target count before its backward " \
      "(not its own mean divided by the micro-batches).") \
    X("train.seq_len", CFG_INT, train.seq_len, "64", POS, \
      "Tokens per training sequence; at most `model.max_seq`.") \
    X("train.lr", CFG_FLOAT, train.lr, "3e-4", NONNEG, "Peak learning rate, reached after warmup.") \
    X("train.min_lr", CFG_FLOAT, train.min_lr, "3e-5", NONNEG, \
      "Cosine decay ends at this rate on the last step; at most `lr`.") \
    X("train.warmup", CFG_FLOAT, train.warmup, "0.05", NONNEG, \
      "Linear warmup from 0: a fraction of `steps` if below 1, else a whole number of steps.") \
    X("train.weight_decay", CFG_FLOAT, train.weight_decay, "0.1", NONNEG, \
      "AdamW decoupled weight decay: w -= lr * weight_decay * w each step, on the matrices only " \
      "(embeddings, attention and MLP projections, an untied head); norm weights, biases and LoRA " \
      "adapters never decay (PyTorch: two parameter groups, weight_decay 0 for the second). Needle " \
      "bases decay every adapter, as Needle does (docs/needle.md).") \
    X("train.beta1", CFG_FLOAT, train.beta1, "0.9", UNIT, "AdamW first-moment decay.") \
    X("train.beta2", CFG_FLOAT, train.beta2, "0.95", UNIT, "AdamW second-moment decay.") \
    X("train.eps", CFG_FLOAT, train.eps, "1e-8", POS, "AdamW denominator epsilon.") \
    X("train.grad_clip", CFG_FLOAT, train.grad_clip, "1.0", NONNEG, \
      "Scale gradients down so their global L2 norm is at most this; 0 = no clipping. The factor " \
      "is clip / norm (torch.nn.utils.clip_grad_norm_ divides by norm + 1e-6).") \
    X("train.seed", CFG_U64, train.seed, "1337", ANY, \
      "Seed of the initial weights and of the data order (same seed, same run at any rank " \
      "count). Above 2^53 write it as a string.") \
    X("train.recompute", CFG_BOOL, train.recompute, "false", ANY, \
      "Recompute each layer's activations in backward: less memory for about 1/3 more compute. " \
      "A Needle fine-tune recomputes in any case (its remat): false keeps a block of each layer " \
      "(its projections, mHC coefficients and output) so that a recompute runs only its attention " \
      "and one Kronecker product, true recomputes whole layers.") \
    X("train.log_every", CFG_INT, train.log_every, "1", POS, "Print a progress line every N steps, and for the first and last step a run takes " \
      "(`metrics.jsonl` gets every step).") \
    X("train.max_bad_steps", CFG_INT, train.max_bad_steps, "5", POS, \
      "Steps with a non-finite loss or gradient are skipped; this many in a row stop the job.") \
    X("train.allow_change", CFG_BOOL, train.allow_change, "false", ANY, \
      "Resume even when a `train` field other than steps, micro_batch, recompute, log_every " \
      "and max_bad_steps (or `data.val_split`, `data.max_len`, `data.bucket`) differs from the checkpoint's; " \
      "the data order or schedule then differ from the original run. Without it, refused.") \
    X("data.train", CFG_STRING, data.train, "\"\"", ANY, \
      "Training data: a file named `*.txt` is text (tokenized on load by the model's tokenizer, " \
      "at most 256 MiB); any other name must be a token file (`loom tokenize`), memory-mapped; " \
      "finetune reads JSONL (at most 1 GiB, strict UTF-8).") \
    X("data.val", CFG_STRING, data.val, "\"\"", ANY, \
      "Validation file; `\"\"` = hold out `val_split` of the training examples (finetune).") \
    X("data.val_split", CFG_FLOAT, data.val_split, "0.1", UNIT, \
      "Fraction of the examples held out for validation when `val` is empty.") \
    X("data.max_len", CFG_INT, data.max_len, "1024", POS, \
      "Finetune: cap on an example's padded length (the model's `max_seq` also caps it).") \
    X("data.skip_bad_lines", CFG_BOOL, data.skip_bad_lines, "false", ANY, \
      "Finetune: skip malformed JSONL lines with a warning instead of stopping.") \
    X("data.chat_format", CFG_STRING, data.chat_format, "\"\"", ANY, \
      "Finetune: chat format (`loom`, `qwen2.5`, `qwen3`, `chatml`, `llama3`, `mistral`, `needle`; docs/finetune-data.md); " \
      "`\"\"` = from the model folder's chat_template, `needle` for a Needle SentencePiece model, else `loom`.") \
    X("data.date_string", CFG_STRING, data.date_string, "\"\"", ANY, \
      "Finetune, Llama 3 chat format: the `Today Date:` its system turn writes (the template's " \
      "`date_string`, as transformers and llama.cpp name it); `\"\"` = the job's start date as the " \
      "template's `strftime_now(\"%d %b %Y\")` writes it (`26 Jul 2024`). The date used is kept in " \
      "the checkpoint's job config, so a resume renders the same bytes, and `eval`/`sample --ckpt` " \
      "render with the checkpoint's date when this is `\"\"`.") \
    X("data.bucket", CFG_BOOL, data.bucket, "true", ANY, \
      "Finetune: batch by length: each global batch runs at its longest example (rounded up to " \
      "8), not at the data set's longest; each epoch's shuffle is also sorted by length in chunks " \
      "of 32 batches (then the batches shuffled) when that saves over 10% of the tokens " \
      "(docs/finetune-data.md). `false`: one shuffled order, every row at the longest.") \
    X("data.pack", CFG_BOOL, data.pack, "true", ANY, \
      "Finetune: each micro-batch's examples run packed one after another, so no padding is " \
      "computed (RoPE, positions and attention per example; docs/finetune-data.md). `false`: rows " \
      "padded to the batch's length.") \
    X("parallel.comm", CFG_STRING, parallel.comm, "\"auto\"", ONE_OF("auto|self|mpi|nccl"), \
      "Transport between ranks; `auto` = nccl on CUDA, mpi under mpirun, else self.") \
    X("parallel.zero_stage", CFG_INT, parallel.zero_stage, "0", RANGE(0, 3), \
      "ZeRO: 1 shards optimizer state, 2 also gradients, 3 also parameters.") \
    X("parallel.bucket_mb", CFG_FLOAT, parallel.bucket_mb, "25", POS, \
      "Gradient bucket size in MB; a full bucket is reduced while backward goes on.") \
    X("parallel.timeout_s", CFG_FLOAT, parallel.timeout_s, "150", POS, \
      "A collective waiting longer than this ends the job, naming the rank it waited for " \
      "(4x until step 1 is done; during a checkpoint save, plus the save's expected time from its " \
      "bytes and the measured write rate: docs/launch.md).") \
    X("parallel.threads", CFG_INT, parallel.threads, "0", RANGE(0, 256), \
      "CPU threads per rank; 0 = cores / ranks on the node. At most 256: each thread reserves " \
      "its own stack and BLAS buffer. More than the node's cores is clamped to them, and more than " \
      "the cores over the node's ranks together is oversubscribed: each says so in a warning.") \
    X("checkpoint.dir", CFG_STRING, checkpoint.dir, "\"\"", ANY, \
      "Checkpoint folder; `\"\"` = `<out>/ckpt`.") \
    X("checkpoint.every", CFG_INT, checkpoint.every, "0", RANGE(-1, HUGE_VAL), \
      "Save every N steps; 0 = only at the end; -1 = never.") \
    X("checkpoint.keep", CFG_INT, checkpoint.keep, "3", POS, \
      "Keep the newest N checkpoints; older ones are deleted once a new one is complete.") \
    X("checkpoint.on_error", CFG_STRING, checkpoint.on_error, "\"stop\"", \
      ONE_OF("stop|continue"), "When a save fails: stop the job, or warn and keep training.") \
    X("finetune.base", CFG_STRING, finetune.base, "\"\"", ANY, \
      "Checkpoint to fine-tune from (a loom checkpoint, a Hugging Face model folder, or a Needle " \
      "base `.safetensors`); its stored model config is used.") \
    X("finetune.method", CFG_STRING, finetune.method, "\"lora\"", ONE_OF("lora|full"), \
      "`lora`: train low-rank adapters on frozen weights; `full`: train every weight.") \
    X("finetune.lora_rank", CFG_INT, finetune.lora_rank, "16", POS, \
      "Rank r of each adapter (A: d_in x r, B: r x d_out).") \
    X("finetune.lora_alpha", CFG_FLOAT, finetune.lora_alpha, "32", POS, \
      "Adapter output is scaled by alpha / r.") \
    X("finetune.lora_targets", CFG_STRING, finetune.lora_targets, "\"q,k,v,o\"", ANY, \
      "Projections that get adapters: a comma list of q, k, v, o, fc, proj (gelu) or " \
      "gate, up, down (swiglu); PEFT's names q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, " \
      "down_proj, GPT-2's c_attn (= q,k,v), c_fc, c_proj (= o,proj), or all-linear.") \
    X("finetune.epochs", CFG_INT, finetune.epochs, "3", POS, "Passes over the training examples (train.steps decides instead when the job names it).") \
    X("finetune.allow_other_base", CFG_BOOL, finetune.allow_other_base, "false", ANY, \
      "Resume LoRA adapters on a finetune.base other than the one they were trained on (its digest " \
      "differs); `loom ckpt merge --allow-other-base` is the same for a merge.") \
    X("finetune.eval_base", CFG_BOOL, finetune.eval_base, "true", ANY, \
      "Measure the base model's tool-call accuracy before training; `false` skips it.") \
    X("finetune.qat", CFG_BOOL, finetune.qat, "true", ANY, \
      "Needle bases: train with Needle's fine-tune numerics as Needle does (the merged weights " \
      "fake-quantised to CQ 4-bit with the straight-through estimator, A8 activations, KV8); " \
      "`false` trains in float32. Other bases ignore it.") \
    X("eval.batch", CFG_INT, eval.batch, "32", POS, \
      "Sequences generated together: one prefill forward, then one step per token for every " \
      "sequence still running.") \
    X("eval.max_examples", CFG_INT, eval.max_examples, "0", NONNEG, \
      "Measure tool-call accuracy on at most this many held-out examples, spread evenly over " \
      "the split (the same ones every run); 0 = all.")

#define FIELD_ROW(p, t, m, d, r, doc) \
    {p, t, offsetof(job_config, m), sizeof(((job_config *)0)->m), d, doc},
#define RULE_ROW(p, t, m, d, r, doc) r,

static const config_field table_fields[] = {CONFIG_TABLE(FIELD_ROW)};
static const config_rule table_rules[] = {CONFIG_TABLE(RULE_ROW)};
#define NFIELDS ((int)(sizeof table_fields / sizeof table_fields[0]))

/* Sections in output order; "" is the top level. */
static const config_section table_sections[] = {
    {"", "Top level", "Naming, output and device."},
    {"model", "model", "The transformer. `\"model\": \"NAME\"` is short for "
                       "`\"model\": {\"preset\": \"NAME\"}`."},
    {"train", "train", "Steps, batch, learning-rate schedule and AdamW."},
    {"data", "data", "Training and validation data."},
    {"parallel", "parallel", "Ranks, transports and ZeRO sharding."},
    {"checkpoint", "checkpoint", "When and where checkpoints are written."},
    {"finetune", "finetune", "`loom finetune`: base checkpoint, LoRA, epochs."},
    {"eval", "eval", "Tool-call evaluation: `loom eval` and a fine-tune's before/after."},
};
#define NSECTIONS ((int)(sizeof table_sections / sizeof table_sections[0]))

const config_field *config_fields(int *count)
{
    if (count) *count = NFIELDS;
    return table_fields;
}

const config_rule *config_rule_of(int i) { return &table_rules[i]; }

int config_named(const job_config *cfg, const char *path)
{
    int i = config_field_find(path);
    return i >= 0 && i < CONFIG_MAX_FIELDS && cfg->named[i];
}

int config_field_find(const char *path)
{
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(table_fields[i].path, path) == 0) return i;
    return -1;
}

int config_is_section(const char *name)
{
    for (int s = 1; s < NSECTIONS; s++)
        if (strcmp(table_sections[s].name, name) == 0) return 1;
    return 0;
}

const char *config_section_name(int s) { return s < NSECTIONS ? table_sections[s].name : NULL; }

const config_section *config_section_of(int s) { return s < NSECTIONS ? &table_sections[s] : NULL; }

/* The shortest %g text that reads back as exactly f, so JSON round-trips are exact. */
void config_float_text(float f, char *buf, size_t n)
{
    char text[32] = "";
    /* Whole numbers as integers ("10000", not "1e+04"). */
    if (f == floorf(f) && fabsf(f) < 1e9f) {
        snprintf(buf, n, "%.0f", (double)f);
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, (double)f);
        if (strtof(text, NULL) == f) break;
    }
    snprintf(buf, n, "%s", text);
}

/* "> 0", "in [0, 1)", "one of `a`, `b`" ("" when any value is allowed). */
void config_rule_text(int i, char *buf, size_t n)
{
    const config_rule *r = &table_rules[i];
    buf[0] = '\0';
    if (strcmp(table_fields[i].path, "model.preset") == 0) {
        snprintf(buf, n, "a preset name or \"\"");
    } else if (r->choices) {
        size_t len = (size_t)snprintf(buf, n, "one of ");
        for (const char *c = r->choices; *c && len + 4 < n;) {
            size_t w = strcspn(c, "|");
            len += (size_t)snprintf(buf + len, n - len, "%s%.*s", c == r->choices ? "" : ", ",
                                    (int)w, c);
            c += w + (c[w] == '|');
        }
    } else if (r->lo == -HUGE_VAL && r->hi == HUGE_VAL) {
        return;
    } else if (r->hi == HUGE_VAL) {
        snprintf(buf, n, "%s %g", r->lo_open ? ">" : ">=", r->lo);
    } else {
        snprintf(buf, n, "in %c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi,
                 r->hi_open ? ')' : ']');
    }
}

/* Field i of cfg as a cJSON value (floats as their shortest exact text). */
cJSON *config_field_json(const job_config *cfg, int i)
{
    const void *p = (const char *)cfg + table_fields[i].offset;
    char buf[64];
    switch (table_fields[i].type) {
    case CFG_INT: return cJSON_CreateNumber(*(const int *)p);
    case CFG_BOOL: return cJSON_CreateBool(*(const int *)p);
    case CFG_STRING: return cJSON_CreateString((const char *)p);
    case CFG_FLOAT:
        if (!isfinite(*(const float *)p)) return cJSON_CreateNull();
        config_float_text(*(const float *)p, buf, sizeof buf);
        return cJSON_CreateRaw(buf);
    case CFG_U64: {
        uint64_t v = *(const uint64_t *)p;
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        /* A JSON number is a double: exact only up to 2^53. */
        return v <= (1ULL << 53) ? cJSON_CreateRaw(buf) : cJSON_CreateString(buf);
    }
    }
    return cJSON_CreateNull();
}

/* cJSON_Print indents with tabs and writes ":\t"; make it two spaces and ": ". Tabs inside
 * strings are escaped as \t by cJSON, so every literal tab here is layout. */
static char *json_untab(char *text)
{
    if (!text) return NULL;
    size_t n = strlen(text), k = 0;
    char *out = malloc(2 * n + 1);
    if (!out) { free(text); return NULL; }
    int line_start = 1;
    for (size_t j = 0; j < n; j++) {
        if (text[j] == '\t') {
            out[k++] = ' ';
            if (line_start) out[k++] = ' ';
            continue;
        }
        line_start = text[j] == '\n';
        out[k++] = text[j];
    }
    out[k] = '\0';
    free(text);
    return out;
}

char *config_to_json(const job_config *cfg)
{
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; root && i < NFIELDS; i++) {
        const char *path = table_fields[i].path, *dot = strchr(path, '.');
        cJSON *parent = root;
        if (dot) {
            char sec[32];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - path), path);
            parent = cJSON_GetObjectItemCaseSensitive(root, sec);
            if (!parent) parent = cJSON_AddObjectToObject(root, sec);
        }
        if (!parent) break;
        cJSON_AddItemToObject(parent, dot ? dot + 1 : path, config_field_json(cfg, i));
    }
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) loom_fail("config: out of memory writing JSON");
    return json_untab(text);
}

char *config_model_to_json(const model_config *m)
{
    job_config tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.model = *m;
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; root && i < NFIELDS; i++)
        if (strncmp(table_fields[i].path, "model.", 6) == 0)
            cJSON_AddItemToObject(root, table_fields[i].path + 6, config_field_json(&tmp, i));
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) loom_fail("config: out of memory writing the model JSON");
    return text;
}
