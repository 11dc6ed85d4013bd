/* fault.c: the fault-injection switch of fault.h, read from the environment at each call.
 * Must never act unless LOOM_FAULT_ACTION is set, and never allocate or log in a normal run
 * (one getenv per call is the whole cost). */
#include "core/train/fault.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/train/session.h"

static int fault_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : dflt;
}

/* The action when this rank is the target at `step` (or within the COUNT steps from it when
 * `span`), else NULL. */
static const char *fault_due(int rank, int step, int span)
{
    const char *action = getenv("LOOM_FAULT_ACTION");
    if (!action || !action[0]) return NULL;
    const char *r = getenv("LOOM_FAULT_RANK");
    if (!(r && strcmp(r, "all") == 0) && rank != fault_env_int("LOOM_FAULT_RANK", 0)) return NULL;
    int first = fault_env_int("LOOM_FAULT_STEP", 1);
    int count = span ? fault_env_int("LOOM_FAULT_COUNT", 1) : 1;
    return step >= first && step < first + (count > 0 ? count : 1) ? action : NULL;
}

static void fault_say(int rank, const char *action, int step)
{
    fprintf(stderr, "[rank %d] fault injection: %s at step %d\n", rank, action, step);
    fflush(stderr);
}

void fault_at_step(int rank, int step)
{
    const char *action = fault_due(rank, step, 0);
    if (!action) return;
    int exits = strcmp(action, "exit") == 0, kills = strcmp(action, "kill") == 0;
    int stalls = strcmp(action, "stall") == 0;
    if (!exits && !kills && !stalls) return; /* the poison actions act in fault_poison_step */
    fault_say(rank, action, step);
    if (exits) _exit(3);
    if (kills) raise(SIGKILL);
    for (;;) pause();
}

void fault_poison_step(struct session *s, int step, double *loss_sum)
{
    int rank = s->comm->rank;
    const char *action = fault_due(rank, step, 1);
    if (!action) return;
    int grad = strcmp(action, "nan_grad") == 0;
    if (!grad && strcmp(action, "nan") != 0 && strcmp(action, "inf") != 0) return;
    fault_say(rank, action, step);
    model *m = s->model;
    if (grad && m->grads && !m->lora.rank) {
        /* backward accumulates into the zeroed gradients: NaN + g stays NaN in every element */
        s->be->ops->fill(s->be, m->grads, NAN, m->nparams);
        return;
    }
    if (grad) fprintf(stderr, "[rank %d] fault injection: no full gradient buffer here, poisoning the loss\n", rank);
    *loss_sum = strcmp(action, "inf") == 0 ? INFINITY : NAN;
}
