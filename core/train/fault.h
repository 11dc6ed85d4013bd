/* fault.h: fault injection for the reliability tests (tests/reliability), harmless in normal runs:
 * nothing happens unless LOOM_FAULT_ACTION is set. Must never change a run where it is unset.
 * The switch, read from the environment once when a job starts (fault_setup; pass it to every
 * rank: mpirun -x NAME):
 *   LOOM_FAULT_ACTION  exit      _exit(3) at the start of the step
 *                      kill      SIGKILL itself at the start of the step (a crash, a lost node)
 *                      stall     stop making progress (pause() until killed): a hung rank
 *                      nan, inf  this rank's loss of the step becomes NaN / +Inf (an overflow)
 *                      nan_grad  this rank's gradients of the step start as NaN, so backward
 *                                leaves them NaN and the reduction carries NaN to every rank
 *                                (stages 0-1 with full gradients; elsewhere the loss instead)
 *                      sigint,   raise SIGINT / SIGTERM in this rank at the start of the step (a
 *                      sigterm   Ctrl-C, a scheduler's preemption), LOOM_FAULT_COUNT times in a row
 *                      stall_save  stop making progress inside the checkpoint save that follows
 *                                step LOOM_FAULT_STEP, once the save's longer wait is in force (rank
 *                                0 in the middle of writing the file, another rank between its
 *                                gathers): a rank hung on a save's I/O
 *   LOOM_FAULT_RANK    the rank it happens on (default 0); "all" = every rank
 *   LOOM_FAULT_STEP    the 1-based training step (default 1)
 *   LOOM_FAULT_COUNT   nan/inf/nan_grad: this many consecutive steps from LOOM_FAULT_STEP (1);
 *                      sigint/sigterm: this many signals at once (2: the second aborts)
 * Checkpoint saves have their own kill points: LOOM_FAULT_CKPT_PHASE (checkpoints/ckpt_write.c). */
#ifndef LOOM_FAULT_H
#define LOOM_FAULT_H

struct session;

typedef enum fault_action {
    FAULT_NONE = 0, /* LOOM_FAULT_ACTION unset, empty or unknown: the hooks return at once */
    FAULT_EXIT, FAULT_KILL, FAULT_STALL, FAULT_NAN, FAULT_INF, FAULT_NAN_GRAD, FAULT_SIGINT, FAULT_SIGTERM,
    FAULT_STALL_SAVE
} fault_action;

/* The switch as parsed by fault_setup; the job that owns it keeps it for its steps. */
typedef struct fault_plan {
    fault_action action;
    int all_ranks;      /* LOOM_FAULT_RANK=all */
    int rank;           /* else this rank only */
    int step;           /* LOOM_FAULT_STEP: the first (1-based) step */
    int count;          /* LOOM_FAULT_COUNT (nan, inf, nan_grad): steps in a row, >= 1 */
} fault_plan;

/* Read LOOM_FAULT_* into *p (action FAULT_NONE when unset). Called once when a job starts. */
void fault_setup(fault_plan *p);

/* Called by the training loop at the start of every step (exit, kill, stall, sigint, sigterm). */
void fault_at_step(const fault_plan *p, int rank, int step);

/* Called by the checkpoint save (session_save) once its longer wait is in force, with the step
 * being saved (stall_save). */
void fault_in_save(const fault_plan *p, int rank, long long step);

/* Called by the training step once the gradients are zeroed and before the first forward, with
 * the step's running loss sum on this rank (nan, inf, nan_grad). */
void fault_poison_step(const fault_plan *p, struct session *s, int step, double *loss_sum);

#endif
