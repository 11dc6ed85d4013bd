/* test_cpu_attention.c: CPU causal GQA attention against a double reference (out and lse) and
 * its backward (dq, dk, dv) against central finite differences of a random functional of out.
 * Shapes cover H == Hkv, GQA, T = 1, T at and off the block size (48 / G queries), several blocks,
 * the backward with and without per-segment partials (under 8 (b, kv head) items: with).
 * Decoding (one query per head over a cache, and batched rows at their own positions) against the
 * same reference's last row, with every kernel the CPU has (AVX-512, AVX2, sgemm). */
#include "cpu_test.h"
#include "backends/cpu/cpu_internal.h" /* cpu_attention_decode_isa */
#include "backends/cpu/cpu_skinny.h"   /* CPU_SKINNY_*: the kernels */

typedef struct {
    double *q, *k, *v, *w, *out, *lse, *p;
    int B, T, H, Hkv, D;
} att_ctx;

static void ref_attention(att_ctx *c)
{
    int B = c->B, T = c->T, H = c->H, Hkv = c->Hkv, D = c->D;
    double scale = 1.0 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                int hk = h / (H / Hkv);
                const double *qi = c->q + (((size_t)b * T + i) * H + h) * D;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *kj = c->k + (((size_t)b * T + j) * Hkv + hk) * D;
                    double s = 0.0;
                    for (int d = 0; d < D; d++) s += qi[d] * kj[d];
                    c->p[j] = s * scale;
                    if (c->p[j] > m) m = c->p[j];
                }
                for (int j = 0; j <= i; j++) sum += (c->p[j] = exp(c->p[j] - m));
                double *o = c->out + (((size_t)b * T + i) * H + h) * D;
                for (int d = 0; d < D; d++) o[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *vj = c->v + (((size_t)b * T + j) * Hkv + hk) * D;
                    for (int d = 0; d < D; d++) o[d] += c->p[j] / sum * vj[d];
                }
                c->lse[((size_t)b * H + h) * T + i] = m + log(sum);
            }
}

static double att_f(void *p)
{
    att_ctx *c = p;
    ref_attention(c);
    return dot_fd(c->w, c->out, (size_t)c->B * c->T * c->H * c->D);
}

/* Scores: D-term dots of q, k in (-1.5, 1.5) (E|qk| = 0.5625) times 1/sqrt(D): absolute error
 * g_D * 0.5625 sqrt(D), which exp turns into a relative error of p; the softmax sum (T positive
 * terms, relative g_T) and expf (2 ulp) add theirs. */
static double att_p_err(int T, int D)
{
    const double gD = CHECK_LAMBDA * sqrt((double)D) * CHECK_U_FP32;
    const double gT = CHECK_LAMBDA * sqrt((double)T) * CHECK_U_FP32;
    return gD * 0.5625 * sqrt((double)D) + gT + 3 * CHECK_U_FP32;
}

/* out = sum_j p_j v_j over T keys with sum_j p_j |v_j| < 1 cancels: atol = p's relative error
 * (+ g_T for the sum itself). One query row (decoding) is the same dots, softmax and mix. */
static check_tol att_out_tol(int T, int D)
{
    const double gT = CHECK_LAMBDA * sqrt((double)T) * CHECK_U_FP32;
    return (check_tol){att_p_err(T, D) + gT, 2 * CHECK_U_FP32};
}

