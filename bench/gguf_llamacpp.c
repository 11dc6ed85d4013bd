/* gguf_llamacpp.c: `gguf_llamacpp MODEL.gguf LOGITS.bin V ID...`: llama.cpp (libllama, the pinned
 * source package's) runs MODEL.gguf on the ids and prints the largest |logit - reference| against
 * LOGITS.bin (little-endian f32, T x V: the HF fixture's transformers logits). LORA=ADAPTER.gguf in
 * the environment applies a LoRA adapter (scale 1); DUMP=OUT.bin writes llama.cpp's logits there.
 * Run by bench/gguf_llamacpp.sh, never by CI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: gguf_llamacpp MODEL.gguf LOGITS.bin V ID...\n"); return 2; }
    int V = atoi(argv[3]), T = argc - 4;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "%s: llama.cpp could not load it\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = cp.n_ubatch = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;                  /* fp32 throughout: the default f16 KV cache  */
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;   /* and the CPU flash attention (f16 Q) cost ~1e-3 */
    struct llama_context *ctx = llama_init_from_model(m, cp);
    const char *lora = getenv("LORA");
    if (ctx && lora) {
        struct llama_adapter_lora *a = llama_adapter_lora_init(m, lora);
        float one = 1.0f;
        if (!a || llama_set_adapters_lora(ctx, &a, 1, &one) != 0) { fprintf(stderr, "%s: llama.cpp could not apply it\n", lora); return 1; }
    }
    struct llama_batch b = llama_batch_init(T, 0, 1);
    for (int i = 0; i < T; i++) {
        b.token[i] = atoi(argv[4 + i]);
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = T;
    if (!ctx || llama_decode(ctx, b) != 0) { fprintf(stderr, "%s: decode failed\n", argv[1]); return 1; }
    const char *dump = getenv("DUMP");
    FILE *d = dump ? fopen(dump, "wb") : NULL;
    for (int i = 0; d && i < T; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)V, d);
    if (d) fclose(d);
    float *ref = malloc((size_t)T * V * sizeof *ref);
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(ref, sizeof *ref, (size_t)T * V, f) != (size_t)T * V) { fprintf(stderr, "%s: unreadable\n", argv[2]); return 1; }
    fclose(f);
    double worst = 0, scale = 0;
    for (int i = 0; i < T; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        for (int v = 0; v < V; v++) {
            worst = fmax(worst, fabs((double)l[v] - ref[(size_t)i * V + v]));
            scale = fmax(scale, fabs(ref[(size_t)i * V + v]));
        }
    }
    printf("%s: max |logit - reference| = %.3g (largest logit %.3g)\n", argv[1], worst, scale);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(m);
    llama_backend_free();
    return 0;
}
