#!/usr/bin/env bash
# no_driver_emu.sh LOOM_EMU: `loom info` under LOOM_BACKEND=cuda where the GPU is not usable says so in
# its one "selected:" line: no device (EMU_DEVICES=0), and no NVIDIA driver at all (EMU_NO_DRIVER=1:
# the runtime's "driver version is insufficient", which loom reads as "no driver" when libcuda.so.1
# cannot be loaded; skipped, 77, on a machine that has the driver).
set -u
emu=$1
fail() { echo "FAIL: $*"; exit 1; }
got=$(EMU_DEVICES=0 LOOM_BACKEND=cuda "$emu" info | grep '^selected:')
[ "$got" = "selected: none (LOOM_BACKEND=cuda: backend 'cuda' (from LOOM_BACKEND) is not available here: no CUDA device)" ] ||
  fail "no device: '$got'"
echo "ok: $got"
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then echo "SKIP: this machine has NVIDIA's driver"; exit 77; fi
got=$(EMU_NO_DRIVER=1 LOOM_BACKEND=cuda "$emu" info | grep '^selected:')
[ "$got" = "selected: none (LOOM_BACKEND=cuda: backend 'cuda' (from LOOM_BACKEND) is not available here: no NVIDIA driver (libcuda.so.1 not found))" ] ||
  fail "no driver: '$got'"
echo "ok: $got"
