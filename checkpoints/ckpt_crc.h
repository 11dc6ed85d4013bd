/* ckpt_crc.h: CRC32C (Castagnoli) of checkpoint tensors, on x86 SSE4.2/AVX-512 or in software.
 * Private to checkpoints/ (and its tests and benchmark): not part of the ckpt.h contract.
 * Must never change the polynomial or byte order: stored checksums depend on both. */
#ifndef LOOM_CKPT_CRC_H
#define LOOM_CKPT_CRC_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of buf, continuing from crc (start with 0); chaining is the same as zlib's crc32():
 * ckpt_crc32c(ckpt_crc32c(0, a, na), b, nb) == ckpt_crc32c(0, a||b, na+nb).
 * Uses AVX-512 VPCLMULQDQ folding and the SSE4.2 crc32 instruction when the CPU has them, else
 * ckpt_crc32c_sw. */
uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len);

/* Portable slicing-by-8 implementation (same result, ~1 GB/s). */
uint32_t ckpt_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* What ckpt_crc32c runs on: 0 software, 1 the SSE4.2 crc32 instruction, 2 that plus AVX-512
 * carry-less multiply folding (VPCLMULQDQ) for buffers of 256 bytes and more. */
int ckpt_crc32c_hw(void);

/* CRC32C of A||B from crc1 = CRC32C(A), crc2 = CRC32C(B) and B's length, as zlib's
 * crc32_combine: a file's checksum from its pieces' checksums without reading them again. */
uint32_t ckpt_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* CRC32C of n fp32 values as little-endian bytes (what the file stores), whatever the host;
 * continues from crc like ckpt_crc32c (start with 0). */
uint32_t ckpt_crc32c_f32(uint32_t crc, const float *x, size_t n);

#endif
