#!/usr/bin/env bash
# train_interrupt.sh LOOM CKPT_COMPARE [MPIRUN...]: SIGTERM / SIGINT during `loom train` (raised
# inside the job at step K by LOOM_FAULT_ACTION=sigterm|sigint, so nothing depends on timing): the
# job ends the step, saves (whatever checkpoint.every says), prints one line with the exact
# `--resume` command and exits 128 + the signal; running that command finishes the run bitwise
# equal to an uninterrupted one. On 2 ranks the signal reaches rank 1 only and both ranks stop at
# step K. A second signal aborts at once, no save, the previous checkpoint whole. The same for the
# fine-tune loop of a Needle base (its own loop, core/train/finetune_needle.c), 1 rank.
LOOM=$1 CMP=$2; shift 2
MPIRUN=("$@")
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work train_interrupt
N=12 K=5
RUN=(--set train.steps=$N --set checkpoint.every=0)

# stopped NP OUT SIG CODE ARGS...: the run OUT (loom ARGS --out OUT) stopped by SIG at step K: exit
# CODE, one line naming the signal and step with the resume command; the checkpoint at step K;
# that command run on NP ranks finishes the run.
stopped()
{
  local np=$1 out=$2 sig=$3 code=$4 rc line cmd; shift 4
  loom_np "$np" "$@" --out "$out" > "$out.log" 2>&1
  rc=$?
  [ $rc -eq "$code" ] || { tail "$out.log"; fail "$out: exit $rc, want $code (128 + $sig)"; }
  [ "$(grep -c 'loom: stopped by' "$out.log")" -eq 1 ] || { cat "$out.log"; fail "$out: want one 'stopped by' line"; }
  line=$(grep 'loom: stopped by' "$out.log")
  echo "$line" | grep -q "stopped by $sig after step $K of $N, checkpoint saved; resume with.*: .* --resume $out/ckpt\$" ||
    fail "$out: the line does not say $sig, step $K of $N and the resume command: $line"
  [ "$(cat "$out/ckpt/latest")" = "$(printf 'step_%08d.h5' $K)" ] || fail "$out: latest is '$(cat "$out/ckpt/latest")', want step $K"
  [ "$(grep -c '"loss"' "$out/metrics.jsonl")" -eq $K ] || fail "$out: $(grep -c '"loss"' "$out/metrics.jsonl") steps logged, want $K"
  cmd=$(echo "$line" | sed 's/.*resume with[^:]*: //')
  eval "set -- $cmd"
  [ "$1" = "$LOOM" ] || fail "$out: the resume command starts '$1', not the loom binary"
  shift
  loom_np "$np" "$@" > "$out.resume.log" 2>&1 || { tail "$out.resume.log"; fail "$out: the printed resume command failed: $cmd"; }
  echo "ok: $out stopped by $sig at step $K (exit $rc), resumed by the printed command"
}

# 1 rank: SIGTERM at K (checkpoint.every=0: no save would be due), resumed == uninterrupted
loom_np 1 train "$TINY" --out A "${BASE[@]}" "${RUN[@]}" > A.log 2>&1 || { tail A.log; fail "A"; }
TRAIN=(train "$TINY" "${BASE[@]}" "${RUN[@]}")
LOOM_FAULT_ACTION=sigterm LOOM_FAULT_STEP=$K stopped 1 B SIGTERM 143 "${TRAIN[@]}"
same_ckpt "$(latest A)" "$(latest B)"
same_losses A/metrics.jsonl B/metrics.jsonl 1 $N
# SIGINT (Ctrl-C) at K, between two periodic saves: 130, saved at K all the same
LOOM_FAULT_ACTION=sigint LOOM_FAULT_STEP=$K stopped 1 C SIGINT 130 "${TRAIN[@]}" --set checkpoint.every=4
same_ckpt "$(latest A)" "$(latest C)"

