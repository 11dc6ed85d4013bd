/* interrupt.c: the per-step stop agreement of interrupt.h. Reads the flag once per step; never
 * writes it (the caller's handler owns it). */
#include "core/train/interrupt.h"

void interrupt_put(const volatile sig_atomic_t *flag, double *slots)
{
    int sig = flag ? (int)*flag : 0;
    slots[0] = sig == SIGINT;
    slots[1] = sig == SIGTERM;
}

int interrupt_agreed(const double *slots)
{
    if (slots[1] > 0) return SIGTERM;
    return slots[0] > 0 ? SIGINT : 0;
}
