#!/usr/bin/env bash
# gguf_cli.sh LOOM FIXTURES TMP: `loom export gguf` through the real binary (docs/gguf.md): a LoRA
# fine-tune exports merged, equal bit for bit to the GGUF of its merged HF export re-imported, or
# as its adapters alone (--adapter); a GGUF imports back (the same file exported again) and
# fine-tunes; bad
# input (a type loom does not write, an architecture llama.cpp lacks, a folder that cannot take
# the file, a disk that fills up, a tokenizer GGUF has no form for or llama.cpp's converter does not
# take (a byte-fallback tokenizer.json with a Metaspace decoder), a truncated GGUF to import) exits non-zero with one line naming the file and
# field, and leaves no file. test_gguf compares the files themselves with llama.cpp's converter.
set -euo pipefail
loom=$(realpath "$1") fix=$(cd "$2" && pwd) tmp=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
cd "$tmp"
tmp=$(pwd)
run() { timeout 120 "$@" >>log.txt 2>&1 || { echo "FAIL: $*"; tail -5 log.txt; exit 1; }; }
# refused: non-zero exit, exactly one line on stderr holding each of the words given, no OUT file
refuse() {
    local want=$1 out=$2
    shift 2
    if "$@" >out.txt 2>err.txt; then echo "FAIL: accepted: $*"; exit 1; fi
    [ "$(wc -l <err.txt)" -eq 1 ] || { echo "FAIL: not one line: $*"; cat err.txt; exit 1; }
    for w in $want; do grep -qF -- "$w" err.txt || { echo "FAIL: '$w' not in: $(cat err.txt)"; exit 1; }; done
    [ ! -e "$out" ] && ! ls "$(dirname "$out")" 2>/dev/null | grep -q '\.tmp\.' || { echo "FAIL: $* left a file"; exit 1; }
    echo "ok: refused: $(cat err.txt)"
}
mkdir src
cp "$fix/hf/qwen2/config.json" "$fix/hf/qwen2/model.safetensors" "$fix/gguf/tokenizer/"* src/
run "$loom" import src imp
run "$loom" export gguf imp base.gguf --type q8_0
# a LoRA fine-tune on the HF folder: merged on export; the same as merging into an HF folder first
for q in a b c d e f; do
    echo "{\"query\":\"$q\",\"tools\":[{\"name\":\"f\"}],\"answers\":[{\"name\":\"f\",\"arguments\":{}}]}"
