"""The on-disk compile cache: reuse across processes, atomic writes, damaged entries."""

import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
import uuid

import pytest
import torch

from torchkiln.disk_cache import read_entry
from torchkiln_inductor import cpp_build

SCRIPT = textwrap.dedent(
    """
    import time, torch, torch.nn.functional as F
    from inductor_testing import aten_graph
    from torchkiln_inductor.compile_fx import compile_fx

    def chain(x, w, b, lw, lb):
        return torch.softmax(F.layer_norm(F.gelu(x * w + b), (256,), lw, lb), -1) + {salt}

    args = [torch.randn(64, 256)] + [torch.randn(256) for _ in range(4)]
    gm = aten_graph(chain, *args)
    start = time.perf_counter()
    compiled = compile_fx(gm, args)
    elapsed = time.perf_counter() - start
    torch.testing.assert_close(compiled(*args)[0], chain(*args))
    print(elapsed)
    """
)


def _run(cache: str, salt: float) -> float:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=cache)
    tests_dir = os.path.dirname(__file__)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(salt=salt)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


def test_second_process_compiles_in_under_a_fifth_of_the_time(tmp_path):
    salt = uuid.uuid4().int % 1000 / 1000
    first = _run(str(tmp_path), salt)
    second = _run(str(tmp_path), salt)
    assert second < 0.2 * first, (first, second)


def test_concurrent_processes_share_one_entry(tmp_path):
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(tmp_path))
    code = (
        "from torchkiln_inductor.cpp_build import load_library\n"
        f"lib = load_library('extern \"C\" int f() {{ return 7; }} // {uuid.uuid4()}', 'O1')\n"
        "assert lib.f() == 7\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [p.wait() for p in procs] == [0, 0]
    libs = list(tmp_path.rglob("*.so"))
    assert len(libs) == 1
    assert not [p for p in tmp_path.rglob("tmp*")]


def test_damaged_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    source = f'extern "C" int g() {{ return 3; }} // {uuid.uuid4()}'
    key = cpp_build.cache_key(source, "O1")
    path = tmp_path / "cpp" / key[:2] / f"{key}.so"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")
    lib = cpp_build.load_library(source, "O1")
    assert lib.g() == 3
    assert read_entry(path)[:4] == b"\x7fELF"


def test_compiler_error_is_a_backend_failure(tmp_path, monkeypatch):
    from torchkiln.exc import BackendCompilerFailed

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    with pytest.raises(BackendCompilerFailed, match="C\\+\\+ compilation failed"):
        cpp_build.load_library(f"this is not C++ {uuid.uuid4()}", "O1")


def _kernels_source(count: int, salt: str, broken: int | None = None) -> str:
    """A prelude and ``count`` kernels ``kiln_k{i}`` (out = x * i + the prelude's constant) of
    about 1000 characters each; kernel ``broken`` does not compile."""
    prelude = f"// {salt}\ninline float kiln_offset() {{ return 0.5f; }}\n\n"
    padding = "\n".join(f"    // line {j} of the kernel's body" for j in range(30))
    kernels = [
        f'extern "C" void kiln_k{i}(const float* x, float* out) {{\n{padding}\n'
        f"    out[0] = x[0] * {i} + kiln_offset(){' +' if i == broken else ''};\n}}\n"
        for i in range(count)
    ]
    return prelude + "\n".join(kernels)


def test_a_large_source_compiles_in_parts_into_one_library(tmp_path, monkeypatch):
    """Kernels beyond a part's worth of source are dealt into translation units compiled at
    once, each with the prelude, and linked into the one library their source names."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_build, "usable_cores", lambda: 3)
    source = _kernels_source(24, str(uuid.uuid4()))
    parts = cpp_build._parts(source)
    assert len(parts) == 3
    assert sorted(k for part in parts for k in re.findall(r"kiln_k\d+", part)) == sorted(
        f"kiln_k{i}" for i in range(24)
    )
    assert all(part.startswith(source[: source.index('extern "C"')]) for part in parts)
    lib = cpp_build.load_library(source, "O1")
    x, out = ctypes.c_float(2.0), ctypes.c_float()
    for i in (0, 7, 23):
        getattr(lib, f"kiln_k{i}")(ctypes.byref(x), ctypes.byref(out))
        assert out.value == 2.0 * i + 0.5
    monkeypatch.setattr(cpp_build, "usable_cores", lambda: 1)
    assert cpp_build._parts(source) == [source]  # one core: one compiler run


def test_a_part_that_does_not_compile_is_a_backend_failure(tmp_path, monkeypatch):
    from torchkiln.exc import BackendCompilerFailed

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_build, "usable_cores", lambda: 2)
    source = _kernels_source(24, str(uuid.uuid4()), broken=5)
    assert len(cpp_build._parts(source)) == 2
    with pytest.raises(BackendCompilerFailed, match="C\\+\\+ compilation failed"):
        cpp_build.load_library(source, "O1")


MODEL_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch, torchkiln
    from torchkiln_inductor import cpp_build

    builds = []
    build = cpp_build._build
    cpp_build._build = lambda *a: (builds.append(a[1]), build(*a))

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    )
    compiled = torchkiln.compile(model)
    torch.manual_seed({seed})
    x = torch.randn(16, 32)
    loss = compiled(x).square().mean()
    loss.backward()
    # before the comparisons below: ``torch.testing.assert_close`` imports sympy
    generator = ("sympy", "torchkiln_inductor.compile_fx", "torchkiln_inductor.lowering")
    imported = [name for name in generator if name in sys.modules]
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x).square().mean()
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grads, [p.grad for p in model.parameters()])
    print(json.dumps({{"builds": len(builds), "imported": imported, **torchkiln.counters["aot_cache"]}}))
    """
)


def _run_model(cache: str, seed: int) -> dict:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=cache)
    out = subprocess.run(
        [sys.executable, "-c", MODEL_SCRIPT.format(seed=seed)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_training_a_model_traces_and_builds_nothing(tmp_path):
    first = _run_model(str(tmp_path), seed=1)
    assert first["builds"] == 2 and first["stores"] == 1 and first["misses"] == 1
    assert len(first["imported"]) == 3
    second = _run_model(str(tmp_path), seed=2)  # other input values: the same plan
    # nor does it import the compiler: the lowering, the code generators, sympy
    assert second == {"builds": 0, "imported": [], "hits": 1}


def test_lowered_ops_come_back_from_their_stored_names(tmp_path, monkeypatch):
    """The decomposition table (which keys the plan cache) is built from the lowered ops'
    names stored by the first process; names torch does not know make the lowering count
    them again."""
    from torchkiln.plugin import write_entry
    from torchkiln_inductor import backend
    from torchkiln_inductor.lowering import LOWERINGS

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    backend.lowered_ops.cache_clear()
    assert backend.lowered_ops() == frozenset(LOWERINGS)  # counted, and stored
    (entry,) = (tmp_path / "inductor").glob("lowered-ops-*")
    assert read_entry(entry).decode().split() == sorted(str(op) for op in LOWERINGS)
    write_entry(entry, b"aten.add.Tensor aten.mul.Tensor")
    backend.lowered_ops.cache_clear()
    assert backend.lowered_ops() == {torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor}
    write_entry(entry, b"aten.add.Tensor aten.no_such_op.default")
    backend.lowered_ops.cache_clear()
    assert backend.lowered_ops() == frozenset(LOWERINGS)
    backend.lowered_ops.cache_clear()
