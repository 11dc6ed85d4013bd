/* needle.h: Needle's own files (pip cactus-needle 3.x) as another checkpoint format: a base
 * checkpoint (.safetensors, format_version "2", the flax parameter tree flattened with '/', the
 * TransformerConfig as JSON metadata) and a LoRA adapter (lora/<flax path>/A and /B, JSON metadata
 * strings). Reading checks every tensor's shape against the config; writing gives files Needle's
 * read_checkpoint / read_adapter accept, byte for byte as its safetensors library writes them.
 * Knows flax paths only: the map onto loom's tensor names lives with the model family
 * (docs/needle.md, "Tensors"). Must never hold a whole file in memory (tensors are mapped). */
#ifndef LOOM_NEEDLE_H
#define LOOM_NEEDLE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoints/safetensors.h"

#define NEEDLE_MAX_LIST 64    /* longest tuple field (layer lists) loom reads */
#define NEEDLE_FORMAT_VERSION "2"

/* A tuple field of TransformerConfig (a JSON list of ints). */
typedef struct needle_list {
    int n;
    int v[NEEDLE_MAX_LIST];
} needle_list;

/* Every field of TransformerConfig (architecture.py:40-80), in its order, with its meaning there. */
typedef struct needle_config {
    int vocab_size, d_model, num_heads, num_kv_heads, num_layers;
    int qk_head_dim, v_head_dim;  /* 0: d_model / num_heads (head_dims(), architecture.py:124) */
    int max_seq_len, pad_token_id, embedding_dim;
    int embedding_probes, embedding_queries, confidence_probes, confidence_queries;
    int router_probes, router_queries;
    double rope_theta;
    char dtype[16];               /* "bfloat16" | "float32" | "float16" */
    int flash;
    needle_list engram_orders;
    int engram_heads;             /* 0: max(1, d_model / (len(orders) * 128)) */
    int engram_slots, engram_seed_heads;
    needle_list engram_layers, global_layers;
    int sliding_window;           /* 0: every layer global */
    needle_list ladder_depths;
    int ladder_sample;
    needle_list ladder_widths;    /* non-empty: the Hadamard MLP's split permutations */
    needle_list ladder_order;
    int mhc_lanes, qkv_conv_taps, out_vocab, kv_window, kv_bits, act_bits;
    char weight_bits[16];
    int remat, scan_unroll;
} needle_config;

/* What the config implies (architecture.py's helpers), for shapes and for the model family. */
typedef struct needle_geometry {
    int qk_head_dim, v_head_dim;  /* head_dims() */
    int q_dim, k_dim, v_dim, attn_dim;       /* H*qk, KV*qk, KV*v, H*v */
    int hada_n, hada_a, hada_b;   /* padded width 2^ceil(log2 d), its Kronecker factors a*b = n */
    int engram_heads, engram_tables, engram_sub_dim; /* engram_geometry(): tables = orders*heads */
    int engram_dilation;          /* max(orders) */
    int lanes;                    /* mhc_lanes */
} needle_geometry;

/* TransformerConfig() (the defaults of every field). */
void needle_config_default(needle_config *c);
/* Parse the checkpoint's `config` JSON as run.py:load_checkpoint + TransformerConfig.from_saved do:
 * a missing field takes from_saved's value (0 / [] / false for the 11 fields it lists, else the
 * default). An unknown field, a Needle 2 config (attn_dim without qk_head_dim), a field of the wrong
 * type or an impossible geometry: -1 + loom_fail("WHERE: config field F: ..."). */
int needle_config_parse(needle_config *c, const char *json, const char *where);
/* The config as json.dumps(dataclasses.asdict(config)) writes it (Python's separators and float
 * repr, the fields in TransformerConfig's order). malloc'd; NULL + loom_fail. */
char *needle_config_json(const needle_config *c);
void needle_geometry_of(const needle_config *c, needle_geometry *g);

/* One tensor a base checkpoint must (or may) hold, from the config. */
typedef struct needle_shape {
    char path[96];                /* flax path, "stack/layers/block/self_attn/q_proj/kernel" */
    int ndim;
    int64_t shape[4];
    int optional;                 /* a probe head's (each head all or nothing) or router calibration */
} needle_shape;
/* Every tensor of a base checkpoint for config c, in a fixed order; *out malloc'd. */
int needle_expected(const needle_config *c, needle_shape **out, int *n);

