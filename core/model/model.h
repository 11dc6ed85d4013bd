/* model.h: the decoder-only transformer: parameter layout (one flat buffer + a named tensor table),
 * activation buffers, and the explicit forward/backward passes built from backend ops; a layer's
 * tensors and passes are its family's (core/model/family.h, private to the room).
 * The model owns its device buffers; it never talks to other ranks (core/train/dp.c does that
 * through the region hooks below) and never touches files (checkpoints/ does). */
#ifndef LOOM_MODEL_H
#define LOOM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "checkpoints/needle.h"
#include "core/config/config.h"
#include "core/model/lora.h"

#define MODEL_MAX_NAME 64

/* The head's logits buffer, at most this many floats (256 MiB): the head runs in chunks of
 * MODEL_HEAD_CHUNK_FLOATS / vocab rows (1365 of SmolLM2's 49152, 1334 of GPT-2's 50304, 523 of
 * Llama 3's 128256, 441 of Qwen2.5's 151936), so the (B*T, vocab) fp32 logits of a pass (4096 x
 * 151936 = 2.3 GiB) never exist. Not fewer rows: a trainable head's weight gradient (vocab x C,
 * 154 MB for GPT-2) is read and written once a chunk (dW += dlogits_c^T x_c), which at 16 Mi
 * floats (333 rows, 13 chunks at 4096 rows) cost a GPT-2 step on the CPU about 0.25 s of memory
 * traffic; at this size 4 chunks. */
#define MODEL_HEAD_CHUNK_FLOATS ((size_t)64 << 20)

/* One named parameter tensor inside the flat parameter buffer. */
typedef struct model_tensor {
    char name[MODEL_MAX_NAME]; /* "h.3.attn.q.weight" */
    int ndim;
    int64_t shape[2];
    size_t offset;             /* elements into the flat buffer */
    size_t numel;
    int region;                /* 0 = embeddings, 1..L = layer l-1, L+1 = final norm + head */
    int decay;                 /* AdamW weight decay applies (matrices, not norms/biases) */
    int trainable;             /* 0 for frozen base weights (LoRA fine-tunes) */
} model_tensor;

/* Device pointers of one layer's tensors (NULL where the architecture has none): the decoder
 * family's; a family with other tensors adds its fields here (all float *: the view map walks the
 * struct as slots) and fills them in its layer_views. */
typedef struct layer_params {
    float *ln1_w, *ln1_b, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *gate_w, *up_w, *proj_w, *proj_b;
    float *lnq_w, *lnk_w;     /* qk_norm: per-head RMSNorm weights (head_dim) */
} layer_params;

typedef struct model_params {
    float *wte, *wpe, *lnf_w, *lnf_b, *lm_head; /* lm_head == wte when tied */
    layer_params *layer;                        /* n_layer entries */
} model_params;

/* Activations of one layer, kept for backward (or recomputed when cfg recompute is on): the
 * decoder family's; another family adds its own fields and carves them in its carve_layer. */
typedef struct layer_acts {
    float *x;                 /* (N, C) residual stream entering the layer (always kept) */
    float *ln1, *ln1_mean, *ln1_rstd;
    float *q, *k, *v;         /* (N, H*D), (N, Hkv*D) x2, after rope */
    float *qr, *kr;           /* qk_norm: q, k before their norm (N, H*D), (N, Hkv*D) */
    float *q_rstd, *k_rstd;   /* qk_norm: (N*H), (N*Hkv) */
    float *att, *lse;         /* (N, C), (B, H, T) */
    float *xm;                /* (N, C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *h, *g;             /* gelu: pre/post activation (N, F); swiglu: gate, up in h, u */
    float *u, *act;           /* swiglu: up (N,F), silu(gate)*up (N,F); gelu: act == g */
    float *xa[LORA_NTARGETS]; /* LoRA: x A^T (N, r) of each adapted projection */
} layer_acts;

