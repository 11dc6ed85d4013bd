#!/usr/bin/env bash
# hf_cli.sh LOOM FIXTURES TMP [MPIRUN...]: the Hugging Face workflow of docs/hf.md through the real
# binary on the committed fixtures: for each family `loom import`, `loom train --init HF_DIR`
# (one step), `loom export hf` (f32 and bf16) and re-import; a LoRA fine-tune with finetune.base =
# an HF folder and HF target names, exported as a PEFT adapter and merged; bad folders exit
# non-zero with one line; with MPIRUN: 2 ranks ZeRO-3 from an HF folder, resumed on 1 rank, exported.
set -euo pipefail
loom=$1 fix=$2 tmp=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
shift 3
rm -rf "$tmp" && mkdir -p "$tmp"
cd "$tmp"
head -c 20000 "$repo/configs/data/corpus.txt" >corpus.txt
# the fixtures' tokenizer.json is a WordLevel one (ids w1..w271, for transformers): loom reads it,
# but it has no chat markers and knows no word of the corpus, so the jobs name loom's byte tokenizer
# (the fixtures' 272 ids) themselves, which the folders' own would override.
# tool calls short enough that prompt + answer fit the fixtures' 64 positions (byte tokens)
for q in a b c d e f; do
    echo "{\"query\":\"$q\",\"tools\":[{\"name\":\"f\"}],\"answers\":[{\"name\":\"f\",\"arguments\":{}}]}"
