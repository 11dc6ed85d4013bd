/* gguf_export.c: loom tensors -> a GGUF llama.cpp loads, as its convert_hf_to_gguf.py writes one
 * (conversion/gpt2.py, llama.py, qwen.py of the llama-cpp-python 0.3.36 source): the tensor list
 * per family (llama.cpp's names, loom tensors concatenated or re-laid where llama.cpp's layout
 * differs, in the converter's order), the architecture keys, then the tokenizer (gguf_vocab.c).
 * Streams: one loom tensor (or a piece of one) in memory at a time. */
#include "checkpoints/gguf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

enum { ARCH_GPT2 = GGUF_ARCH_GPT2, ARCH_LLAMA = GGUF_ARCH_LLAMA, ARCH_QWEN2 = GGUF_ARCH_QWEN2, ARCH_QWEN3 = GGUF_ARCH_QWEN3 };
static const char *const arch_names[] = {"gpt2", "llama", "qwen2", "qwen3"};

const char *gguf_arch_name(int arch) { return arch_names[arch]; }

static gg_tensor *gg_add(gg_list *l, const char *name, const char *order, int64_t rows, int64_t cols)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        gg_tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t) { loom_fail("export gguf: out of memory"); return NULL; }
        l->t = t;
        l->cap = cap;
    }
    gg_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->order, sizeof t->order, "%s", order);
    t->ndim = cols ? 2 : 1;
    t->ne[0] = cols ? cols : rows;
    t->ne[1] = cols ? rows : 1;
    return t;
}

/* gguf name <- loom tensors (NULL-terminated), HF name for the order */
static int gg_one(gg_list *l, const char *name, const char *order, int64_t rows, int64_t cols, const char *p0,
                  const char *p1, const char *p2)
{
    gg_tensor *t = gg_add(l, name, order, rows, cols);
    if (!t) return -1;
    const char *p[3] = {p0, p1, p2};
    for (int i = 0; i < 3 && p[i]; i++) snprintf(t->part[t->nparts++], sizeof t->part[0], "%s", p[i]);
    return 0;
}

/* conversion/gpt2.py: HF's Conv1D weights transposed back to (out, in), which is loom's layout;
 * c_attn is loom's q, k, v stacked. */
static int gg_gpt2(const hf_dims *d, gg_list *l)
{
    int64_t C = d->d_model, F = d->d_ff, V = d->vocab;
    char g[64], h[128], a[64], b[64], c[64];
#define ONE(gn, hn, r, cl, p) (snprintf(g, sizeof g, "blk.%d.%s", i, gn), snprintf(h, sizeof h, "h.%d.%s", i, hn), \
                               snprintf(a, sizeof a, "h.%d.%s", i, p), gg_one(l, g, h, r, cl, a, NULL, NULL))
    for (int i = 0; i < d->n_layer; i++) {
        for (int w = 0; w < 2; w++) {
            const char *s = w ? "bias" : "weight";
            snprintf(g, sizeof g, "blk.%d.attn_qkv.%s", i, s);
            snprintf(h, sizeof h, "h.%d.attn.c_attn.%s", i, s);
            snprintf(a, sizeof a, "h.%d.attn.q.%s", i, s);
            snprintf(b, sizeof b, "h.%d.attn.k.%s", i, s);
            snprintf(c, sizeof c, "h.%d.attn.v.%s", i, s);
            if (gg_one(l, g, h, 3 * C, w ? 0 : C, a, b, c)) return -1;
        }
        if (ONE("attn_output.weight", "attn.c_proj.weight", C, C, "attn.o.weight") ||
            ONE("attn_output.bias", "attn.c_proj.bias", C, 0, "attn.o.bias") ||
            ONE("attn_norm.weight", "ln_1.weight", C, 0, "ln_1.weight") || ONE("attn_norm.bias", "ln_1.bias", C, 0, "ln_1.bias") ||
            ONE("ffn_norm.weight", "ln_2.weight", C, 0, "ln_2.weight") || ONE("ffn_norm.bias", "ln_2.bias", C, 0, "ln_2.bias") ||
            ONE("ffn_up.weight", "mlp.c_fc.weight", F, C, "mlp.fc.weight") || ONE("ffn_up.bias", "mlp.c_fc.bias", F, 0, "mlp.fc.bias") ||
            ONE("ffn_down.weight", "mlp.c_proj.weight", C, F, "mlp.proj.weight") ||
            ONE("ffn_down.bias", "mlp.c_proj.bias", C, 0, "mlp.proj.bias"))
            return -1;
    }