/* Region hooks: let data parallelism gather sharded parameters just before a region is used
 * (ZeRO-3), give backward a place for a region's gradients (ZeRO-2/3) and reduce them as soon as
 * backward has finished the region (overlap). Region ids as in model_tensor.region.
 * Forward: begin(r,0) before region r is read, end(r,0) when forward no longer reads it (the head
 *   region L+1, and region 0 when tied, stay begun into backward).
 * Backward: begin(r,1) before region r's backward (not for L+1: still begun), end(r,1) once its
 *   gradients are final for this micro-batch.
 * A training forward (model_forward, grad_scale != 0) already adds the head's weight gradient,
 *   into region L+1's gradients (region 0's when tied): those views must be bound, and zeroed
 *   for the step, before model_forward, not only by begin(r,1).
 * Either hook may be NULL. Return -1 to abort the pass. */
typedef struct model_hooks {
    void *ctx;
    int (*region_begin)(void *ctx, int region, int backward);
    int (*region_end)(void *ctx, int region, int backward);
} model_hooks;

typedef struct model {
    model_config cfg;
    const struct model_family *family; /* the layers' code (core/model/family.h), from cfg */
    backend *be;
    int B, T;                  /* the shape the next passes run at (model_set_shape) ... */
    int B_max, T_max;          /* ... at most the micro-batch shape the activations were sized for */
    const int *seg;            /* host, nseg: a ragged pass's sequence lengths (model_set_ragged; */
    int nseg;                  /* B = 1, T = their sum, packed); 0: B rows of T */
    int recompute;

    int ntensors;
    model_tensor *tensors;     /* host */
    size_t nparams;            /* elements in the flat buffer */
    size_t *region_offset;     /* nregions + 1: region r spans [region_offset[r], region_offset[r+1]) */
    int nregions;              /* n_layer + 2 */
    int *region_first;         /* nregions + 1: region r holds tensors [region_first[r], region_first[r+1]) */
    float ***view_map;         /* per side and tensor, the (up to 2) named view fields it feeds */

    float *params;             /* device, nparams; NULL when dp binds regions (ZeRO-3) */
    float *grads;              /* device, nparams; NULL when frozen or dp binds regions */
    float **ptr_params, **ptr_grads; /* per tensor: where it lives now (host table) */
    model_params p, g;         /* named views into params and grads */

    layer_acts *acts;          /* n_layer entries; with recompute they share one scratch set */
    float *x_final, *lnf, *lnf_mean, *lnf_rstd, *losses;
    /* The head runs in chunks of rows (model_forward): logits holds one chunk's (head_chunk, vocab)
     * logits, then its dlogits; never the (B*T, vocab) of a whole pass. head_chunk = B*T or
     * MODEL_HEAD_CHUNK_FLOATS / vocab rows, whichever is fewer (at least 1), or LOOM_HEAD_CHUNK
     * (rows, read by model_create and model_plan alike: tests and experiments) when set. A test may
     * lower it after model_create, never raise it. */
    float *logits;
    int head_chunk;
    int head_dx;               /* the last forward ran the head's backward (grad_scale != 0) */
    float *loss_acc;           /* device, B*T: per-position loss sums since model_take_loss */
    float *dres, *dln;         /* backward scratch: the residual's gradient, a norm's input's */
    float *dq, *dk, *dv, *datt, *dh, *du, *dact; /* the decoder family's backward scratch */
    float *dqr, *dkr;          /* qk_norm backward scratch */
    float *rope_freq;          /* device, head_dim/2 inverse frequencies (rope_scaling), else NULL */
    int32_t *tokens, *targets; /* device, B*T */
    /* The head runs on the positions with a target only (fine-tunes: the answer tokens): */
    int head_rows_n;           /* M, those positions in this batch; M == B*T: every position */
    int32_t *head_rows;        /* device, B*T: the M positions, ascending */
    int32_t *head_targets;     /* device, B*T: their targets */
    int32_t *host_rows;        /* host, 2*B*T: both, built by model_set_batch */
    int full_head;             /* tests only: 1 = the head on every position (the reference) */
    float *host_losses;        /* host, B*T: the per-position losses read back once per step */
    size_t activation_bytes;   /* what the activations and scratch took */
    model_hooks hooks;

    /* LoRA: the flat array above holds only the adapters (lp/lg views); the base weights live
     * frozen in `base` (p views), with no gradients (g views NULL) and no optimizer state. */
    lora_spec lora;               /* rank 0 = no LoRA */
    float lora_scale;             /* alpha / rank */
    model_tensor *base_tensors;   /* host table of the base weights */
    int nbase;
    size_t nbase_params;
    float *base, **ptr_base;
    int base_bf16;                /* the backend holds base's bf16 copy (model_weights_bf16) */
    layer_lora *lp, *lg;
    float *dxa;                   /* backward scratch (N, r) */
} model;

