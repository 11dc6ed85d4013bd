/* metal_shim_kernels.cpp: compiles the Metal kernel sources as C++17 (through metal_shim.h) and
 * runs one kernel over its 1-D grid, the way the GPU would but one thread after another.
 * It must never reinterpret a kernel: arguments are bound by position exactly as Metal binds them. */
#include "backends/metal/metal_params.h"
#include "backends/metal/metal_shim.h"

namespace loom_mk {
#include "backends/metal/activation.metal"
#include "backends/metal/adamw.metal"
#include "backends/metal/attention.metal"
#include "backends/metal/elementwise.metal"
#include "backends/metal/embedding.metal"
#include "backends/metal/needle.metal"
#include "backends/metal/needle_mix.metal"
#include "backends/metal/norm.metal"
#include "backends/metal/rope.metal"
#include "backends/metal/xent.metal"
} // namespace loom_mk

/* From here on ordinary C++: the Metal spellings mean nothing again. */
#undef kernel
#undef device
#undef constant
#undef thread

#include <cstddef>
#include <cstdio>
#include <tuple>
#include <type_traits>
#include <utility>

extern "C" {
#include "backends/metal/metal_kernels.h"
int metal_shim_run(int k, size_t grid, void *const *bufs, int nbufs, const void *params, size_t params_bytes,
                   int reverse);
}

namespace {

template <typename... A, std::size_t... I>
void shim_grid(void (*f)(A...), void *const *bufs, const void *params, std::size_t grid, int reverse,
               std::index_sequence<I...>)
{
    using Args = std::tuple<A...>;
    using Pref = std::tuple_element_t<sizeof...(I), Args>;
    using P = std::remove_cv_t<std::remove_reference_t<Pref>>;
    const P &p = *static_cast<const P *>(params);
    for (std::size_t i = 0; i < grid; i++) {
        uint g = (uint)(reverse ? grid - 1 - i : i);
        f(static_cast<std::tuple_element_t<I, Args>>(bufs[I])..., p, g);
    }
}

/* Kernel signature: (buffers..., constant P &params, uint gid). Checks the host passed as many
 * buffers as the kernel binds and a params block of the kernel's own type size. */
template <typename... A>
int shim_run(const char *name, void (*f)(A...), void *const *bufs, int nbufs, const void *params,
             std::size_t params_bytes, std::size_t grid, int reverse)
{
    constexpr std::size_t nb = sizeof...(A) - 2;
    using Args = std::tuple<A...>;
    static_assert(std::is_same<std::tuple_element_t<nb + 1, Args>, uint>::value, "last kernel argument is the gid");
    using P = std::remove_cv_t<std::remove_reference_t<std::tuple_element_t<nb, Args>>>;
    if (nbufs != (int)nb || params_bytes != sizeof(P)) {
        std::fprintf(stderr, "metal-shim: %s called with %d buffers and %zu param bytes; it binds %zu and %zu\n",
                     name, nbufs, params_bytes, nb, sizeof(P));
        return -1;
    }
    shim_grid(f, bufs, params, grid, reverse, std::make_index_sequence<nb>{});
    return 0;
}

} // namespace

/* Run kernel k over grid threads in increasing (reverse = 0) or decreasing thread order. */
int metal_shim_run(int k, size_t grid, void *const *bufs, int nbufs, const void *params, size_t params_bytes,
                   int reverse)
{
    switch (k) {
#define SHIM_CASE(id, fn)                                                                          \
    case MK_##id:                                                                                  \
        return shim_run(#fn, loom_mk::fn, bufs, nbufs, params, params_bytes, grid, reverse);
        METAL_KERNEL_LIST(SHIM_CASE)
#undef SHIM_CASE
    }
    std::fprintf(stderr, "metal-shim: unknown kernel %d\n", k);
    return -1;
}