#undef ONE
    return gg_one(l, "output_norm.weight", "ln_f.weight", C, 0, "ln_f.weight", NULL, NULL) ||
           gg_one(l, "output_norm.bias", "ln_f.bias", C, 0, "ln_f.bias", NULL, NULL) ||
           gg_one(l, "position_embd.weight", "wpe.weight", d->max_seq, C, "wpe.weight", NULL, NULL) ||
           gg_one(l, "token_embd.weight", "wte.weight", V, C, "wte.weight", NULL, NULL) ||
           (!d->tied && gg_one(l, "output.weight", "lm_head.weight", V, C, "lm_head.weight", NULL, NULL));
}

/* conversion/llama.py permutes q/k rows from HF's rotate-half halves to adjacent pairs, which is
 * loom's layout already; qwen.py keeps HF's (NEOX RoPE), so loom's rows are put back. */
static int gg_llama(const hf_dims *d, int arch, gg_list *l)
{
    int64_t C = d->d_model, D = hf_head_dim(d), qC = D * d->n_head, kvC = D * d->n_kv_head, F = d->d_ff, V = d->vocab;
    int neox = arch != ARCH_LLAMA, qb = d->bias || d->qkv_bias;
    char g[64], h[128], a[64];
    if (d->llama3) {
        gg_tensor *t = gg_add(l, "rope_freqs.weight", "", D / 2, 0);
        if (!t) return -1;
        t->rope_freqs = 1;
    }
#define ONE(gn, hn, r, cl, p, rope)                                                                                  \
    do {                                                                                                            \
        snprintf(g, sizeof g, "blk.%d.%s", i, gn);                                                                  \
        snprintf(h, sizeof h, "model.layers.%d.%s", i, hn);                                                         \
        snprintf(a, sizeof a, "h.%d.%s", i, p);                                                                     \
        if (gg_one(l, g, h, r, cl, a, NULL, NULL)) return -1;                                                       \
        l->t[l->n - 1].neox = (rope) && neox;                                                                       \
        l->t[l->n - 1].head_dim = (int)D;                                                                           \
    } while (0)
    for (int i = 0; i < d->n_layer; i++) {
        ONE("attn_norm.weight", "input_layernorm.weight", C, 0, "ln_1.weight", 0);
        ONE("attn_q.weight", "self_attn.q_proj.weight", qC, C, "attn.q.weight", 1);
        ONE("attn_k.weight", "self_attn.k_proj.weight", kvC, C, "attn.k.weight", 1);
        ONE("attn_v.weight", "self_attn.v_proj.weight", kvC, C, "attn.v.weight", 0);
        if (qb) {
            ONE("attn_q.bias", "self_attn.q_proj.bias", qC, 0, "attn.q.bias", 1);
            ONE("attn_k.bias", "self_attn.k_proj.bias", kvC, 0, "attn.k.bias", 1);
            ONE("attn_v.bias", "self_attn.v_proj.bias", kvC, 0, "attn.v.bias", 0);
        }
        if (d->qk_norm) {
            ONE("attn_q_norm.weight", "self_attn.q_norm.weight", D, 0, "attn.ln_q.weight", 1);
            ONE("attn_k_norm.weight", "self_attn.k_norm.weight", D, 0, "attn.ln_k.weight", 1);
        }
        ONE("attn_output.weight", "self_attn.o_proj.weight", C, qC, "attn.o.weight", 0);
        if (d->bias) ONE("attn_output.bias", "self_attn.o_proj.bias", C, 0, "attn.o.bias", 0);
        ONE("ffn_norm.weight", "post_attention_layernorm.weight", C, 0, "ln_2.weight", 0);
        ONE("ffn_gate.weight", "mlp.gate_proj.weight", F, C, "mlp.gate.weight", 0);
        ONE("ffn_up.weight", "mlp.up_proj.weight", F, C, "mlp.up.weight", 0);
        ONE("ffn_down.weight", "mlp.down_proj.weight", C, F, "mlp.down.weight", 0);
    }
#undef ONE
    return gg_one(l, "token_embd.weight", "model.embed_tokens.weight", V, C, "wte.weight", NULL, NULL) ||
           gg_one(l, "output_norm.weight", "model.norm.weight", C, 0, "ln_f.weight", NULL, NULL) ||
           (!d->tied && gg_one(l, "output.weight", "lm_head.weight", V, C, "lm_head.weight", NULL, NULL));
}

static int gg_cmp(const void *a, const void *b) { return strcmp(((const gg_tensor *)a)->order, ((const gg_tensor *)b)->order); }

int gguf_tensor_list(const hf_dims *d, int arch, gg_list *l)
{
    memset(l, 0, sizeof *l);
    int rc = arch == ARCH_GPT2 ? gg_gpt2(d, l) : gg_llama(d, arch, l);
    if (rc == 0) qsort(l->t, (size_t)l->n, sizeof *l->t, gg_cmp);
    return rc;
}

