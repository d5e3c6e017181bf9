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


def run(cache_dir, script: str = SCRIPT) -> dict:
    """Run ``script`` (by default: compile, train a step and infer) in a new process on
    ``cache_dir``: what it counted."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_loads_built_libraries(tmp_path):
    cold = run(tmp_path)
    assert cold["built"] > 0 and cold["stores"] == 2  # training and inference plans
    warm = run(tmp_path)
    assert warm["built"] == 0 and warm["hits"] == 2


#: Inference of a convolution and a linear layer, counting the calls of torch's kernels
#: (``extern_ops``) through wrappers registered over them before anything is built.
TORCH_KERNELS_SCRIPT = textwrap.dedent(
    """
    import collections, json
    import torch
    import tvm_ffi
    import torchkiln
    from torchkiln_tvm import extern

    calls = collections.Counter()
    for name, fn in ((extern.CONVOLUTION, extern.convolution), (extern.ADDMM, extern.addmm)):
        counted = lambda *args, name=name, fn=fn: calls.update([name]) or fn(*args)
        tvm_ffi.register_global_func(name, counted, override=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5)
    ).eval()
    compiled = torchkiln.compile(model, backend="tvm")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    print(json.dumps({"calls": calls, **torchkiln.counters["aot_cache"]}))
    """
)


def test_a_loaded_plan_calls_torch_kernels(tmp_path):
    """The library names torch's kernels; the new process's VM finds them registered
    (``test_second_process_loads_built_libraries`` loads such a plan with nothing but the
    plugin's own registration)."""
    from torchkiln_tvm import extern

    cold, warm = run(tmp_path, TORCH_KERNELS_SCRIPT), run(tmp_path, TORCH_KERNELS_SCRIPT)
    one_each = {extern.CONVOLUTION: 1, extern.ADDMM: 1}
    assert cold["stores"] == 1 and cold["calls"] == one_each
    assert warm["hits"] == 1 and warm["calls"] == one_each
