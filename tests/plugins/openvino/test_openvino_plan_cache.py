"""openvino graphs in the on-disk plan cache: a second process imports them, converting and
compiling nothing, with the properties they were compiled with."""

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
    import torchkiln_openvino.cache as cache
    import torchkiln_openvino.compiler as compiler

    converted, threads = [], []
    convert = compiler.convert
    compiler.convert = lambda *a, **k: converted.append(1) or convert(*a, **k)
    load = cache.load
    def counting_load(artifact):
        graph = load(artifact)
        if isinstance(graph, cache.OpenVINOGraph):  # not torch's, nor a choice of both
            threads.append(graph.compiled.get_property("INFERENCE_NUM_THREADS"))
        return graph
    cache.load = counting_load  # before the first compile builds the codec

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    compiled = torchkiln.compile(model, backend="openvino", options=json.loads(sys.argv[1]))
    torch.manual_seed(1)
    x = torch.randn(4, 8)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), list(model.parameters()))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), list(model.parameters())))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    counts = {"converted": len(converted), "threads": sorted(set(threads))}
    print(json.dumps({**counts, **torchkiln.counters["aot_cache"]}))
    """
)


def run(cache_dir, options) -> dict:
    """Compile, train a step and infer in a new process on ``cache_dir``: what it counted."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache_dir))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(options)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_imports_its_models_with_their_properties(tmp_path):
    cold = run(tmp_path, {"num_threads": 1})
    assert cold["converted"] > 0 and cold["stores"] == 2  # training and inference plans
    warm = run(tmp_path, {"num_threads": 1})
    assert warm["converted"] == 0 and warm["hits"] == 2
    assert warm["threads"] == [1]  # imported with the threads it was compiled with