/* The llama.cpp architecture of loom's options (gguf_internal.h). */
int gguf_arch_of(const hf_dims *d, const char *src)
{
    if (d->layernorm && !d->swiglu && !d->rope && d->bias) return ARCH_GPT2;
    if (!d->layernorm && d->swiglu && d->rope) return d->qk_norm ? ARCH_QWEN3 : d->qkv_bias ? ARCH_QWEN2 : ARCH_LLAMA;
    return loom_fail("%s: model.norm/mlp/positions/bias = %s/%s/%s/%s is no architecture llama.cpp has "
                     "(GPT-2: layernorm/gelu/learned/true; Llama, Qwen2, Qwen3: rmsnorm/swiglu/rope)", src,
                     d->layernorm ? "layernorm" : "rmsnorm", d->swiglu ? "swiglu" : "gelu", d->rope ? "rope" : "learned",
                     d->bias ? "true" : "false");
}

/* The tensor's type as the converter picks it (base.py prepare_tensors): 1-d, *_norm.weight,
 * position_embd and any non-.weight f32; a q8_0 tensor whose rows do not split into blocks of 32
 * falls back to f16 (gguf-py's QuantError). */
static gguf_type gg_type(const gg_tensor *t, gguf_type want)
{
    size_t n = strlen(t->name);
    if (t->ndim == 1 || (n > 12 && strcmp(t->name + n - 12, "_norm.weight") == 0) || strcmp(t->name, "position_embd.weight") == 0 ||
        n < 7 || strcmp(t->name + n - 7, ".weight") != 0)
        return GGUF_F32;
    if (want == GGUF_Q8_0 && t->ne[0] % 32) {
        log_warn("export gguf: %s: rows of %lld do not split into q8_0 blocks of 32: f16, as llama.cpp's converter",
                 t->name, (long long)t->ne[0]);
        return GGUF_F16;
    }
    return want;
}

/* general.file_type (llama.cpp's LlamaFileType) */
static uint32_t gg_file_type(gguf_type t) { return t == GGUF_F32 ? 0 : t == GGUF_F16 ? 1 : t == GGUF_Q8_0 ? 7 : 32; }

/* The keys before the tokenizer's, in the converter's order (TextModel.set_gguf_parameters and the
 * family's additions). */
static int gg_arch_keys(gguf_writer *w, const hf_dims *d, int arch, gguf_type type)
{
    const char *a = arch_names[arch];
    char k[96];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    int rc = gguf_kv_str(w, "general.architecture", a) || gguf_kv_str(w, "general.type", "model") ||
             gguf_kv_u32(w, KEY("block_count"), (uint32_t)d->n_layer) ||
             gguf_kv_u32(w, KEY("context_length"), (uint32_t)d->max_seq) ||
             gguf_kv_u32(w, KEY("embedding_length"), (uint32_t)d->d_model) ||
             gguf_kv_u32(w, KEY("feed_forward_length"), (uint32_t)d->d_ff) ||
             gguf_kv_u32(w, KEY("attention.head_count"), (uint32_t)d->n_head);
    if (rc) return -1;
    if (arch == ARCH_GPT2)
        return gguf_kv_f32(w, KEY("attention.layer_norm_epsilon"), (float)d->norm_eps) ||
               gguf_kv_u32(w, "general.file_type", gg_file_type(type)) || gguf_kv_u32(w, "general.quantization_version", 2);
    rc = gguf_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)d->n_kv_head) ||
         gguf_kv_f32(w, KEY("rope.freq_base"), (float)d->rope_theta) ||
         gguf_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)d->norm_eps);
    if (rc == 0 && arch != ARCH_QWEN2) /* written from config.json's head_dim, which these families' configs carry */
        rc = gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)hf_head_dim(d)) ||
             gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)hf_head_dim(d));
    if (rc == 0) rc = gguf_kv_u32(w, "general.file_type", gg_file_type(type));
    if (rc == 0 && arch == ARCH_LLAMA)
        rc = gguf_kv_u32(w, KEY("vocab_size"), (uint32_t)d->vocab) ||
             gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)hf_head_dim(d));
#undef KEY
    return rc || gguf_kv_u32(w, "general.quantization_version", 2);
}

