/* safetensors.h: read and write the safetensors format (an 8-byte little-endian header length, a
 * JSON header naming each tensor's dtype, shape and byte range, then the raw data), as Hugging
 * Face folders hold weights. Reading memory-maps the file and converts one tensor at a time to
 * fp32; every length and offset is checked at open, so a lying file is one error, never a crash
 * or a huge allocation. Knows nothing about models or their names. */
#ifndef LOOM_SAFETENSORS_H
#define LOOM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ST_MAX_DIMS 8

typedef enum { ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2 } st_dtype;

typedef struct st_tensor {
    char *name;                  /* owned by the file */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    uint64_t begin, end;         /* byte range inside the data section */
} st_tensor;

/* One open .safetensors file (mapped read-only). */
typedef struct st_file {
    char *path;
    uint8_t *map;
    size_t size, data_start;
    int ntensors;
    st_tensor *t;                /* sorted by begin */
} st_file;

/* Open, map and validate: header length within the file, a JSON object, known dtypes, byte
 * ranges inside the data section that match dtype x shape, no overlaps, no duplicate names.
 * NULL + loom_fail("FILE: tensor NAME: ...") on any lie. */
st_file *st_open(const char *path);
void st_close(st_file *f);
/* Index of tensor `name`, -1 when absent. */
int st_find(const st_file *f, const char *name);
/* Tensor i converted to fp32 into out[0 .. numel) (numel must match), then its pages released
 * from memory (so an import holds one tensor at a time). */
int st_read_f32(st_file *f, int i, float *out, size_t numel);
/* Elements [e0, e0 + n) of tensor i as fp32 into out; the tensor's pages are released once its
 * last element has been read (so a reader going front to back in pieces holds one tensor). */
int st_read_f32_range(st_file *f, int i, size_t e0, size_t n, float *out);

/* Parse a dtype name ("F32", "BF16", "F16"); -1 for any other. */
int st_dtype_parse(const char *s);
const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);

/* Round-to-nearest-even conversions (NaN stays NaN), as torch converts. Inline: the loops that
 * convert whole tensors call them per element and must vectorise (export/import run at disk speed). */
static inline float st_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);            /* inf / nan */
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);       /* normal */
    else if (!man) u = sign;                                          /* zero */
    else { /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t st_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline uint16_t st_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);        /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);       /* rounds to >= 65520: inf */
    if (a >= 0x38800000u) {                                        /* normal half */
        uint32_t r = a - 0x38000000u;                              /* rebias exponent 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign;                    /* below half the smallest */
    /* subnormal half: shift the full mantissa, round to nearest even */
    uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
    uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* --- a set of files: model.safetensors, or the shards model.safetensors.index.json names --- */
typedef struct st_set {
    int nfiles;
    st_file **files;
} st_set;

/* Open the weights of folder `dir`: model.safetensors if present, else the index and every shard
 * it names (an index naming a missing file or a tensor not in its shard is an error). NULL +
 * loom_fail. */
st_set *st_set_open(const char *dir);
void st_set_close(st_set *s);
/* Find `name`: its file and index there; -1 when absent. */
int st_set_find(const st_set *s, const char *name, st_file **file, int *index);

/* --- writing --- */
typedef struct st_wtensor {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_wtensor;

/* Tensor k's fp32 contents (numel of its shape), asked once per tensor in order; NULL aborts. */
typedef const float *(*st_fetch_fn)(void *ctx, int k);

/* Write tensors [0, n) in `dtype` into `dir`: one model.safetensors (named `stem`.safetensors)
 * when the data fits in max_shard_bytes, else stem-0000i-of-0000N.safetensors files plus
 * stem.safetensors.index.json (the HF layout). Each file goes to a temporary name first. */
int st_write_dir(const char *dir, const char *stem, st_dtype dtype, const st_wtensor *t, int n,
                 st_fetch_fn fetch, void *ctx, uint64_t max_shard_bytes);

/* st_write_dir for a writer that hands each tensor over in pieces: stream(ctx, k, sink) pushes
 * tensor k's fp32 values, in order, through st_sink_put (converted and written as they come);
 * exactly the shape's count, else an error naming the tensor. -1 aborts (the file is removed). */
typedef struct st_sink st_sink;
int st_sink_put(st_sink *s, const float *x, size_t n);
typedef int (*st_stream_fn)(void *ctx, int k, st_sink *sink);
int st_write_dir_stream(const char *dir, const char *stem, st_dtype dtype, const st_wtensor *t, int n,
                        st_stream_fn stream, void *ctx, uint64_t max_shard_bytes);

#endif
