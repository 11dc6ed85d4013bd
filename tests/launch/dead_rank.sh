#!/usr/bin/env bash
# dead_rank.sh LOOM MPIRUN...: one of 2 ranks SIGKILLs itself at step 3 of a 200-step job; the
# whole job must exit non-zero within 30 s with a message (never hang).
set -u
loom=$1; shift
src=$(cd "$(dirname "$0")/../.." && pwd)
start=$(date +%s)
out=$(LOOM_FAULT_ACTION=kill LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=3 timeout 60 "$@" -np 2 \
      -x LOOM_FAULT_ACTION -x LOOM_FAULT_RANK -x LOOM_FAULT_STEP \
      "$loom" train "$src/configs/tiny-train.json" --set train.steps=200 --set parallel.threads=1 \
      --set parallel.timeout_s=20 --out dead_rank_out --quiet 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | tail -5
if [ $rc -eq 0 ]; then echo "FAIL: job exited 0 after a rank died"; exit 1; fi
if [ $rc -eq 124 ]; then echo "FAIL: job hung (killed by timeout after 60 s)"; exit 1; fi
if [ $took -gt 30 ]; then echo "FAIL: took ${took}s to end (limit 30 s)"; exit 1; fi
echo "$out" | grep -qiE "rank 1|signal 9|killed" || { echo "FAIL: no message naming the dead rank"; exit 1; }
echo "ok: exit $rc after ${took}s"
