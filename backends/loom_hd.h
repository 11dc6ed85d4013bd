/* loom_hd.h: LOOM_HD, the mark of a function written once for host C and CUDA device code
 * (backends/adamw_math.h): __host__ __device__ under nvcc, nothing in C and in the CUDA host
 * emulator's C++. Only the macro; it must never pull in a CUDA header. */
#ifndef LOOM_HD
#ifdef __CUDACC__
#define LOOM_HD __host__ __device__
#else
#define LOOM_HD
#endif
#endif
