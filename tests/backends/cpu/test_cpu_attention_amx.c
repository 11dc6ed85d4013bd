/* test_cpu_attention_amx.c: `precision: bf16` attention on AMX tiles (cpu_attention_amx.c) against
 * a double reference of the bf16-rounded inputs. The kernels round each probability (P) and each
 * score gradient (dS) to bf16 before a product, so an output's error is at most u_bf16 times the
 * sum of its terms' magnitudes, which the reference knows element by element (check_within),
 * plus the fp32 error of the rest. A wrong packing, a missed causal mask or a skipped row is off
 * by the size of the values, far outside. Also: the backend's ops dispatch to these kernels
 * (bitwise the direct call's result), the same bits on 1 and 2 threads and on a rerun, and a
 * head size they do not take (D 80) left to the fp32 path. Exits 77 where AMX is not usable
 * (no AMX, or no bf16 matmuls: then the ops are fp32 and test_cpu_attention covers them). */
#include "cpu_test.h"

#include "backends/cpu/cpu_bf16.h"
#include "backends/cpu/cpu_internal.h"

typedef struct {
    int B, T, H, Hkv, D;
    size_t nq, nk, nl;
} shape;

static double bf(float x) { return (double)check_bf16_round(x); }

/* Forward reference: out, lse and out's per-element bound. */
static void ref_forward(const shape *s, const float *q, const float *k, const float *v,
                        double *out, double *lse, double *ob, double *lb)
{
    int T = s->T, D = s->D, G = s->H / s->Hkv;
    double scale = 1.0 / sqrt((double)D), *p = malloc(T * sizeof(double));
    /* the scores' fp32 sums (D exact products of |.| < 2.25, E 0.5625) and the softmax sum
     * carry into p relatively (as test_cpu_attention derives), expf adds 2 ulp */
    double gD = CHECK_LAMBDA * sqrt((double)D) * CHECK_U_FP32;
    double gT = CHECK_LAMBDA * sqrt((double)T) * CHECK_U_FP32;
    double p_err = gD * 0.5625 * sqrt((double)D) + gT + 3 * CHECK_U_FP32;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = q + (((size_t)b * T + i) * s->H + h) * D;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = k + (((size_t)b * T + j) * s->Hkv + h / G) * D;
                    double d = 0.0;
                    for (int e = 0; e < D; e++) d += bf(qi[e]) * bf(kj[e]);
                    p[j] = d * scale;
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - m));
                size_t o = (((size_t)b * T + i) * s->H + h) * D;
                for (int e = 0; e < D; e++) {
                    double acc = 0.0, mag = 0.0;
                    for (int j = 0; j <= i; j++) {
                        double vj = bf(v[(((size_t)b * T + j) * s->Hkv + h / G) * D + e]);
                        acc += p[j] / sum * vj;
                        mag += p[j] / sum * fabs(vj);
                    }
                    out[o + e] = acc;
                    ob[o + e] = (CHECK_U_BF16 + p_err) * mag + gT + 2 * CHECK_U_FP32 * fabs(acc);
                }
                size_t l = ((size_t)b * s->H + h) * T + i;
                lse[l] = m + log(sum);
                lb[l] = p_err + gT + 2 * CHECK_U_FP32 * fabs(lse[l]);
            }
    free(p);
}

/* Backward reference from the kernel's own out and lse (as the kernel uses them): with
 * p = e^(s - lse), dp = bf16(dO).v, delta = dO.out, ds = p (dp - delta): dq = scale ds k,
 * dk = scale ds^T q, dv = p^T bf16(dO), and the bounds: u_bf16 times the terms' magnitudes
 * (P and dS are rounded), plus fp32: p's relative error and the longest sum's on the same
 * terms, and the D-term fp32 sums of dp and delta (g_D times their D terms of |.| < 1.5)
 * times p. */