/* Lay out the tensors of cfg (no allocation). Fills m->family, tensors, nparams, regions. */
int model_layout(model *m, const model_config *cfg);

/* The `recompute` argument of model_create: keep every layer's activations for backward,
 * recompute them in backward, or allocate none (inference through model_gen only). */
enum { MODEL_ACTS_KEEP = 0, MODEL_ACTS_RECOMPUTE = 1, MODEL_ACTS_NONE = 2 };

/* Create a model on `be` for micro-batch (B, T): allocates the full parameter buffer (if
 * with_params), the full gradient buffer (if with_grads) and every activation buffer, once.
 * Without them, the owner binds region buffers with model_bind_region (ZeRO-2/3).
 * Parameters are zero until model_init or a load. NULL + loom_fail on error. */
model *model_create(const model_config *cfg, backend *be, int B, int T, int with_params,
                    int with_grads, int recompute, const lora_spec *lora);

/* What model_create(cfg, be, B, T, ..., recompute, lora) lays out and sizes, without a backend or
 * any device memory: the tensor tables, nparams, nbase_params (LoRA's frozen base) and
 * activation_bytes (the arena model_create allocates for KEEP or RECOMPUTE). model_create runs the
 * same code first, so a memory plan (core/train/plan.h) and the allocation cannot drift. Free it
 * with model_destroy. NULL + loom_fail. */
model *model_plan(const model_config *cfg, int B, int T, int recompute, const lora_spec *lora);

/* LoRA models: base elements [lo, hi) (the base table's layout) from host[0 .. hi - lo). */
int model_load_base_range(model *m, const float *host, size_t lo, size_t hi);
/* LoRA models: base_host (the base table's layout) += s B A for every adapter in lora_host. */
int model_lora_merge(const model *m, float *base_host, const float *lora_host);

/* LoRA models: the base table (what a base checkpoint's /model group holds). */
int model_base_table(const model *m, const model_tensor **tensors, int *n, size_t *nparams);
void model_destroy(model *m);

/* Seeded init into a host array of nparams floats, by the family's rule (the decoder's: GPT-2
 * style, N(0, std) matrices (residual output projections std/sqrt(2L)), zero biases, unit norm
 * weights). Deterministic in seed, independent of backend and world size. */
int model_init_values(const model *m, uint64_t seed, float *host);
/* The same values for logical elements [lo, hi) only, into host[0 .. hi - lo). */
int model_init_range(const model *m, uint64_t seed, float *host, size_t lo, size_t hi);

/* Point region r's parameter (and/or gradient) views at a buffer holding that region's elements
 * from its first one on (NULL leaves that side as it is). */
void model_bind_region(model *m, int region, float *params, float *grads);

/* Run the next passes at B x T (B <= B_max, T <= T_max): every activation is the contiguous
 * B*T-row prefix of its buffer and every op takes the new shape, so a batch of short rows costs
 * what its rows need, not the allocated length. model_create starts at (B_max, T_max). 0, or -1 +
 * loom_fail for a shape over the allocation. */
int model_set_shape(model *m, int B, int T);

/* Run the next passes ragged: n sequences of lens[i] tokens (1..T_max each, at most B_max x T_max
 * in all) packed one after another, so no padding is computed. Every op but RoPE, learned
 * positions and attention is row-wise and runs on all the tokens at once (B = 1, T = their sum);
 * those three run per sequence, positions from 0. lens must stay valid until model_set_shape
 * ends the ragged passes. 0, or -1 + loom_fail. */
