"""Helpers for the inductor tests: trace a function to aten and compile it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from torchkiln_inductor.backend import decompositions
from torchkiln_inductor.compile_fx import CompiledGraph, compile_fx
from torchkiln_inductor.options import parse_options

#: a test that runs CPU tensors through generated Triton kernels needs Triton's interpreter,
#: which ``tests/conftest.py`` turns on (before anything imports Triton) where there is no CUDA
#: device; where there is one, Triton compiles for it and the GPU runs these paths for real
needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs CPU tensors through Triton's interpreter (TRITON_INTERPRET=1, which "
    "tests/conftest.py sets on machines without CUDA)",
)


def aten_graph(fn: Callable, *args: Any) -> torch.fx.GraphModule:
    def flat(*a: Any) -> tuple:
        return tuple(pytree.tree_leaves(fn(*a)))

    with torch.no_grad():
        return make_fx(flat, decomposition_table=decompositions())(*args)


def compile_fn(fn: Callable, *args: Any, **options: Any) -> CompiledGraph:
    """``fn`` traced to a flat aten graph and compiled by the inductor pipeline."""
    return compile_fx(aten_graph(fn, *args), list(args), parse_options(options))


def check(
    fn: Callable, *args: Any, rtol: float | None = None, atol: float | None = None, **options: Any
) -> CompiledGraph:
    """Compile ``fn``, run it on fresh copies of ``args`` and compare with eager."""
    compiled = compile_fn(fn, *args, **options)
    expected = pytree.tree_leaves(fn(*args))
    actual = compiled(*args)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
    return compiled


def kernel_count(compiled: CompiledGraph) -> int:
    """Number of C++ kernel functions in the generated source."""
    return len(re.findall(r'extern "C" (?:void|int64_t) kiln_', compiled.artifact.cpp_source))


def live_storages(wrapper_source: str) -> list[int]:
    """How many buffer storages the generated wrapper holds after each of its lines, followed
    as Python runs them: a storage lives while any name is bound to it (``bufN = bufM`` and
    ``_view(bufM, ...)`` share bufM's), inputs aside."""
    storage_of: dict[str, int] = {}
    counts = []
    for line in wrapper_source.splitlines():
        for statement in line.split("#")[0].split(";"):
            statement = statement.strip()
            if m := re.match(r"(buf\d+) = (.*)", statement):
                shared = re.match(r"(?:_view\()?(buf\d+)\b", m.group(2))
                new = storage_of[shared.group(1)] if shared else len(counts) * 100 + len(storage_of)
                storage_of[m.group(1)] = new
            elif m := re.match(r"del (buf\d+)", statement):
                storage_of.pop(m.group(1), None)
        counts.append(len(set(storage_of.values())))
    return counts


#: A small MLP's first training step on the GPU, in a process of its own, compared with
#: eager's (outputs and input gradients); prints the Triton counters as JSON, and under
#: ``process`` whether the compiled step imported Triton
GPU_TRAINING_STEP = """
import json, sys, torch, torchkiln
from torchkiln import counters
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256), torch.nn.Linear(256, 8)
).cuda()
x = torch.randn(32, 64, device="cuda", requires_grad=True)
out = torchkiln.compile(model)(x).softmax(-1)
out.sum().backward()
counters["process"]["triton_imported"] = int("triton" in sys.modules)
grad, x.grad = x.grad, None
expected = model(x).softmax(-1)
expected.sum().backward()
torch.testing.assert_close(out, expected)
torch.testing.assert_close(grad, x.grad)
print(json.dumps({g: dict(counters[g]) for g in ("triton_binaries", "triton_launch", "process")}))
"""


def run_gpu_training_step(cache: Path, **env: str) -> dict[str, dict[str, int]]:
    """:data:`GPU_TRAINING_STEP` with torchkiln's and Triton's caches under ``cache``, and
    ``env``; its counters, by group."""
    environ = dict(
        os.environ,
        TORCHKILN_CACHE_DIR=str(cache / "kiln"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        **env,
    )
    environ.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-c", GPU_TRAINING_STEP]
    done = subprocess.run(command, env=environ, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])
