/* hf_internal.h: what hf.c and the per-family files (hf_gpt2.c, hf_llama.c) share: the model
 * dimensions in neutral words, the tensor map (HF name <-> loom name + layout change) and the
 * family table. Nothing outside checkpoints/hf*.c includes it. */
#ifndef LOOM_HF_INTERNAL_H
#define LOOM_HF_INTERNAL_H

#include <cjson/cJSON.h>

#include "checkpoints/hf.h"

/* The dimensions and options of a decoder (loom's model_config fields, by their JSON names). */
typedef struct hf_dims {
    int vocab, d_model, n_layer, n_head, n_kv_head, d_ff, max_seq;
    int head_dim;           /* 0 = d_model / n_head */
    int layernorm, swiglu, rope, tied, bias, qkv_bias, qk_norm;
    double rope_theta, norm_eps;
    int llama3, rope_original_max_seq;
    double rope_factor, rope_low, rope_high;
} hf_dims;

/* How a loom tensor sits inside its HF tensor. */
enum {
    HF_COPY,    /* same layout */
    HF_T,       /* 2-D transposed (GPT-2's Conv1D stores (in, out)) */
    HF_ROPE     /* rows permuted per head: HF's rotate-half pairs (i, i + D/2) -> loom's (2i, 2i+1) */
};

typedef struct hf_map {
    char hf[128], loom[64];
    int op;
    int part, nparts;     /* loom tensor = part `part` of nparts along HF's last dim (fused c_attn) */
    int head_dim;         /* HF_ROPE */
    int hf_ndim;
    int64_t hf_shape[2];  /* what config.json implies */
    int ndim;
    int64_t shape[2];     /* loom's */
} hf_map;

typedef struct hf_family {
    const char *arch;       /* architectures[0] */
    const char *model_type;
    /* config.json -> dims; -1 + loom_fail naming the field */
    int (*parse)(const cJSON *cfg, const char *path, hf_dims *d);
    /* the full tensor map for d, appended through hf_map_add */
    int (*map)(const hf_dims *d, const char *prefix, hf_map **maps, int *n);
    /* dims -> fields written into config.json on export */
    void (*write_config)(const hf_dims *d, cJSON *cfg);
    /* HF tensors that are buffers, not weights (accounted for, never imported) */
    int (*is_buffer)(const char *hf_name);
} hf_family;

extern const hf_family hf_family_gpt2, hf_family_llama, hf_family_mistral, hf_family_qwen2,
    hf_family_qwen3;

static inline int hf_head_dim(const hf_dims *d) { return d->head_dim ? d->head_dim : d->d_model / d->n_head; }

int hf_map_add(hf_map **maps, int *n, const char *hf, const char *loom, int op, int part,
               int nparts, int head_dim, int hf_ndim, int64_t h0, int64_t h1, int ndim, int64_t l0,
               int64_t l1);

/* 1 when map m's loom tensor is its whole HF tensor, element for element (no layout change). */
static inline int hf_is_copy(const hf_map *m) { return m->op == HF_COPY && m->nparts <= 1; }

/* loom's tensor (its layout) <- the whole HF tensor hf for map m; back = 1 runs it the other way
 * (loom is then only read). */
void hf_convert(const hf_map *m, float *loom, float *hf, int back);

/* JSON helpers: a number field (def when absent; -1 + loom_fail when not a number) */
int hf_json_int(const cJSON *o, const char *key, int def, int *out, const char *path);
int hf_json_num(const cJSON *o, const char *key, double def, double *out, const char *path);
int hf_json_bool(const cJSON *o, const char *key, int def, int *out, const char *path);

/* dims <-> loom's model-config JSON */
char *hf_dims_to_loom_json(const hf_dims *d);
int hf_dims_from_loom_json(const char *json, hf_dims *d);

#endif
