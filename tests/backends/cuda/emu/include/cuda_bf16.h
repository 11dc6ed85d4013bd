/* cuda_bf16.h (emulator): bfloat16 storage and round-to-nearest-even conversion. Test-only. */
#ifndef LOOM_EMU_CUDA_BF16_H
#define LOOM_EMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>

typedef struct {
    uint16_t x;
} __nv_bfloat16;

/* Keep the top 16 bits of the float, rounding the dropped 16 to nearest, ties to even; NaN stays NaN. */
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.x = (uint16_t)((u >> 16) | 0x40);
        return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.x = (uint16_t)(u >> 16);
    return b;
}

static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }

static inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#endif