/* Needle's LoRA targets (finetune.py:24, 306-315: q/k/v/gate/out_proj kernels of the layer
 * stack), t = 0 .. NEEDLE_LORA_TARGETS - 1 in that order: the kernel's flax path, and in / out of
 * y = x W for config geometry g. */
#define NEEDLE_LORA_TARGETS 5
const char *needle_lora_path(int t);
void needle_lora_dims(const needle_geometry *g, int d_model, int t, int *in, int *out);

/* --- reading a base checkpoint --- */
typedef struct needle_file needle_file;

/* Open `path`: a safetensors file whose metadata has format_version "2" and a config Needle 3
 * loads; mtp_* tensors dropped (run.py:39); every other tensor one of needle_expected()'s with
 * its shape, none missing. Or the loom checkpoint (folder or file) `loom import` made of such a
 * file (below), checked the same and read as that file. NULL + loom_fail naming the file and the
 * field or tensor. */
needle_file *needle_open(const char *path);
void needle_close(needle_file *f);
const needle_config *needle_file_config(const needle_file *f);
/* The file's identity for a LoRA checkpoint trained on it (ckpt_state.base_digest): a digest of
 * every byte of the file, never 0. An imported checkpoint's is its file's (recorded at import), so
 * adapters trained on either resume and export with the other. */
uint64_t needle_file_digest(const needle_file *f);
/* Metadata string `key` ("format_version", "config", "step", "run") as stored; NULL if absent. */
const char *needle_file_meta(const needle_file *f, const char *key);
/* The kept tensors (mtp_ dropped), in file order. Borrowed. */
int needle_file_count(const needle_file *f);
const st_tensor *needle_file_tensor(const needle_file *f, int i);
/* The metadata strings in file order: key i, its value into *value. */
int needle_file_meta_count(const needle_file *f);
const char *needle_file_meta_at(const needle_file *f, int i, const char **value);
/* Index of flax path `path` among the kept tensors, -1 if absent. */
int needle_file_find(const needle_file *f, const char *path);
/* Tensor i (kept index) converted to fp32 into out[0 .. numel). */
int needle_file_read(needle_file *f, int i, float *out, size_t numel);
/* Elements [e0, e0 + n) of tensor i as fp32: a mapped file's read in place; a rung's cut tensor
 * or an imported checkpoint's read whole once, held until its last element is asked for. */
int needle_file_read_range(needle_file *f, int i, size_t e0, size_t n, float *out);
/* Tensor i's stored bytes (little-endian, its dtype), borrowed from the mapping (a rung's cut
 * tensor, or any of an imported checkpoint: from a copy the file keeps until needle_close).
 * NULL + loom_fail (out of memory; a checkpoint value the dtype cannot hold). */
const void *needle_file_bytes(needle_file *f, int i, size_t *nbytes);

/* --- a base as a loom checkpoint (`loom import`, needle_ckpt.c; docs/needle.md section 11) ---
 * Group "model" holds each kept tensor as logical fp32 under its flax path with '/' written '.'
 * (needle_ckpt_name), in Needle's layout and the file's order; model_config is the file's config
 * string; the root attribute `source` (ckpt_state.source) holds the rest as JSON: format "needle",
 * file (the path imported), digest (16 hex digits: the file's needle_file_digest), meta ([key,
 * value] in the file's order), tensors ([flax path, dtype, shape] in the file's order), dropped
 * (the mtp_ paths). needle_open presents such a checkpoint as the file: the same config, tensors,
 * dtypes, metadata, digest, and needle_file_bytes the stored bytes bitwise (F32, BF16, F16 ->
 * fp32 is exact, and back). */
void needle_ckpt_name(const char *path, char *out, size_t cap);
/* Write base f (opened from `src`: a file, not a rung or a checkpoint) as that checkpoint into the
 * folder dir (ckpt_save_pieces: dir/step_00000000.h5 and dir/latest), a piece at a time. -1 +
 * loom_fail naming the file or tensor; nothing left under its final name. */
int needle_ckpt_save(needle_file *f, const char *src, const char *dir);
/* 1 if `path` is a Needle base: a regular file NAME.safetensors (not opened), or a loom checkpoint
 * holding a Needle source (opened: its seal is read). 0 for anything else, whatever is wrong. */
int needle_is_base(const char *path);

/* --- the ladder (architecture.py:131-224; finetune.py:293-303, what `needle build --layers N`
 * cuts) --- */
/* The layers rung `depth` keeps, ascending, into sel[0 .. depth): the first `depth` of the ladder
 * order (a rung's saved ladder_order, else 0, L-1, then the midpoint of the largest gap, leftmost
 * first). -1 + loom_fail unless 2 <= depth <= num_layers. */
