"""onnxrt graphs in the on-disk plan cache: a second process converts nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torchkiln
    import torchkiln_onnxrt.compiler as compiler

    converted = []
    convert_graph = compiler.convert_graph
    compiler.convert_graph = lambda *a, **k: converted.append(1) or convert_graph(*a, **k)

    class AngleMLP(torch.nn.Module):
        # atan2 has no ONNX converter: the next backend of the chain runs it
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            y = torch.relu(self.fc1(x))
            return self.fc2(torch.atan2(y, y.flip(-1) + 1))

    torch.manual_seed(0)
    model = AngleMLP()
    compiled = torchkiln.compile(model, backend=json.loads(sys.argv[1]),
                                 options=json.loads(sys.argv[2]))
    torch.manual_seed(1)
    x = torch.randn(4, 8)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), list(model.parameters()))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), list(model.parameters())))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    print(json.dumps({"converted": len(converted), **torchkiln.counters["aot_cache"]}))
    """
)


def run(cache_dir, backend, options=None) -> dict:
    """Compile, train a step and infer in a new process on ``cache_dir``: what it counted."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache_dir))
    command = [sys.executable, "-c", SCRIPT, json.dumps(backend), json.dumps(options or {})]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_converts_nothing_and_other_options_miss(tmp_path):
    cold = run(tmp_path, "onnxrt")
    assert cold["converted"] > 0 and cold["stores"] == 2  # training and inference plans
    warm = run(tmp_path, "onnxrt")
    assert warm["converted"] == 0 and warm["hits"] == 2
    other = run(tmp_path, "onnxrt", {"graph_optimization_level": "basic"})
    assert other["converted"] > 0 and other.get("hits", 0) == 0


def test_chain_with_inductor_round_trips(tmp_path):
    cold = run(tmp_path, ["onnxrt", "inductor"])
    assert cold["converted"] > 0 and cold["stores"] == 2
    warm = run(tmp_path, ["onnxrt", "inductor"])
    assert warm["converted"] == 0 and warm["hits"] == 2


LOADER = textwrap.dedent(
    """
    import json, sys
    import torch
    import torchkiln

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    x = torch.randn(4, 8)
    with torch.no_grad():  # an inference plan: stored at its first call
        out = torchkiln.compile(model, backend="onnxrt")(x)
    heavy = ["onnx", "sympy", "torchkiln_onnxrt.converter"]
    imported = [m for m in heavy if m in sys.modules]
    torch.testing.assert_close(out, model(x))  # (it imports sympy itself, for DTensors)
    print(json.dumps({"imported": imported, **torchkiln.counters["aot_cache"]}))
    """
)


def test_a_process_loading_from_the_plan_cache_imports_no_converter(tmp_path):
    """Loading opens sessions on the stored bytes: onnx, sympy and the converter tables
    (most of such a process's first call when they were imported) stay out."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(tmp_path))
    results = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", LOADER], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = results
    assert "torchkiln_onnxrt.converter" in cold["imported"] and cold["stores"] == 1
    assert warm == {"imported": [], "hits": 1}
