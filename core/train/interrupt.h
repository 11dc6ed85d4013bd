/* interrupt.h: a training loop's clean stop on SIGINT / SIGTERM. The caller (launch/) installs
 * the handler and owns the flag it sets (train_options.stop); a loop adds this rank's flag to two
 * slots of its step's own host all-reduce, so every rank learns at the same step that one of them
 * was signalled, and stops there, the step done and saved. Never installs a handler or talks to comm. */
#ifndef LOOM_INTERRUPT_H
#define LOOM_INTERRUPT_H

#include <signal.h>

/* Slots a step's all-reduce carries for the agreement: ranks that saw SIGINT, ranks that saw SIGTERM. */
enum { INTERRUPT_SLOTS = 2 };

/* This rank's flag (NULL: none) into slots[0..INTERRUPT_SLOTS), before the sum over ranks. */
void interrupt_put(const volatile sig_atomic_t *flag, double *slots);

/* The agreed stop once the slots are summed over ranks: SIGTERM if any rank saw it (a scheduler's
 * preemption), else SIGINT if any did, else 0. The same on every rank. */
int interrupt_agreed(const double *slots);

#endif
