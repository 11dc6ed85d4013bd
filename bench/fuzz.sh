#!/usr/bin/env bash
# fuzz.sh [RUNS]: build loom's libFuzzer targets with clang (ASan + UBSan + libFuzzer) and run
# each for a fixed number of executions from seeds taken from the repo:
#   fuzz_config  job-config JSON (+ one --set override)   seeds: configs/*.json, configs/models/*
#   fuzz_jsonl   fine-tuning JSONL files and lines         seeds: lines of configs/data/tools.jsonl
#   fuzz_ckpt    checkpoint files (open, state, groups, `ckpt info`)  seed: a small valid checkpoint
# RUNS (default 200000) executions for config and jsonl; FUZZ_CKPT_RUNS (default RUNS/10) for
# ckpt, whose every execution writes and opens an HDF5 file. Crashes, leaks and timeouts are
# written to $FUZZ_OUT/crashes (FUZZ_OUT defaults to build-fuzz/out); exit 1 if any target found
# one. Each crash input belongs in tests/reliability/regress/<target>/ once its bug is fixed.
# Needs clang with libFuzzer (Debian: clang-14 + libclang-rt-14-dev). Takes minutes: not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=${1:-200000}
ckpt_runs=${FUZZ_CKPT_RUNS:-$((runs / 10))}
build=${FUZZ_BUILD:-$root/build-fuzz}
out=${FUZZ_OUT:-$build/out}
CC=${CC:-clang}
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang libclang-rt-14-dev)"; exit 2; }

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-O1 $san" \
      -DLOOM_CUDA=OFF -DCMAKE_PROJECT_loom_INCLUDE="$root/bench/fuzz/fuzz.cmake" >"$build.configure.log" 2>&1 ||
    { tail -20 "$build.configure.log"; exit 1; }
cmake --build "$build" --target fuzz_config fuzz_jsonl fuzz_ckpt fuzz_replay -j2 >"$build.build.log" 2>&1 ||
    { grep -E "error" "$build.build.log" | head -20; exit 1; }

# Seeds (fresh each run; the fuzzer's own finds go to corpus/, kept between runs)
seeds=$out/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{config,jsonl,ckpt} "$out"/corpus/{config,jsonl,ckpt} "$out/crashes"
cp configs/*.json configs/models/*.json "$seeds/config/"
i=0
while IFS= read -r line && [ $i -lt 64 ]; do   # flag byte: bit0 skip_bad_lines, bit1 prompt-only
    { printf "\\$(printf %03o $((i % 8)))"; printf '%s\n' "$line"; } >"$seeds/jsonl/line$i"
    i=$((i + 1))
done <configs/data/tools.jsonl
{ printf '\x05'; head -n 40 configs/data/tools.jsonl; } >"$seeds/jsonl/file40"
"$build/tests/reliability/fuzz_replay" --ckpt-seed "$seeds/ckpt/full.h5"
# the same checkpoint without HDF5's 1 MiB metadata block reservation: small enough to mutate
if command -v h5repack >/dev/null; then h5repack "$seeds/ckpt/full.h5" "$seeds/ckpt/packed.h5"; fi

export LOOM_FUZZ_TMP=${LOOM_FUZZ_TMP:-/dev/shm}
# leaks inside HDF5 on damaged files (its metadata cache) are HDF5's: suppressed by the CI's list,
# which needs full stacks to see the HDF5 frames; loom's own leaks still stop the fuzzer
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/reliability/lsan.supp:print_suppressions=0}
status=0
for t in config jsonl ckpt; do
    n=$runs
    [ $t = ckpt ] && n=$ckpt_runs
    extra=()
    [ $t = ckpt ] && extra=(-max_len=65536)
    start=$(date +%s)
    log=$out/fuzz_$t.log
    if "$build/fuzz_$t" -runs="$n" -seed=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/crashes/${t}-" "${extra[@]}" "$out/corpus/$t" "$seeds/$t" >"$log" 2>&1; then
        verdict=ok
    else
        verdict="FOUND A CRASH (see $log)"
        status=1
    fi
    execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
    cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1 || true)
    echo "fuzz_$t: $execs executions in $(( $(date +%s) - start )) s, $cov, $verdict"
done
ls "$out/crashes" | sed 's/^/crash input: /'
exit $status
