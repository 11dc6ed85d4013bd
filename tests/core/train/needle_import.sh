#!/usr/bin/env bash
# needle_import.sh LOOM: `loom import` of a Needle base (tests/fixtures/needle/train_base.safetensors,
# made by Needle's own code) through the binary:
#  - into a checkpoint folder and into one .h5 file; `loom export needle` of either gives the base
#    file back byte for byte;
#  - a fine-tune with finetune.base the import logs the losses of the one on the file, as printed,
#    and merges (`export needle --merge`) to the same bytes; a checkpoint trained on the file
#    evaluates on the import (the same base digest) to the same validation loss;
#  - a truncated file, a safetensors file that is not Needle's, a Needle 2 config: one error line
#    naming the file, a non-zero exit, and no checkpoint, folder or .h5 left behind.
# (Every dtype, mtp_ tensors, rungs and lying checkpoints: tests/checkpoints/test_needle_import.c.)
# Never writes outside its work folder.
LOOM=$1
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work needle_import
FIX=$SRC/tests/fixtures/needle
BASE=$FIX/train_base.safetensors
JOB=$SRC/configs/needle-finetune.json

"$LOOM" import "$BASE" imp > imp.log 2>&1 && [ -f imp/latest ] || { cat imp.log; fail "import into a folder"; }
"$LOOM" import "$BASE" sub/one.h5 > one.log 2>&1 && [ -f sub/one.h5 ] && [ ! -e sub/one.h5.d ] ||
    { cat one.log; fail "import into one .h5 file"; }
"$LOOM" export needle imp back.safetensors > /dev/null 2>&1 || fail "export needle of the import"
"$LOOM" export needle sub/one.h5 back1.safetensors --merge > /dev/null 2>&1 || fail "export needle --merge of the .h5 import"
cmp "$BASE" back.safetensors && cmp "$BASE" back1.safetensors || fail "the exported base is not the file imported"
echo "ok: imported (folder and .h5), exported back: the base file byte for byte"

# one epoch (7 steps) from the file and from the import
FT=(--set data.train=$FIX/needle_rows.jsonl --set model.tokenizer=$FIX/needle.model --set train.batch_size=4
    --set finetune.lora_rank=4 --set finetune.lora_alpha=8 --set train.lr=1e-2 --set finetune.epochs=1
    --set data.val_split=0.2 --set parallel.threads=1 --set finetune.eval_base=false --set checkpoint.every=0)
ft() { timeout "$RUN_TIMEOUT" "$LOOM" finetune "$JOB" --out "$1" "${FT[@]}" --set finetune.base="$2" > "$1.log" 2>&1; }
ft F "$BASE" || { tail F.log; fail "fine-tune from the file"; }
ft I imp || { tail I.log; fail "fine-tune from the import"; }
printed() { sed -E 's/, "(tokens_per_s|mfu|step_s|elapsed_s)": [^,}]*//g' "$1"; }
[ "$(grep -c '"loss"' F/metrics.jsonl)" -ge 2 ] && [ "$(printed F/metrics.jsonl)" = "$(printed I/metrics.jsonl)" ] ||
    { diff <(printed F/metrics.jsonl) <(printed I/metrics.jsonl); fail "the fine-tune from the import logs other losses"; }
"$LOOM" export needle F/ckpt F.safetensors --merge > /dev/null 2>&1 &&
    "$LOOM" export needle I/ckpt I.safetensors --merge > /dev/null 2>&1 || fail "export needle --merge of F and I"
cmp F.safetensors I.safetensors || fail "merged from the import: not the bytes merged from the file"
ev() { "$LOOM" eval "$JOB" "${FT[@]}" --set finetune.base="$1" --ckpt F/ckpt --quiet 2>&1 | sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p'; }
vf=$(ev "$BASE") && vi=$(ev imp) && [ -n "$vf" ] && [ "$vf" = "$vi" ] || fail "F's checkpoint on the import: val loss '$vi', on the file '$vf'"
echo "ok: the import fine-tunes as the file (losses as printed, the merged base), F evaluates on it ($vf)"

# refusals: one line naming the file, no output left
head -c 100000 "$BASE" > truncated.safetensors
LC_ALL=C sed 's/qk_head_dim\\": 48/attn_dim\\":    48/' "$BASE" > needle2.safetensors # same length: a valid file
cmp -s "$BASE" needle2.safetensors && fail "the Needle 2 variant was not made"
for c in "truncated.safetensors|truncated" "$SRC/tests/fixtures/hf/llama/model.safetensors|format_version" \
         "needle2.safetensors|Needle 2"; do
    in=${c%%|*} want=${c#*|}
    for out in out_dir out.h5; do
        "$LOOM" import "$in" "$out" > bad.out 2> bad.err
        rc=$?
        [ $rc -ne 0 ] && [ "$(grep -c . bad.err)" -eq 1 ] && grep -q "$want" bad.err && grep -q "$(basename "$in")" bad.err ||
            { cat bad.err; fail "import $in $out: exit $rc, want one error line naming the file and '$want'"; }
        [ ! -e out_dir ] && [ ! -e out.h5 ] && [ ! -e out.h5.d ] || fail "import $in $out left output: $(ls -d out*)"
    done
done
echo "ok: a truncated file, a non-Needle safetensors, a Needle 2 config: one line each, nothing left"
