/* cuda_embedding.cu: token (+ learned position) embedding lookup and its deterministic backward.
 * Backward sorts positions by token (CUB's stable radix sort), then one block per distinct token
 * adds that token's dout rows in position order: no atomics, bitwise reproducible run to run.
 * It must never let two blocks write the same dwte row (the sort makes each token one segment). */
#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/cuda_internal.h"

/* out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:]); a negative token reads row 0 (as the CPU reference) */
__global__ void cuda_emb_fwd_kernel(float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, size_t total, int T, int C)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (size_t)C;
        int c = (int)(i - n * (size_t)C), tok = tokens[n];
        float e = wte[(size_t)(tok < 0 ? 0 : tok) * C + c];
        out[i] = wpe ? e + wpe[(n % (size_t)T) * C + c] : e;
    }
}

/* keys[n] = tok[n] if 0 <= tok[n] < V else V (sorted last, skipped); vals[n] = n */
__global__ void cuda_emb_keys_kernel(int32_t *keys, int32_t *vals, const int32_t *tokens, int N, int V)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int tok = tokens[n];
    keys[n] = (tok >= 0 && tok < V) ? tok : V;
    vals[n] = n;
}

/* After the stable sort, positions with equal tokens are contiguous and in increasing position
 * order. Block k starts a segment iff k == 0 or key[k] != key[k-1]; it then, for its columns,
 * computes dwte[tok, c] += sum_{k' in segment, in order} dout[pos[k'], c]. Blocks that do not
 * start a segment exit at once; grid.y tiles the columns. */
__global__ void cuda_emb_bwd_kernel(float *dwte, const float *dout, const int32_t *keys,
                                    const int32_t *pos, int N, int C, int V)
{
    const int k = blockIdx.x, tok = keys[k];
    if (tok >= V || (k > 0 && keys[k - 1] == tok)) return;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int j = k; j < N && keys[j] == tok; j++) acc += dout[(size_t)pos[j] * C + c];
    dwte[(size_t)tok * C + c] += acc;
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in order */
__global__ void cuda_emb_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)T * C;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + i];
        dwpe[i] += acc;
    }
}

void cuda_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    size_t total = (size_t)B * T * C;
    if (total == 0 || cuda_broken(be)) return;
    cuda_emb_fwd_kernel<<<cuda_grid_for(be, total), CUDA_BLOCK, 0, cuda_im(be)->compute>>>(
        out, tokens, wte, wpe, total, T, C);
    cuda_check_launch(be, "embedding_forward");
}

/* Number of key bits the sort must look at so that 0..V all sort correctly. */
static int cuda_emb_key_bits(int V)
{
    int bits = 1;
    while (bits < 31 && (1u << bits) <= (unsigned)V) bits++;
    return bits;
}

static size_t cuda_align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Sorts (token, position) pairs into scratch; returns the sorted keys/positions or -1. */
static int cuda_emb_sort(backend *be, const int32_t *tokens, int N, int V, int32_t **keys_out,
                         int32_t **pos_out)
{
    cudaStream_t st = cuda_im(be)->compute;
    const int bits = cuda_emb_key_bits(V);
    size_t temp = 0, arr = cuda_align256((size_t)N * sizeof(int32_t));
    int32_t *null_i = NULL;
    if (cuda_check(be, cub::DeviceRadixSort::SortPairs(NULL, temp, null_i, null_i, null_i, null_i,
                                                       N, 0, bits, st),
                   "embedding_backward (sort size)") != 0)
        return -1;
    char *ws = (char *)cuda_scratch(be, 4 * arr + temp);
    if (!ws) return -1;
    int32_t *keys_in = (int32_t *)ws, *vals_in = (int32_t *)(ws + arr);
    int32_t *keys = (int32_t *)(ws + 2 * arr), *pos = (int32_t *)(ws + 3 * arr);
    cuda_emb_keys_kernel<<<(N + CUDA_BLOCK - 1) / CUDA_BLOCK, CUDA_BLOCK, 0, st>>>(keys_in, vals_in,
                                                                              tokens, N, V);
    if (cuda_check_launch(be, "embedding_backward (keys)") != 0) return -1;
    if (cuda_check(be, cub::DeviceRadixSort::SortPairs(ws + 4 * arr, temp, keys_in, keys, vals_in,
                                                       pos, N, 0, bits, st),
                   "embedding_backward (sort)") != 0)
        return -1;
    *keys_out = keys;
    *pos_out = pos;
    return 0;
}

void cuda_embedding_backward(backend *be, float *dwte, float *dwpe, const float *dout,
                             const int32_t *tokens, int B, int T, int C, int V)
{
    const int N = B * T;
    if (N <= 0 || C <= 0 || cuda_broken(be)) return;
    cudaStream_t st = cuda_im(be)->compute;
    if (dwte && V > 0) {
        int32_t *keys = NULL, *pos = NULL;
        if (cuda_emb_sort(be, tokens, N, V, &keys, &pos) != 0) return;
        dim3 grid((unsigned)N, (unsigned)((C + CUDA_BLOCK - 1) / CUDA_BLOCK));
        cuda_emb_bwd_kernel<<<grid, CUDA_BLOCK, 0, st>>>(dwte, dout, keys, pos, N, C, V);
        if (cuda_check_launch(be, "embedding_backward (dwte)") != 0) return;
    }
    if (dwpe) {
        cuda_emb_wpe_kernel<<<cuda_grid_for(be, (size_t)T * C), CUDA_BLOCK, 0, st>>>(dwpe, dout, B,
                                                                                   T, C);
        cuda_check_launch(be, "embedding_backward (dwpe)");
    }
}
