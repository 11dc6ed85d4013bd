#!/usr/bin/env bash
# needle_resume_emu.sh LOOM LOOM_EMU: a Needle fine-tune saved on the CPU and resumed on the CUDA
# backend (issue 38), the CUDA kernels run by the host emulator (LOOM_EMU: the `loom` CLI linked
# against it, tests/backends/cuda/emu/build.sh). On the small fixture base, float numerics
# (finetune.qat=false), one epoch of 7 steps:
#  A  LOOM on the CPU, the whole epoch;
#  B  LOOM on the CPU, a checkpoint every step, every rank exits at step 6 (injected): B's steps
#     are A's, and its latest checkpoint is step 5;
#  C  LOOM_EMU with LOOM_BACKEND=cuda resumes B: it prints the emulated CUDA backend and a resume
#     of a checkpoint saved on cpu, and its steps 6 and 7 are A's within rtol 1e-5 (losses) and
#     1e-4 (gradient norms).
# Tolerance: C starts from B's parameters and AdamW moments bit for bit; its float32 sums run in
# other orders than the CPU's (the kernels' reduction trees, the emulated cuBLAS's, against
# OpenBLAS and the CPU kernels'), a relative error of a few 1e-7 in step 6's loss (its sums are
# over d_model 64, 256 positions, a vocabulary of 2000), and step 7's loss moves further only by
# that error of step 6's update (AdamW's m / sqrt(v) carries the gradient's relative error). 1e-5
# is the bound the 2-rank float runs (needle_base_finetune.sh D) allow for the same cause; the
# norms are printed to 6 significant digits (each rounded by up to 5e-6 relative), hence 1e-4.
# Never writes outside its work folder.
LOOM=$1 LOOM_EMU=$2
RUN_TIMEOUT=${RUN_TIMEOUT:-300} # the emulated steps take seconds each, more on a loaded machine
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work needle_resume_emu
FIX=$SRC/tests/fixtures/needle
JOB=$SRC/configs/needle-finetune.json
# every row trains (no held-out rows: no evaluation pass to emulate), 4-row batches, one epoch
FT=(--set finetune.base=$FIX/train_base.safetensors --set data.train=$FIX/needle_rows.jsonl
    --set model.tokenizer=$FIX/needle.model --set train.batch_size=4 --set finetune.lora_rank=4
    --set finetune.lora_alpha=8 --set train.lr=1e-2 --set finetune.epochs=1 --set data.val_split=0
    --set finetune.eval_base=false --set finetune.qat=false --set parallel.threads=1)
# ft BINARY BACKEND OUT ARGS...
ft() {
  local bin=$1 be=$2 out=$3; shift 3
  LOOM=$bin LOOM_BACKEND=$be loom_np 1 finetune "$JOB" --out "$out" "${FT[@]}" "$@" > "$out.log" 2>&1
}
norms() { sed -nE 's/.*"grad_norm": *([-0-9.eE+]+).*/\1/p' "$1" | sed -n "$2,$3p"; }

ft "$LOOM" cpu A --set checkpoint.every=0 || { tail A.log; fail "A"; }
N=$(sed -nE 's/.*"step": *([0-9]+),.*/\1/p' A/metrics.jsonl | tail -1)
[ "$N" = 7 ] || fail "A: $N steps, want 7 (26 rows in batches of 4)"
K=5
LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=$((K + 1)) ft "$LOOM" cpu B --set checkpoint.every=1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { tail B.log; fail "B: exit $rc, want the injected failure at step $((K + 1))"; }
[ "$(cat B/ckpt/latest)" = "$(printf 'step_%08d.h5' $K)" ] || fail "B: latest is '$(cat B/ckpt/latest)', want step $K"
same_losses A/metrics.jsonl B/metrics.jsonl 1 $K

ft "$LOOM_EMU" cuda C --set checkpoint.every=0 --resume B/ckpt || { tail C.log; fail "C (emulated CUDA)"; }
grep -q "^backend cuda (Host emulation of an sm_90 GPU" C.log || { head C.log; fail "C: the backend line does not name the emulated CUDA device"; }
grep -q "resumed B/ckpt/step_0000000$K.h5: step $K of $N.* on cpu" C.log || { head C.log; fail "C: no line saying it resumed step $K saved on cpu"; }
close_losses A/metrics.jsonl C/metrics.jsonl $((K + 1)) "$N" 1e-5
paste <(norms A/metrics.jsonl $((K + 1)) "$N") <(norms C/metrics.jsonl 1 $((N - K))) |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || !(d <= 1e-4 * $1)) bad = 1; n++ } END { exit bad || n != 2 }' ||
  fail "C's gradient norms $(norms C/metrics.jsonl 1 9 | tr '\n' ' ')not A's steps $((K + 1))..$N within rtol 1e-4"
echo "ok: C's gradient norms $(norms C/metrics.jsonl 1 9 | tr '\n' ' ')are A's within rtol 1e-4"
echo "PASS"
