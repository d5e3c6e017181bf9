"""Compiled models under DDP and FSDP2 (gloo, 2 processes): training matches uncompiled."""

from __future__ import annotations

import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from tests.core.distributed import scenarios


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ranks")
    ranks = mp.start_processes(
        scenarios.run_rank,
        args=(_free_port(), str(out)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + 240
    while not ranks.join(timeout=5):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail("the 2 ranks did not finish in 240 s")
    return [torch.load(out / f"rank{rank}.pt") for rank in range(2)]


def _outcome(results: list[dict], name: str) -> list:
    for rank, got in enumerate(results):
        assert "error" not in got[name], f"rank {rank}:\n{got[name]['error']}"
    return [got[name]["ok"] for got in results]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_ddp_trains_like_ddp(results, backend):
    # DDP's forward runs eagerly (no graph break in it), its module split at the buckets
    breaks, subgraphs = _outcome(results, f"ddp_outer_{backend}")[0]
    assert breaks == 0 and subgraphs > 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_ddp_of_compiled_module_trains_like_ddp(results, backend):
    breaks, subgraphs = _outcome(results, f"ddp_inner_{backend}")[0]
    assert breaks == 0 and subgraphs > 1


@pytest.mark.parametrize("name", ["ddp_find_unused", "ddp_static_graph"])
def test_ddp_options_keep_working(results, name):
    breaks, _ = _outcome(results, name)[0]
    assert breaks == 0


def test_no_sync_accumulates_like_ddp(results):
    assert _outcome(results, "ddp_no_sync") == [0, 0]


@pytest.mark.parametrize(
    "name", ["fsdp2_whole_aot_eager", "fsdp2_blocks_inductor", "fsdp2_compile_first_aot_eager"]
)
def test_compiled_fsdp2_trains_like_fsdp2(results, name):
    # 3 SGD steps match uncompiled FSDP2 (parameters compared whole); frames were compiled
    assert all(frames > 0 for frames in _outcome(results, name))


def test_graph_split_at_buckets(results):
    # Parameters from the head back: 8448 (head) + 3 x 50816 (blocks, norms included) + 8192
    # (embedding) bytes; a bucket closes once it holds 50304 (BLOCK_BYTES): 4 buckets.
    # 25 MB: one bucket, no split.
    counts = [_outcome(results, name)[0] for name in ("split_per_block", "split_one_bucket")]
    assert counts == [4, 0]


def test_split_turned_off(results):
    assert _outcome(results, "split_off") == [0, 0]


def test_inplace_collective_breaks_the_graph(results):
    breaks, _ = _outcome(results, "inplace_all_reduce")[0]
    assert breaks >= 1


def test_functional_collectives_in_the_graph_guarded_by_group(results):
    for name in ("functional_all_reduce", "functional_gather_scatter"):
        breaks, recompiles = _outcome(results, name)[0]
        assert (breaks, recompiles) == (0, 1), name  # another group: another graph
