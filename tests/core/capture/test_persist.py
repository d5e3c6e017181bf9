"""Captures kept on disk: a second process (or an emptied cache) loads them instead of
translating, and only when everything the capture assumed still holds."""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import torchkiln
from torchkiln.api import GraphCompiler
from torchkiln.backends.debug import eager
from torchkiln.capture import persist
from torchkiln.capture.dispatch import CaptureConfig, frame_cache


@pytest.fixture
def persisted(tmp_path, monkeypatch):
    """Captures kept on disk, in a directory of this test's own."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    return tmp_path


def stats() -> dict[str, int]:
    return dict(torchkiln.counters["capture_cache"])


class Block(nn.Module):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


class Stack(nn.Module):
    """Layers in a ModuleList, and a graph break (``print``) before the last step."""

    def __init__(self, n: int, scale: float = 2.0):
        super().__init__()
        self.layers = nn.ModuleList(Block(scale) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        print(end="")
        return x.sin() + 1


def run_compiled(model: nn.Module) -> None:
    """One call of the compiled model on fresh input, checked against eager."""
    x = torch.randn(4, 8)
    torch.testing.assert_close(torchkiln.compile(model, backend="eager")(x), model(x))


def test_an_emptied_cache_loads_the_stored_capture_for_a_new_instance(persisted):
    run_compiled(Stack(2))
    stored = stats()["stores"]
    assert stored >= 2  # the frame, and the resume function after the break
    breaks = dict(torchkiln.counters["graph_break"])
    torchkiln.reset()
    run_compiled(Stack(2))  # new weights: the loaded entry reads them, it bakes nothing in
    assert stats() == {"hits": stored}
    assert dict(torchkiln.counters["graph_break"]) == breaks


def test_a_record_for_fewer_layers_is_not_loaded_for_more(persisted):
    run_compiled(Stack(2))
    torchkiln.reset()
    run_compiled(Stack(3))  # the 2-layer graph would pass every guard but the layer list's
    assert stats()["misses"] >= 1


def test_a_layer_appended_after_capture_recompiles():
    model = Stack(2)
    compiled = torchkiln.compile(model, backend="eager")
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x), model(x))
    model.layers.append(Block())
    torch.testing.assert_close(compiled(x), model(x))


def test_a_changed_attribute_is_not_loaded(persisted):
    run_compiled(Stack(2, scale=2.0))
    torchkiln.reset()
    run_compiled(Stack(2, scale=3.0))
    assert stats()["misses"] >= 1


def scaled(x, k=2.0):
    return x * k


def calls_scaled(x):
    return scaled(x.cos())


def test_changed_default_arguments_of_an_inlined_function_are_not_loaded(persisted, monkeypatch):
    compiled = torchkiln.compile(calls_scaled, backend="eager")
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x.cos() * 2.0)
    torchkiln.reset()
    monkeypatch.setattr(scaled, "__defaults__", (3.0,))
    torch.testing.assert_close(compiled(x), x.cos() * 3.0)
    assert stats() == {"misses": 1, "stores": 1}


def apply(x, fn):
    return fn(x) + 1


def multiplier(k):
    return lambda t: t * k


def test_a_function_guarded_by_identity_is_loaded_by_its_code_and_held_weakly(persisted):
    compiled = torchkiln.compile(apply, backend="eager")
    double = multiplier(2)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x, double), x * 2 + 1)
    assert stats() == {"misses": 1, "stores": 1}
    torchkiln.reset()
    torch.testing.assert_close(compiled(x, double), x * 2 + 1)
    assert stats() == {"hits": 1}
    del double  # the loaded entry holds it weakly and goes with it
    gc.collect()
    assert frame_cache(apply.__code__).all_entries() == []
    torch.testing.assert_close(compiled(x, multiplier(3)), x * 3 + 1)


def test_editing_a_file_the_capture_read_invalidates_the_record(persisted, tmp_path, monkeypatch):
    """The frame's own code is unchanged; the helper it inlined, in another file, is not."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "kiln_persist_main.py").write_text(
        "from kiln_persist_helper import helper\n\ndef f(x):\n    return helper(x) + 1\n"
    )
    helper = src / "kiln_persist_helper.py"
    helper.write_text("def helper(x):\n    return x.sin()\n")
    monkeypatch.syspath_prepend(str(src))

    def fresh_f():
        for name in ("kiln_persist_main", "kiln_persist_helper"):
            sys.modules.pop(name, None)
        return importlib.import_module("kiln_persist_main").f

    x = torch.randn(5)
    torch.testing.assert_close(torchkiln.compile(fresh_f(), backend="eager")(x), x.sin() + 1)
    helper.write_text("def helper(x):\n    return x.cos() * 2.0\n")
    os.utime(helper, ns=(helper.stat().st_atime_ns, helper.stat().st_mtime_ns + 10**9))
    torchkiln.reset()
    torch.testing.assert_close(torchkiln.compile(fresh_f(), backend="eager")(x), x.cos() * 2 + 1)
    assert stats() == {"misses": 1, "stores": 1}


