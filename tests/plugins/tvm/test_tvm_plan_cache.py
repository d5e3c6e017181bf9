"""tvm graphs in the on-disk plan cache: a second process loads their libraries, building nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")

SCRIPT = textwrap.dedent(
    """
    import json
    import torch
    import torchkiln
    import torchkiln_tvm.compiler as compiler

    built = []
    compile_ = compiler.tvm.compile
    compiler.tvm.compile = lambda *a, **k: built.append(1) or compile_(*a, **k)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    compiled = torchkiln.compile(model, backend="tvm")
    torch.manual_seed(1)
    x = torch.randn(4, 8)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), list(model.parameters()))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), list(model.parameters())))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    print(json.dumps({"built": len(built), **torchkiln.counters["aot_cache"]}))
    """
)


def run(cache_dir) -> dict:
    """Compile, train a step and infer in a new process on ``cache_dir``: what it counted."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_loads_built_libraries(tmp_path):
    cold = run(tmp_path)
    assert cold["built"] > 0 and cold["stores"] == 2  # training and inference plans
    warm = run(tmp_path)
    assert warm["built"] == 0 and warm["hits"] == 2
