"""Where the CUDA graph pool's reserved memory goes (test_training_graphs_share_one_pool...)."""

import collections
import copy
import sys

import torch
import torch.nn as nn

import torchkiln


class GraphBreak(nn.Module):
    def forward(self, x):
        print("graph break", end="\r")
        return x


def peak_reserved(step, steps):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved() / 2**20, torch.cuda.max_memory_allocated() / 2**20


def train(m, x):
    def step():
        for p in m.parameters():
            p.grad = None
        m(x).sum().backward()

    return step


def segments(label):
    snap = torch.cuda.memory_snapshot()
    by_pool = collections.defaultdict(list)
    for s in snap:
        by_pool[tuple(s.get("segment_pool_id", (0, 0)))].append(s)
    print(
        f"--- {label}: reserved {torch.cuda.memory_reserved() / 2**20:.0f} allocated {torch.cuda.memory_allocated() / 2**20:.0f}"
    )
    for pool, segs in by_pool.items():
        total = sum(s["total_size"] for s in segs) / 2**20
        alloc = sum(s["allocated_size"] for s in segs) / 2**20
        print(f"  pool {pool}: {len(segs)} segments, {total:.0f} MiB, {alloc:.0f} allocated")
        for s in segs:
            blocks = " ".join(
                f"{b['size'] / 2**20:.1f}{'A' if b['state'] == 'active_allocated' else 'f'}"
                for b in s["blocks"]
            )
            print(f"    seg {s['total_size'] / 2**20:.0f} MiB: {blocks}")


def main(variant):
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(6)]
    model = nn.Sequential(*layers[:3], GraphBreak(), *layers[3:]).cuda()
    reference = copy.deepcopy(model)
    x = torch.randn(4096, 1024, device="cuda")
    eager = peak_reserved(train(reference, x), 3)
    for p in reference.parameters():
        p.grad = None
    del reference
    torch.cuda.empty_cache()
    if variant == "torch":
        compiled = torch.compile(model, mode="reduce-overhead")
    else:
        compiled = torchkiln.compile(model, backend=variant, mode="reduce-overhead")
    for _ in range(3):
        train(compiled, x)()
    kiln = peak_reserved(train(compiled, x), 3)
    print(
        f"{variant}: eager reserved/allocated {eager[0]:.0f}/{eager[1]:.0f} MiB, compiled {kiln[0]:.0f}/{kiln[1]:.0f}"
    )
    segments(variant)


if __name__ == "__main__":
    main(sys.argv[1])