done >tools.jsonl
cat >lora.json <<JSON
{"name": "gguf-lora", "model": {"tokenizer": "byte"}, "train": {"batch_size": 2, "lr": 1e-2, "log_every": 1},
 "data": {"train": "tools.jsonl", "val_split": 0, "max_len": 64},
 "finetune": {"method": "lora", "lora_rank": 4, "lora_alpha": 8, "lora_targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "epochs": 1},
 "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
run "$loom" finetune lora.json --set finetune.base="$tmp/src" --out run_lora --quiet
run "$loom" export gguf run_lora/ckpt lora.gguf --type q8_0
run "$loom" export hf run_lora/ckpt merged --merge
run "$loom" import merged merged_imp
run "$loom" export gguf merged_imp merged.gguf --type q8_0
cmp -s lora.gguf merged.gguf || { echo "FAIL: LoRA GGUF differs from the GGUF of the merged HF export"; exit 1; }
! cmp -s lora.gguf base.gguf || { echo "FAIL: the LoRA GGUF is the base's (adapters not merged)"; exit 1; }
[ "$(stat -c %s lora.gguf)" = "$(stat -c %s base.gguf)" ] || { echo "FAIL: LoRA GGUF's size"; exit 1; }
echo "ok: a LoRA fine-tune exports merged"
# --adapter: the adapters alone, for `llama-cli -m base.gguf --lora adapter.gguf` (test_gguf checks
# the file against llama.cpp's convert_lora_to_gguf.py); a whole-model checkpoint has none
run "$loom" export gguf run_lora/ckpt adapter.gguf --adapter
grep -q "adapter.lora.alpha" adapter.gguf || { echo "FAIL: no adapter.lora.alpha in adapter.gguf"; exit 1; }
refuse "imp/ --adapter" noad.gguf "$loom" export gguf imp noad.gguf --adapter
echo "ok: --adapter"
# a GGUF back in (`loom import`), and a LoRA fine-tune from it, exported again
run "$loom" import base.gguf from_gguf
run "$loom" export gguf from_gguf again.gguf --type q8_0
cmp -s base.gguf again.gguf || { echo "FAIL: import + export of a GGUF is not the same file"; exit 1; }
head -c 20000 "$repo/configs/data/corpus.txt" >corpus.txt
cat >train.json <<JSON
{"name": "gguf", "model": {"tokenizer": "byte"}, "train": {"steps": 1, "batch_size": 2, "seq_len": 16, "lr": 1e-3, "log_every": 1},
 "data": {"train": "corpus.txt"}, "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
run "$loom" train train.json --init from_gguf --set model.tokenizer=from_gguf --out run_gguf --quiet
run "$loom" export gguf run_gguf/ckpt trained.gguf --type f16
echo "ok: import of a GGUF, training from it, exported again"
head -c 3000 base.gguf >cut.gguf
refuse "cut.gguf runs past the end" cut_imp "$loom" import cut.gguf cut_imp
refuse "--type q4_k llama-quantize" x.gguf "$loom" export gguf imp x.gguf --type q4_k
mkdir word && cp "$fix/hf/llama/config.json" "$fix/hf/llama/model.safetensors" word/
cp "$fix/hf/llama/tokenizer.json" "$fix/hf/llama/tokenizer_config.json" word/
run "$loom" import word word_imp
refuse "out/x.gguf cannot create" out/x.gguf "$loom" export gguf imp out/x.gguf
mkdir out
refuse "word_imp/tokenizer.json model.type WordLevel" out/x.gguf "$loom" export gguf word_imp out/x.gguf
# a byte-fallback tokenizer.json with a Metaspace decoder: llama.cpp's converter takes one only with
# the Llama converter's Sequence decoder (or a tokenizer.model), so loom names the field
mkdir meta && cp "$fix/hf/mistral/config.json" "$fix/hf/mistral/model.safetensors" meta/
cp "$fix/tokenizers/mistral.json" meta/tokenizer.json
run "$loom" import meta meta_imp
refuse "meta_imp/tokenizer.json decoder.type Metaspace tokenizer.model" out/x.gguf "$loom" export gguf meta_imp out/x.gguf
refuse "/proc/loom-gguf-test.gguf" /proc/loom-gguf-test.gguf "$loom" export gguf imp /proc/loom-gguf-test.gguf
# a disk that fills up part way (a 20 KB file size limit; write() fails with EFBIG): no file
refuse "full.gguf write failed" full.gguf bash -c "ulimit -f 20; trap '' XFSZ; exec \"$loom\" export gguf imp full.gguf"
# a read-only folder (meaningful when not root: root writes anyway)
mkdir ro && chmod 555 ro
if [ "$(id -u)" != 0 ]; then refuse "ro/x.gguf" ro/x.gguf "$loom" export gguf imp ro/x.gguf; fi
chmod 755 ro
# an architecture llama.cpp lacks: a loom model of rmsnorm + gelu, one training step
cat >odd.json <<JSON
{"name": "odd", "model": {"tokenizer": "byte", "vocab": 272, "d_model": 32, "n_layer": 1, "n_head": 4, "n_kv_head": 4,
 "d_ff": 64, "max_seq": 16, "norm": "rmsnorm", "mlp": "gelu", "positions": "learned"},
 "train": {"steps": 1, "batch_size": 2, "seq_len": 16, "lr": 1e-3, "log_every": 1},
 "data": {"train": "corpus.txt"}, "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
run "$loom" train odd.json --out run_odd --quiet
refuse "model.norm/mlp/positions rmsnorm/gelu/learned .h5" odd.gguf "$loom" export gguf run_odd/ckpt odd.gguf
echo "gguf_cli: ok"
