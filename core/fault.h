/* fault.h: fault injection for the reliability tests, harmless in normal runs: nothing happens
 * unless LOOM_FAULT_ACTION is set. LOOM_FAULT_RANK (default 0) at training step LOOM_FAULT_STEP
 * (default 1) then does LOOM_FAULT_ACTION: "exit" (_exit(3)), "kill" (SIGKILL itself) or
 * "stall" (stops making progress: pause() until killed). */
#ifndef LOOM_FAULT_H
#define LOOM_FAULT_H

/* Called by the training loop at the start of every step. */
void fault_at_step(int rank, int step);

#endif
