#!/usr/bin/env bash
# dead_rank.sh LOOM MPIRUN...: one of 2 ranks SIGKILLs itself at step 3 of a 200-step job; the
# whole job must end by itself, non-zero, with a message naming the dead rank, and without having
# run on (no step past the death logged). Never a hang: a 150 s guard (7x the 20 s collective
# timeout that bounds the survivor's wait) turns one into a failure; no tighter wall-clock limit,
# so a loaded machine cannot fail it.
set -u
loom=$1; shift
src=$(cd "$(dirname "$0")/../.." && pwd)
start=$(date +%s)
rm -rf dead_rank_out
out=$(LOOM_FAULT_ACTION=kill LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=3 timeout -k 10 150 "$@" -np 2 \
      -x LOOM_FAULT_ACTION -x LOOM_FAULT_RANK -x LOOM_FAULT_STEP \
      "$loom" train "$src/configs/tiny-train.json" --set train.steps=200 --set parallel.threads=1 \
      --set parallel.timeout_s=20 --out dead_rank_out 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | tail -5
if [ $rc -eq 0 ]; then echo "FAIL: job exited 0 after a rank died"; exit 1; fi
if [ $rc -eq 124 ] || [ $took -ge 150 ]; then echo "FAIL: job hung (killed by the 150 s guard)"; exit 1; fi
echo "$out" | grep -qiE "rank 1|signal 9|killed" || { echo "FAIL: no message naming the dead rank"; exit 1; }
steps=$(grep -c '"step"' dead_rank_out/metrics.jsonl 2>/dev/null || echo 0)
if [ "$steps" -gt 3 ]; then echo "FAIL: $steps steps logged after rank 1 died at step 3"; exit 1; fi
echo "ok: exit $rc after ${took}s, $steps steps logged"
