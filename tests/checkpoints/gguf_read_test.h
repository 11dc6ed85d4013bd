/* gguf_read_test.h: a small independent GGUF reader for the tests (not loom's writer read back
 * through itself): every key with its type and raw value bytes, every tensor's info and a SHA-256
 * of its data, and the layout checks the spec asks (aligned data section and tensor offsets). */
#ifndef LOOM_GGUF_READ_TEST_H
#define LOOM_GGUF_READ_TEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct gt_kv {
    char *key;
    uint32_t type;       /* GGUF value type; 9 = array */
    uint32_t elem;       /* arrays: the element type */
    uint64_t n;          /* arrays: the element count */
    unsigned char *val;  /* the value as stored (scalars: its bytes; strings: u64 length + bytes) */
    size_t len;
} gt_kv;

typedef struct gt_tensor {
    char *name;
    uint32_t ndim, type;
    uint64_t ne[4], offset;
    char sha256[65];
} gt_tensor;

typedef struct gt_file {
    uint32_t version, alignment;
    uint64_t nkv, nt;
    gt_kv *kv;
    gt_tensor *t;
    int aligned;         /* 1: data start and every offset are multiples of the alignment */
} gt_file;

/* Read path; 0, or -1 with a message in err. */
int gt_read(const char *path, gt_file *f, char *err, size_t errlen);
void gt_free(gt_file *f);
/* Hex SHA-256 of n bytes. */
void gt_sha256(const void *data, size_t n, char out[65]);
/* Bytes of n elements of a ggml type (f32, f16, bf16, q8_0). */
size_t gt_type_size(uint32_t type, uint64_t n);

#endif
