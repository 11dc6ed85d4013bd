/* cpu_scratch.c: the per-thread scratch buffers the CPU kernels share (attention blocks, norm
 * partial sums), grown on demand and kept for the backend's life. The only allocation an op may
 * cause; never shrinks, never called from inside a parallel region. */
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"
#include "base/log.h"

int cpu_scratch_reserve(cpu_state *st, size_t nfloats)
{
    if (nfloats <= st->scratch_cap) return 0;
    for (int t = 0; t < st->threads; t++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, nfloats * sizeof(float)) != 0) {
            log_warn("cpu backend: out of memory growing scratch to %zu floats", nfloats);
            return -1;
        }
        free(st->scratch[t]);
        st->scratch[t] = p;
    }
    st->scratch_cap = nfloats;
    return 0;
}
