/* cuda_matmul.c: C = alpha op(A) op(B) + beta C through cuBLAS, in the backend's precision mode.
 * fp32: CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores) unless allow_tf32 = 0 (plain fp32);
 * bf16: bf16 inputs, fp32 accumulate and fp32 C; an operand inside registered weights is read
 * from their bf16 copy (cast once per registration), any other is rounded into scratch. Never
 * allocates per call once the scratch has grown to the largest shape. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

static int cuda_blas_check(backend *be, cublasStatus_t st, int M, int N, int K)
{
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    char what[160];
    snprintf(what, sizeof what, "matmul M=%d N=%d K=%d: cuBLAS %s", M, N, K,
             cublasGetStatusString(st));
    return cuda_check(be, cudaErrorUnknown, what);
}

/* Register (cast now) or drop (n = 0) the bf16 copy of w, in the slots of bf16_slots.h (the
 * policy the CPU backend shares): re-registering each step allocates nothing, and with every slot
 * taken matmuls simply keep casting per call (right, only slower). */
void cuda_weights_bf16(backend *be, const float *w, size_t n)
{
    cuda_impl *im = cuda_im(be);
    if (be->cfg.precision != BACKEND_BF16 || !w || cuda_broken(be)) return;
    bf16_slot *slot = bf16_slot_claim(im->weights, CUDA_WEIGHT_SLOTS, w, n);
    if (!slot) return;
    if (slot->cap < n) {
        if (slot->copy) cudaFree(slot->copy); /* waits for the device: no matmul still reads it */
        slot->copy = NULL;
        slot->cap = 0;
        if (cuda_check(be, cudaMalloc((void **)&slot->copy, n * 2), "allocating bf16 weights") != 0)
            return;
        slot->cap = n;
    }
    if (cuda_cast_bf16(be, slot->copy, w, n) != 0) return;
    bf16_slot_set(slot, w, n);
}

void cuda_weights_free(backend *be)
{
    cuda_impl *im = cuda_im(be);
    for (int i = 0; i < CUDA_WEIGHT_SLOTS; i++)
        if (im->weights[i].copy) cudaFree(im->weights[i].copy);
    memset(im->weights, 0, sizeof im->weights);
}

/* Row-major C (M, N) is column-major C^T (N, M) with ld N, and C^T = op(B)^T op(A)^T. The
 * buffer of row-major B (K, N) read column-major is B^T (N, K), ld N: no cuBLAS transpose; with
 * transB the buffer holds (N, K) row-major = (K, N) column-major, ld K, and cuBLAS transposes it.
 * Likewise A: (M, K) row-major -> ld K, no transpose; transA (K, M) -> ld M, transpose.
 * So: cublasGemmEx(opB, opA, m = N, n = M, k = K, B, ldb, A, lda, C, ldc = N). */
void cuda_matmul(backend *be, float *C, const float *A, const float *B, int M, int N, int K,
                 int transA, int transB, float alpha, float beta)
{
    if (M <= 0 || N <= 0 || cuda_broken(be)) return;
    if (K <= 0) { /* empty product: C = beta C (beta = 0 writes zeros, never 0 * NaN) */
        if (beta == 0.0f) cuda_fill(be, C, 0.0f, (size_t)M * N);
        else if (beta != 1.0f) cuda_scale(be, C, beta, (size_t)M * N);
        return;
    }
    cuda_impl *im = cuda_im(be);
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = transA ? M : K, ldb = transB ? K : N;
    const void *a = A, *b = B;
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute = be->cfg.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (be->cfg.precision == BACKEND_BF16) {
        const size_t na = (size_t)M * K, nb = (size_t)K * N;
        const size_t abytes = (na * 2 + 255) & ~(size_t)255; /* 2 bytes per bf16 */
        const void *wa = bf16_slot_find(im->weights, CUDA_WEIGHT_SLOTS, A, na);
        const void *wb = bf16_slot_find(im->weights, CUDA_WEIGHT_SLOTS, B, nb);
        char *ws = (wa && wb) ? NULL : cuda_scratch(be, abytes + nb * 2);
        if (!(wa && wb) && !ws) return;
        if ((!wa && cuda_cast_bf16(be, ws, A, na) != 0) ||
            (!wb && cuda_cast_bf16(be, ws + abytes, B, nb) != 0))
            return;
        a = wa ? wa : ws;
        b = wb ? wb : ws + abytes;
        type = CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
    }
    cublasStatus_t st = cublasGemmEx(im->blas, opB, opA, N, M, K, &alpha, b, type, ldb, a, type, lda,
                                     &beta, C, CUDA_R_32F, N, compute, CUBLAS_GEMM_DEFAULT);
    cuda_blas_check(be, st, M, N, K);
}
