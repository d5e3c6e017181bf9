"""tvm graphs in the plan cache: a second process loads their built library, building nothing.

A built graph is stored as its shared library (``export_library``: the VM's bytecode and
the compiled kernels in one ``.so``), the device it runs on, its outputs' layouts and
which outputs it copies. Loading writes the library into this process's own scratch
folder (where nobody else can swap it before it is loaded) and opens it with
``tvm.runtime.load_module``. The salt names this plugin's code, the TVM version and the
host's target (its ``-mcpu``: a library built for one CPU may not run on another).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import torch

import tvm
from torchkiln.aot import ArtifactCodec
from torchkiln.index_checks import IndexCheck
from torchkiln.plugin import scratch_dir, source_fingerprint
from torchkiln_tvm.runtime import TVMGraph
from torchkiln_tvm.targets import host

_names = itertools.count()


@dataclass(frozen=True)
class TVMArtifact:
    library: bytes
    device: torch.device
    #: the outputs' layouts, as meta tensors
    values: list[torch.Tensor]
    copies: frozenset[int]
    index_checks: tuple[IndexCheck, ...] = ()


def _library_path() -> Path:
    return scratch_dir() / f"tvm_{os.getpid()}_{next(_names)}.so"


def dump(compiled: object) -> TVMArtifact | None:
    if not isinstance(compiled, TVMGraph):
        return None
    path = _library_path()
    compiled.executable.export_library(str(path))
    try:
        return TVMArtifact(
            path.read_bytes(),
            compiled.device,
            compiled.values,
            compiled.copies,
            compiled.index_checks,
        )
    finally:
        path.unlink()


def load(artifact: TVMArtifact) -> TVMGraph:
    path = _library_path()
    path.write_bytes(artifact.library)
    module = tvm.runtime.load_module(str(path))
    return TVMGraph(
        module, artifact.device, artifact.values, artifact.copies, artifact.index_checks
    )


def codec() -> ArtifactCodec:
    salt = "|".join(
        ("tvm", source_fingerprint(str(Path(__file__).parent)), tvm.__version__, str(host()))
    )
    return ArtifactCodec(salt, dump=dump, load=load)
