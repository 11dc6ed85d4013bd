#!/bin/sh
# run_expect.sh WANT CMD...: runs CMD under `timeout 60` and passes only if it exits with WANT
# ("nonzero" = any failure code except 124, which is what a job hung until the guard gets).
# It must never turn a hang into a pass. Exit 77 (the test cannot run here) is passed on: a skip.
want=$1
shift
timeout 60 "$@"
rc=$?
if [ "$rc" = 77 ]; then
    echo "SKIP: the job says it cannot run here (exit 77)"
    exit 77
fi
if [ "$want" = nonzero ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
    echo "PASS: job exited $rc (non-zero, not hung)"
    exit 0
fi
if [ "$rc" = "$want" ]; then
    echo "PASS: job exited $rc as wanted"
    exit 0
fi
echo "FAIL: job exited $rc, wanted $want (124 = still running at the 60 s guard)"
exit 1
