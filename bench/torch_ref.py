#!/usr/bin/env python3
"""torch_ref.py: the PyTorch reference for bench/train.sh: the same GPT-2 style model (LayerNorm,
tanh-GELU MLP, learned positions, tied embeddings, biases), shape, optimizer (AdamW) and thread
count as the loom run, trained on random tokens. Prints one line: `tokens_per_s <median>`.
Run with Debian's python3-torch (/usr/bin/python3); it is only a yardstick, loom never needs it."""
import argparse, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=12)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--width", type=int, default=768)
p.add_argument("--vocab", type=int, default=50304)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.H = H
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + s.o((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.proj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(a.vocab, a.width), nn.Embedding(a.seq, a.width)
        s.h = nn.ModuleList(Block(a.width, a.heads) for _ in range(a.layers))
        s.ln_f = nn.LayerNorm(a.width)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h:
            x = b(x)
        logits = s.ln_f(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.view(-1, a.vocab), tgt.view(-1))

model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
times = []
for step in range(a.steps):
    idx = torch.randint(0, 256, (a.batch, a.seq))
    tgt = torch.randint(0, 256, (a.batch, a.seq))
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(idx, tgt)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print("tokens_per_s %.1f" % (a.batch * a.seq / statistics.median(times[1:])))
