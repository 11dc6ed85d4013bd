#!/usr/bin/env python3
"""peft_lora.py: the transformers + PEFT reference for bench/lora.sh: a randomly initialised
LlamaForCausalLM with SmolLM2-135M's shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152,
tied embeddings, rope theta 1e5), LoRA rank R (alpha 2R, dropout 0) on q,k,v,o via PEFT, AdamW on
the adapters, BATCH rows of SEQ random ids, no padding, labels (-100 elsewhere) on the last FRAC
of each row, exactly as bench_lora builds its batch. STEPS steps on THREADS threads; prints one
line: `s_per_step <median of the steps after the first>`. --device cuda runs it on the GPU (each
step timed to a synchronize; TF32 off, as loom's precision fp32). Only a yardstick: loom never
needs it."""
import argparse, statistics, time
import torch
from smol_shapes import smol_model
from peft import LoraConfig, get_peft_model

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--rank", type=int, default=16)
p.add_argument("--frac", type=float, default=0.25)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--bf16", action="store_true", help="forward and backward under torch.autocast bf16")
p.add_argument("--device", default="cpu")
a = p.parse_args()
cuda = a.device.startswith("cuda")
sync = torch.cuda.synchronize if cuda else (lambda: None)
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = False
model = smol_model(a.threads).to(a.device)
model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
model.train()
opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4, weight_decay=0.0)
ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq))
labels = torch.full_like(ids, -100)
first = a.seq - int(a.frac * a.seq + 0.5)
labels[:, first:] = ids[:, first:]  # HF shifts labels inside the loss: position t predicts t+1
ids, labels = ids.to(a.device), labels.to(a.device)
times = []
for step in range(a.steps):
    sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=a.bf16):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    sync()
    times.append(time.perf_counter() - t0)
    print(f"peft step {step + 1} {times[-1]:.3f} s loss {loss.item():.4f}", flush=True)
print("s_per_step %.4f" % statistics.median(times[1:] if len(times) > 1 else times))
