#!/usr/bin/env bash
# train_resume_metrics.sh LOOM: a --resume appends to the run's metrics.jsonl and loss.svg shows the
# whole run. B saves at step K and dies at step K+2, so its log holds step K+1, after the checkpoint;
# the resume runs K+1 again: metrics.jsonl holds steps 1..N once each, with the uninterrupted run's
# losses, elapsed_s grows through the resume, and the plot has one train point per step.
LOOM=$1; shift
CMP=
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work train_resume_metrics
N=12 K=4
train 1 A --set train.steps=$N --set checkpoint.every=0
LOOM_FAULT_ACTION=exit LOOM_FAULT_STEP=$((K + 2)) loom_np 1 train "$TINY" --out B "${BASE[@]}" --set train.steps=$N \
  --set checkpoint.every=$K > B.log 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { tail B.log; fail "B: exit $rc, want the injected failure at step $((K + 2))"; }
steps() { sed -nE 's/.*"step": *([0-9]+),.*/\1/p' "$1" | tr '\n' ' '; }
[ "$(steps B/metrics.jsonl)" = "$(seq -s ' ' 1 $((K + 1))) " ] || fail "B: logged steps '$(steps B/metrics.jsonl)', want 1..$((K + 1))"
train 1 B --set train.steps=$N --set checkpoint.every=$K --resume B/ckpt
[ "$(steps B/metrics.jsonl)" = "$(seq -s ' ' 1 $N) " ] ||
  fail "resumed: metrics.jsonl holds steps '$(steps B/metrics.jsonl)', want 1..$N once each"
same_losses A/metrics.jsonl B/metrics.jsonl 1 $N
sed -nE 's/.*"elapsed_s": *([0-9.]+).*/\1/p' B/metrics.jsonl | awk 'NR > 1 && $1 < prev {bad = 1} {prev = $1} END {exit bad}' ||
  fail "resumed: elapsed_s does not grow through the resume: $(sed -nE 's/.*"elapsed_s": *([0-9.]+).*/\1/p' B/metrics.jsonl | tr '\n' ' ')"
n=$(grep -c 'class="train-point"' B/loss.svg)
[ "$n" -eq $N ] || fail "resumed: loss.svg has $n train points, want $N (the whole run)"
grep -q '<title>step 1: ' B/loss.svg || fail "resumed: loss.svg does not start at step 1"
echo "ok: --resume appended: steps 1..$N once each, $n points in loss.svg"