int model_set_ragged(model *m, const int *lens, int n);

/* Pack B host rows of T (tokens, targets; target < 0 = no loss) in place for a ragged pass: each
 * row cut after its last target (the positions after it carry no loss and, the model being
 * causal, change nothing before them), rows without a target dropped, the rest moved together.
 * lens[0..n) receives the lengths; returns n >= 1: an all-empty batch packs to one token with no
 * target, so every rank still runs its passes (ZeRO-3 gathers parameters in them). */
int model_pack_rows(int32_t *tokens, int32_t *targets, int B, int T, int *lens);

/* Upload a micro-batch: tokens and targets (host, B*T int32 at the current shape; target < 0 =
 * no loss). */
void model_set_batch(model *m, const int32_t *tokens, const int32_t *targets);

/* Forward + loss. When grad_scale is non-zero (a training forward, model_backward follows), the
 * head's backward runs with it chunk by chunk: its weight gradient (a trainable head's, or the tied
 * embedding's) is added into m->grads' views, which must be bound (and zeroed, as for backward)
 * before this call, and its input gradient waits for model_backward. grad_scale 0 computes the
 * losses only. loss_out non-NULL receives the SUM of this micro-batch's token losses (a
 * read of the device: the host waits for the pass). loss_out NULL: the per-token losses are added
 * up on the device and model_take_loss reads them once per step (the host queues the next
 * micro-batch without waiting). 0, or -1 + loom_fail when a region hook failed (the pass stopped,
 * no loss was added). */
int model_forward(model *m, float grad_scale, double *loss_out);

/* The loss sum of every model_forward(m, ..., NULL) since the last call (host; one read of the
 * device, in double over the positions) and starts the next sum at 0. */
double model_take_loss(model *m);

/* bf16 backends: keep (1) a bf16 copy of the full weights, cast now, for the matmuls of the
 * passes that follow, or drop it (0). The trainer keeps it from the start of a step's first
 * micro-batch to its last backward: one cast per optimizer step. A LoRA base is frozen, so its
 * copy is cast once and kept across steps (dropped only when the base is loaded again or the
 * model destroyed). No-op elsewhere. */
void model_weights_bf16(model *m, int keep);

/* Backward of the last forward: ACCUMULATES into m->grads (zero them per optimizer step). */
int model_backward(model *m);

/* Single-sequence generation with a KV cache in the model's own activations (the reference
 * the batched model_gen below is tested against; evaluation and sampling use model_gen), on batch row 0: prefill runs the prompt tokens[0..n) and returns
 * the next-token logits (host, vocab floats); decode appends `token` at position t (= the
 * current length) and returns the logits after it. Needs recompute off; n, t < T. */
int model_prefill(model *m, const int32_t *tokens, int n, float *logits_host);
int model_decode(model *m, int32_t token, int t, float *logits_host);

/* Batched generation (model_gen.c): up to `rows` sequences of up to `cap` positions (prompt + new
 * tokens, cap <= max_seq) decoded together, each with its own KV cache row and position. The
 * context holds the KV cache, one layer's activations for at most fwd_tokens token rows and the
 * logits of the live rows: in its own device memory (so it serves a model created with
 * MODEL_ACTS_NONE), or inside a training model's activation arena when that is large enough
 * (idle between steps: no model_forward/backward may run while such a context is in use).
 * Rows are "live" from prefill until dropped. model_gen_bytes: device bytes it allocated. */
typedef struct model_gen model_gen;
model_gen *model_gen_create(model *m, int rows, int cap, int fwd_tokens); /* NULL + loom_fail */
void model_gen_destroy(model_gen *g);
size_t model_gen_bytes(const model_gen *g);
/* The bytes of model_gen_create(m, rows, cap, fwd_tokens)'s buffers and caches, before it runs
 * (m may be model_plan's): inside m's activation arena when they fit its activation_bytes (a
 * training model), else its own. */