static void test_attention(backend *be, int B, int T, int H, int Hkv, int D, size_t samples)
{
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1), *w = frand(nq, 1);
    float *out = frand(nq, 1), *lse = frand(nl, 1);
    att_ctx c = {todbl(q, nq),
                 todbl(k, nk),
                 todbl(v, nk),
                 todbl(w, nq),
                 malloc(nq * sizeof(double)),
                 malloc(nl * sizeof(double)),
                 malloc(T * sizeof(double)),
                 B,
                 T,
                 H,
                 Hkv,
                 D};
    ref_attention(&c);
    backend_attention_forward(be, out, lse, q, k, v, B, T, H, Hkv, D, 0);
    char name[96];
    snprintf(name, sizeof name, "attention fwd B=%d T=%d H=%d Hkv=%d D=%d", B, T, H, Hkv, D);
    /* lse = m + log(sum) carries p's relative error absolutely, as out does (att_out_tol) */
    const check_tol out_tol = att_out_tol(T, D);
    const double p_err = att_p_err(T, D);
    check_close(name, out, c.out, nq, out_tol);
    check_close("  lse", lse, c.lse, nl, out_tol);
    float *dq = frand(nq, 1), *dk = frand(nk, 1), *dv = frand(nk, 1); /* overwritten */
    backend_attention_backward(be, dq, dk, dv, w, q, k, v, out, lse, B, T, H, Hkv, D, 0);
    /* Backward: dP_ij = dout_i . v_j and delta_i = dout_i . out_i are D-term dots (terms of
     * E 1/4, cancelling), dS = p (dP - delta) inherits p's relative error on |dP - delta| <
     * sqrt(D) typical; dv_j sums p_ij dout_i over the queries of every head sharing kv head j
     * (sum_i p_ij < 1 + ln T per head), dq_i / dk_j sum dS times k or q (|.| < 1.5) over T keys or
     * queries, scaled by 1/sqrt(D). The atol is the longest chain's (T + D terms) bound on
     * those magnitudes, summed over the H/Hkv heads of a group. */
    const double group = (double)H / Hkv, lnT = 1.0 + log((double)T);
    const double S_v = group * lnT, S_qk = group * lnT * 1.5 * (sqrt((double)D) + 1);
    const check_tol dv_tol = {(p_err + CHECK_LAMBDA * sqrt((double)T + D) * CHECK_U_FP32) * S_v,
                              4 * CHECK_U_FP32};
    const check_tol dqk_tol = {(p_err + CHECK_LAMBDA * sqrt((double)T + D) * CHECK_U_FP32) * S_qk,
                               6 * CHECK_U_FP32};
    check_grad("  bwd dq", att_f, &c, c.q, nq, dq, NULL, samples, dqk_tol);
    check_grad("  bwd dk", att_f, &c, c.k, nk, dk, NULL, samples, dqk_tol);
    check_grad("  bwd dv", att_f, &c, c.v, nk, dv, NULL, samples, dv_tol);
    /* deterministic: a second backward gives the same bits */
    float *dk2 = frand(nk, 1), *dv2 = frand(nk, 1), *dq2 = frand(nq, 1);
    backend_attention_backward(be, dq2, dk2, dv2, w, q, k, v, out, lse, B, T, H, Hkv, D, 0);
    check_equal("  bwd deterministic dk", dk2, dk, nk);
    /* and independent of the thread count (each output row has one writer, fixed order) */
    backend *one = test_backend(1);
    backend_attention_backward(one, dq2, dk2, dv2, w, q, k, v, out, lse, B, T, H, Hkv, D, 0);
    check_equal("  bwd 1 thread == 2 threads (dq)", dq2, dq, nq);
    check_equal("  bwd 1 thread == 2 threads (dv)", dv2, dv, nk);
    backend_destroy(one);
    free(q), free(k), free(v), free(w), free(out), free(lse), free(dq), free(dk), free(dv);
    free(dq2), free(dk2), free(dv2);
    free(c.q), free(c.k), free(c.v), free(c.w), free(c.out), free(c.lse), free(c.p);
}

/* The reference's last query row of a T-token sequence (q, k, v: that sequence, B = 1), all heads. */
static double *ref_last_row(const float *q, const float *k, const float *v, int T, int H, int Hkv,
                            int D)
{
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    att_ctx c = {todbl(q, nq), todbl(k, nk), todbl(v, nk), NULL, malloc(nq * sizeof(double)),
                 malloc((size_t)H * T * sizeof(double)), malloc(T * sizeof(double)), 1, T, H, Hkv,
                 D};
    ref_attention(&c);
    double *row = malloc((size_t)H * D * sizeof(double));
    memcpy(row, c.out + (size_t)(T - 1) * H * D, (size_t)H * D * sizeof(double));
    free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.p);
    return row;
}

/* One query per head (the sequence's last) over Tk cached keys, each kernel at most `isa` wide. */
static void test_decode(backend *be, int Tk, int H, int Hkv, int D)
{
    size_t nq = (size_t)Tk * H * D, nk = (size_t)Tk * Hkv * D;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1), *out = frand((size_t)H * D, 1);
    double *ref = ref_last_row(q, k, v, Tk, H, Hkv, D);
    for (int isa = CPU_SKINNY_NONE; isa <= cpu_skinny_isa(); isa++) {
        cpu_attention_decode_isa(be, isa, out, q + (size_t)(Tk - 1) * H * D, k, v, Tk, H, Hkv, D);
        char name[96];
        snprintf(name, sizeof name, "decode %s Tk=%d H=%d Hkv=%d D=%d",
                 isa == CPU_SKINNY_AVX512 ? "avx512" : isa == CPU_SKINNY_AVX2 ? "avx2" : "sgemm",
                 Tk, H, Hkv, D);
        check_close(name, out, ref, (size_t)H * D, att_out_tol(Tk, D));
    }
    free(q), free(k), free(v), free(out), free(ref);
}

