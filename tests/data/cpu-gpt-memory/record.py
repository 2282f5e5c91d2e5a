#!/usr/bin/env python3
"""Record small real CPU GPT training traces with the profiler's memory records (``profile_memory``).

The model and training step are those of the shared capture tool (``capture_gpt_traces.py``): a
GPT of ``--layers`` blocks (LN, qkv, SDPA causal, proj, LN, fc1, GELU, fc2), untied embeddings and
LM head, AdamW, ``zero_grad(set_to_none=True)``. What differs is *when* the profiler starts: with
``--profile-memory`` it starts before the model and optimizer are built, because PyTorch's CPU
allocator reports to the profiler only tensors allocated while memory profiling is on (a tensor
allocated earlier is never counted, and neither is its free). Starting first makes the records'
"Total Allocated" the process's whole tensor memory: weights, gradients, AdamW moments,
activations and temporaries. Set-up runs in a ``setup`` range outside the ``ProfilerStep#N`` ranges (written by this script,
as a profiler schedule would), so the steps are training iterations only (``ProfilerStep#1`` is
the first; it allocates the AdamW moments in its optimizer step).

    python record.py --out base --profile-memory --layers 4 --steps 3

Needs only torch (the CPU build).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, layers: int, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for i, block in enumerate(self.blocks):
            with torch.profiler.record_function(f"layer.{i}"):
                x = block(x)
        return self.head(self.ln(x))


def record(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = Path(args.out)
    raw = out / "rank0.pt.trace.json"
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=args.profile_memory,
    )
    prof.start()
    with torch.profiler.record_function("setup"):
        model = GPT(args.vocab, args.seq, args.layers, args.hidden, args.heads, args.ffn)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = torch.randint(0, args.vocab, (args.micro_batch, args.seq + 1))
    for step in range(1, args.steps + 1):
        # Without a profiler schedule there are no step ranges; write them as a scheduled run would.
        with torch.profiler.record_function(f"ProfilerStep#{step}"):
            for _ in range(args.microbatches):
                logits = model(data[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, args.vocab), data[:, 1:].reshape(-1))
                (loss / args.microbatches).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    prof.stop()
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    params = sum(p.numel() for p in model.parameters())
    return params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (created; must not exist or be empty)")
    p.add_argument("--profile-memory", action="store_true", help="record [memory] events (allocations)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=0, help="FFN width (default 4 x hidden)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--microbatches", type=int, default=1, help="gradient-accumulation steps per iteration")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads")
    p.add_argument("--steps", type=int, default=3, help="profiled iterations (the first creates AdamW state)")
    args = p.parse_args()
    args.ffn = args.ffn or 4 * args.hidden
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        p.error(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    params = record(args)
    config = {k: v for k, v in vars(args).items() if k != "out"}
    config.update(torch=torch.__version__, params=params, dtype="fp32", device="cpu")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {out} in {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
