/* test_comm_choose.c: the transport parallel.comm = auto picks, for every backend, launch state
 * and build (comm_choose is a pure function: no MPI, no GPU needed). It must never start a
 * transport: only the choice and its stated reason are checked. */
#include <string.h>

#include "parallel/comm.h"
#include "tests/check.h"

/* kind (or NULL for "no transport") and a word the reason must contain */
static void expect(const char *kind, const char *backend, int launched, int mpi, int nccl,
                   const char *want, const char *reason_word)
{
    char why[256] = "";
    comm_features f = {mpi, nccl};
    const char *got = comm_choose(kind, backend, launched, f, why, sizeof why);
    CHECK((got == NULL && want == NULL) || (got && want && strcmp(got, want) == 0),
          "comm_choose(%s, %s, launched %d, mpi %d, nccl %d) = %s, want %s (%s)",
          kind ? kind : "NULL", backend ? backend : "NULL", launched, mpi, nccl,
          got ? got : "NULL", want ? want : "NULL", why);
    CHECK(why[0] && strstr(why, reason_word), "reason \"%s\" should say \"%s\"", why, reason_word);
}

int main(void)
{
    static const char *const backends[] = {"cpu", "cuda", "metal", NULL};
    for (int b = 0; b < 4; b++) {
        const char *be = backends[b];
        int cuda = be && strcmp(be, "cuda") == 0;
        /* one process: self, whatever the build */
        for (int f = 0; f < 4; f++) {
            expect("auto", be, 0, f & 1, f >> 1, "self", "one process");
            expect(NULL, be, 0, f & 1, f >> 1, "self", "one process");
        }
        /* launched, the full build: cuda -> nccl, the host backends -> mpi */
        expect("auto", be, 1, 1, 1, cuda ? "nccl" : "mpi", cuda ? "NCCL" : "host backend");
        expect("", be, 1, 1, 1, cuda ? "nccl" : "mpi", "auto");
        /* launched, MPI without NCCL: cuda cannot run (MPI must not get device pointers) */
        expect("auto", be, 1, 1, 0, cuda ? NULL : "mpi", cuda ? "NCCL" : "host backend");
        /* launched without MPI: nothing can join the ranks */
        expect("auto", be, 1, 0, 0, NULL, "without MPI");
        /* a named kind is taken as named (comm_init reports what the build lacks) */
        expect("self", be, 1, 1, 1, "self", "parallel.comm");
        expect("mpi", be, 1, 1, 1, "mpi", "parallel.comm");
        expect("nccl", be, 0, 0, 0, "nccl", "parallel.comm");
    }
    /* this binary's features match its build */
    comm_features f = comm_compiled();
#ifdef LOOM_HAVE_MPI
    CHECK(f.mpi == 1, "built with MPI, comm_compiled says no");
#else
    CHECK(f.mpi == 0, "built without MPI, comm_compiled says yes");
#endif
#ifdef LOOM_HAVE_NCCL
    CHECK(f.nccl == 1, "built with NCCL, comm_compiled says no");
#else
    CHECK(f.nccl == 0, "built without NCCL, comm_compiled says yes");
#endif
    if (!failures) printf("PASS: comm_choose\n");
    return failures != 0;
}
