#!/usr/bin/env python3
"""hf_generate.py: the transformers reference for bench/generate.sh: a randomly initialised
LlamaForCausalLM with SmolLM2-135M's shapes (d 576, 30 layers, 9/3 heads, d_ff 1536, vocab 49152,
tied embeddings, rope theta 1e5), greedy `generate` with the KV cache on BATCH prompts of PROMPT
random tokens, exactly NEW new tokens each, on THREADS threads. One warm-up call, then the best of
ROUNDS timed calls. --dtype autocast runs it under torch.autocast bf16 (fp32 weights, bf16
matmuls: what loom's precision bf16 does), --dtype bf16 with the weights cast to bf16 (half the
bytes a decode step reads). --prompt-min M gives row r M + (PROMPT - M) r / (BATCH - 1) tokens,
left-padded with an attention mask (how transformers batches prompts of mixed lengths).
--device cuda runs it on the GPU (timed after a synchronize). Prints one line:
`tokens_per_s <generated tokens / s>`. Only a yardstick: loom never needs Python."""
import argparse, time
import torch
from smol_shapes import smol_model

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=2)
p.add_argument("--prompt", type=int, default=200)
p.add_argument("--prompt-min", type=int, default=0)
p.add_argument("--new", type=int, default=56)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=1)
p.add_argument("--dtype", choices=["fp32", "autocast", "bf16"], default="fp32")
p.add_argument("--device", default="cpu")
a = p.parse_args()
cuda = a.device.startswith("cuda")
sync = torch.cuda.synchronize if cuda else (lambda: None)
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as loom's precision fp32
model = smol_model(a.threads).eval().to(a.device)
if a.dtype == "bf16":
    model = model.to(torch.bfloat16)
ids = torch.randint(0, model.config.vocab_size, (a.batch, a.prompt))
mask = torch.ones_like(ids)
if 0 < a.prompt_min < a.prompt and a.batch > 1:
    for r in range(a.batch):
        pad = a.prompt - (a.prompt_min + (a.prompt - a.prompt_min) * r // (a.batch - 1))
        ids[r, :pad], mask[r, :pad] = 0, 0
ids, mask = ids.to(a.device), mask.to(a.device)
kw = dict(attention_mask=mask, do_sample=False, use_cache=True, pad_token_id=0)
with torch.inference_mode(), torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16,
                                             enabled=a.dtype == "autocast"):
    model.generate(ids[:, -8:], max_new_tokens=2, min_new_tokens=2,
                   **dict(kw, attention_mask=mask[:, -8:]))  # warm-up
    best = None
    for _ in range(a.rounds):
        sync()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw)
        sync()
        dt = time.perf_counter() - t0
        assert out.shape[1] == a.prompt + a.new
        best = dt if best is None or dt < best else best
print(f"tokens_per_s {a.batch * a.new / best:.2f}")
