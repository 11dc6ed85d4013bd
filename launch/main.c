/* main.c: the `loom` binary: picks the subcommand. Before anything else it makes sure OpenBLAS
 * runs a kernel that fits this CPU (which may re-exec the process once, see backends/cpu). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "base/version.h"
#include "launch/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loom <command> [args]     (loom --version; loom CMD --help: this text)\n"
            "  train JOB.json [--set key=value]... [--out DIR] [--backend NAME] [--resume CKPT] [--quiet]\n"
            "        [--init CKPT_OR_HF_DIR]     start from those weights instead of a seeded init\n"
            "        [--overwrite]       replace the run the run folder holds (else refused; --resume continues it)\n"
            "                      pretrain or continue training (a token or text file)\n"
            "  finetune JOB.json [same flags]   fine-tune finetune.base on JSONL tool-calling data\n"
            "  eval JOB.json [--ckpt CKPT] [--quiet]   validation loss + tool-call accuracy\n"            "  render JOB.json [--set key=value]... [--limit N] [--json]\n"
            "                      what a fine-tune trains on: each example's text, the trained tokens\n"
            "                      between \u27e6 and \u27e7 (--json: {split, ids, mask, text} a line)\n"
            "  sample JOB.json [--ckpt CKPT | --random] (--prompt TEXT | --query TEXT --tools JSON)\n"
            "         [--temperature T>=0] [--top-k K>=0] [--seed S] [--max-new N>=1] [--quiet]\n"
            "  plan JOB.json [--set key=value]... [-n RANKS] [--json] [--train|--finetune]\n"
            "                      memory per rank before anything is allocated (parameters, gradients,\n"
            "                      optimizer, bf16 copies, activations with and without recompute,\n"
            "                      workspace) and whether it fits this machine; train/finetune refuse a\n"
            "                      job that does not (LOOM_NO_FIT_CHECK=1 runs it anyway; docs/memory.md)\n"
            "  info                build features, devices, the backend that would be picked\n"
            "  tokenize IN.txt OUT.bin [--width 2|4]\n"
            "                      byte-level tokenize a text file into a token file\n"
            "  config show JOB.json [--set key=value]...   the full effective config\n"
            "  config docs         the config reference (docs/config.md)\n"
            "  ckpt info FILE_OR_DIR                       what a checkpoint holds\n"
            "  ckpt merge BASE ADAPTER OUT_DIR             fold LoRA adapters into the base model\n"
            "  ckpt seal FILE_OR_DIR                       accept a checkpoint edited outside loom\n"
            "Results (generated text, summaries, JSON) go to stdout, logs to stderr; --quiet keeps\n"
            "only results, warnings and errors.\n"
            "  import HF_DIR|NEEDLE.safetensors|MODEL.gguf OUT_DIR|OUT.h5  a Hugging Face folder, a Needle base or a GGUF\n"
            "                                              -> a loom checkpoint\n"
            "  export hf CKPT OUT_DIR [--dtype f32|bf16|f16] [--merge] [--shard-mb N]\n"
            "  export peft CKPT OUT_DIR                    a LoRA checkpoint -> a PEFT adapter folder\n"
            "  export gguf CKPT OUT.gguf [--type f32|f16|bf16|q8_0] [--adapter]  -> one GGUF file for llama.cpp\n"
            "                                              (a LoRA fine-tune merged, or its adapters; docs/gguf.md)\n"
            "  export needle CKPT OUT.safetensors [--merge] a Needle fine-tune -> Needle's adapter (or merged base);\n"
            "                                              an imported Needle base -> its file again\n"
            "Run under mpirun for several ranks: mpirun -np 4 loom train JOB.json\n");
}

int main(int argc, char **argv)
{
    backend_prepare_process(argv);
    /* a file-size limit must make write() fail with EFBIG (a message, the previous checkpoint
     * kept), not kill the process silently */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("loom %s\n", LOOM_VERSION);
        return 0;
    }
    for (int i = 2; i < argc; i++) /* loom CMD --help: the usage, every command's flags */
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return cmd_train(argc, argv);
    if (strcmp(cmd, "finetune") == 0) return cmd_finetune(argc, argv);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(cmd, "render") == 0) return cmd_render(argc, argv);
    if (strcmp(cmd, "sample") == 0) return cmd_sample(argc, argv);
    if (strcmp(cmd, "plan") == 0) return cmd_plan(argc, argv);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc, argv);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc, argv);
    if (strcmp(cmd, "config") == 0) return cmd_config(argc, argv);
    if (strcmp(cmd, "ckpt") == 0) return cmd_ckpt(argc, argv);
    if (strcmp(cmd, "import") == 0) return cmd_import(argc, argv);
    if (strcmp(cmd, "export") == 0) return cmd_export(argc, argv);
    fprintf(stderr, "loom: error: unknown command '%s' (try: loom --help)\n", cmd);
    return 2;
}
