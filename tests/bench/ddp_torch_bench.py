#!/usr/bin/env python3
"""PyTorch DDP baseline for tests/bench/fsdp_bench: the same Llama shape
(preset "bench": d=256, 4 layers, 8 heads, 4 KV heads, ffn 688, vocab 4096,
untied head, fp32), seq 256, micro-batch 8 per rank, 2 processes x 1 thread,
DDP over gloo on loopback, AdamW. Prints tokens/s and model GFLOP/s counted as
shardd does: 6N + 12*L*d*T per token, N = parameters without the input
embedding.

Debian's PyTorch 1.13 (python3-torch) has no CPU FSDP and its gloo lacks
reduce-scatter, so DDP (all-reduce of gradient buckets overlapped with the
backward pass) is the fair CPU baseline.

usage: /usr/bin/python3 ddp_torch_bench.py [--steps 6] [--world 2]
"""
import argparse
import math
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, LAYERS, HEADS, KV_HEADS, FFN = 4096, 256, 4, 8, 4, 688
SEQ, MICRO, THETA, EPS = 256, 8, 10000.0, 1e-5


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rope_tables(seq, hd):
    inv = 1.0 / (THETA ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(seq).float(), inv)
    ang = torch.cat([ang, ang], dim=-1)  # HF rotate-half layout
    return ang.cos(), ang.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = D // HEADS
        self.attn_norm = RMSNorm(D)
        self.q = nn.Linear(D, HEADS * self.hd, bias=False)
        self.k = nn.Linear(D, KV_HEADS * self.hd, bias=False)
        self.v = nn.Linear(D, KV_HEADS * self.hd, bias=False)
        self.o = nn.Linear(HEADS * self.hd, D, bias=False)
        self.mlp_norm = RMSNorm(D)
        self.gate = nn.Linear(D, FFN, bias=False)
        self.up = nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, HEADS, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, KV_HEADS, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, KV_HEADS, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = HEADS // KV_HEADS
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        a = torch.softmax(s, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)  # untied
        cos, sin = rope_tables(SEQ, D // HEADS)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))


def rank_main(rank, world, steps, init_file, out_q):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.manual_seed(1234)
    model = Llama()
    n_matmul = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)

    def step():
        data = torch.randint(0, VOCAB, (MICRO, SEQ + 1), generator=g)
        logits = ddp(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(2):  # warm-up
        step()
    times = []
    for _ in range(steps):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        dt = torch.tensor([time.perf_counter() - t0, time.process_time() - c0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        times.append(tuple(dt.tolist()))
    if rank == 0:
        out_q.put((n_matmul, times))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shardd-ddp-bench-")
    init_file = os.path.join(tmp, "init")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a.world, a.steps, init_file, q)) for r in range(a.world)]
    for p in procs:
        p.start()
    n_matmul, times = q.get()
    for p in procs:
        p.join()
    cpu = sum(c for _, c in times) / len(times)
    times = [t for t, _ in times]
    mean = sum(times) / len(times)
    best = min(times)
    median = sorted(times)[len(times) // 2]
    tok = MICRO * a.world * SEQ
    flops = 6.0 * n_matmul + 12.0 * LAYERS * D * SEQ
    print("ddp_torch_bench: torch %s, DDP gloo, W=%d processes x 1 thread, N=%.2fM matmul params, seq %d, "
          "micro-batch %d per rank, %d timed steps" % (torch.__version__, a.world, n_matmul / 1e6, SEQ, MICRO,
                                                       a.steps))
    print("  %-14s step %7.1f ms (median %7.1f, best %7.1f)  tokens/s %7.0f (median %7.0f)  GFLOP/s %6.1f"
          "  cpu/step %7.1f ms" % ("ddp (torch)", mean * 1e3, median * 1e3, best * 1e3, tok / mean, tok / median,
                                   tok * flops / mean / 1e9, cpu * 1e3))


if __name__ == "__main__":
    main()
