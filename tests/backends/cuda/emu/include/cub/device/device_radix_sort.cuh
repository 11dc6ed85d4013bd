/* cub/device/device_radix_sort.cuh (emulator): a stable sort of (key, value) pairs on bits
 * [begin_bit, end_bit) of the key, with CUB's two-call temp-storage protocol. Test-only. */
#ifndef LOOM_EMU_CUB_RADIX_H
#define LOOM_EMU_CUB_RADIX_H
#include <algorithm>
#include <numeric>
#include <vector>

#include "cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
    template <class K, class V, class N>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *vals_in, V *vals_out, N n, int begin_bit, int end_bit,
                                 cudaStream_t stream = 0)
    {
        (void)stream;
        if (!temp) {
            temp_bytes = 4096; /* anything; the caller must pass the same size back */
            return cudaSuccess;
        }
        if (temp_bytes < 4096 || begin_bit < 0 || end_bit > (int)(8 * sizeof(K)) || begin_bit >= end_bit)
            return cudaErrorInvalidValue;
        /* CUB flips the sign bit of signed keys, then compares bits [begin, end). */
        auto bits = [&](K key) {
            unsigned long long u = (unsigned long long)key;
            if ((K)-1 < 0) u ^= 1ull << (8 * sizeof(K) - 1);
            u >>= begin_bit;
            int w = end_bit - begin_bit;
            return w >= 64 ? u : (u & ((1ull << w) - 1));
        };
        std::vector<size_t> idx((size_t)n);
        std::iota(idx.begin(), idx.end(), (size_t)0);
        std::stable_sort(idx.begin(), idx.end(),
                         [&](size_t a, size_t b) { return bits(keys_in[a]) < bits(keys_in[b]); });
        std::vector<K> k2((size_t)n);
        std::vector<V> v2((size_t)n);
        for (size_t i = 0; i < (size_t)n; i++) {
            k2[i] = keys_in[idx[i]];
            v2[i] = vals_in[idx[i]];
        }
        std::copy(k2.begin(), k2.end(), keys_out);
        std::copy(v2.begin(), v2.end(), vals_out);
        return cudaSuccess;
    }
};
} // namespace cub
#endif
