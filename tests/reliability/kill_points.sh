#!/usr/bin/env bash
# kill_points.sh LOOM CKPT_SCAN MPIRUN... : SIGKILL a 2-rank job at N seeded random points
# (KILL_SEED, KILL_POINTS; defaults 1 and 20): the checkpoint writer (rank 0) at one of the save
# phases of checkpoints/ckpt_write.c, or rank 0, rank 1 or every rank at the start of a step.
# After each kill: `loom ckpt info` on `latest` succeeds at the last complete save, no NaN, and a
# resume finishes the job with a final checkpoint identical to an uninterrupted run.
source "$(dirname "$0")/common.sh" || { echo "FAIL: cannot read $(dirname "$0")/common.sh"; exit 1; }
seed=${KILL_SEED:-1}
points=${KILL_POINTS:-20}
workdir kill_points
STEPS=8
RUN=(--set train.steps=$STEPS --set checkpoint.every=2)

# The reference: every checkpoint kept, to seed the runs that die in a later save.
LOG=ref.log
loom_np 2 --out ref "${RUN[@]}" --set checkpoint.keep=10 || { show; fail "reference run failed"; }
want=$(digest_of ref/ckpt/step_0000000$STEPS.h5) || fail "reference checkpoint unreadable"

phases=(after_data before_rename before_latest before_rotate step step)
ranks=(0 1 all)
RANDOM=$seed
for ((i = 1; i <= points; i++)); do
    phase=${phases[RANDOM % ${#phases[@]}]}
    keep=$((1 + RANDOM % 2))
    d=p$i
    mkdir -p $d/ckpt
    resume=()
    unset LOOM_FAULT_ACTION LOOM_FAULT_RANK LOOM_FAULT_STEP LOOM_FAULT_CKPT_PHASE
    if [ "$phase" = step ]; then
        rank=${ranks[RANDOM % 3]}
        step=$((3 + RANDOM % (STEPS - 2)))  # 3..8: at least one save (step 2) is done
        expect=$(( (step - 1) / 2 * 2 ))
        export LOOM_FAULT_ACTION=kill LOOM_FAULT_RANK=$rank LOOM_FAULT_STEP=$step
        what="kill rank $rank at the start of step $step (keep $keep)"
    else
        # the save of step `save` dies: resume from a copy of the save before it, so that the
        # first save the job reaches is the one that is killed (the hook fires at the first)
        rank=0
        save=$((4 + 2 * (RANDOM % 3)))     # 4, 6 or 8 (8 = the final save)
        expect=$((save - 2))
        prev=$(printf 'step_%08d.h5' $expect)
        cp ref/ckpt/$prev $d/ckpt/ && echo "$prev" >$d/ckpt/latest
        [ $keep -eq 2 ] && [ $expect -gt 2 ] && cp ref/ckpt/$(printf 'step_%08d.h5' $((expect - 2))) $d/ckpt/
        resume=(--resume $d/ckpt)
        export LOOM_FAULT_CKPT_PHASE=$phase
        what="kill the writer (rank 0) at $phase of the step-$save save (keep $keep)"
    fi
    LOG=$d/kill.log
    loom_np 2 --out $d "${RUN[@]}" --set checkpoint.keep=$keep "${resume[@]}"
    rc=$?
    unset LOOM_FAULT_ACTION LOOM_FAULT_RANK LOOM_FAULT_STEP LOOM_FAULT_CKPT_PHASE
    [ $rc -ne 0 ] || { show; fail "point $i ($what): the job exited 0"; }
    [ $rc -ne 124 ] || { show; fail "point $i ($what): the job hung (120 s guard)"; }
    got=$(latest_step $d/ckpt) || fail "point $i ($what): ckpt info on latest failed"
    # `latest` may only be on the last save before the kill, or (killed after the pointer moved)
    # on the save that was being made
    [ "$got" = "$expect" ] || { [ "$phase" = before_rotate ] && [ "$got" = "$save" ]; } ||
        fail "point $i ($what): latest is step $got, want $expect"
    "$SCAN" $d/ckpt >/dev/null || fail "point $i ($what): a checkpoint file is unreadable or has NaN"
    LOG=$d/resume.log
    loom_np 2 --out $d --resume $d/ckpt "${RUN[@]}" --set checkpoint.keep=$keep ||
        { show; fail "point $i ($what): resume from step $got failed"; }
    grep -q "resumed from .* at step $got" "$LOG" || { show; fail "point $i: resume did not start at step $got"; }
    fin=$(digest_of $d/ckpt/step_0000000$STEPS.h5) || fail "point $i: final checkpoint unreadable"
    [ "$fin" = "$want" ] || fail "point $i ($what): final checkpoint differs from the uninterrupted run"
    ls $d/ckpt/.*.tmp >/dev/null 2>&1 && fail "point $i ($what): a temp file is left after the resumed run"
    echo "ok $i: $what -> latest step $got, resumed to $STEPS, identical"
done
echo "ok: $points kill points (seed $seed)"