def test_an_edit_that_keeps_size_and_modification_time_invalidates_the_record(
    persisted, tmp_path, monkeypatch
):
    """As ``tar``, ``rsync -a`` or Nix leave a file: only its content tells the edit. The
    method is reached through a module and an instance made in the frame: no recipe names
    its code, only the file it came from does."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "kiln_persist_user.py").write_text(
        "import kiln_persist_lib\n\ndef f(x):\n    return kiln_persist_lib.Op().apply(x) + 1\n"
    )
    lib = src / "kiln_persist_lib.py"
    lib.write_text("class Op:\n    def apply(self, x):\n        return x.sin()\n")
    monkeypatch.syspath_prepend(str(src))

    def fresh_f():
        for name in ("kiln_persist_user", "kiln_persist_lib"):
            sys.modules.pop(name, None)
        return importlib.import_module("kiln_persist_user").f

    x = torch.randn(5)
    torch.testing.assert_close(torchkiln.compile(fresh_f(), backend="eager")(x), x.sin() + 1)
    before = lib.stat()
    lib.write_text("class Op:\n    def apply(self, x):\n        return x.cos()\n")
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (lib.stat().st_size, lib.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    torchkiln.reset()
    torch.testing.assert_close(torchkiln.compile(fresh_f(), backend="eager")(x), x.cos() + 1)
    assert stats() == {"misses": 1, "stores": 1}


class Table:
    values = torch.arange(4.0)


class WithClassTensor(nn.Module):
    def forward(self, x):
        return x + Table().values  # read through an object made in the frame: no source


def test_a_capture_holding_a_tensor_constant_is_not_kept(persisted):
    model = WithClassTensor()
    x = torch.randn(4)
    torch.testing.assert_close(torchkiln.compile(model, backend="eager")(x), x + Table.values)
    assert stats() == {"misses": 1, "unportable": 1}


def test_a_callable_backend_keeps_nothing(persisted):
    x = torch.randn(3)
    compiled = torchkiln.compile(lambda x: x.sin(), backend=lambda gm, inputs: gm)
    torch.testing.assert_close(compiled(x), x.sin())
    assert stats() == {}
    assert not (persisted / "capture").exists()


def test_a_damaged_record_is_rebuilt(persisted):
    run_compiled(Stack(2))
    records = list((persisted / "capture").rglob("*.pkl"))
    assert records
    for path in records:
        path.write_bytes(b"not a record")
    torchkiln.reset()
    run_compiled(Stack(2))
    torchkiln.reset()
    run_compiled(Stack(2))
    assert stats()["hits"] >= 2


def test_backend_options_are_part_of_the_key(persisted):
    code = Stack.forward.__code__
    plain = CaptureConfig(GraphCompiler("eager", eager), fullgraph=False)
    other = CaptureConfig(GraphCompiler("eager", eager, {"level": 1}), fullgraph=False)
    full = CaptureConfig(GraphCompiler("eager", eager), fullgraph=True)
    paths = {persist.record_path(code, cfg) for cfg in (plain, other, full)}
    assert len(paths) == 3
    unnamed = CaptureConfig(GraphCompiler("mine", lambda gm, inputs: gm), fullgraph=False)
    assert persist.record_path(code, unnamed) is None


TRAINING_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch, torch.nn as nn
    import torchkiln

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

        def forward(self, x):
            h = self.body(x)
            print(end="")  # a graph break: two frames to load
            return torch.log_softmax(h, -1)

    torch.manual_seed(int(sys.argv[1]))
    model, x = Net(), torch.randn(8, 16)
    reference = Net()
    reference.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="aot_eager")
    compiled(x).sum().backward()
    reference(x).sum().backward()
    torch.testing.assert_close(compiled(x), reference(x))
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    print(json.dumps(dict(torchkiln.counters["capture_cache"])))
    """
)


