#!/usr/bin/env bash
# bench/lora.sh [BUILD_DIR]: LoRA fine-tune step time on a ~45M-parameter model (d_model 512,
# 27 layers, GQA 8/4 heads, vocab 8192, SwiGLU d_ff 512, tied embeddings, RMSNorm/RoPE: 46.7M)
# at batch 16, length 256, fp32 on all cores: seconds per step and tokens/s (padding excluded),
# median over the steps after the first, next to Needle's reported step time.
# The base is a freshly initialised checkpoint of that model (the weights do not change the cost).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
loom="$build/launch/loom"
steps=${STEPS:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--set model=llama-small --set model.vocab=8192 --set model.d_model=512 --set model.n_layer=27
       --set model.n_head=8 --set model.n_kv_head=4 --set model.d_ff=512 --set model.tied_embeddings=true
       --set model.max_seq=256)
"$loom" train "$root/configs/tiny-train.json" "${model[@]}" --set train.steps=1 --set train.warmup=0 \
  --set train.seq_len=64 --out "$tmp/base" --quiet > "$tmp/base.log" 2>&1 || { cat "$tmp/base.log"; exit 1; }
params=$(sed -n 's/^model [^:]*: \([0-9]*\) parameters.*/\1/p' "$tmp/base.log")
"$loom" finetune "$root/configs/finetune-demo.json" "${model[@]}" --set finetune.base="$tmp/base/ckpt" \
  --set finetune.epochs=1 --set train.batch_size=16 --set finetune.lora_targets=q,k,v,o \
  --set data.max_len=256 --set checkpoint.every=-1 --out "$tmp/ft" --quiet > "$tmp/ft.log" 2>&1 &
pid=$!
logged() { local n; n=$(grep -c '"step"' "$tmp/ft/metrics.jsonl" 2>/dev/null || true); echo "${n:-0}"; }
# one epoch is long: stop after `steps` steps have been logged (or when the run ends early)
while kill -0 $pid 2>/dev/null && [ "$(logged)" -lt "$steps" ]; do sleep 1; done
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[ "$(logged)" -ge 2 ] || { echo "bench/lora.sh: the fine-tune logged $(logged) steps:"; tail -5 "$tmp/ft.log"; exit 1; }
# median over the steps after the first (plain awk: no gawk-only asort)
field() { grep '"step"' "$tmp/ft/metrics.jsonl" | tail -n +2 | head -n $((steps - 1)) |
          sed -n "s/.*\"$1\": \([0-9.eE+-]*\).*/\1/p" | sort -g |
          awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
s=$(field step_s) t=$(field tokens_per_s)
printf "%-44s %10s %10s\n" "LoRA fine-tune (B=16, T=256, fp32)" "s/step" "tokens/s"
printf "%-44s %10.2f %10.0f\n" "loom, $params params, rank 16 on q,k,v,o" "$s" "$t"
printf "%-44s %10.2f %10s\n" "Needle (reported, laptop CPU)" 2.90 "-"
printf "%-44s %10.2f\n" "ratio (Needle / loom)" "$(echo "2.90 / $s" | bc -l)"
