/* metal_shim.h: lets the .metal kernel files compile both as Metal Shading Language (on a Mac, at
 * run time) and as C++17 with g++ on Linux, where tests run each kernel over its grid on the CPU.
 * It must never add behaviour: on Linux it only maps Metal spellings to their C++ equivalents. */
#ifndef LOOM_METAL_SHIM_H
#define LOOM_METAL_SHIM_H

#if defined(__METAL_VERSION__)

#include <metal_stdlib>
using namespace metal;

/* Argument-table attributes. Buffer i of a kernel is what the host binds at index i. */
#define LOOM_BUFFER(i) [[buffer(i)]]
#define LOOM_GID [[thread_position_in_grid]]

#else /* C++17 on the host: the kernels become plain functions of (buffers..., params, gid). */

#include <cmath>
#include <cstdint>

typedef unsigned int uint;

/* Address spaces: all memory is host memory; `constant` stays read-only. Kernels keep no
 * threadgroup memory and use no barriers or SIMD-group functions (each GPU thread's work is
 * independent), so running the threads of a grid one after another is exact. */
#define kernel
#define device
#define constant const
#define thread
#define LOOM_BUFFER(i)
#define LOOM_GID

/* The subset of the Metal standard library the kernels use, mapped to <cmath> in float. */
namespace metal {
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float tanh(float x) { return std::tanh(x); }
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float abs(float x) { return std::fabs(x); }
inline float rint(float x) { return std::rint(x); } /* to nearest even, as Metal's */
inline float frexp(float x, int &e) { return std::frexp(x, &e); }
inline float ldexp(float x, int k) { return std::ldexp(x, k); }
inline bool isfinite(float x) { return std::isfinite(x); }
/* Metal's max/min on float are fmax/fmin (a NaN operand loses to a number). */
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
} /* namespace metal */

#endif
#endif