done >tools.jsonl
cat >train.json <<JSON
{"name": "hf", "model": {"tokenizer": "byte"}, "train": {"steps": 1, "batch_size": 2, "seq_len": 16, "lr": 1e-3, "log_every": 1},
 "data": {"train": "corpus.txt"}, "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
cat >lora.json <<JSON
{"name": "hf-lora", "model": {"tokenizer": "byte"}, "train": {"batch_size": 2, "lr": 1e-2, "log_every": 1},
 "data": {"train": "tools.jsonl", "val_split": 0, "max_len": 64},
 "finetune": {"method": "lora", "lora_rank": 4, "lora_alpha": 8, "lora_targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "epochs": 1},
 "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
run() { timeout 120 "$@" >>log.txt 2>&1 || { echo "FAIL: $*"; tail -5 log.txt; exit 1; }; }
for a in gpt2 llama mistral qwen2 qwen3; do
    run "$loom" import "$fix/$a" "imp_$a"
    run "$loom" train train.json --init "$fix/$a" --out "run_$a" --quiet
    run "$loom" export hf "run_$a/ckpt" "out_$a"
    run "$loom" export hf "imp_$a" "out16_$a" --dtype bf16
    run "$loom" import "out_$a" "back_$a"
    # export -> import -> export through the binary (both stream in pieces) is bitwise
    run "$loom" export hf "back_$a" "again_$a"
    cmp -s "out_$a/model.safetensors" "again_$a/model.safetensors" || { echo "FAIL: $a: export of the re-import differs"; exit 1; }
    for f in config.json model.safetensors; do [ -f "out_$a/$f" ] || { echo "FAIL: out_$a/$f missing"; exit 1; }; done
    [ -f "out16_$a/tokenizer.json" ] || { echo "FAIL: $a: tokenizer.json not carried through import + export"; exit 1; }
    grep -q '"bfloat16"' "out16_$a/config.json" || { echo "FAIL: $a: bf16 export's config.json dtype"; exit 1; }
    echo "ok: $a import, train --init, export, re-import"
done
# import into one .h5 file, train from it, export (tokenizer found beside the file)
run "$loom" import "$fix/qwen3" one/qwen3.h5
# the import kept the folder's tokenizer (copied into one/): a job from it names that one
run "$loom" train train.json --init one/qwen3.h5 --set model.tokenizer=one --out run_one --quiet
run "$loom" export hf one/qwen3.h5 out_one
[ -f out_one/tokenizer.json ] && [ -f one/hf_config.json ] || { echo "FAIL: side files of an .h5 import"; exit 1; }
echo "ok: import to a file, --init from it, export"
# LoRA from an HF base, PEFT adapter and merged export
run "$loom" finetune lora.json --set finetune.base="$fix/qwen2" --out run_lora --quiet
run "$loom" export peft run_lora/ckpt peft_qwen2
run "$loom" export hf run_lora/ckpt merged_qwen2 --merge
grep -q '"target_modules"' peft_qwen2/adapter_config.json && grep -q '"down_proj"' peft_qwen2/adapter_config.json ||
    { echo "FAIL: adapter_config.json"; exit 1; }
grep -q 'base_model.model.model.layers.1.mlp.down_proj.lora_B.weight' peft_qwen2/adapter_model.safetensors ||
    { echo "FAIL: PEFT tensor names"; exit 1; }
if "$loom" export hf run_lora/ckpt nomerge 2>err.txt; then echo "FAIL: LoRA export without --merge accepted"; exit 1; fi
# GPT-2: q, k, v adapters fused into one c_attn pair (exactness: test_hf_peft)
run "$loom" finetune lora.json --set finetune.base="$fix/gpt2" --set finetune.lora_targets=all-linear \
    --set data.max_len=32 --set train.seq_len=32 --out run_lora_gpt2 --quiet
run "$loom" export peft run_lora_gpt2/ckpt peft_gpt2
grep -q 'base_model.model.transformer.h.1.attn.c_attn.lora_B.weight' peft_gpt2/adapter_model.safetensors &&
    grep -q '"fan_in_fan_out":.*true' peft_gpt2/adapter_config.json || { echo "FAIL: GPT-2 PEFT adapter"; exit 1; }
echo "ok: LoRA from an HF folder -> PEFT adapter and merged HF folder (Qwen2, GPT-2)"
# a loom import as finetune.base is the HF folder itself: its model config comes with it (the job
# names no model size) and the fine-tune is the same, bit for bit
run "$loom" finetune lora.json --set finetune.base=imp_qwen2 --out run_lora_imp --quiet
run "$loom" export peft run_lora_imp/ckpt peft_qwen2_imp
cmp -s peft_qwen2/adapter_model.safetensors peft_qwen2_imp/adapter_model.safetensors ||
    { echo "FAIL: LoRA on the import of qwen2 differs from LoRA on the folder"; exit 1; }
# eval's and sample's --ckpt of an import, from another folder, with a job that names no model: the
# import's model, and the tokenizer copied beside it (the path the import recorded was relative to
# here, qwen2-chat's: its chat template rides with it); the same greedy text as from the HF folder
echo '{"name": "s"}' >s.json
mkdir -p elsewhere
run "$loom" import "$fix/qwen2-chat" imp_chat
(cd elsewhere && timeout 120 "$loom" sample ../s.json --ckpt ../imp_chat --prompt "w1 w2" --max-new 8 >../s_imp.txt 2>>../log.txt) ||
    { echo "FAIL: sample --ckpt of an import from another folder"; tail -3 log.txt; exit 1; }
timeout 120 "$loom" sample s.json --set finetune.base="$fix/qwen2-chat" --prompt "w1 w2" --max-new 8 >s_hf.txt 2>>log.txt ||
    { echo "FAIL: sample from the qwen2-chat folder"; tail -3 log.txt; exit 1; }
[ -s s_hf.txt ] && cmp -s s_imp.txt s_hf.txt || { echo "FAIL: sample from the import differs:"; cat s_imp.txt s_hf.txt; exit 1; }
echo "ok: an import as finetune.base and as --ckpt: its model and tokenizer, the folder's bits"
# model.* fields the job sets itself against the folder's config.json: agreeing ones and a lower
# max_seq (RoPE) run; a conflicting one (--set or the job file) is one line naming both values
run "$loom" finetune lora.json --set finetune.base="$fix/qwen2" --set model.d_model=32 --set model.norm=rmsnorm \
    --set model.max_seq=48 --set data.max_len=48 --set train.seq_len=48 --out run_agree --quiet
"$loom" ckpt info run_agree/ckpt >info.txt 2>&1 && grep -q '"max_seq":48' info.txt ||
    { echo "FAIL: model.max_seq=48 not kept"; exit 1; }
refuse() { # refuse PATTERN ARGS...: non-zero exit, one line matching PATTERN
    local want=$1; shift
    if "$loom" "$@" >/dev/null 2>err.txt; then echo "FAIL: accepted: $*"; exit 1; fi
    [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- "$want" err.txt || { echo "FAIL: $*: want one line '$want', got:"; cat err.txt; exit 1; }
}
refuse 'model.d_model = 64 (set by the job) disagrees with 32 from .*qwen2/config.json' \
    finetune lora.json --set finetune.base="$fix/qwen2" --set model.d_model=64 --out run_bad
refuse 'model.max_seq = 128 (set by the job) disagrees with 64 from .*may only be lowered' \
    finetune lora.json --set finetune.base="$fix/qwen2" --set model.max_seq=128 --out run_bad
refuse 'model.max_seq = 16 (set by the job) disagrees with 32 from .*gpt2/config.json' \
    finetune lora.json --set finetune.base="$fix/gpt2" --set model.max_seq=16 --set train.seq_len=16 --set data.max_len=16 --out run_bad
sed 's/"tokenizer": "byte"}/"tokenizer": "byte", "n_layer": 4}/' lora.json >lora4.json
refuse 'model.n_layer = 4 (set by the job) disagrees with 2 from' finetune lora4.json --set finetune.base="$fix/llama" --out run_bad
refuse 'model.tied_embeddings = false (set by the job) disagrees with true from' \
    train train.json --init imp_qwen2 --set model.tied_embeddings=false --out run_bad
sed 's/"model": {"tokenizer": "byte"}, //' lora.json >lora_tok.json # the folder's own tokenizer
refuse 'chat format loom: the tokenizer (bpe .*qwen2/tokenizer.json (272 ids)) has no token <|system|>' finetune lora_tok.json --quiet --set finetune.base="$fix/qwen2" --out run_bad
echo "ok: explicit model fields: agreeing ones and a lower max_seq run, conflicting ones refused with one line"
# bad input: one line, non-zero exit
mkdir -p empty
for bad in empty "$fix/does-not-exist"; do
    if "$loom" import "$bad" x 2>err.txt; then echo "FAIL: import $bad accepted"; exit 1; fi
    [ "$(wc -l <err.txt)" -eq 1 ] || { echo "FAIL: import $bad: not one line:"; cat err.txt; exit 1; }
done
echo "ok: bad folders refused with one line"
# resume and reshard: 2 ranks ZeRO-3 from an HF folder, checkpoint, resume on 1 rank, export
if [ $# -gt 0 ]; then
    timeout 180 "$@" -np 2 "$loom" train train.json --init "$fix/llama" --out run_z3 --quiet \
        --set parallel.zero_stage=3 --set train.steps=2 --set checkpoint.every=1 --set checkpoint.keep=3 >>log.txt 2>&1 ||
        { echo "FAIL: 2-rank ZeRO-3 run"; tail -5 log.txt; exit 1; }
    run "$loom" train train.json --init "$fix/llama" --out run_z3 --quiet --set train.steps=3 --resume run_z3/ckpt
    run "$loom" export hf run_z3/ckpt out_z3
    [ -f out_z3/model.safetensors ] || { echo "FAIL: export after resume"; exit 1; }
    echo "ok: 2 ranks ZeRO-3 -> resume on 1 rank -> export"
fi
