/* cmd_plan.c: `loom plan JOB.json [--set k=v]... [-n RANKS] [--json]`: a training job's memory per
 * rank before anything is allocated (core/train/plan.h), and whether it fits the device this
 * machine shows. Opens the backend (to learn the precision it computes and its threads) and, for
 * a fine-tune, reads the data (its rows' length); never creates the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backends/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "core/train/train.h"
#include "launch/cli.h"

/* The plan's own flags, taken out of argv (the rest are cli_parse_job's). */
typedef struct plan_args {
    long ranks;
    int json, train, finetune;
} plan_args;

static int cmd_plan_flags(int *argc, char **argv, plan_args *pa)
{
    int n = 2;
    pa->ranks = 1;
    for (int i = 2; i < *argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "-n") == 0 || strcmp(f, "--ranks") == 0) {
            if (i + 1 >= *argc) return loom_fail("flag %s needs a value", f);
            if (cli_long(f, argv[++i], 1, 1 << 20, &pa->ranks)) return -1;
        } else if (strcmp(f, "--json") == 0) pa->json = 1;
        else if (strcmp(f, "--train") == 0) pa->train = 1;
        else if (strcmp(f, "--finetune") == 0) pa->finetune = 1;
        else argv[n++] = argv[i];
    }
    if (pa->train && pa->finetune) return loom_fail("--train and --finetune: give one");
    *argc = n;
    return 0;
}

/* The backend the job would run on here, as session_backend_open asks for it: threads the cores
 * split over the ranks (or parallel.threads, at most the cores). */
static backend *cmd_plan_backend(const job_config *cfg, int ranks)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores > 0 ? cores : 1), t = cfg->parallel.threads;
    backend_config bc = {0};
    bc.threads = t > 0 ? (t < n ? t : n) : (n / ranks > 0 ? n / ranks : 1);
    bc.precision = strcmp(cfg->precision, "bf16") == 0 ? BACKEND_BF16 : BACKEND_FP32;
    bc.allow_tf32 = strcmp(cfg->precision, "tf32") == 0;
    char why[256] = "";
    return backend_select(cfg->backend, &bc, why, sizeof why);
}

static void cmd_plan_table(const job_config *cfg, const train_plan *p, const char *be_desc, size_t dev,
                           const char *dev_what, const char *hint)
{
    char b[32];
    const plan_shape *sh = &p->shape;
    printf("plan for %s: %s, %d rank%s, ZeRO stage %d, micro-batch %d x %d tokens, %s, train.recompute %s\n",
           cfg->name, sh->finetune ? (p->lora_rank ? "LoRA fine-tune" : "full fine-tune") : "training", sh->ranks,
           sh->ranks == 1 ? "" : "s", p->zero_stage, p->micro_batch, sh->T, sh->bf16 ? "bf16 matmuls" : "fp32",
           p->recompute ? "on" : "off");
    printf("backend %s; %zu trainable parameters", be_desc, p->nparams);
    if (p->nbase_params) printf(", %zu frozen (LoRA rank %d)", p->nbase_params, p->lora_rank);
    printf("\n\n%-18s %12s %16s\n", "per rank", "", "bytes");
    for (int i = 0; i < PLAN_NPARTS; i++) {
        printf("%-18s %12s %16zu", plan_part_name(i), plan_bytes(p->part[i], b, sizeof b), p->part[i]);
        if (i == PLAN_ACTS)
            printf("   (train.recompute=%s: %s)", p->recompute ? "false" : "true", plan_bytes(p->acts_other, b, sizeof b));
        printf("\n");
    }
    printf("%-18s %12s %16zu\n", "total", plan_bytes(p->total, b, sizeof b), p->total);
    size_t per = sh->cpu ? (size_t)sh->local_ranks : 1, need = p->total * per;
    if (per > 1) printf("%-18s %12s %16zu   (%zu ranks on this node share its RAM)\n", "node", plan_bytes(need, b, sizeof b), need, per);
    if (!dev) {
        printf("\ndevice memory unknown (%s): fits not decided\n", dev_what);
        return;
    }
    printf("\ndevice: %s (%s)\n", plan_bytes(dev, b, sizeof b), dev_what);
    if (need <= dev) printf("fits: yes (%.0f%% of it)\n", 100.0 * (double)need / (double)dev);
    else printf("fits: no: the largest part is %s (%s); %s\n", plan_part_name(p->largest),
                plan_bytes(p->part[p->largest], b, sizeof b), hint);
}

