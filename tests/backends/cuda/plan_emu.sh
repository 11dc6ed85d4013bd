#!/usr/bin/env bash
# plan_emu.sh LOOM_EMU SRC: `loom plan` and the fit check on the emulated CUDA backend, whose memory
# the backend reports (backend_memory: cudaMemGetInfo; the emulator's size is EMU_DEVICE_MEM):
# the plan names the device's free memory and its size; a job that does not fit is refused by
# `train` in one line naming the need, the device, the largest part and the switch, before a step;
# with room, the same plan fits.
set -u
emu=$1 src=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
job=("$src/configs/tiny-train.json" --set model=gpt2-small6 --set train.batch_size=16 --set train.seq_len=256
     --set checkpoint.every=-1)
export LOOM_BACKEND=cuda
out=$(EMU_DEVICE_MEM=100M "$emu" plan "${job[@]}" 2>&1) || { echo "$out"; fail "loom plan exited non-zero"; }
grep -qE '^device: [0-9.]+ MiB \(free on the cuda device, of 100.0 MiB\)$' <<<"$out" &&
  grep -q '^fits: no: the largest part is activations .*train.recompute=true' <<<"$out" ||
  { echo "$out"; fail "loom plan on 100 MiB: no device line from the backend, or not 'fits: no'"; }
EMU_DEVICE_MEM=100M "$emu" plan "${job[@]}" --json | grep -q '"fits":false' || fail "loom plan --json: fits is not false"
EMU_DEVICE_MEM=100M timeout 120 "$emu" train "${job[@]}" --out refused > refused.out 2> refused.err &&
  fail "train ran a job over the device's memory"
[ "$(grep -c error refused.err)" = 1 ] &&
  grep -qE '^loom: error: the job needs [0-9.]+ [KMG]iB per rank and the device has [0-9.]+ MiB \(free on the cuda device, of 100.0 MiB\): the largest part is activations, [0-9.]+ MiB; train.recompute=true shrinks it' refused.err ||
  { cat refused.err; fail "the refusal does not name the need, the device, the largest part and the switch in one line"; }
grep -q '^step' refused.err && fail "the refused job ran a step"
echo "ok: $(grep error refused.err | cut -c1-160)..."
out=$(EMU_DEVICE_MEM=8G "$emu" plan "${job[@]}" 2>&1)
grep -qE '^fits: yes' <<<"$out" || { echo "$out"; fail "8 GiB: the plan does not fit"; }
echo "ok: on 8 GiB it fits: $(grep '^device' <<<"$out")"
echo PASS
