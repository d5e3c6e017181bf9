"""Who holds the reduce-overhead pool test's memory: active blocks by pool and allocating frame."""

import collections
import sys

import torch
from torch import nn

import torchkiln


class GraphBreak(nn.Module):
    def forward(self, x):
        print("graph break")
        return x


def where(frames):
    keep = [
        f
        for f in frames
        if f["filename"].endswith(".py")
        and "/torch/" not in f["filename"]
        and "pool_mem2" not in f["filename"]
    ]
    fs = keep[:6] if keep else frames[:3]
    return " < ".join(f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in fs)


def dump(tag):
    snap = torch.cuda.memory._snapshot()
    agg = collections.defaultdict(lambda: [0, 0])
    for s in snap["segments"]:
        pool = tuple(s.get("segment_pool_id", (0, 0)))
        for b in s["blocks"]:
            if b["state"] != "active_allocated":
                continue
            k = (pool, where(b.get("frames", [])))
            agg[k][0] += b["size"]
            agg[k][1] += 1
    print(
        "==",
        tag,
        "allocated",
        round(torch.cuda.memory_allocated() / 2**20),
        "reserved",
        round(torch.cuda.memory_reserved() / 2**20),
    )
    for (pool, w), (size, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  pool{pool} {size / 2**20:7.1f} MiB x{n}: {w}")


def holders():
    """Python objects holding tensors in the regular pool's blocks allocated by a warm-up."""
    import gc

    snap = torch.cuda.memory._snapshot()
    ranges = []
    for s in snap["segments"]:
        if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0):
            continue
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and "_warm_up" in where(b.get("frames", [])):
                ranges.append(
                    (
                        addr,
                        addr + b["size"],
                        b["size"],
                        [
                            f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}"
                            for f in b.get("frames", [])[:12]
                        ],
                    )
                )
            addr += b["size"]
    for lo, hi, size, frames in ranges:
        print(f"block {size / 2**20:.1f} MiB allocated at:", " < ".join(frames))
        for o in gc.get_objects():
            try:
                hit = (
                    isinstance(o, torch.Tensor)
                    and o.is_cuda
                    and lo <= o.untyped_storage().data_ptr() < hi
                )
            except Exception:
                continue
            if hit:
                print(
                    "   tensor",
                    tuple(o.shape),
                    "referrers:",
                    [type(r).__name__ for r in gc.get_referrers(o)][:6],
                )
                for r in gc.get_referrers(o)[:4]:
                    if isinstance(r, (list, tuple, dict)):
                        print(
                            "      container",
                            type(r).__name__,
                            len(r),
                            "held by",
                            [type(rr).__name__ for rr in gc.get_referrers(r)][:6],
                        )


def main(brk):
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(6)]
    model = nn.Sequential(*layers[:3], *([GraphBreak()] if brk else []), *layers[3:]).cuda()
    x = torch.randn(4096, 1024, device="cuda")
    compiled = torchkiln.compile(model, backend="aot_eager", mode="reduce-overhead")

    def step():
        for p in model.parameters():
            p.grad = None
        compiled(x).sum().backward()

    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    step()
    step()
    torch.cuda.synchronize()
    dump("after warm-up + record")
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    print(
        "replay step peak alloc",
        round(torch.cuda.max_memory_allocated() / 2**20),
        "peak reserved",
        round(torch.cuda.max_memory_reserved() / 2**20),
    )
    dump("after a replay")
    holders()


main(sys.argv[1] == "1")
