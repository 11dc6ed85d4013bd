/* fuzz_main.c: the libFuzzer entry of one target, chosen at compile time with
 * -DFUZZ_TARGET=config|jsonl|ckpt (bench/fuzz.sh builds all three). Must stay a thin shim: the
 * target code lives in fuzz_targets.c so the regression test replays the very same code. */
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "fuzz_targets.h"

#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

static fuzz_target_fn fuzz_fn;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_fn = fuzz_target_by_name(FUZZ_STR(FUZZ_TARGET));
    if (!fuzz_fn) abort();
    log_set_quiet(1);
    /* whatever a target prints stays off the terminal; libFuzzer reports on stderr */
    if (!freopen("/dev/null", "w", stdout)) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    return fuzz_fn(data, n);
}