size_t model_gen_size(model *m, int rows, int cap, int fwd_tokens);
/* Start R sequences (prompt r = prompts[r][0..lens[r]), 1 <= lens[r] < cap): one forward for the
 * whole batch when R * longest prompt <= fwd_tokens (else consecutive groups); logits_host (R, vocab)
 * receives each row's next-token logits. Row r is live row r. */
int model_gen_prefill(model_gen *g, const int32_t *const *prompts, const int *lens, int R, float *logits_host);
/* Append tokens[i] to every live row i and return the next-token logits (live, vocab). */
int model_gen_step(model_gen *g, const int32_t *tokens, float *logits_host);
/* Drop live row i (its sequence is finished): the last live row moves to index i. */
int model_gen_drop(model_gen *g, int i);
int model_gen_live(const model_gen *g);
int model_gen_pos(const model_gen *g, int i); /* tokens live row i holds so far */
/* Sum of token losses of R sequences of T tokens (host tokens/targets (R, T), target < 0 = no
 * loss) into *sum_out, forward only through the context's buffers: the rows packed
 * (model_pack_rows) into ragged passes of at most the context's forward rows, the head only on
 * positions with a target, in chunks. 0, or -1 + loom_fail (then *sum_out is untouched). */
int model_gen_loss(model_gen *g, const int32_t *tokens, const int32_t *targets, int R, int T,
                   double *sum_out);

/* Matmul FLOPs of one training token (forward + backward) in rows of T, head included, for MFU. */
double model_flops_per_token(const model *m, int T);
/* Matmul FLOPs of one optimizer step that computed `tokens` real positions in rows of T and the
 * head on `head_rows` of them (the compact head: only positions with a target), for MFU. */
double model_step_flops(const model *m, int T, double tokens, double head_rows);

/* Index of a tensor by name, -1 if absent. */
int model_find(const model *m, const char *name);

/* --- Needle's architecture (family_needle.c, docs/needle.md): a Needle base checkpoint and
 * optionally an adapter (merged into the weights as Needle's merge_lora does) read into device
 * tensors, and its forward pass. qat = 1 runs Needle's fine-tune numerics (W4 of the weights, A8,
 * KV8), 0 plain float. The backend needs BACKEND_OP_NEEDLE_MIX and BACKEND_OP_ROPE_FREQS. Not yet a
 * model_family (no training, no decoding through model.c). --- */
typedef struct needle_net needle_net;
/* Numerics (needle_net_open's qat, flags): Needle's fine-tune runs both (NEEDLE_NUM_QAT), its
 * run.generate neither (0) or W4 weights alone (cq_ste_params, then a float forward). */
#define NEEDLE_NUM_W4 1  /* CQ 4-bit fake-quant of every kernel cq_ste_params quantises (STE) */
#define NEEDLE_NUM_A8 2  /* A8 of the activations at its six sites, KV8 of k and v */
#define NEEDLE_NUM_QAT 3
/* layers: 0 the base's depth, else its ladder rung of that many layers (needle_open_rung: Needle's
 * nested subset, as `needle build --layers N` cuts it). adapter: NULL, or Needle's adapter file
 * (for the rung when layers > 0) merged in. NULL + loom_fail. */
needle_net *needle_net_open(backend *be, const char *base, int layers, const char *adapter, int qat);
void needle_net_close(needle_net *n);
const needle_config *needle_net_config(const needle_net *n);
/* Needle's A8 and KV8 (NEEDLE_NUM_A8) on (1) or off (0) from here on, the weights untouched: a QAT
 * net then decodes as a W4 net with the same adapters does, bit for bit (Needle scores a fine-tune
 * on W4 weights with float activations), without a second copy of the base. */
void needle_net_set_a8(needle_net *n, int on);
/* What a training pass keeps for its backward (train.recompute): 0 (the default) keeps a block of
 * each layer (its q, k, v, gate and out projections, attention's output and log-sum-exp, mHC's
 * coefficients, the MLP's s8 and the layer's output y) and every 4th layer's stream, the others
 * rebuilt from the blocks before them, so a layer's recompute runs about 1/10 of its FLOPs (one
 * Kronecker product); 1 keeps only the streams and recomputes each layer whole, as Needle's
 * remat. The numbers are the same bits either way. */
