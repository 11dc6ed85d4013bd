#!/usr/bin/env python3
"""torch_ref.py: the PyTorch reference for bench/train.sh: loom's GPT-2 preset as PyTorch code (LayerNorm,
tanh-GELU MLP, learned positions over max_seq rows, tied head over the padded vocab, biases), the same
step (AdamW, decay on matrices only, global-norm clipping at 1), shape and thread count, trained on random
tokens. --mode eager or compile (torch.compile, inductor); attention by scaled_dot_product_attention where
torch has it (2.x), else written out (1.13). Prints `tokens_per_s <median>` (steps after the first two;
with compile, the first two hold the compilation) and, with --sgemm, torch's own matmul rate.
--device cuda runs the step on the GPU (timed to a synchronize; --tf32 lets its fp32 matmuls round
to TF32, as loom's precision tf32); --profile: the last step's kernels by time, on stderr. A yardstick only: loom never needs it, and it installs nothing."""
import argparse, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=12)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--width", type=int, default=768)
p.add_argument("--vocab", type=int, default=50304)
p.add_argument("--max-seq", type=int, default=1024)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--mode", choices=("eager", "compile"), default="eager")
p.add_argument("--bf16", action="store_true", help="forward and backward under torch.autocast bf16")
p.add_argument("--device", default="cpu")
p.add_argument("--tf32", action="store_true", help="GPU: fp32 matmuls and convolutions in TF32")
p.add_argument("--profile", action="store_true",
               help="time the last step's kernels with torch.profiler, a table on stderr (where its time goes)")
p.add_argument("--sgemm", action="store_true",
               help="only print torch's matmul GFLOP/s: 1536^3 A B^T, and on the model's shapes as bench_cpu_step --sgemm")
a = p.parse_args()
cuda = a.device.startswith("cuda")
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.tf32
torch.set_num_threads(a.threads)
torch.manual_seed(0)
SDPA = hasattr(F, "scaled_dot_product_attention")

class Block(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.H = H
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.register_buffer("mask", torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.H)
            y = att.masked_fill(s.mask[:T, :T], float("-inf")).softmax(-1) @ v
        x = x + s.o(y.transpose(1, 2).reshape(B, T, C))
        return x + s.proj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(a.vocab, a.width), nn.Embedding(a.max_seq, a.width)
        s.h = nn.ModuleList(Block(a.width, a.heads) for _ in range(a.layers))
        s.ln_f = nn.LayerNorm(a.width)
        s.register_buffer("pos", torch.arange(a.seq), persistent=False)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(s.pos[: idx.shape[1]])
        for b in s.h:
            x = b(x)
        logits = s.ln_f(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.view(-1, a.vocab), tgt.view(-1))

def mm_rate(M, N, K, tA, tB, beta, min_s=0.2):
    """best GFLOP/s of C = op(A) op(B) (+ C when beta), op = transpose where t*"""
    A = torch.rand(K, M).t() if tA else torch.rand(M, K)
    B = torch.rand(N, K).t() if tB else torch.rand(K, N)
    C = torch.zeros(M, N)
    run = (lambda: C.addmm_(A, B)) if beta else (lambda: torch.mm(A, B, out=C))
    run()
    best, t_all, it = 1e30, time.perf_counter(), 0
    while it < 2 or time.perf_counter() - t_all < min_s:
        t0 = time.perf_counter()
        run()
        best, it = min(best, time.perf_counter() - t0), it + 1
    return 2.0 * M * N * K / best / 1e9

def shapes_rate(L, C, N, V):
    """bench_cpu_step's shapes_rate: forward, input and weight gradient of qkv, o, fc, proj and the head"""
    flops = secs = 0.0
    for out, inp, per in ((3 * C, C, L), (C, C, L), (4 * C, C, L), (C, 4 * C, L), (V, C, 1)):
        f, o = 2.0 * N * out * inp * per, out if per != 1 else out // 4
        for r in (mm_rate(N, o, inp, 0, 1, 0), mm_rate(N, inp, o, 0, 0, 0), mm_rate(o, inp, N, 1, 0, 1)):
            flops, secs = flops + f, secs + f / r
    return flops / secs

if a.sgemm:
    print("torch_sgemm_gflops %.1f shapes_gflops %.1f" % (mm_rate(1536, 1536, 1536, 0, 1, 0),
          shapes_rate(a.layers, a.width, a.batch * a.seq, a.vocab)))
    raise SystemExit(0)
model = GPT().to(a.device)
decay = [q for q in model.parameters() if q.dim() == 2]
other = [q for q in model.parameters() if q.dim() < 2]
groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
try:  # the fused CPU AdamW (torch >= 2.4) is the fastest; older torch has only the loop
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), fused=True)
except (TypeError, RuntimeError):
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95))
fwd = torch.compile(model) if a.mode == "compile" else model
times = []
prof = None
for step in range(a.steps):
    if a.profile and step == a.steps - 1:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=a.bf16):
        loss = fwd(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if cuda:
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
if prof:
    import sys
    prof.__exit__(None, None, None)
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=30), file=sys.stderr)
skip = 2 if len(times) > 3 else 1
print("step_s " + " ".join("%.3f" % t for t in times))
print("tokens_per_s %.1f" % (a.batch * a.seq / statistics.median(times[skip:])))
