#!/usr/bin/env bash
# hf_io.sh BUILD_DIR [TMP]: import of a 135M-parameter bf16 Hugging Face model (SmolLM2-135M's
# shapes, random weights made by loom itself: a 1-step train exported with --dtype bf16) and the
# export back, in seconds and MB/s of safetensors bytes, next to `cp` of the same file on the same
# disk (the issue's target: at least half of cp's rate), and the CPU time and peak RSS of each.
# ROUNDS (default 3) rounds alternate cp, import and export, each ratio taken within its round; the
# summary is the median ratio. A benchmark, not a test: needs a quiet machine (on a loaded one
# compare the CPU times and the ratios, and quote the load printed), ~2 GB of disk and memory.
set -euo pipefail
build=${1:?usage: hf_io.sh BUILD_DIR [TMP]}
tmp=${2:-/tmp/loom-hf-io}
loom=$(cd "$build" && pwd)/launch/loom
repo=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$tmp" && mkdir -p "$tmp" && cd "$tmp"
cat >make.json <<JSON
{"name": "smol", "out": "$tmp/make",
 "model": {"preset": "", "vocab": 49152, "d_model": 576, "n_layer": 30, "n_head": 9, "n_kv_head": 3,
           "d_ff": 1536, "norm": "rmsnorm", "mlp": "swiglu", "positions": "rope", "rope_theta": 100000,
           "tied_embeddings": true, "bias": false, "max_seq": 2048, "norm_eps": 1e-5},
 "train": {"steps": 1, "batch_size": 1, "seq_len": 16, "log_every": 1},
 "data": {"train": "$repo/configs/data/corpus.txt"}, "checkpoint": {"every": 0, "keep": 1}}
JSON
"$loom" train make.json --quiet 2>/dev/null
"$loom" export hf make/ckpt smol-bf16 --dtype bf16 2>/dev/null >/dev/null
bytes=$(stat -c %s smol-bf16/model.safetensors)
rounds=${ROUNDS:-3}
now() { date +%s.%N; }
# Each timed step ends with its own output durable: loom fsyncs what it writes, cp's copy is
# fsync'd by `sync FILE` (that file only: a global sync also waits for other processes' writes,
# seconds on a shared machine). The machine-wide sync before each step is not timed.
: >ratios.txt
for r in $(seq "$rounds"); do
    rm -rf copy.safetensors imported exported
    sync; t0=$(now); /usr/bin/time -o cp.time -f "%U %S" sh -c 'cp smol-bf16/model.safetensors copy.safetensors && sync copy.safetensors'; t1=$(now)
    sync; t2=$(now); /usr/bin/time -o import.time -f "%U %S %M" "$loom" import smol-bf16 imported >/dev/null 2>&1; t3=$(now)
    sync; t4=$(now); /usr/bin/time -o export.time -f "%U %S %M" "$loom" export hf imported exported --dtype bf16 >/dev/null 2>&1; t5=$(now)
    cmp -s smol-bf16/model.safetensors exported/model.safetensors && same="bitwise equal to the source" || same="DIFFERS from the source"
    read -r cu cs <cp.time
    read -r iu is im <import.time
    read -r eu es em <export.time
    awk -v b="$bytes" -v c="$(echo "$t1 - $t0" | bc)" -v i="$(echo "$t3 - $t2" | bc)" -v e="$(echo "$t5 - $t4" | bc)" \
        -v cu="$cu" -v cs="$cs" -v iu="$iu" -v is="$is" -v im="$im" -v eu="$eu" -v es="$es" -v em="$em" -v same="$same" \
        -v r="$r" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
        mb = b / 1048576
        if (r == 1) printf "model.safetensors: %.1f MB bf16 (%.0fM parameters); fp32 model %.0f MB\n", mb, b / 2e6, 2 * mb
        printf "round %d (load average %s)\n", r, load
        printf "cp:      %6.2f s  %7.1f MB/s  (CPU %.2f s user + %.2f s sys)\n", c, mb / c, cu, cs
        printf "import:  %6.2f s  %7.1f MB/s  (%.2f of cp; CPU %.2f s user + %.2f s sys; peak RSS %.0f MB = %.2fx the fp32 model; writes %.0f MB of fp32 HDF5)\n",
               i, mb / i, c / i, iu, is, im / 1024, im / 1024 / (2 * mb), 2 * mb
        printf "export:  %6.2f s  %7.1f MB/s  (%.2f of cp; CPU %.2f s user + %.2f s sys; peak RSS %.0f MB; %s)\n",
               e, mb / e, c / e, eu, es, em / 1024, same
        printf "%f %f\n", c / i, c / e >>"ratios.txt"
    }'
done
sort -n -k1 ratios.txt | awk '{ i[NR] = $1 } END { printf "median ratio to cp: import %.2f", i[int((NR + 1) / 2)] }'
sort -n -k2 ratios.txt | awk '{ e[NR] = $2 } END { printf ", export %.2f (%d rounds; target 0.5)\n", e[int((NR + 1) / 2)], NR }'
