/* cmd_export.c: `loom export hf CKPT OUT_DIR [--dtype f32|bf16|f16] [--merge] [--shard-mb N]`,
 * `loom export peft CKPT OUT_DIR`, `loom export gguf CKPT OUT.gguf [--type f32|f16|bf16|q8_0] [--adapter]` and
 * `loom export needle CKPT OUT.safetensors`: a loom checkpoint -> a Hugging Face folder, a PEFT
 * adapter, a GGUF file for llama.cpp, or a Needle adapter. Parsing and printing only: the
 * work is export_hf's (core/train/export.c) and export_needle's (core/train/export_needle.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/train/train.h"
#include "launch/cli.h"

static int export_parse(int argc, char **argv, export_options *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = ST_F32;
    o->shard_mb = 2048;
    if (argc < 5) return loom_fail("usage: loom export hf CKPT OUT_DIR [--dtype f32|bf16|f16] [--merge] [--shard-mb N] | loom export peft CKPT OUT_DIR | "
                                    "loom export needle CKPT OUT.safetensors [--merge]");
    const char *kind = argv[2];
    o->ckpt = argv[3];
    o->out_dir = argv[4];
    if (strcmp(kind, "hf") != 0 && strcmp(kind, "peft") != 0) return loom_fail("export: unknown kind '%s' (hf, peft, gguf, needle)", kind);
    o->peft = strcmp(kind, "peft") == 0;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--merge") == 0) o->merge = 1;
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") == 0) o->dtype = ST_F32;
            else if (strcmp(d, "bf16") == 0) o->dtype = ST_BF16;
            else if (strcmp(d, "f16") == 0) o->dtype = ST_F16;
            else return loom_fail("export: --dtype '%s' (f32, bf16, f16)", d);
        } else if (strcmp(argv[i], "--shard-mb") == 0 && i + 1 < argc) {
            o->shard_mb = atof(argv[++i]);
            if (!(o->shard_mb > 0)) return loom_fail("export: --shard-mb must be positive");
        } else return loom_fail("export: unexpected argument '%s'", argv[i]);
    }
    return 0;
}

/* `loom export gguf CKPT OUT.gguf [--type T] [--merge | --adapter]` (a LoRA fine-tune is merged unless
 * --adapter asks for its adapters alone) */
static int export_gguf_parse(int argc, char **argv, export_options *o)
{
    memset(o, 0, sizeof *o);
    o->gguf = 1;
    o->merge = 1;
    o->gguf_type = GGUF_F32;
    if (argc < 5) return loom_fail("usage: loom export gguf CKPT OUT.gguf [--type f32|f16|bf16|q8_0] [--adapter]");
    o->ckpt = argv[3];
    o->out_dir = argv[4];
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--merge") == 0) continue;
        if (strcmp(argv[i], "--adapter") == 0) { o->gguf_adapter = 1; continue; }
        if (strcmp(argv[i], "--type") != 0 || i + 1 >= argc) return loom_fail("export gguf: unexpected argument '%s'", argv[i]);
        int t = gguf_type_parse(argv[++i]);
        if (t < 0)
            return loom_fail("export gguf: --type '%s' (f32, f16, bf16, q8_0; k-quants: llama-quantize on the f16 or f32 file, "
                             "docs/gguf.md)", argv[i]);
        o->gguf_type = (gguf_type)t;
    }
    return 0;
}

int cmd_export(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[2], "gguf") == 0) {
        export_options g;
        if (export_gguf_parse(argc, argv, &g) || export_hf(&g)) return cli_fail();
        printf("%s -> %s\n", g.ckpt, g.out_dir);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[2], "needle") == 0) {
        int merge = 0, other = 0, bad = argc < 5;
        for (int i = 5; i < argc; i++) {
            if (strcmp(argv[i], "--merge") == 0) merge = 1;
            else if (strcmp(argv[i], "--allow-other-base") == 0) other = 1;
            else bad = 1;
        }
        if (bad) return loom_fail("usage: loom export needle CKPT OUT.safetensors [--merge] [--allow-other-base]"), cli_fail();
        if (export_needle(argv[3], argv[4], merge, other)) return cli_fail();
        printf("%s -> %s\n", argv[3], argv[4]);
        return 0;
    }
    export_options o;
    if (export_parse(argc, argv, &o) || export_hf(&o)) return cli_fail();
    printf("%s -> %s\n", o.ckpt, o.out_dir);
    return 0;
}