void needle_net_set_recompute(needle_net *n, int whole);
/* With the blocks kept (not whole): keep every span-th layer's input stream (2..8, 4 by default;
 * each stream is N lanes d floats), the others rebuilt by an expand for the backward, the same bits
 * at any span. Memory against a few expands; tests use it to run the rebuild on a few layers. */
void needle_net_set_stream_span(needle_net *n, int span);
/* Rows of the head a training pass runs at a time (default 512, <= 0 the default): each block's
 * logits, loss and dL/dlogits E, in a (rows, V') buffer instead of (B T, V'). */
void needle_net_set_head_rows(needle_net *n, int rows);
/* B rows of T tokens into logits (B, T, V') host (V' = out_vocab or vocab_size) and, when hidden is
 * not NULL, hidden_states() (L, B, T, d) host: the lane mean after each layer. -1 + loom_fail. */
int needle_net_forward(needle_net *n, const int32_t *tokens, int B, int T, float *logits, float *hidden);
/* Model FLOPs of one LoRA step on B rows of T tokens as docs/needle.md section 7 counts them by
 * hand (matmuls only, attention dense over T as Needle computes it, the merge and the adapters'
 * gradients; not the whole-layer recompute): 1.402 TFLOP at the default config, B 16, T 256, r 16. */
double needle_net_step_flops(const needle_net *n, int B, int T);
/* Device bytes the net holds: *held its tensors (the frozen base in loom's layout with its W4
 * copies, the merged targets, adapters, their gradients and moments), *activations the largest
 * pass's arena so far. */
void needle_net_bytes(const needle_net *n, size_t *held, size_t *activations);
/* needle_net's memory before it is opened: what needle_net_bytes would report, and a decode's.
 * For `loom plan` (core/train/plan.c); test_needle_net checks held and train_pass against a real
 * net to the byte. */
typedef struct needle_net_size {
    size_t held;        /* needle_net_bytes' *held after needle_net_open (no adapter file) and
                         * needle_net_lora_init(lora_rank) (lora_rank 0: without the second) */
    size_t lora;        /* of held, the adapters' A and B; their gradients and two moments are as
                         * many bytes each, also of held */
    size_t base_params; /* elements of the base's tensors as the file holds them */
    size_t train_pass;  /* *activations after needle_net_grad over B x T (train.recompute as asked) */
    size_t other_pass;  /* the same with recompute the other way */
    size_t gen_pass;    /* a needle_net_generate of gen_rows rows of gen_cap tokens, prompts at most
                         * T: its prefill's arena (a net that ran no pass before) ... */
    size_t gen_caches;  /* ... and its caches (keys, values, the taps' histories) */
    int heads, kv_heads, head_width; /* attention's: H, Hk and the padded head width F */
} needle_net_size;
typedef struct needle_net_ask {
    const char *base;   /* the base file (needle_net_open's base, layers, qat) */
    int layers, qat, lora_rank, recompute, B, T, gen_rows, gen_cap;
} needle_net_ask;
/* 0, or -1 + loom_fail (the file is not a Needle base). Reads the file's header only. */
int needle_net_plan(const needle_net_ask *ask, needle_net_size *s);
/* Greedy decoding (run.generate's, without its cache-less cost in memory): B rows of cap tokens,
 * row b's prompt its first lens[b] (> 0); up to max_new[b] tokens appended after it, stopping
 * after eos (-1: none) or at cap; made[b] the count. -1 + loom_fail. */
int needle_net_greedy(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                      int *made);
/* The same decoding with a KV cache (each layer's keys and values, the conv taps' last inputs,
 * the engram's last values): one pass over the prompts, then one of a token per row a step. The
 * tokens are needle_net_greedy's (the same math, sums in another order). -1 + loom_fail. */
