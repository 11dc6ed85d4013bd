/* fault.h: fault injection for the reliability tests (tests/reliability), harmless in normal runs:
 * nothing happens unless LOOM_FAULT_ACTION is set. Must never change a run where it is unset.
 * The switch, read from the environment (pass it to every rank: mpirun -x NAME):
 *   LOOM_FAULT_ACTION  exit      _exit(3) at the start of the step
 *                      kill      SIGKILL itself at the start of the step (a crash, a lost node)
 *                      stall     stop making progress (pause() until killed): a hung rank
 *                      nan, inf  this rank's loss of the step becomes NaN / +Inf (an overflow)
 *                      nan_grad  this rank's gradients of the step start as NaN, so backward
 *                                leaves them NaN and the reduction carries NaN to every rank
 *                                (stages 0-1 with full gradients; elsewhere the loss instead)
 *   LOOM_FAULT_RANK    the rank it happens on (default 0); "all" = every rank
 *   LOOM_FAULT_STEP    the 1-based training step (default 1)
 *   LOOM_FAULT_COUNT   nan/inf/nan_grad: this many consecutive steps from LOOM_FAULT_STEP (1)
 * Checkpoint saves have their own kill points: LOOM_FAULT_CKPT_PHASE (checkpoints/ckpt_write.c). */
#ifndef LOOM_FAULT_H
#define LOOM_FAULT_H

struct session;

/* Called by the training loop at the start of every step (exit, kill, stall). */
void fault_at_step(int rank, int step);

/* Called by the training step once the gradients are zeroed and before the first forward, with
 * the step's running loss sum on this rank (nan, inf, nan_grad). */
void fault_poison_step(struct session *s, int step, double *loss_sum);

#endif