/* conversion/llama.py generate_extra_tensors, in float32 as torch computes it there */
void gguf_rope_freqs(const hf_dims *d, float *out)
{
    int dim = hf_head_dim(d);
    double lo_wave = d->rope_original_max_seq / d->rope_low, hi_wave = d->rope_original_max_seq / d->rope_high;
    for (int i = 0; i < dim / 2; i++) {
        float freq = 1.0f / powf((float)d->rope_theta, (float)(2 * i) / (float)dim);
        float wavelen = (float)(2 * 3.14159265358979323846) / freq; /* 2 * math.pi, made float32 by torch */
        if (wavelen < (float)hi_wave) out[i] = 1.0f;
        else if (wavelen > (float)lo_wave) out[i] = (float)d->rope_factor;
        else {
            float smooth = ((float)d->rope_original_max_seq / wavelen - (float)d->rope_low) / (float)(d->rope_high - d->rope_low);
            out[i] = 1.0f / ((1.0f - smooth) / (float)d->rope_factor + smooth);
        }
    }
}

typedef struct gg_ctx {
    gguf_writer *w;
    hf_get_fn get;
    hf_pieces_fn pieces;
    void *ctx;
    float *buf;
    size_t cap;
} gg_ctx;

static int gg_put(void *pctx, const float *x, size_t n) { return gguf_put(pctx, x, n); }

/* loom part p of t: streamed in pieces when it goes as it is, else whole (re-laid for NEOX) */
static int gg_write_part(gg_ctx *c, const gg_tensor *t, int p, size_t numel)
{
    if (!t->neox && c->pieces) return c->pieces(c->ctx, t->part[p], gg_put, c->w);
    const float *x = c->get(c->ctx, t->part[p]);
    if (!x) return loom_fail("export gguf: the checkpoint has no tensor %s (for %s)", t->part[p], t->name);
    if (!t->neox) return gguf_put(c->w, x, numel);
    if (numel > c->cap) {
        float *b = realloc(c->buf, numel * sizeof *b);
        if (!b) return loom_fail("export gguf: out of memory for %s", t->name);
        c->buf = b;
        c->cap = numel;
    }
    size_t cols = t->ndim > 1 ? (size_t)t->ne[0] : 1;
    gguf_rows_to_neox(x, c->buf, numel / cols, cols, (size_t)t->head_dim);
    return gguf_put(c->w, c->buf, numel);
}

void gguf_rows_to_neox(const float *x, float *out, size_t rows, size_t cols, size_t D)
{
    size_t half = D / 2;
    for (size_t r = 0; r < rows; r++) { /* loom row h*D + j holds HF row h*D + (j odd ? half + j/2 : j/2) */
        size_t h = r / D, j = r % D, src = h * D + (j % 2 ? half + j / 2 : j / 2);
        memcpy(out + src * cols, x + r * cols, cols * sizeof(float));
    }
}

static int gg_write_data(gg_ctx *c, const hf_dims *d, const gg_list *l)
{
    for (int i = 0; i < l->n; i++) {
        const gg_tensor *t = &l->t[i];
        if (t->rope_freqs) {
            float f[512];
            if (t->ne[0] > 512) return loom_fail("export gguf: head dim %lld too large", (long long)(2 * t->ne[0]));
            gguf_rope_freqs(d, f);
            if (gguf_put(c->w, f, (size_t)t->ne[0])) return -1;
            continue;
        }
        size_t per = (size_t)(t->ne[0] * t->ne[1]) / (size_t)t->nparts;
        for (int p = 0; p < t->nparts; p++)
            if (gg_write_part(c, t, p, per)) return -1;
    }
    return 0;
}

int gguf_export(const char *out_path, const char *model_json, const char *what, hf_get_fn get, hf_pieces_fn pieces,
                void *ctx, gguf_type type, const char *src_dir)
{
    hf_dims d;
    gg_list l;
    if (hf_dims_from_loom_json(model_json, &d)) return -1;
    int arch = gguf_arch_of(&d, what ? what : "checkpoint model config");
    if (arch < 0) return -1;
    int rc = gguf_tensor_list(&d, arch, &l);
    gguf_writer *w = rc == 0 ? gguf_create(out_path, 32) : NULL;
    if (rc == 0 && !w) rc = -1;
    if (rc == 0) rc = gg_arch_keys(w, &d, arch, type);
    if (rc == 0) rc = gguf_vocab_write(w, src_dir, d.vocab, arch);
    for (int i = 0; rc == 0 && i < l.n; i++) rc = gguf_tensor_add(w, l.t[i].name, l.t[i].ndim, l.t[i].ne, gg_type(&l.t[i], type));
    gg_ctx c = {w, get, pieces, ctx, NULL, 0};
    if (rc == 0) rc = gguf_data_begin(w) || gg_write_data(&c, &d, &l);
    if (rc == 0) {
        rc = gguf_commit(w);
        w = NULL;
    }
    if (rc == 0) log_info("exported %s (%d tensors, %s) to %s", arch_names[arch], l.n, gguf_type_name(type), out_path);
    gguf_abort(w);
    free(c.buf);
    free(l.t);
    return rc;
}
