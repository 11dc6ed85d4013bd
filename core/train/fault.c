/* fault.c: the fault-injection switch of fault.h, read from the environment once (fault_setup).
 * Must never act unless LOOM_FAULT_ACTION is set, and never allocate or log in a normal run (a
 * test of one int per step is the whole cost). */
#include "core/train/fault.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/train/session.h"

/* LOOM_FAULT_ACTION's values, in fault_action's order (FAULT_NONE first). */
static const char *const fault_names[] = {"", "exit", "kill", "stall", "nan", "inf", "nan_grad", "sigint", "sigterm",
                                           "stall_save"};

static int fault_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : dflt;
}

void fault_setup(fault_plan *p)
{
    memset(p, 0, sizeof *p);
    const char *action = getenv("LOOM_FAULT_ACTION");
    for (int a = FAULT_EXIT; action && a <= FAULT_STALL_SAVE; a++)
        if (strcmp(action, fault_names[a]) == 0) p->action = (fault_action)a;
    if (p->action == FAULT_NONE) return;
    const char *r = getenv("LOOM_FAULT_RANK");
    p->all_ranks = r && strcmp(r, "all") == 0;
    p->rank = fault_env_int("LOOM_FAULT_RANK", 0);
    p->step = fault_env_int("LOOM_FAULT_STEP", 1);
    int count = fault_env_int("LOOM_FAULT_COUNT", 1);
    p->count = count > 0 ? count : 1;
}

/* 1 when this rank is the target at `step` (or within the COUNT steps from it when `span`). */
static int fault_due(const fault_plan *p, int rank, int step, int span)
{
    if (!p->all_ranks && rank != p->rank) return 0;
    return step >= p->step && step < p->step + (span ? p->count : 1);
}

static void fault_say(int rank, fault_action action, int step)
{
    fprintf(stderr, "[rank %d] fault injection: %s at step %d\n", rank, fault_names[action], step);
    fflush(stderr);
}

void fault_at_step(const fault_plan *p, int rank, int step)
{
    if (p->action != FAULT_EXIT && p->action != FAULT_KILL && p->action != FAULT_STALL &&
        p->action != FAULT_SIGINT && p->action != FAULT_SIGTERM)
        return;
    if (!fault_due(p, rank, step, 0)) return; /* the poison actions act in fault_poison_step */
    fault_say(rank, p->action, step);
    if (p->action == FAULT_SIGINT || p->action == FAULT_SIGTERM) { /* the handler decides what happens */
        for (int i = 0; i < p->count; i++) raise(p->action == FAULT_SIGINT ? SIGINT : SIGTERM);
        return;
    }
    if (p->action == FAULT_EXIT) _exit(3);
    if (p->action == FAULT_KILL) raise(SIGKILL);
    for (;;) pause();
}

void fault_in_save(const fault_plan *p, int rank, long long step)
{
    if (!p || p->action != FAULT_STALL_SAVE || !fault_due(p, rank, (int)step, 0)) return;
    fprintf(stderr, "[rank %d] fault injection: stall_save in the save of step %lld\n", rank, step);
    fflush(stderr);
    for (;;) pause();
}

void fault_poison_step(const fault_plan *p, struct session *s, int step, double *loss_sum)
{
    if (p->action != FAULT_NAN && p->action != FAULT_INF && p->action != FAULT_NAN_GRAD) return;
    int rank = s->comm->rank;
    if (!fault_due(p, rank, step, 1)) return;
    fault_say(rank, p->action, step);
    model *m = s->model;
    if (p->action == FAULT_NAN_GRAD && m->grads && !m->lora.rank) {
        /* backward accumulates into the zeroed gradients: NaN + g stays NaN in every element */
        backend_fill(s->be, m->grads, NAN, m->nparams);
        return;
    }
    if (p->action == FAULT_NAN_GRAD)
        fprintf(stderr, "[rank %d] fault injection: no full gradient buffer here, poisoning the loss\n", rank);
    *loss_sum = p->action == FAULT_INF ? INFINITY : NAN;
}
