"""What each of 2 gloo ranks runs for test_ddp: every scenario in one process group.

Starting processes and a group costs seconds; the scenarios share one start. Each
returns None when it matches uncompiled torch.distributed, else what differed.
"""

from __future__ import annotations

import os
import time
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.nn.parallel import DistributedDataParallel as DDP

import torchkiln

STEPS = 3
WIDTH = 32
#: bytes of one block's linear layers' parameters (attention, projection, MLP)
BLOCK_BYTES = 4 * (12 * WIDTH * WIDTH + 9 * WIDTH)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.up = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.down = torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        x = x + self.proj(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class Transformer(torch.nn.Module):
    def __init__(self, unused: bool = False):
        super().__init__()
        self.embed = torch.nn.Embedding(64, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(WIDTH, 64)
        self.unused = torch.nn.Linear(WIDTH, WIDTH) if unused else None

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _model(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return Transformer(**kwargs)


def _full(p: torch.Tensor) -> torch.Tensor:
    """A parameter's whole value: FSDP2 keeps each rank's shard (a DTensor)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()


def _train(model: torch.nn.Module, rank: int, accumulate: bool = False) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        tokens = torch.randint(0, 64, (2, 8), generator=gen)
        if accumulate:  # a micro-batch without all-reduce, then one with it
            with model.no_sync():
                model(tokens).logsumexp(-1).mean().backward()
        model(tokens).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
    return [_full(p) for p in model.parameters()]


def _compare(make, compiled, rank: int, **train_kwargs) -> None:
    torch.testing.assert_close(
        _train(compiled(make()), rank, **train_kwargs), _train(make(), rank, **train_kwargs)
    )


def _ddp(backend: str, outer: bool, **ddp_kwargs):
    def run(rank: int) -> tuple[int, int]:
        """Graph breaks and bucket subgraphs: DDP's forward is not traced, its module split."""
        torchkiln.reset()
        unused = ddp_kwargs.get("find_unused_parameters", False)
        make = lambda: DDP(_model(unused=unused), **ddp_kwargs)  # noqa: E731
        if outer:
            _compare(make, lambda ddp: torchkiln.compile(ddp, backend=backend), rank)
        else:
            compiled = lambda ddp: DDP(  # noqa: E731
                torchkiln.compile(ddp.module, backend=backend), **ddp_kwargs
            )
            _compare(make, compiled, rank)
        return sum(torchkiln.counters["graph_break"].values()), torchkiln.counters["ddp"][
            "subgraphs"
        ]

    return run


def _no_sync(rank: int) -> int:
    torchkiln.reset()
    make = lambda: DDP(_model())  # noqa: E731
    _compare(make, lambda ddp: torchkiln.compile(ddp, backend="aot_eager"), rank, accumulate=True)
    return sum(torchkiln.counters["graph_break"].values())


def _split(bucket_cap_mb: float, split: bool):
    """The subgraphs the bucket split made."""

    def run(rank: int) -> int:
        torchkiln.reset()
        torchkiln.config.ddp_bucket_split = split
        try:
            make = lambda: DDP(_model(), bucket_cap_mb=bucket_cap_mb)  # noqa: E731
            _compare(make, lambda ddp: torchkiln.compile(ddp, backend="aot_eager"), rank)
        finally:
            torchkiln.config.ddp_bucket_split = True
        return torchkiln.counters["ddp"]["subgraphs"]

    return run


def _fsdp2(backend: str, per_block: bool, compile_first: bool = False):
    """FSDP2: blocks and the root ``fully_shard``-ed (their all-gathers and reduce-scatters
    run in FSDP's hooks, outside the graphs), compiled whole or block by block; with
    ``compile_first``, each block is compiled before ``fully_shard`` (torchtitan's order)."""

    def run(rank: int) -> int:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torchkiln.reset()
        mesh = init_device_mesh("cpu", (2,))

        def make(compile_blocks: bool = False):
            model = _model()
            for i, block in enumerate(model.blocks):
                if compile_blocks:
                    model.blocks[i] = block = torchkiln.compile(block, backend=backend)
                fully_shard(block, mesh=mesh)
            return fully_shard(model, mesh=mesh)

        if compile_first:
            torch.testing.assert_close(
                _train(make(compile_blocks=True), rank), _train(make(), rank)
            )
            return torchkiln.counters["frames"]["ok"]

        def compiled(model):
            if not per_block:
                return torchkiln.compile(model, backend=backend)
            for i, block in enumerate(model.blocks):
                model.blocks[i] = torchkiln.compile(block, backend=backend)
            return model

        _compare(make, compiled, rank)
        return torchkiln.counters["frames"]["ok"]

    return run


GROUP = None


def _inplace_all_reduce(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def _functional_all_reduce(x):
    return funcol.all_reduce(x * 2, "sum", GROUP) + 1


def _functional_gather_scatter(x):
    gathered = funcol.all_gather_single(x + 1, 0, GROUP)
    return funcol.reduce_scatter_single(gathered * 2, "sum", 0, GROUP) * dist.get_rank()


def _collective(fn, group_factory=None):
    """``fn`` compiled matches eager; returns (graph breaks, recompiles) after two groups."""

    def run(rank: int) -> tuple[int, int]:
        global GROUP
        torchkiln.reset()
        compiled = torchkiln.compile(fn, backend="aot_eager")
        for group in (dist.group.WORLD, dist.new_group([0, 1])):
            GROUP = group
            x = torch.randn(4, 3)
            torch.testing.assert_close(compiled(x), fn(x))
        return (
            sum(torchkiln.counters["graph_break"].values()),
            torchkiln.counters["recompiles"]["total"],
        )

    return run


SCENARIOS = {
    "ddp_outer_aot_eager": _ddp("aot_eager", outer=True, bucket_cap_mb=BLOCK_BYTES / 2**20),
    "ddp_inner_aot_eager": _ddp("aot_eager", outer=False, bucket_cap_mb=BLOCK_BYTES / 2**20),
    "ddp_outer_inductor": _ddp("inductor", outer=True, bucket_cap_mb=BLOCK_BYTES / 2**20),
    "ddp_inner_inductor": _ddp("inductor", outer=False, bucket_cap_mb=BLOCK_BYTES / 2**20),
    "ddp_find_unused": _ddp("aot_eager", outer=True, find_unused_parameters=True),
    "ddp_static_graph": _ddp("aot_eager", outer=True, static_graph=True),
    "ddp_no_sync": _no_sync,
    "split_per_block": _split(BLOCK_BYTES / 2**20, split=True),
    "split_off": _split(BLOCK_BYTES / 2**20, split=False),
    "split_one_bucket": _split(25.0, split=True),
    "fsdp2_whole_aot_eager": _fsdp2("aot_eager", per_block=False),
    "fsdp2_blocks_inductor": _fsdp2("inductor", per_block=True),
    "fsdp2_compile_first_aot_eager": _fsdp2("aot_eager", per_block=True, compile_first=True),
    "inplace_all_reduce": _collective(_inplace_all_reduce),
    "functional_all_reduce": _collective(_functional_all_reduce),
    "functional_gather_scatter": _collective(_functional_gather_scatter),
}


def run_rank(rank: int, port: int, out_dir: str) -> None:
    """Run every scenario on this rank; write ``{name: result or error}`` to ``out_dir``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    results = {}
    for name, scenario in SCENARIOS.items():
        start = time.perf_counter()
        try:
            results[name] = {"ok": scenario(rank), "s": time.perf_counter() - start}
        except Exception:
            results[name] = {"error": traceback.format_exc()}
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()