int needle_net_generate(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                        int *made);
/* needle_net_generate with another choice of each token: pick(ctx, b, k, logits, V) returns row b's
 * k-th new token (k = 0, 1, ...) from its logits (host, V = out_vocab or vocab_size); NULL: argmax
 * (needle_net_generate). -1 + loom_fail. */
typedef int32_t (*needle_pick_fn)(void *ctx, int b, int k, const float *logits, int V);
int needle_net_sample(needle_net *n, int32_t *tokens, int B, int cap, const int *lens, const int *max_new, int eos,
                      needle_pick_fn pick, void *ctx, int *made);
/* Needle's fine-tune loss on B rows of T tokens (position i's next-token loss counts where
 * weights[i + 1], host (B, T), is non-zero: the mask of Needle's rows), divided by denom (> 0; a
 * data-parallel step passes the whole global batch's count) or else by this batch's count, into
 * *loss. needle_net_loss runs the forward only; needle_net_grad also the gradient with respect to
 * each merged LoRA target (every base tensor frozen) and from it the adapters', added to the last
 * call's when accumulate (micro-batches of one step). -1 + loom_fail. */
int needle_net_loss(needle_net *n, const int32_t *tokens, const float *weights, int B, int T, double denom,
                    double *loss);
int needle_net_grad(needle_net *n, const int32_t *tokens, const float *weights, int B, int T, double denom,
                    int accumulate, double *loss);
/* Adapter i (0, 1, ... in Needle's target order q, k, v, gate, out; NULL past the last): its
 * kernel's flax path, in and out of the kernel, rank and scale (each pointer may be NULL). */
const char *needle_net_lora_info(const needle_net *n, int i, int *in, int *out, int *rank, double *scale);
/* The adapters' gradient arrays on the device (dA, dB of each target, Needle's layout but B's
 * columns permuted for q/k), for a caller that sums them over ranks in place: up to cap of them
 * into bufs/counts; returns how many, -1 + loom_fail. */
int needle_net_lora_grad_buffers(needle_net *n, float **bufs, size_t *counts, int cap);
/* After needle_net_grad: the adapter's gradients of target `path` (a Needle flax path, e.g.
 * "stack/layers/block/self_attn/q_proj/kernel"), dA [L, in, r] and dB [L, r, out] host. */
int needle_net_lora_grad(needle_net *n, const char *path, float *dA, float *dB);
/* The adapter of target `path` and its AdamW moments, host, Needle's layout (A, mA, vA [L, in, r];
 * B, mB, vB [L, r, out]): read (set 0) or written (set 1; the merged weights follow). A NULL
 * pointer skips that tensor. */
int needle_net_lora_state(needle_net *n, const char *path, int set, float *A, float *B, float *mA, float *vA,
                          float *mB, float *vB);
/* Every adapter written as Needle's write_adapter writes one (read_adapter and `needle build
 * --lora` take it): metadata base = base_name, seed (< 0: null). -1 + loom_fail. */
int needle_net_save_adapter(needle_net *n, const char *path, const char *base_name, int64_t seed);
/* A new adapter (A = N(0, 1) / rank, B = 0, scale alpha / rank: Needle's init, loom's generator)
 * on each of Needle's five targets that has none. -1 + loom_fail. */
int needle_net_lora_init(needle_net *n, int rank, float alpha, uint64_t seed);
/* Needle's optimiser (finetune.py:443-465): clip_by_global_norm(clip) then adamw, on every adapter
 * from the last needle_net_grad's gradients times grad_mult. lr is the schedule's value at the
 * count before the step, count the one after (AdamW's bias correction). */
typedef struct needle_adamw {
    float lr, beta1, beta2, eps, weight_decay, clip, grad_mult;
    int count;
} needle_adamw;
/* One step; *grad_norm (may be NULL) the clipped-over norm. 0 done, 1 skipped (a non-finite
 * norm: nothing changes), -1 + loom_fail. */
int needle_net_step(needle_net *n, const needle_adamw *o, double *grad_norm);

#endif
