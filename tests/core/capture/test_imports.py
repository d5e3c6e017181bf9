"""Import statements inside a captured frame bind what ``__import__`` binds: the named
module when names are imported from it, its top-level package otherwise, and for a
relative import the module of the frame's own package (never a top-level module that
happens to share its name)."""

import importlib
import os
import sys
import textwrap

import pytest
import torch

import torchkiln


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``kilnpkg`` with a module ``os`` of its own and a submodule not imported."""
    root = tmp_path / "kilnpkg"
    root.mkdir()
    files = {
        "__init__.py": "from . import helpers\n",
        "helpers.py": "SCALE = 3.0\n",
        "os.py": "sep = 'inner'\n",
        "later.py": "OFFSET = 5.0\n",
        "user.py": """
            def relative(x):
                from .helpers import SCALE
                from . import helpers
                return x * SCALE + helpers.SCALE

            def same_name_as_stdlib(x):
                from .os import sep
                return x + len(sep)

            def submodule_not_imported_yet(x):
                from . import later
                return x + later.OFFSET
        """,
    }
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("kilnpkg.user")
    for name in [m for m in sys.modules if m == "kilnpkg" or m.startswith("kilnpkg.")]:
        del sys.modules[name]


def test_from_a_dotted_module_binds_the_module_itself(backend):
    def f(x):
        from torch.nn.functional import relu

        return relu(x)

    x = torch.randn(4)
    torch.testing.assert_close(torchkiln.compile(f, backend=backend, fullgraph=True)(x), x.relu())


def test_from_a_dotted_package_binds_a_class_defined_in_a_submodule(backend):
    def f(x):
        from torch.nn.modules import Linear

        return x + 1, Linear

    out, cls = torchkiln.compile(f, backend=backend, fullgraph=True)(torch.zeros(2))
    assert cls is torch.nn.Linear
    torch.testing.assert_close(out, torch.ones(2))


def test_import_of_a_dotted_name_binds_the_top_level_package(backend):
    def f(x):
        import os.path

        return x + len(os.sep), os

    out, module = torchkiln.compile(f, backend=backend, fullgraph=True)(torch.zeros(2))
    assert module is os
    torch.testing.assert_close(out, torch.full((2,), float(len(os.sep))))


def test_import_as_binds_the_submodule(backend):
    def f(x):
        import torch.nn.functional as F

        return F.relu(x)

    x = torch.randn(4)
    torch.testing.assert_close(torchkiln.compile(f, backend=backend, fullgraph=True)(x), x.relu())


def test_relative_imports_come_from_the_frames_package(package, backend):
    x = torch.randn(4)
    compiled = torchkiln.compile(package.relative, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), x * 3.0 + 3.0)


def test_a_relative_module_named_like_a_top_level_one_is_the_packages(package, backend):
    x = torch.randn(4)
    compiled = torchkiln.compile(package.same_name_as_stdlib, backend=backend)
    torch.testing.assert_close(compiled(x), x + len("inner"))


def test_a_submodule_imported_by_the_statement_itself_runs_in_python(package, backend):
    x = torch.randn(4)
    compiled = torchkiln.compile(package.submodule_not_imported_yet, backend=backend)
    torch.testing.assert_close(compiled(x), x + 5.0)
    assert "kilnpkg.later" in sys.modules