/* R rows at their own positions in caches of cap rows: the op stores each row's new key and value
 * at pos[r] and attends over 0..pos[r]; row r against the reference of that prefix. */
static void test_decode_rows(backend *be, int R, int cap, int H, int Hkv, int D)
{
    size_t ldq = (size_t)H * D, ldk = (size_t)Hkv * D, nc = (size_t)R * cap * ldk;
    float *kc = frand(nc, 1.5), *vc = frand(nc, 1), *q = frand(R * ldq, 1.5);
    float *kn = frand(R * ldk, 1.5), *vn = frand(R * ldk, 1), *out = frand(R * ldq, 1);
    int32_t *pos = malloc((size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++) pos[r] = r == 0 ? 0 : r == R - 1 ? cap - 1 : (int32_t)(r * 37 % cap);
    backend_attention_decode_rows(be, out, q, kn, vn, kc, vc, pos, R, cap, H, Hkv, D);
    for (int r = 0; r < R; r++) {
        int T = pos[r] + 1;
        const float *kr = kc + (size_t)r * cap * ldk, *vr = vc + (size_t)r * cap * ldk;
        check_equal("decode_rows stored k", kr + (size_t)pos[r] * ldk, kn + r * ldk, ldk);
        check_equal("decode_rows stored v", vr + (size_t)pos[r] * ldk, vn + r * ldk, ldk);
        float *qs = calloc((size_t)T * ldq, sizeof(float)); /* only the last row's query matters */
        memcpy(qs + (size_t)pos[r] * ldq, q + r * ldq, ldq * sizeof(float));
        double *ref = ref_last_row(qs, kr, vr, T, H, Hkv, D);
        char name[96];
        snprintf(name, sizeof name, "decode_rows row %d pos %d H=%d Hkv=%d D=%d", r, pos[r], H, Hkv, D);
        check_close(name, out + r * ldq, ref, ldq, att_out_tol(T, D));
        free(qs), free(ref);
    }
    free(kc), free(vc), free(q), free(kn), free(vn), free(out), free(pos);
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_blas_ensure_fast_kernel(argv);
    backend *be = test_backend(2);
    test_attention(be, 1, 67, 2, 2, 8, 0);    /* H == Hkv, T off the block size, full FD */
    test_attention(be, 2, 67, 4, 2, 8, 300);  /* GQA */
    test_attention(be, 2, 1, 4, 2, 16, 0);    /* T = 1 */
    test_attention(be, 1, 48, 2, 2, 8, 0);    /* T = block (48 queries) */
    test_attention(be, 1, 64, 4, 1, 8, 300);  /* MQA, 12-query blocks */
    test_attention(be, 2, 130, 2, 2, 16, 60); /* three blocks */
    test_attention(be, 1, 300, 2, 1, 64, 8);  /* GPT-2 head size, MQA, 13 blocks */
    test_attention(be, 2, 150, 9, 3, 16, 60); /* SmolLM2's 9/3 heads: 3-head groups, 16-query blocks */
    test_attention(be, 1, 50, 16, 1, 8, 60);  /* 16-head group: 4-query blocks, a short last */
    test_attention(be, 1, 200, 6, 3, 16, 60); /* 3 kv heads, 3 segments each (partials) */
    test_attention(be, 4, 40, 4, 2, 8, 60);   /* 8 (b, kv head) items: no partials */
    test_decode(be, 1, 2, 1, 16);     /* the first generated token */
    test_decode(be, 230, 9, 3, 64);   /* SmolLM2's heads: 3-head groups, keys off 3 and 4 */
    test_decode(be, 37, 14, 2, 96);   /* 7 heads a group (Qwen2.5), D 96: a 32-column tail */
    test_decode(be, 50, 4, 2, 24);    /* D 24: AVX2's kernel, AVX-512 declines */
    test_decode(be, 9, 2, 1, 20);     /* D 20: sgemm only */
    test_decode_rows(be, 5, 300, 9, 3, 64);
    backend_destroy(be);
    return test_finish("test_cpu_attention");
}
