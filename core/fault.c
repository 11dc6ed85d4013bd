/* fault.c: the fault-injection switch of fault.h. */
#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fault_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : dflt;
}

void fault_at_step(int rank, int step)
{
    const char *action = getenv("LOOM_FAULT_ACTION");
    if (!action || !action[0]) return;
    if (rank != fault_env_int("LOOM_FAULT_RANK", 0) || step != fault_env_int("LOOM_FAULT_STEP", 1)) return;
    fprintf(stderr, "[rank %d] fault injection: %s at step %d\n", rank, action, step);
    fflush(stderr);
    if (strcmp(action, "exit") == 0) _exit(3);
    if (strcmp(action, "kill") == 0) raise(SIGKILL);
    if (strcmp(action, "stall") == 0)
        for (;;) pause();
}
