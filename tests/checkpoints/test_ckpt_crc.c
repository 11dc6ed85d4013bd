/* test_ckpt_crc.c: CRC32C against published check values, hardware vs software paths on every
 * alignment and many lengths (crossing the 3-stream block sizes), zlib-style chaining and combining.
 * Must never depend on the CPU: without SSE4.2 both paths are the software one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_crc.h"
#include "ckpt_test_util.h"

int main(void)
{
    /* RFC 3720 (iSCSI) B.4 test vectors and the usual "123456789" check value. */
    CHECK(ckpt_crc32c(0, "123456789", 9) == 0xE3069283u, "check value");
    CHECK(ckpt_crc32c_sw(0, "123456789", 9) == 0xE3069283u, "check value (sw)");
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    CHECK(ckpt_crc32c(0, zeros, 32) == 0x8A9136AAu, "32 zero bytes");
    CHECK(ckpt_crc32c(0, ones, 32) == 0x62A8AB43u, "32 0xff bytes");
    CHECK(ckpt_crc32c(0, inc, 32) == 0x46DD794Eu, "32 incrementing bytes");
    CHECK(ckpt_crc32c(0, "", 0) == 0, "empty");

    size_t n = 3 * 8192 * 2 + 3 * 256 * 3 + 77;
    unsigned char *buf = malloc(n + 8);
    uint32_t x = 12345;
    for (size_t i = 0; i < n + 8; i++) buf[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
    size_t lens[] = {1, 7, 8, 9, 15, 16, 17, 255, 256, 257, 271, 272, 511, 512, 513, 767, 768, 769, 1000,
                     4096 + 13, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 5, n};
    for (int a = 0; a < 8; a++)
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            uint32_t hw = ckpt_crc32c(0, buf + a, lens[k]), sw = ckpt_crc32c_sw(0, buf + a, lens[k]);
            CHECK(hw == sw, "align %d len %zu: %08x vs %08x", a, lens[k], hw, sw);
        }
    uint32_t whole = ckpt_crc32c(0, buf, n);
    CHECK(ckpt_crc32c(ckpt_crc32c(0, buf, 1000), buf + 1000, n - 1000) == whole, "chaining");
    CHECK(ckpt_crc32c_f32(0, (const float *)(const void *)buf, n / 4) == ckpt_crc32c(0, buf, n / 4 * 4), "f32 view");
    /* combine: every split point class (empty halves, short, long) against the direct CRC */
    size_t cuts[] = {0, 1, 3, 8, 1000, 3 * 8192 + 5, n - 1, n};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        size_t c = cuts[k];
        uint32_t got = ckpt_crc32c_combine(ckpt_crc32c(0, buf, c), ckpt_crc32c(0, buf + c, n - c), n - c);
        CHECK(got == whole, "combine at %zu: %08x vs %08x", c, got, whole);
    }
    CHECK(ckpt_crc32c_combine(ckpt_crc32c(0, "12345", 5), ckpt_crc32c(0, "6789", 4), 4) == 0xE3069283u,
          "combine of the check value");
    const float *fb = (const float *)(const void *)buf;
    CHECK(ckpt_crc32c_f32(ckpt_crc32c_f32(0, fb, 100), fb + 100, n / 4 - 100) == ckpt_crc32c_f32(0, fb, n / 4),
          "f32 chaining");
    const char *paths[] = {"software", "sse4.2 crc32", "sse4.2 crc32 + avx512 vpclmulqdq folding"};
    printf("crc32c path tested against software: %s\n", paths[ckpt_crc32c_hw()]);
    free(buf);
    return tc_finish("test_ckpt_crc");
}