static int cmd_plan_json(const job_config *cfg, const train_plan *p, const char *be_name, size_t dev,
                         const char *dev_what, const char *hint)
{
    const plan_shape *sh = &p->shape;
    size_t per = sh->cpu ? (size_t)sh->local_ranks : 1, need = p->total * per;
    cJSON *o = cJSON_CreateObject(), *parts = cJSON_CreateObject();
    if (!o || !parts) return loom_fail("out of memory");
    cJSON_AddStringToObject(o, "job", cfg->name);
    cJSON_AddStringToObject(o, "kind", sh->finetune ? (p->lora_rank ? "lora" : "full") : "train");
    cJSON_AddStringToObject(o, "backend", be_name);
    cJSON_AddStringToObject(o, "precision", sh->bf16 ? "bf16" : "fp32");
    cJSON_AddNumberToObject(o, "ranks", sh->ranks);
    cJSON_AddNumberToObject(o, "zero_stage", p->zero_stage);
    cJSON_AddNumberToObject(o, "micro_batch", p->micro_batch);
    cJSON_AddNumberToObject(o, "seq_len", sh->T);
    cJSON_AddBoolToObject(o, "recompute", p->recompute);
    cJSON_AddNumberToObject(o, "trainable_params", (double)p->nparams);
    cJSON_AddNumberToObject(o, "frozen_params", (double)p->nbase_params);
    for (int i = 0; i < PLAN_NPARTS; i++) cJSON_AddNumberToObject(parts, plan_part_name(i), (double)p->part[i]);
    cJSON_AddItemToObject(o, "bytes_per_rank", parts);
    cJSON_AddNumberToObject(o, "activations_keep", (double)(p->recompute ? p->acts_other : p->part[PLAN_ACTS]));
    cJSON_AddNumberToObject(o, "activations_recompute", (double)(p->recompute ? p->part[PLAN_ACTS] : p->acts_other));
    cJSON_AddNumberToObject(o, "total_per_rank", (double)p->total);
    cJSON_AddNumberToObject(o, "ranks_sharing_memory", (double)per);
    cJSON_AddNumberToObject(o, "device_memory", (double)dev);
    cJSON_AddStringToObject(o, "device_memory_from", dev_what);
    if (dev) cJSON_AddBoolToObject(o, "fits", need <= dev);
    else cJSON_AddNullToObject(o, "fits");
    cJSON_AddStringToObject(o, "largest", plan_part_name(p->largest));
    cJSON_AddStringToObject(o, "hint", hint);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return loom_fail("out of memory");
    printf("%s\n", text);
    free(text);
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    plan_args pa = {0};
    cli_job a;
    job_config cfg;
    if (cmd_plan_flags(&argc, argv, &pa) || cli_parse_job(argc, argv, 2, &a) || cli_load_config(&a, &cfg))
        return cli_fail();
    /* a job is a fine-tune when it names a base (train --init names one too: --init, --train) */
    int finetune = pa.finetune || (!pa.train && !a.init && cfg.finetune.base[0]);
    int T;
    if (train_seq_len(&cfg, finetune, &T)) return cli_fail();
    backend *be = cmd_plan_backend(&cfg, (int)pa.ranks);
    if (!be) return cli_fail();
    const backend_config *bc = backend_cfg(be);
    plan_shape sh = {(int)pa.ranks, (int)pa.ranks, T, finetune, bc->precision == BACKEND_BF16,
                     strcmp(backend_name(be), "cpu") == 0, bc->threads > 0 ? bc->threads : 1};
    char desc[256], name[32], what[96], hint[160];
    snprintf(desc, sizeof desc, "%s", backend_description(be));
    snprintf(name, sizeof name, "%s", backend_name(be));
    size_t dev = plan_device_memory(be, sh.cpu, what, sizeof what);
    backend_destroy(be);
    train_plan p;
    if (plan_compute(&cfg, &sh, &p)) return cli_fail();
    plan_hint(&cfg, &p, p.largest, hint, sizeof hint);
    if (pa.json) return cmd_plan_json(&cfg, &p, name, dev, what, hint) ? cli_fail() : 0;
    cmd_plan_table(&cfg, &p, desc, dev, what, hint);
    return 0;
}
