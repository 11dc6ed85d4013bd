#!/usr/bin/env bash
# reshard.sh LOOM CKPT_COMPARE ZERO_STAGE N CONTINUE MPIRUN...: a checkpoint saved on N ranks with
# ZeRO stage S loads on M = 1..4 ranks. Never edits anything outside its work folder.
#  (a) consolidated after load equals saved, bitwise: resume the final checkpoint on M ranks at its
#      own step (0 steps), save again, compare all three groups and the state: every M.
#  (b) continuing: resume the mid-run checkpoint (step 2) on M ranks, run steps 3..4; losses match
#      the uninterrupted N-rank run within rtol 1e-4 (identical when M == N). CONTINUE = "all" runs
#      it for every M; "subset" for M = N and M = N % 4 + 1 only (over the 4 values of N, every M is
#      still met once with M != N), to keep the suite near 90 s on 2 cores.
#  Cross-stage: one M (M = (N + 1) % 4 + 1) also loads with another stage X (3 <-> 0 for N <= 2,
#  else 1 or 2), (a) and (b).
LOOM=$1 CMP=$2 S=$3 N=$4 CONTINUE=$5; shift 5
MPIRUN=("$@")
source "$(dirname "$0")/resume_lib.sh" || { echo "FAIL: cannot read $(dirname "$0")/resume_lib.sh"; exit 1; }
work "reshard_z${S}_np${N}"
RTOL=1e-4

# the N-rank run: saves at 2 (mid-run) and 4 (final); its metrics are the uninterrupted reference
train "$N" ref --set train.steps=4 --set checkpoint.every=2 --set parallel.zero_stage="$S"
MID=ref/ckpt/step_00000002.h5 FINAL=ref/ckpt/step_00000004.h5
[ -f $MID ] && [ -f $FINAL ] || fail "ref: want step 2 and 4 checkpoints, have: $(ls ref/ckpt)"

# check_m M X: (a) and, if asked, (b) on M ranks with ZeRO stage X.
check_m()
{
    local m=$1 x=$2 want_b=$3 tag="np${1}_z${2}"
    train "$m" "a_$tag" --set train.steps=4 --set parallel.zero_stage="$x" --resume $FINAL
    [ ! -s "a_$tag/metrics.jsonl" ] || fail "a_$tag: a resume at the final step ran steps"
    echo "(a) saved np $N ZeRO $S -> loaded np $m ZeRO $x -> saved again:"
    same_ckpt $FINAL "$(latest "a_$tag")"
    [ "$want_b" = 1 ] || return 0
    train "$m" "b_$tag" --set train.steps=4 --set parallel.zero_stage="$x" --resume $MID
    echo "(b) np $N ZeRO $S step 2 -> np $m ZeRO $x steps 3..4:"
    if [ "$m" = "$N" ] && [ "$x" = "$S" ]; then
        same_losses ref/metrics.jsonl "b_$tag/metrics.jsonl" 3 4
        same_ckpt $FINAL "$(latest "b_$tag")"
    else
        close_losses ref/metrics.jsonl "b_$tag/metrics.jsonl" 3 4 $RTOL
    fi
}

for M in 1 2 3 4; do
    b=0
    if [ "$CONTINUE" = all ] || [ "$M" = "$N" ] || [ "$M" = $((N % 4 + 1)) ]; then b=1; fi
    check_m "$M" "$S" $b
done
if [ "$S" = 0 ]; then X=(3 3 1 2); else X=(0 0 2 1); fi
check_m $(((N + 1) % 4 + 1)) "${X[$((N - 1))]}" 1
echo "ok: ZeRO $S saved on $N ranks loads on 1..4 ranks"
