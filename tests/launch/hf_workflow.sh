#!/usr/bin/env bash
# hf_workflow.sh LOOM REPO TMP [MPIRUN...]: the Hugging Face workflow of docs/hf.md, its lines run as
# written (extracted between the hf-workflow markers) on the qwen2-chat fixture in place of the
# downloaded model, on OpenAI-style chats (tools, tool calls, tool results, several turns): LoRA and
# full fine-tunes whose loss falls, 2 ranks ZeRO-2 resumed on 1, evaluation, PEFT / merged / bf16
# exports, and export -> import -> export bitwise. The rows are the shipped configs/data/chats.jsonl.
# Given MPIRUN (MPI is built), the loom-run line runs through the real launch/loom-run (which builds
# its own mpirun line: as root with --allow-run-as-root); without, on 1 rank.
set -euo pipefail
loom=$1 repo=$2 tmp=$3
shift 3
fix=$repo/tests/fixtures/hf/qwen2-chat
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$tmp" && mkdir -p "$tmp/models" && cd "$tmp"
ln -s "$repo/configs" configs
ln -s "$fix" models/qwen2.5-0.5b
# the doc's commands, continuation lines joined, comments dropped; README.md may carry the same
# block between the same markers (it must then be the same commands)
block() { sed -n '/<!-- hf-workflow: begin/,/<!-- hf-workflow: end/p' "$1" |
          sed -e '/^```/d' -e '/^<!--/d' -e '/^#/d' -e '/^ *$/d' | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta'; }
cmds=$(block "$repo/docs/hf.md")
if grep -q '<!-- hf-workflow: begin' "$repo/README.md"; then
    [ "$(block "$repo/README.md")" = "$cmds" ] || fail "README.md's hf-workflow block differs from docs/hf.md's"
fi
[ "$(grep -c '^loom \|^loom-run ' <<<"$cmds")" -ge 7 ] || fail "docs/hf.md: the workflow block is missing or shorter than 7 commands"
grep -q '^huggingface-cli download .* --local-dir models/qwen2.5-0.5b$' <<<"$cmds" || fail "docs/hf.md: no download line"

# the rows are the shipped configs/data/chats.jsonl (hf-finetune.json's data.train): the tokenizer
# fixture's five conversations twice and 24 multi-turn ones (tools, tool calls, tool results)
[ "$(wc -l <"$repo/configs/data/chats.jsonl")" -ge 20 ] || fail "configs/data/chats.jsonl missing or short"

# the doc's lines, with the test's knobs: a learning rate for a 2-layer random model, 1 thread a rank
extra=(--set train.lr=3e-3 --set parallel.threads=1)
n=0
while IFS= read -r line; do
    n=$((n + 1))
    case $line in
    huggingface-cli*) continue ;;
    loom-run\ -n\ *\ --\ loom\ *)
        np=$(sed 's/^loom-run -n \([0-9]*\) .*/\1/' <<<"$line")
        rest=${line#loom-run -n $np -- loom }
        # the real launch/loom-run (it finds this build's loom on PATH); without MPI, one rank
        if [ $# -gt 0 ]; then cmd=(env PATH="$(dirname "$loom"):$PATH" "$repo/launch/loom-run" -n "$np" -- loom); else cmd=("$loom"); fi ;;
    loom\ *) rest=${line#loom }; cmd=("$loom") ;;
    *) fail "docs/hf.md: line $n is neither loom nor loom-run: $line" ;;
    esac
    read -r -a args <<<"$rest"
    case ${args[0]} in finetune | eval | train) args+=("${extra[@]}") ;; esac
    echo "+ ${line:0:150}" >>log.txt
    timeout 300 "${cmd[@]}" "${args[@]}" </dev/null >>log.txt 2>&1 || { tail -8 log.txt; fail "$line"; }
done <<<"$cmds"

# the LoRA and the full fine-tune train: the last step's loss at least 5% below the first's (the
# full one across its 2-rank epoch and its resumed one, as logged between these markers)
falls() { # falls WHAT FROM_MARK TO_MARK
    local l first last
    l=$(awk -v a="$2" -v b="$3" 'index($0, a) == 1 { on = 1 } on && index($0, b) == 1 { exit } on' log.txt |
        grep '^step [0-9]*/[0-9]* | loss' | sed 's/.*| loss \([0-9.]*\) |.*/\1/')
    first=$(head -1 <<<"$l") last=$(tail -1 <<<"$l")
    [ -n "$first" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.95 * a) }' ||
        fail "$1: loss '$first' -> '$last' did not fall by 5%"
    echo "ok: $1: loss $first -> $last over $(wc -l <<<"$l") steps"
}
falls "LoRA fine-tune" "+ loom finetune" "+ loom-run"
falls "full fine-tune (2 ranks, then resumed on 1)" "+ loom-run" "+ loom eval"
# loom-run said what it ran (as root: --allow-run-as-root, which a bare mpirun line lacked)
if [ $# -gt 0 ]; then
    grep -q "^loom-run: mpirun -np 2 --bind-to none$([ "$(id -u)" -ne 0 ] || echo ' --allow-run-as-root')" log.txt ||
        fail "loom-run did not print its mpirun line: $(grep -m1 'loom-run' log.txt)"
fi
# the folder's tokenizer and chat template render the rows: the longest (chat.jsonl's fifth, its
# numbers as tojson prints them) is the 825 ids transformers' apply_chat_template gives it
# (tests/fixtures/tokenizers/chat_qwen2.5.jsonl)
grep -q "tokenizer models/qwen2.5-0.5b" log.txt && grep -q "longest 825," log.txt ||
    fail "the rows were not rendered with the folder's tokenizer and Qwen2.5 template"
grep -q "resumed from runs/qwen-full/ckpt.* (saved by $([ $# -gt 0 ] && echo "2 ranks" || echo "1 rank"), ZeRO 2" log.txt ||
    fail "no resume of the 2-rank ZeRO-2 checkpoint on 1 rank"
[ "$(grep -c 'tool-call accuracy (exact match, held-out)' log.txt)" -ge 3 ] || fail "evaluation lines missing"
grep -q 'val loss' log.txt || fail "no validation loss"
echo "ok: $(grep 'tool-call accuracy' log.txt | tail -1)"

# exports: the tokenizer and its chat template travel; PEFT names; export -> import -> export bitwise
for d in out/qwen-merged out/qwen-full; do
    [ -f $d/model.safetensors ] && [ -f $d/config.json ] && grep -q chat_template $d/tokenizer_config.json ||
        fail "$d: model, config or tokenizer files missing"
done
grep -q '"down_proj"' out/qwen-lora/adapter_config.json && grep -q 'base_model.model.model.layers.1.mlp.down_proj.lora_B.weight' \
    out/qwen-lora/adapter_model.safetensors || fail "out/qwen-lora: PEFT config or names"
grep -q '"bfloat16"' out/qwen-full/config.json || fail "out/qwen-full: not bf16"
"$loom" export hf runs/qwen-full/ckpt out/f32 >>log.txt 2>&1 || fail "export f32"
for x in f32:f32 qwen-full:bf16 qwen-merged:f32; do
    d=${x%%:*} t=${x#*:}
    "$loom" import out/$d back/$d >>log.txt 2>&1 && "$loom" export hf back/$d again/$d --dtype $t >>log.txt 2>&1 ||
        fail "re-import / re-export of out/$d"
    cmp -s out/$d/model.safetensors again/$d/model.safetensors || fail "out/$d: export -> import -> export is not bitwise"
done
echo "ok: exports carry the tokenizer; export -> import -> export bitwise (f32, bf16, merged)"