def test_a_second_process_loads_every_frame_and_trains_like_eager(tmp_path):
    """New process, new model objects, new weights: all frames load, forward and grads match."""
    env = {**os.environ, "TORCHKILN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TORCHKILN_PERSIST_CAPTURES", None)
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    results = []
    for seed in ("0", "1"):
        done = subprocess.run(
            [sys.executable, str(script), seed],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = results
    assert first["stores"] >= 2 and "hits" not in first
    assert second == {"hits": first["stores"]}


def test_a_cache_directory_that_cannot_be_written_costs_nothing_but_time(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache directory's path is a file: every write fails
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(blocked))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    run_compiled(Stack(2))
    assert "stores" not in stats()


class Patched:
    def method(self, x):
        return x * 2


def calls_patched_method(x):
    return PATCHED.method(x)


PATCHED = Patched()


def test_a_method_rebound_since_capture_is_not_loaded(persisted, monkeypatch):
    """A record's functions are found again by name: a name rebound since then (a
    monkeypatched method) names other code, and the record must not be used."""
    x = torch.randn(3)
    torchkiln.compile(calls_patched_method, backend="eager")(x)
    torchkiln.reset()
    monkeypatch.setattr(Patched, "method", lambda self, x: x - 1)
    assert_close(torchkiln.compile(calls_patched_method, backend="eager")(x), x - 1)
    assert stats()["misses"] >= 1 and stats().get("hits", 0) == 0


def test_a_loaded_capture_marks_parameters_and_buffers_as_weights(persisted):
    """Backends may fold ``meta["weight"]`` placeholders (openvino's ``freeze_weights``)."""
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).eval()
    marks = []
    for _ in range(2):
        torchkiln.reset()
        torchkiln.compile(model, backend="eager")(torch.randn(4, 8))
        (entry,) = frame_cache(type(model).forward.__code__).all_entries()
        (gm,) = entry.graphs
        marks.append([n.meta.get("weight") for n in gm.graph.find_nodes(op="placeholder")])
    assert stats() == {"hits": 1}
    # the input; linear's weight and bias; batch norm's weight, bias, mean and variance
    assert marks == [[False] + [True] * 6] * 2


class Scaled(nn.Module):
    """A forward that reads a property: its guard holds the class's ``property`` object."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @property
    def factor(self) -> float:
        return 3.0

    def forward(self, x):
        return self.lin(x) * self.factor


def test_a_capture_reading_a_property_is_kept_and_found_again_through_its_class(persisted):
    x = torch.randn(2, 4)
    run = lambda model: assert_close(torchkiln.compile(model, backend="eager")(x), model(x))  # noqa: E731
    run(Scaled())
    assert stats() == {"misses": 1, "stores": 1}
    torchkiln.reset()
    run(Scaled())
    assert stats() == {"hits": 1}


def test_a_property_replaced_since_capture_is_not_loaded(persisted, monkeypatch):
    x = torch.randn(2, 4)
    model = Scaled()
    torchkiln.compile(model, backend="eager")(x)
    torchkiln.reset()
    monkeypatch.setattr(Scaled, "factor", property(lambda self: -1.0))
    assert_close(torchkiln.compile(model, backend="eager")(x), model.lin(x) * -1.0)
    assert stats()["misses"] >= 1 and stats().get("hits", 0) == 0


def test_a_loaded_record_brings_its_hoisted_guards(persisted, monkeypatch):
    """Loading compiles the guard text the record stored: rewriting every guard again was a
    large part of a warm start for models with many parameters."""
    from torchkiln.capture import guards

    run_compiled(Stack(2))
    torchkiln.reset()

    def no_rewrite(*args):
        raise AssertionError("a loaded record's guards were hoisted again")

    monkeypatch.setattr(guards, "hoist", no_rewrite)
    run_compiled(Stack(2))
    assert stats()["hits"] >= 2