# a second signal: ends the process by that signal at once, no save, the step-4 checkpoint whole
LOOM_FAULT_ACTION=sigterm LOOM_FAULT_STEP=$K LOOM_FAULT_COUNT=2 \
  loom_np 1 train "$TINY" --out D "${BASE[@]}" "${RUN[@]}" --set checkpoint.every=4 > D.log 2>&1
rc=$?
[ $rc -eq 143 ] || { tail D.log; fail "D: exit $rc, want 143 (ended by SIGTERM)"; }
grep -q "second signal: aborting now" D.log || { tail D.log; fail "D: no 'second signal' line"; }
! grep -q "loom: stopped by" D.log || fail "D: a second signal must not wait for the save"
[ "$(cat D/ckpt/latest)" = "$(printf 'step_%08d.h5' 4)" ] || fail "D: latest is '$(cat D/ckpt/latest)', want step 4"
"$LOOM" ckpt info D/ckpt > D.info 2>&1 || { cat D.info; fail "D: the step-4 checkpoint is not whole"; }
echo "ok: a second signal aborts at once (exit $rc), the previous checkpoint whole"

if [ ${#MPIRUN[@]} -gt 0 ]; then
  # 2 ranks, the signal on rank 1 only: rank 0 learns it through the step's all-reduce
  loom_np 2 train "$TINY" --out A2 "${BASE[@]}" "${RUN[@]}" > A2.log 2>&1 || { tail A2.log; fail "A2"; }
  LOOM_FAULT_ACTION=sigterm LOOM_FAULT_RANK=1 LOOM_FAULT_STEP=$K stopped 2 B2 SIGTERM 143 "${TRAIN[@]}"
  grep -q '^\[rank 0\] loom: stopped by' B2.log || fail "B2: rank 0 (not signalled) did not report the stop"
  same_ckpt "$(latest A2)" "$(latest B2)"
  same_losses A2/metrics.jsonl B2/metrics.jsonl 1 $N
fi

# a Needle base's fine-tune (tests/fixtures/needle, as needle_base_finetune.sh): 2 epochs of 6 steps
FIX=$SRC/tests/fixtures/needle
NFT=(finetune "$SRC/configs/needle-finetune.json" --set finetune.base=$FIX/train_base.safetensors
     --set data.train=$FIX/needle_rows.jsonl --set model.tokenizer=$FIX/needle.model --set train.batch_size=4
     --set finetune.lora_rank=4 --set finetune.lora_alpha=8 --set finetune.epochs=2 --set data.val_split=0.2
     --set parallel.threads=1 --set checkpoint.every=0 --quiet)
loom_np 1 "${NFT[@]}" --out NA > NA.log 2>&1 || { tail NA.log; fail "NA"; }
N=$(sed -nE 's/.*"step": *([0-9]+),.*"loss".*/\1/p' NA/metrics.jsonl | tail -1) K=3
LOOM_FAULT_ACTION=sigterm LOOM_FAULT_STEP=$K stopped 1 NB SIGTERM 143 "${NFT[@]}"
same_losses NA/metrics.jsonl NB/metrics.jsonl 1 "$N"
vals() { sed -n 's/.*"step": \([0-9]*\), "val_loss": \([-0-9.eE+]*\).*/\1 \2/p' "$1" | tr '\n' ' '; }
[ -n "$(vals NA/metrics.jsonl)" ] && [ "$(vals NA/metrics.jsonl)" = "$(vals NB/metrics.jsonl)" ] ||
  fail "Needle fine-tune: validation lines '$(vals NA/metrics.jsonl)' vs resumed '$(vals NB/metrics.jsonl)'"
"$LOOM" export needle NA/ckpt NA.safetensors > /dev/null 2>&1 || fail "export NA"
"$LOOM" export needle NB/ckpt NB.safetensors > /dev/null 2>&1 || fail "export NB"
cmp NA.safetensors NB.safetensors || fail "Needle fine-tune: the resumed adapters differ from the uninterrupted run's"
echo "ok: interrupted + resumed == uninterrupted, bitwise (train, 1 and 2 ranks; Needle fine-tune)"
