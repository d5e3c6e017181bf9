"""Backends from other distributions: torchkiln's entry-point group and torch.compile's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kiln_testing import pip_install_into

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def third_party_site(tmp_path_factory) -> Path:
    """Install the fixture distributions into an empty folder, as pip would for a user."""
    site = tmp_path_factory.mktemp("third_party_site")
    for name in ("thirdparty_backend", "dynamo_style_backend"):
        # Build from a private copy: parallel test workers must not share build folders.
        source = shutil.copytree(FIXTURES / name, tmp_path_factory.mktemp("src") / name)
        pip_install_into(site, source)
    return site


def run_with_site(site: Path, code: str) -> str:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    )
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_third_party_plugin_is_listed(third_party_site):
    out = run_with_site(
        third_party_site,
        """
        import torchkiln
        print(torchkiln.list_backends())
        """,
    )
    assert "'thirdparty_recorder'" in out


def test_third_party_plugin_compiles_user_code(third_party_site):
    out = run_with_site(
        third_party_site,
        """
        import torch, torchkiln, kiln_thirdparty_backend
        fn = torchkiln.compile(lambda x: torch.sin(x) + 1, backend="thirdparty_recorder")
        x = torch.randn(5)
        torch.testing.assert_close(fn(x), torch.sin(x) + 1)
        print("graphs", len(kiln_thirdparty_backend.COMPILED_GRAPHS))
        """,
    )
    assert "graphs 1" in out


def test_torch_dynamo_backend_is_listed_as_experimental_torch_compat(third_party_site):
    out = run_with_site(
        third_party_site,
        """
        import torchkiln
        from torchkiln.registry import lookup_backend
        print("default", "dynamo_style" in torchkiln.list_backends())
        print("experimental", "dynamo_style" in torchkiln.list_backends(experimental=True))
        print("tags", lookup_backend("dynamo_style").tags)
        """,
    )
    assert "default False" in out
    assert "experimental True" in out
    assert "tags ('torch-compat', 'experimental')" in out


def test_torch_dynamo_backend_gets_gm_and_example_inputs(third_party_site):
    out = run_with_site(
        third_party_site,
        """
        import torch, torchkiln, dynamo_style_backend
        fn = torchkiln.compile(lambda x: x * 2, backend="dynamo_style")
        x = torch.randn(3)
        torch.testing.assert_close(fn(x), x * 2)
        (inputs,) = dynamo_style_backend.SEEN_EXAMPLE_INPUTS
        print("shapes", [tuple(t.shape) for t in inputs])
        """,
    )
    assert "shapes [(3,)]" in out
