/* gguf_quant.c: the number formats of a GGUF tensor (see gguf.h), each a transcription of ggml's
 * reference code so that a file loom writes is byte-equal to one llama.cpp's converter writes from
 * the same fp32 values. Never approximates: any change here must keep test_gguf_quant bitwise. */
#include "checkpoints/gguf.h"

#include <math.h>
#include <string.h>

static uint32_t gguf_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float gguf_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ggml-impl.h ggml_compute_fp32_to_fp16 (from the FP16 library): scaling by 2^112 then 2^-110
 * rounds the mantissa to nearest even in float arithmetic; NaN -> 0x7E00 with the sign. */
uint16_t gguf_fp32_to_fp16(float f)
{
    const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = gguf_bits(f), shl1_w = w + w, sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = gguf_float((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = gguf_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00), mantissa_bits = bits & UINT32_C(0x00000FFF);
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : exp_bits + mantissa_bits));
}

/* ggml-impl.h ggml_compute_fp16_to_fp32 (exact: every fp16 is a float). */
float gguf_fp16_to_fp32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16, sign = w & UINT32_C(0x80000000), two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = gguf_float((two_w >> 4) + exp_offset) * 0x1.0p-112f;
    const float denormalized = gguf_float((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
    return gguf_float(sign | (two_w < (UINT32_C(1) << 27) ? gguf_bits(denormalized) : gguf_bits(normalized)));
}

/* ggml-impl.h ggml_compute_fp32_to_bf16: round to nearest even; a NaN keeps its top bits and is
 * made quiet (| 64), never rounded into an infinity. */
uint16_t gguf_fp32_to_bf16(float f)
{
    uint32_t u = gguf_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ggml-quants.c quantize_row_q8_0_ref, one block (QK8_0 = 32). gguf-py's numpy Q8_0 is the same
 * arithmetic in float32 (its np_roundf rounds half away from zero, as roundf). */
void gguf_quantize_q8_0(const float *x, uint8_t *out)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) { /* ggml's MAX(a, b) ((a) > (b) ? (a) : (b)): a NaN wins, as in numpy */
        const float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    uint16_t h = gguf_fp32_to_fp16(d);
    out[0] = (uint8_t)(h & 0xff);
    out[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

int gguf_type_parse(const char *name)
{
    static const struct { const char *name; gguf_type t; } types[] = {
        {"f32", GGUF_F32}, {"f16", GGUF_F16}, {"bf16", GGUF_BF16}, {"q8_0", GGUF_Q8_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(name, types[i].name) == 0) return (int)types[i].t;
    return -1;
}

const char *gguf_type_name(gguf_type t)
{
    return t == GGUF_F32 ? "f32" : t == GGUF_F16 ? "f16" : t == GGUF_BF16 ? "bf16" : t == GGUF_Q8_0 ? "q8_0" : "?";
}

size_t gguf_type_size(gguf_type t, uint64_t n)
{
    return t == GGUF_F32 ? (size_t)n * 4 : t == GGUF_Q8_0 ? (size_t)(n / 32) * 34 : (size_t)n * 2;
}
