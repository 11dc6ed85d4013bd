#!/usr/bin/env bash
# train_run_folder.sh LOOM [MPIRUN...]: a new job whose run folder already holds a run (a logged
# metrics.jsonl, or a checkpoint) is refused in one line naming --resume and --overwrite, and the
# old run is left as it was; --overwrite replaces that run (its metrics, plot and checkpoints: no
# step of the old run left beside the new one) and nothing else in the folder; --resume continues
# it; --overwrite with --resume is refused. On 2 ranks the refusal is clean (no hang, no crash).
LOOM=$1; shift
MPIRUN=("$@")
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work train_run_folder
RUN=(--set train.steps=6 --set checkpoint.every=3)
train 1 A "${RUN[@]}"
sum=$(cat A/metrics.jsonl A/ckpt/latest A/ckpt/*.h5 | md5sum)
refused 1 "A already holds a run .*--resume A/ckpt.*--overwrite" train "$TINY" --out A "${BASE[@]}" "${RUN[@]}"
[ "$(cat A/metrics.jsonl A/ckpt/latest A/ckpt/*.h5 | md5sum)" = "$sum" ] || fail "a refused job changed the old run's files"
# only a metrics.jsonl (checkpoint.every=-1 saves nothing): refused too, no --resume offered
train 1 M --set train.steps=2 --set checkpoint.every=-1
refused 1 "M already holds a run .*no checkpoint.*--overwrite" train "$TINY" --out M "${BASE[@]}" --set train.steps=2
refused 1 "--overwrite starts the run afresh, --resume continues it" train "$TINY" --out A "${BASE[@]}" "${RUN[@]}" \
  --overwrite --resume A/ckpt
if [ ${#MPIRUN[@]} -gt 0 ]; then
  refused 2 "already holds a run" train "$TINY" --out A "${BASE[@]}" "${RUN[@]}"
fi
# --overwrite: a shorter run; no step of the old one left (step 6 would outrank the new step 4)
echo keep > A/notes.txt
train 1 A --set train.steps=4 --set checkpoint.every=2 --overwrite
ls A/ckpt/*.h5 | sed 's|.*/||' | tr '\n' ' ' | grep -qx 'step_00000002.h5 step_00000004.h5 ' ||
  fail "--overwrite: A/ckpt holds $(ls A/ckpt | tr '\n' ' '), want the new run's steps 2 and 4 only"
[ "$(cat A/ckpt/latest)" = step_00000004.h5 ] || fail "--overwrite: latest is '$(cat A/ckpt/latest)'"
steps=$(sed -nE 's/.*"step": *([0-9]+),.*/\1/p' A/metrics.jsonl | tr '\n' ' ')
[ "$steps" = "1 2 3 4 " ] || fail "--overwrite: metrics.jsonl holds steps '$steps', want the new run's 1..4"
[ "$(cat A/notes.txt)" = keep ] || fail "--overwrite removed a file loom did not write"
echo "ok: --overwrite replaced the run, kept A/notes.txt"
# --resume into the folder it continues is not refused; a fresh folder takes no flag
train 1 A --set train.steps=6 --set checkpoint.every=2 --resume A/ckpt
train 1 F "${RUN[@]}"
echo "ok: run folders: a second run is refused unless --resume or --overwrite"
