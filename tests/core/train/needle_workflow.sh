#!/usr/bin/env bash
# needle_workflow.sh LOOM [MPIRUN...]: the Needle workflow of docs/needle.md section 11, its lines run
# as written (extracted between the needle-workflow markers) on the fixture base made by Needle's own
# code (tests/fixtures/needle/train_base.safetensors, 3 layers) in place of a downloaded Needle
# checkpoint, with Needle's rows and tokenizer. The test's knobs: one epoch at a small model's
# learning rate, one thread a rank; the 4-rank run is interrupted after its step 2 (its checkpoint)
# so the resume line resumes it; the rung of 8 layers becomes the fixture's rung of 2. Without
# MPIRUN the mpirun line runs on 1 rank. Checks each command's result: the checkpoints, the resume,
# the plan, the evaluation lines, the exported adapter and merged base (which loom then evaluates), the imported
# base given back as its file.
LOOM=$1; shift
MPIRUN=("$@")
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work needle_workflow
FIX=$SRC/tests/fixtures/needle
ln -s "$SRC/configs" configs
ln -s "$FIX/train_base.safetensors" needle_base.safetensors
ln -s "$FIX/needle_rows.jsonl" data.jsonl
ln -s "$FIX/needle.model" tokenizer.model
# the doc's commands, continuation lines joined, comments dropped
cmds=$(sed -n '/<!-- needle-workflow: begin/,/<!-- needle-workflow: end/p' "$SRC/docs/needle.md" |
       sed -e '/^```/d' -e '/^<!--/d' -e '/^#/d' -e '/^ *$/d' | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta')
[ "$(grep -c '^loom \|^mpirun ' <<<"$cmds")" -ge 9 ] || fail "docs/needle.md: the workflow block is missing or shorter than 9 commands"
extra=(--set finetune.epochs=1 --set train.lr=1e-2 --set parallel.threads=1 --set train.batch_size=4)
n=0
while IFS= read -r line; do
    n=$((n + 1))
    line=${line//model.layers=8/model.layers=2}
    fault=()
    case $line in
    mpirun\ -np\ *\ loom\ *)
        np=$(sed 's/^mpirun -np \([0-9]*\) .*/\1/' <<<"$line")
        rest=${line#mpirun -np $np loom }
        fault=(LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=3)
        [ ${#MPIRUN[@]} -gt 0 ] || np=1 ;;
    loom\ *) rest=${line#loom }; np=1 ;;
    *) fail "docs/needle.md: line $n is neither loom nor mpirun: $line" ;;
    esac
    eval "args=($rest)" # the doc's own quoting (a query, a JSON tools list)
    case ${args[0]} in finetune | eval | plan) args+=("${extra[@]}") ;; esac
    [ ${#fault[@]} -gt 0 ] && args+=(--set checkpoint.every=2)
    echo "+ ${line:0:160}" >>log.txt
    ( [ ${#fault[@]} -eq 0 ] || export "${fault[@]}"; loom_np "$np" "${args[@]}" ) </dev/null >>log.txt 2>&1
    rc=$?
    if [ ${#fault[@]} -gt 0 ]; then
        [ $rc -ne 0 ] && [ "$(cat runs/needle-4/ckpt/latest 2>/dev/null)" = step_00000002.h5 ] ||
            { tail -8 log.txt; fail "$line: want the run stopped after its checkpoint at step 2"; }
    else
        [ $rc -eq 0 ] || { tail -8 log.txt; fail "$line"; }
    fi
done <<<"$cmds"

grep -qE "^fits: yes" log.txt && grep -qE "^activations +[0-9.]+ [KMG]iB" log.txt || fail "loom plan: no parts or fit line"
grep -q "^resumed runs/needle-4/ckpt/step_00000002.h5: step 2 of" log.txt || fail "the resume line did not resume the interrupted run"
steps=$(sed -nE 's/.* ([0-9]+) steps per epoch.*/\1/p' log.txt | head -1)
[ "$(cat runs/needle-4/ckpt/latest)" = "$(printf 'step_%08d.h5' "$steps")" ] || fail "the resumed run did not end at step $steps"
[ "$(grep -c "| val loss [0-9.]* |" log.txt)" -ge 1 ] && grep -q "Needle's exact-call" log.txt || fail "loom eval: no loss or accuracy lines"
grep -q "^+ loom sample" log.txt && [ "$(sed -n '/^+ loom sample/,/^+ /p' log.txt | grep -c '^loaded runs/needle-finetune')" -eq 1 ] ||
    fail "loom sample did not load the checkpoint"
grep -a -q '"rank":"16"' needle_lora.safetensors && grep -a -q 'lora/stack/layers/block/self_attn/q_proj/kernel/A' needle_lora.safetensors ||
    fail "needle_lora.safetensors: not Needle's adapter (rank 16, lora/<path>/A)"
grep -a -q 'num_layers\\": 2' needle_rung8.safetensors || fail "needle_rung8.safetensors: not the rung's base"
cmp -s needle_base.safetensors needle_base_again.safetensors || fail "needle_base_again.safetensors: not the imported base's file"
for f in needle_merged needle_rung8; do # each merged base is a Needle base loom evaluates
    "$LOOM" eval configs/needle-finetune.json --set finetune.base=$f.safetensors --set data.train=data.jsonl \
        --set model.tokenizer=tokenizer.model "${extra[@]}" --quiet > $f.eval 2>&1 || { cat $f.eval; fail "loom eval of $f"; }
done
echo "ok: $(grep -c '^+ ' log.txt) commands of docs/needle.md ran on the fixture base"
echo "PASS"
