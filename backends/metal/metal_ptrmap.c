/* metal_ptrmap.c: sorted-array range map from device pointers to allocation handles.
 * Lookups are a binary search (one per bound buffer per kernel launch); inserts and removes
 * shift the array, which is fine because allocations happen before the step loop. */
#include "backends/metal/metal_ptrmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Index of the first entry with base > p (0..n). */
static size_t ptrmap_upper(const metal_ptrmap *m, uintptr_t p)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->e[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int metal_ptrmap_insert(metal_ptrmap *m, const void *base, size_t size, void *handle)
{
    uintptr_t b = (uintptr_t)base;
    size_t i = ptrmap_upper(m, b);
    if ((i > 0 && m->e[i - 1].base + m->e[i - 1].size > b) || (i < m->n && b + size > m->e[i].base))
        return loom_fail("metal: buffer %p (+%zu bytes) overlaps a registered buffer", base, size);
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        metal_ptrmap_entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return loom_fail("metal: out of host memory for the buffer table (%zu entries)", cap);
        m->e = e;
        m->cap = cap;
    }
    memmove(&m->e[i + 1], &m->e[i], (m->n - i) * sizeof *m->e);
    m->e[i] = (metal_ptrmap_entry){b, size, handle};
    m->n++;
    return 0;
}

void *metal_ptrmap_remove(metal_ptrmap *m, const void *base)
{
    size_t i = ptrmap_upper(m, (uintptr_t)base);
    if (i == 0 || m->e[i - 1].base != (uintptr_t)base) return NULL;
    void *h = m->e[i - 1].handle;
    memmove(&m->e[i - 1], &m->e[i], (m->n - i) * sizeof *m->e);
    m->n--;
    return h;
}

void *metal_ptrmap_find(const metal_ptrmap *m, const void *p, size_t *offset)
{
    uintptr_t q = (uintptr_t)p;
    size_t i = ptrmap_upper(m, q);
    if (i == 0) return NULL;
    const metal_ptrmap_entry *e = &m->e[i - 1];
    if (q - e->base >= e->size) return NULL;
    if (offset) *offset = (size_t)(q - e->base);
    return e->handle;
}

void metal_ptrmap_clear(metal_ptrmap *m)
{
    free(m->e);
    m->e = NULL;
    m->n = m->cap = 0;
}
