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
# the merged export (expect fp32 noise). Then speed: llama.cpp's own `llama-bench` (built from the
# same source) on a SmolLM2-135M-shaped model (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152,
# tied, rope theta 1e5: bench/smol_shapes.h) with loom's random init, made by loom commands alone:
# `loom train` of 1 step at lr 0 (the init kept), `loom export hf`, the SmolLM2 fixture tokenizer
# (tests/fixtures/tokenizers/smollm2.json) put beside it, `loom import`, `loom export gguf` in each
# of TYPES; prints llama-bench's prompt (ppPP) and generation (tgTG) tokens/s per file next to
# loom's own fp32 figures on the same shapes from bench_generate (beside LOOM in BUILD/bench/, or
# GEN=path; reported missing when not built): its prefill of PP tokens and TG decode steps after a
# 1-token prompt, the median of REPS runs. THREADS (2), PP (128), TG (32), REPS (2), TYPES
# ("f32 f16 q8_0") set it, SPEED_ONLY=1 runs this part alone; llama-bench runs with its defaults
# otherwise (f16 KV cache, flash attention auto, a warm-up run), on the libllama built here
# (GGML_NATIVE=OFF: AVX2/FMA/F16C kernels, no AVX-512). The 1-step training needs ~2.2 GB of
# memory. Not CI: minutes of compiling, no network needed after the download.
set -euo pipefail
loom=$(realpath "${1:?usage: gguf_llamacpp.sh LOOM LLAMA_CPP [TMP]}") lcpp=$(realpath "${2:?LLAMA_CPP}") tmp=${3:-/tmp/loom-gguf-llamacpp}
repo=$(cd "$(dirname "$0")/.." && pwd)
fix=$repo/tests/fixtures
# tools on for llama-bench, but only the targets llama and llama-bench built (with llama-common, no
# server, examples or tests); a build folder an earlier run left with libllama alone is configured
# again and only llama-bench's part compiled
if [ ! -f "$lcpp/build/src/libllama.a" ] || [ ! -x "$lcpp/build/bin/llama-bench" ]; then
    cmake -S "$lcpp" -B "$lcpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF \
        -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$lcpp/build" --target llama llama-bench -j"$(nproc)" >/dev/null
fi
rm -rf "$tmp" && mkdir -p "$tmp" && cd "$tmp"
if [ "${SPEED_ONLY:-0}" != 1 ]; then
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
fi

# Speed: llama-bench on a SmolLM2-135M-shaped model, loom's bench_generate beside it
threads=${THREADS:-2} pp=${PP:-128} tg=${TG:-32} reps=${REPS:-2} types=${TYPES:-f32 f16 q8_0}
gen=${GEN:-$(dirname "$loom")/../bench/bench_generate}
cat >smol.json <<JSON
{"name": "smol-random",
 "model": {"preset": "llama-small", "vocab": 49152, "d_model": 576, "n_layer": 30, "n_head": 9, "n_kv_head": 3,
           "d_ff": 1536, "tied_embeddings": true, "rope_theta": 100000, "max_seq": 2048,
           "tokenizer": "$fix/tokenizers/smollm2.json"},
 "train": {"steps": 1, "batch_size": 1, "seq_len": 16, "lr": 0, "min_lr": 0, "warmup": 0, "seed": 1},
 "data": {"train": "$repo/configs/data/corpus.txt"},
 "checkpoint": {"every": 0}}
JSON
"$loom" train smol.json --out smol_run --quiet >/dev/null
"$loom" export hf smol_run/ckpt smol_hf >/dev/null 2>&1
cp "$fix/tokenizers/smollm2.json" smol_hf/tokenizer.json
"$loom" import smol_hf smol_imp >/dev/null 2>&1
rm -rf smol_run smol_hf
for t in $types; do "$loom" export gguf smol_imp "smol-$t.gguf" --type "$t" >/dev/null 2>&1; done
rm -rf smol_imp
median() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.1f\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
load() { cut -d' ' -f1 /proc/loadavg; }
echo
echo "llama-bench, SmolLM2-135M shapes (134.5M parameters, random), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "$threads threads: llama-bench -p $pp -n $tg -r $reps -t $threads; loom $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
lpp=- ltg=- lload=-
if [ -x "$gen" ]; then
    lload=$(load)
    for r in $(seq "$reps"); do
        "$gen" 1 "$pp" 1 "$threads" 2>/dev/null | sed -n "s/.*($pp tokens) in \([0-9.]*\) s,.*/\1/p" | awk -v n="$pp" '{print n / $1}' >>loom_pp
        "$gen" 1 1 $((tg + 1)) "$threads" 2>/dev/null | sed -n "s/.* $tg steps in \([0-9.]*\) s,.*/\1/p" | awk -v n="$tg" '{print n / $1}' >>loom_tg
    done
    lpp=$(median <loom_pp) ltg=$(median <loom_tg)
fi
printf "%-16s %-7s %24s %8s %16s %12s\n" file test "llama-bench tokens/s" "load" "loom fp32 tok/s" "llama/loom"
for t in $types; do
    la=$(load)
    "$lcpp/build/bin/llama-bench" -m "smol-$t.gguf" -p "$pp" -n "$tg" -r "$reps" -t "$threads" -o jsonl 2>/dev/null >"bench-$t.jsonl"
    while read -r np ng avg sd; do
        if [ "$np" -gt 0 ]; then test=pp$np l=$lpp; else test=tg$ng l=$ltg; fi
        ratio=-; [ "$l" = - ] || ratio=$(awk -v a="$avg" -v b="$l" 'BEGIN {printf "%.2fx", a / b}')
        printf "%-16s %-7s %16.1f +- %5.1f %8s %16s %12s\n" "smol-$t.gguf" "$test" "$avg" "$sd" "$la" "$l" "$ratio"
    done < <(sed 's/.*"n_prompt": *\([0-9]*\).*"n_gen": *\([0-9]*\).*"avg_ts": *\([0-9.e+-]*\).*"stddev_ts": *\([0-9.e+-]*\).*/\1 \2 \3 \4/' "bench-$t.jsonl")
done
if [ "$lpp" = - ]; then
    echo "(loom fp32: missing: $gen not built (cmake --build BUILD --target bench_generate), or GEN=path)"
else
    echo "(loom fp32: bench_generate, the same shapes with fp32 weights, median of $reps runs, load before $lload: prefill of" \
         "$pp tokens, $tg decode steps after a 1-token prompt; loom has no f16/q8_0 inference, so each file's row is against fp32)"
fi