static void ref_backward(const shape *s, const float *q, const float *k, const float *v,
                         const float *out, const float *lse, const float *dout, double *dq,
                         double *dk, double *dv, double *bq, double *bk, double *bv)
{
    int T = s->T, D = s->D, G = s->H / s->Hkv;
    double scale = 1.0 / sqrt((double)D);
    double gD = CHECK_LAMBDA * sqrt((double)D) * CHECK_U_FP32;
    double gK = CHECK_LAMBDA * sqrt((double)T * G + D) * CHECK_U_FP32; /* the longest fp32 sum */
    double p_err = gD * 0.5625 * sqrt((double)D) + 3 * CHECK_U_FP32;
    double dp_abs = gD * 2.25 * D; /* dp and delta: D terms each, |dO| < 1, |v|, |out| < 1 */
    double rel = CHECK_U_BF16 + 2 * (p_err + gK);
    memset(dq, 0, s->nq * sizeof(double)), memset(bq, 0, s->nq * sizeof(double));
    memset(dk, 0, s->nk * sizeof(double)), memset(bk, 0, s->nk * sizeof(double));
    memset(dv, 0, s->nk * sizeof(double)), memset(bv, 0, s->nk * sizeof(double));
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int i = 0; i < T; i++) {
                size_t oi = (((size_t)b * T + i) * s->H + h) * D;
                double delta = 0.0, l = lse[((size_t)b * s->H + h) * T + i];
                for (int e = 0; e < D; e++) delta += (double)dout[oi + e] * out[oi + e];
                for (int j = 0; j <= i; j++) {
                    size_t oj = (((size_t)b * T + j) * s->Hkv + h / G) * D;
                    double sc = 0.0, dp = 0.0;
                    for (int e = 0; e < D; e++) {
                        sc += bf(q[oi + e]) * bf(k[oj + e]);
                        dp += bf(dout[oi + e]) * bf(v[oj + e]);
                    }
                    double p = exp(sc * scale - l), ds = p * (dp - delta);
                    for (int e = 0; e < D; e++) {
                        double qe = bf(q[oi + e]), ke = bf(k[oj + e]), de = bf(dout[oi + e]);
                        dq[oi + e] += scale * ds * ke;
                        bq[oi + e] += scale * (rel * fabs(ds) + p * dp_abs) * fabs(ke);
                        dk[oj + e] += scale * ds * qe;
                        bk[oj + e] += scale * (rel * fabs(ds) + p * dp_abs) * fabs(qe);
                        dv[oj + e] += p * de;
                        bv[oj + e] += rel * p * fabs(de);
                    }
                }
            }
    for (size_t i = 0; i < s->nq; i++) bq[i] += 1e-7 + 4 * CHECK_U_FP32 * fabs(dq[i]);
    for (size_t i = 0; i < s->nk; i++) {
        bk[i] += 1e-7 + 4 * CHECK_U_FP32 * fabs(dk[i]);
        bv[i] += 1e-7 + 4 * CHECK_U_FP32 * fabs(dv[i]);
    }
}

