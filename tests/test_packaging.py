"""The distribution ships every package and its entry points, installed or editable."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kiln_testing import pip_install_into

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"torchkiln": ROOT / "core"} | {
    f"torchkiln_{p.name}": p for p in (ROOT / "plugins").iterdir() if p.is_dir()
}


def declared_packages() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["tool"]["setuptools"]["packages"])


def package_folders() -> set[str]:
    found = set()
    for top, folder in PACKAGE_DIRS.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((top, *parts)))
    return found


def test_every_package_folder_is_declared_in_pyproject():
    assert package_folders() - declared_packages() == set()


def test_every_declared_package_exists():
    assert declared_packages() - package_folders() == set()


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> Path:
    """Build the wheel and install it into an empty folder (no editable finder involved)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("torchkiln-*.whl")
    site = tmp / "site"
    pip_install_into(site, wheel)
    return site


def test_wheel_installs_importable_packages_and_entry_points(installed_wheel, tmp_path):
    script = (
        "import importlib, torchkiln, torchkiln.registry\n"
        f"for name in sorted({declared_packages()!r}):\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(installed_wheel)!r}), (name, module.__file__)\n"
        "print(','.join(torchkiln.list_backends(exclude_tags=())))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(installed_wheel))
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    listed = set(out.stdout.strip().split(","))
    assert {"eager", "inductor", "onnxrt", "tvm", "openvino", "cudagraphs"} <= listed
