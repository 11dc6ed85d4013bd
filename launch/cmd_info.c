/* cmd_info.c: `loom info`: build features, the backends compiled in and whether each is usable,
 * the one backend_select() would pick and why, threads. Plain "key: value" lines (parsable). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "base/error.h"
#include "launch/cli.h"
#include "parallel/comm.h"

#ifdef LOOM_HAVE_MPI
#define FEATURE_MPI "yes"
#else
#define FEATURE_MPI "no"
#endif
#ifdef LOOM_HAVE_NCCL
#define FEATURE_NCCL "yes"
#else
#define FEATURE_NCCL "no"
#endif
#ifdef LOOM_HDF5_PARALLEL
#define FEATURE_HDF5 "yes (parallel build)"
#else
#define FEATURE_HDF5 "yes (serial build)"
#endif

int cmd_info(int argc, char **argv)
{
    (void)argc; (void)argv;
    printf("loom: %s\n", "0.1");
    printf("blas: %s (kernel %s)\n", LOOM_BLAS_NAME, backend_blas_kernel());
    printf("mpi: %s\n", FEATURE_MPI);
    printf("nccl: %s\n", FEATURE_NCCL);
    printf("hdf5: %s\n", FEATURE_HDF5);
    int n;
    const backend_entry *e = backend_registry(&n);
    printf("backends:");
    for (int i = 0; i < n; i++) printf(" %s", e[i].name);
    printf("\n");
    for (int i = 0; i < n; i++) {
        const char *why = "";
        int ok = e[i].available(&why);
        /* one line each, even when the driver's reason has line breaks */
        char reason[160];
        snprintf(reason, sizeof reason, "%s", why ? why : "");
        for (char *p = reason; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        size_t len = strlen(reason);
        while (len && reason[len - 1] == ' ') reason[--len] = '\0';
        if (ok) printf("backend.%s: available\n", e[i].name);
        else printf("backend.%s: unavailable (%s)\n", e[i].name, reason);
    }
    int from_env;
    const char *pick = backend_preferred(&from_env); /* the start of backend_select's choice */
    char why_env[256];
    if (from_env && !backend_choose(NULL, why_env, sizeof why_env)) { /* what a job would be refused with */
        printf("selected: none (LOOM_BACKEND=%s: %s)\n", pick, loom_error());
        pick = NULL;
    } else {
        printf("selected: %s (%s", pick ? pick : "none", from_env ? "LOOM_BACKEND" : "auto-detected: first available of");
        if (!from_env)
            for (int i = 0; i < n; i++) printf("%s%s", i ? ", " : " ", e[i].name);
        printf(")\n");
    }
    printf("launched_by_mpi: %s\n", comm_launched_by_mpi() ? "yes" : "no");
    /* parallel.comm = auto with that backend: here, and as one rank of an mpirun/srun job */
    char why[256];
    const char *k = comm_choose("auto", pick, comm_launched_by_mpi(), comm_compiled(), why, sizeof why);
    printf("comm: %s (%s)\n", k ? k : "none", why);
    k = comm_choose("auto", pick, 1, comm_compiled(), why, sizeof why);
    printf("comm.launched: %s (%s)\n", k ? k : "none", why);
    printf("cpus: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    return 0;
}