static void test_shape(backend *be, backend *one, int B, int T, int H, int Hkv, int D)
{
    shape s = {B, T, H, Hkv, D, (size_t)B * T * H * D, (size_t)B * T * Hkv * D, (size_t)B * H * T};
    float *q = frand(s.nq, 1.5), *k = frand(s.nk, 1.5), *v = frand(s.nk, 1), *w = frand(s.nq, 1);
    float *out = frand(s.nq, 1), *lse = frand(s.nl, 1), *out2 = frand(s.nq, 1);
    float *lse2 = frand(s.nl, 1);
    double *ro = malloc(s.nq * sizeof(double)), *rl = malloc(s.nl * sizeof(double));
    double *ob = malloc(s.nq * sizeof(double)), *lb = malloc(s.nl * sizeof(double));
    char name[96];
    snprintf(name, sizeof name, "amx fwd B=%d T=%d H=%d Hkv=%d D=%d", B, T, H, Hkv, D);
    CHECK(cpu_attention_amx_forward(be, out, lse, q, k, v, B, T, H, Hkv, D) == 1,
          "%s: the AMX forward must run", name);
    ref_forward(&s, q, k, v, ro, rl, ob, lb);
    check_within(name, out, ro, ob, s.nq);
    check_within("  lse", lse, rl, lb, s.nl);
    backend_attention_forward(be, out2, lse2, q, k, v, B, T, H, Hkv, D, 0);
    check_equal("  the op is the AMX kernel (out)", out2, out, s.nq);
    backend_attention_forward(one, out2, lse2, q, k, v, B, T, H, Hkv, D, 0);
    check_equal("  1 thread == 2 threads (out)", out2, out, s.nq);
    check_equal("  1 thread == 2 threads (lse)", lse2, lse, s.nl);

    float *dq = frand(s.nq, 1), *dk = frand(s.nk, 1), *dv = frand(s.nk, 1);
    float *dq2 = frand(s.nq, 1), *dk2 = frand(s.nk, 1), *dv2 = frand(s.nk, 1);
    double *rq = malloc(s.nq * sizeof(double)), *rk = malloc(s.nk * sizeof(double));
    double *rv = malloc(s.nk * sizeof(double)), *bq = malloc(s.nq * sizeof(double));
    double *bk = malloc(s.nk * sizeof(double)), *bv = malloc(s.nk * sizeof(double));
    CHECK(cpu_attention_amx_backward(be, dq, dk, dv, w, q, k, v, out, lse, B, T, H, Hkv, D) == 1,
          "%s: the AMX backward must run", name);
    ref_backward(&s, q, k, v, out, lse, w, rq, rk, rv, bq, bk, bv);
    check_within("  bwd dq", dq, rq, bq, s.nq);
    check_within("  bwd dk", dk, rk, bk, s.nk);
    check_within("  bwd dv", dv, rv, bv, s.nk);
    backend_attention_backward(be, dq2, dk2, dv2, w, q, k, v, out, lse, B, T, H, Hkv, D, 0);
    check_equal("  the op is the AMX kernel (dk)", dk2, dk, s.nk);
    backend_attention_backward(one, dq2, dk2, dv2, w, q, k, v, out, lse, B, T, H, Hkv, D, 0);
    check_equal("  1 thread == 2 threads (dq)", dq2, dq, s.nq);
    check_equal("  1 thread == 2 threads (dk)", dk2, dk, s.nk);
    check_equal("  1 thread == 2 threads (dv)", dv2, dv, s.nk);
    free(q), free(k), free(v), free(w), free(out), free(lse), free(out2), free(lse2);
    free(ro), free(rl), free(ob), free(lb), free(dq), free(dk), free(dv), free(dq2), free(dk2);
    free(dv2), free(rq), free(rk), free(rv), free(bq), free(bk), free(bv);
}

static backend *bf16_backend(int threads)
{
    backend_config cfg = {threads, 0, BACKEND_BF16, 0};
    backend *be = cpu_backend_entry.create(&cfg);
    if (!be) {
        printf("FAIL: cpu backend create: %s\n", loom_error());
        exit(1);
    }
    return be;
}

int main(void)
{
    log_set_quiet(1);
    setenv("LOOM_CPU_PEAK_GFLOPS", "100", 0);
    backend *be = bf16_backend(2), *one = bf16_backend(1);
    float x[64 * 3] = {0}, o[64 * 3], l[3];
    if (backend_cfg(be)->precision != BACKEND_BF16 ||
        !cpu_attention_amx_forward(be, o, l, x, x, x, 1, 1, 3, 1, 64)) {
        char why[160] = "bf16 runs here";
        cpu_bf16_ready(why, sizeof why);
        printf("skip: no AMX attention here (precision %s; %s)\n",
               backend_cfg(be)->precision == BACKEND_BF16 ? "bf16, but no AMX tiles" : "fp32", why);
        backend_destroy(be), backend_destroy(one);
        return 77;
    }
    test_shape(be, one, 2, 37, 6, 2, 64);  /* 3-head groups, T off 16 and 32 */
    test_shape(be, one, 1, 100, 4, 4, 64); /* one head per kv head */
    test_shape(be, one, 3, 16, 2, 1, 128); /* D 128: two column groups, one 16-key block */
    test_shape(be, one, 1, 1, 3, 1, 64);   /* T = 1 */
    test_shape(be, one, 1, 70, 2, 1, 192); /* D 192: three column groups, six d blocks */
    test_shape(be, one, 2, 256, 9, 3, 64); /* SmolLM2-135M's heads at a fine-tune's T */
    /* D 80 is not a multiple of 64: the kernels decline, and the op runs in fp32 */
    CHECK(cpu_attention_amx_forward(be, o, l, x, x, x, 1, 1, 2, 1, 80) == 0,
          "the AMX forward must decline D 80");
    backend_destroy(be), backend_destroy(one);
    return test_finish("test_cpu_attention_amx");
}
