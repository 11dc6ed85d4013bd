#!/usr/bin/env bash
# loom_run.sh LOOM: loom-run -n 3 runs a short CPU job end to end on 3 ranks, and the mpirun line
# it prints is the one it ran (rank count, binding, root and oversubscribe flags, the command).
set -u
loom=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf loom_run_out # a run folder holds one run: start from none (ctest may run this again)
out=$("$root/launch/loom-run" -n 3 -- "$loom" train "$root/configs/tiny-train.json" \
      --set train.steps=3 --set train.batch_size=12 --out loom_run_out 2>&1)
rc=$?
echo "$out" | tail -4
[ $rc -eq 0 ] || { echo "FAIL: loom-run exited $rc"; exit 1; }
line=$(echo "$out" | grep -m1 '^loom-run: mpirun')
want="loom-run: mpirun -np 3 --bind-to none"
case "$line" in "$want"*" $loom train $root/configs/tiny-train.json --set train.steps=3"*) ;; *) echo "FAIL: printed line: $line"; exit 1 ;; esac
[ "$(id -u)" -ne 0 ] || case "$line" in *--allow-run-as-root*) ;; *) echo "FAIL: no --allow-run-as-root as root"; exit 1 ;; esac
echo "$out" | grep -q "3 ranks" || { echo "FAIL: the job did not run on 3 ranks"; exit 1; }
grep -c '"step"' loom_run_out/metrics.jsonl | grep -qx 3 || { echo "FAIL: metrics.jsonl does not hold 3 steps"; exit 1; }
"$root/launch/loom-run" -n 2 --hosts /nonexistent -- true 2>/dev/null && { echo "FAIL: a missing hostfile was accepted"; exit 1; }
echo "ok: $line"