int needle_ladder_layers(const needle_config *c, int depth, int *sel);
/* The rung's config as rung() and ladder_config() make it: num_layers = depth, global_layers,
 * engram_layers and ladder_order renumbered to the kept layers, ladder_depths / ladder_sample /
 * ladder_widths cleared. -1 + loom_fail. */
int needle_ladder_config(const needle_config *c, int depth, needle_config *out);
/* Open `path` as its rung of `depth` layers, as ladder_slice cuts it: each stacked tensor (not
 * stack/final_norm) its kept layers, the probe heads' rows 0 and 1 + each kept layer, the engram
 * sites of kept layers renumbered (the others dropped), every other tensor as stored; the metadata
 * "config" is the rung's. needle_file_read / _bytes / _tensor then serve the rung; the digest stays
 * the file's. depth 0 or the file's num_layers: the file itself (needle_open). NULL + loom_fail. */
needle_file *needle_open_rung(const char *path, int depth);

/* --- reading a LoRA adapter (checkpoints.py:343-361, written by finetune.py:497-506) --- */
typedef struct needle_lora {
    char path[96];                /* flax path of the adapted kernel */
    int a, b;                     /* st indices of lora/<path>/A and /B */
} needle_lora;

typedef struct needle_adapter {
    st_file *st;
    int n;
    needle_lora *lora;            /* one per adapted kernel, in file order of A */
    int rank;                     /* metadata "rank" (checked against every A and B) */
    double scale;                 /* metadata "scale" (alpha / rank) */
    char *meta[6];                /* scale, base, rank, seed, pieces, languages as stored; NULL absent */
} needle_adapter;

/* Open an adapter: every tensor lora/<path>/A [.., in, r] with its /B [.., r, out], rank and scale
 * from the metadata. A "rows" tensor (Whistle) is refused. NULL + loom_fail. */
needle_adapter *needle_adapter_open(const char *path);
void needle_adapter_close(needle_adapter *a);
/* Check an adapter against a base: each path a LoRA target of Needle's (finetune.py:306-315:
 * q/k/v/gate/out_proj kernels of the layer stack) with A [L, in, r] and B [L, r, out] for that
 * kernel's [L, in, out]. -1 + loom_fail naming the tensor. */
int needle_adapter_check(const needle_adapter *a, const needle_file *base);
/* The metadata keys, in write_adapter's order (checkpoints.py:326). */
extern const char *const needle_adapter_keys[6];

/* --- writing (the layout of the safetensors library Needle calls) --- */
typedef struct needle_wtensor {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;             /* numel * dtype size bytes, little-endian */
} needle_wtensor;

typedef struct needle_meta {
    const char *key, *value;
} needle_meta;

/* Write a safetensors file as safetensors 0.8's serialize_file does (tensors sorted by dtype
 * alignment then name, the header's metadata first, padded with spaces to 8 bytes), through a
 * temporary name renamed into place. -1 + loom_fail. */
int needle_write(const char *path, const needle_wtensor *t, int n, const needle_meta *m, int nm);
/* needle_write with the tensors in the order given (a file given back: its own order), not sorted. */
int needle_write_ordered(const char *path, const needle_wtensor *t, int n, const needle_meta *m, int nm);
/* A base checkpoint as write_checkpoint writes it (checkpoints.py:313-323): metadata
 * format_version "2", config (needle_config_json(c) when config_json is NULL), step ("" when
 * step < 0), run (JSON text; "{}" when NULL). */
int needle_write_base(const char *path, const needle_config *c, const char *config_json, int64_t step,
                      const char *run, const needle_wtensor *t, int n);
/* An adapter as write_adapter writes it: tensors lora/<path>/A and /B (t[2i] = A, t[2i+1] = B of
 * paths[i]), metadata json.dumps of scale (a float), base (a string), rank, seed (ints; seed < 0:
 * null), pieces and languages (null). */
int needle_write_adapter(const char *path, const char *const *paths, const needle_wtensor *t, int npaths,
                         double scale, const char *base, int rank, int64_t seed);
/* Python's repr(float) (json.dumps of a float) into buf. */
void needle_py_float(double x, char *buf, size_t cap);
/* json.dumps(s) of a UTF-8 string (ensure_ascii: \uXXXX escapes, surrogate pairs), malloc'd. */
char *needle_py_str(const char *s);

#endif
