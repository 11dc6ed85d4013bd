/* metal_ptrmap.h: maps any pointer inside an allocation to (the allocation's handle, offset), so
 * the Metal host can bind an MTLBuffer at an offset for a pointer core computed by arithmetic.
 * Plain C so it is unit-tested on Linux; it never owns or releases the handles it stores. */
#ifndef LOOM_METAL_PTRMAP_H
#define LOOM_METAL_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct metal_ptrmap_entry {
    uintptr_t base;
    size_t size;
    void *handle;
} metal_ptrmap_entry;

typedef struct metal_ptrmap {
    metal_ptrmap_entry *e; /* sorted by base, non-overlapping */
    size_t n, cap;
} metal_ptrmap;

/* Add [base, base + size); 0, or -1 + loom_fail on OOM or overlap with an existing range. */
int metal_ptrmap_insert(metal_ptrmap *m, const void *base, size_t size, void *handle);
/* Remove the range starting exactly at base; its handle, or NULL if there is none. */
void *metal_ptrmap_remove(metal_ptrmap *m, const void *base);
/* The handle of the range holding p (base <= p < base + size), offset = p - base; NULL if none. */
void *metal_ptrmap_find(const metal_ptrmap *m, const void *p, size_t *offset);
/* Forget every range and free the table. */
void metal_ptrmap_clear(metal_ptrmap *m);

#endif
