/* bf16_slots.h: the slot policy behind backend_weights_bf16, written once for the CPU
 * (cpu_bf16.c) and CUDA (cuda_matmul.c) backends: which slot a registered weight range takes,
 * and which kept copy a matmul operand reads. Header-only; the backend owns the slots and their
 * buffers (host or device memory) and does the allocating and rounding: nothing here allocates. */
#ifndef LOOM_BF16_SLOTS_H
#define LOOM_BF16_SLOTS_H

#include <stddef.h>
#include <stdint.h>

/* A registered fp32 range and its bf16 rounding. A dropped slot keeps its buffer, so
 * registering again (every step) allocates nothing. */
typedef struct bf16_slot {
    const float *w;  /* the registered range w[0..n); NULL: free */
    size_t n, cap;   /* floats registered; bf16 values copy holds */
    uint16_t *copy;  /* w rounded to bf16, the backend's memory */
} bf16_slot;

/* Register (n > 0) or drop (n = 0) the copy of w in slots[0..count). Registering returns the
 * slot to fill: w's own, else a free one whose buffer holds n, else any free one; it is free
 * (w = NULL) until bf16_slot_set. The caller grows copy to n when cap < n, rounds w into it and
 * calls bf16_slot_set; on failure it leaves the slot free. NULL: dropped, or every slot taken
 * (matmuls then round w per call: the same numbers, only slower). */
static inline bf16_slot *bf16_slot_claim(bf16_slot *slots, int count, const float *w, size_t n)
{
    bf16_slot *slot = NULL;
    for (int i = 0; i < count && !slot; i++)
        if (slots[i].w == w) slot = &slots[i];
    if (n == 0) {
        if (slot) slot->w = NULL;
        return NULL;
    }
    for (int i = 0; i < count && !slot; i++) /* a free slot that fits, else any free */
        if (!slots[i].w && slots[i].cap >= n) slot = &slots[i];
    for (int i = 0; i < count && !slot; i++)
        if (!slots[i].w) slot = &slots[i];
    if (slot) slot->w = NULL;
    return slot;
}

/* The slot holds w[0..n) rounded (its copy is filled). */
static inline void bf16_slot_set(bf16_slot *slot, const float *w, size_t n)
{
    slot->w = w;
    slot->n = n;
}

/* The bf16 copy of x[0..n) when it lies inside a registered range, else NULL. Addresses are
 * compared as integers: x and the ranges may be device pointers, or unrelated objects. */
static inline const uint16_t *bf16_slot_find(const bf16_slot *slots, int count, const float *x,
                                             size_t n)
{
    const uintptr_t p = (uintptr_t)x;
    for (int i = 0; i < count; i++) {
        const uintptr_t lo = (uintptr_t)slots[i].w, hi = lo + slots[i].n * sizeof(float);
        if (slots[i].w && p >= lo && p + n * sizeof(float) <= hi)
            return slots[i].copy + (p - lo) / sizeof(float);
    }
    return NULL;
}

#endif
