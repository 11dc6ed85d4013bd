#!/usr/bin/env bash
# gguf_llamacpp.sh LOOM LLAMA_CPP [TMP]: llama.cpp itself runs what `loom export gguf` writes
# (docs/gguf.md). LLAMA_CPP is vendor/llama.cpp of the pinned source package (make_gguf.py's header:
# pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36). Builds its libllama once
# (CPU, in LLAMA_CPP/build), links bench/gguf_llamacpp.c against it, then for each HF fixture family
# (with the GGUF fixture tokenizer): `loom import` + `loom export gguf` in f32, f16, q8_0, and
# prints llama.cpp's largest logit error against transformers' logits (tests/fixtures/hf/*/
# logits.bin; f32 KV cache, no flash attention: expect fp32 noise for f32 but GPT-2's, whose GELU
# llama.cpp's CPU backend takes from an f16 table, ~1e-3; q8_0 within a few 1e-2). Then a LoRA
# fine-tune of qwen2 and of mistral: llama.cpp on base.gguf + `--adapter` file against llama.cpp on
# the merged export (expect fp32 noise). Not CI: minutes of compiling, no network needed after the
# download.
set -euo pipefail
loom=$(realpath "${1:?usage: gguf_llamacpp.sh LOOM LLAMA_CPP [TMP]}") lcpp=$(realpath "${2:?LLAMA_CPP}") tmp=${3:-/tmp/loom-gguf-llamacpp}
repo=$(cd "$(dirname "$0")/.." && pwd)
fix=$repo/tests/fixtures
if [ ! -f "$lcpp/build/src/libllama.a" ]; then
    cmake -S "$lcpp" -B "$lcpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$lcpp/build" --target llama -j"$(nproc)" >/dev/null
fi
rm -rf "$tmp" && mkdir -p "$tmp" && cd "$tmp"
gcc -O2 -o logits "$repo/bench/gguf_llamacpp.c" -I"$lcpp/include" -I"$lcpp/ggml/include" "$lcpp/build/src/libllama.a" \
    "$lcpp/build/ggml/src/libggml.a" "$lcpp/build/ggml/src/libggml-cpu.a" "$lcpp/build/ggml/src/libggml-base.a" -lstdc++ -lm -lpthread
ids="3 17 42 5 88 261 0 271 23 7 150 34" # make_fixtures.py's IDS
for a in gpt2 llama mistral qwen2 qwen3; do
    mkdir "src_$a" && cp "$fix/hf/$a/config.json" "$fix/hf/$a/model.safetensors" "$fix/gguf/tokenizer/"* "src_$a/"
    "$loom" import "src_$a" "imp_$a" >/dev/null 2>&1
    for t in f32 f16 q8_0; do
        "$loom" export gguf "imp_$a" "$a-$t.gguf" --type "$t" >/dev/null 2>&1
        ./logits "$a-$t.gguf" "$fix/hf/$a/logits.bin" 272 $ids 2>/dev/null
    done
done
for q in a b c d e f; do
    echo "{\"query\":\"$q\",\"tools\":[{\"name\":\"f\"}],\"answers\":[{\"name\":\"f\",\"arguments\":{}}]}"
done >tools.jsonl
cat >lora.json <<JSON
{"name": "gguf-lora", "model": {"tokenizer": "byte"}, "train": {"batch_size": 2, "lr": 1e-2, "log_every": 1},
 "data": {"train": "tools.jsonl", "val_split": 0, "max_len": 64},
 "finetune": {"method": "lora", "lora_rank": 4, "lora_alpha": 8, "lora_targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "epochs": 1},
 "checkpoint": {"every": 0, "keep": 1}, "parallel": {"threads": 1}}
JSON
for a in qwen2 mistral; do
    "$loom" finetune lora.json --set finetune.base="$tmp/src_$a" --out "lora_$a" --quiet >/dev/null 2>&1
    "$loom" export gguf "lora_$a/ckpt" "merged_$a.gguf" >/dev/null 2>&1
    "$loom" export gguf "lora_$a/ckpt" "adapter_$a.gguf" --adapter >/dev/null 2>&1
    DUMP="merged_$a.bin" ./logits "merged_$a.gguf" "$fix/hf/$a/logits.bin" 272 $ids >/dev/null 2>&1
    echo -n "LoRA $a, base + --lora adapter vs merged: "
    LORA="adapter_$a.gguf" ./logits "$a-f32.gguf" "merged_$a.bin" 272 $ids 2>/dev/null
done
