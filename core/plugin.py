"""What a backend plugin needs: the hook markers and the records it returns.

A plugin is any module (or object) whose functions carry ``@hookimpl`` and
which is named by an entry point in the group ``torchkiln.backends``::

    # pyproject.toml of a third-party package
    [project.entry-points."torchkiln.backends"]
    mybackend = "my_package.torchkiln_plugin"

    # my_package/torchkiln_plugin.py
    from torchkiln.plugin import Backend, hookimpl

    def compile_graph(gm, example_inputs, **options):
        return gm.forward

    @hookimpl
    def torchkiln_backends():
        return [Backend("mybackend", compile_graph, description="runs the graph as is")]

The hook specifications themselves live in :mod:`torchkiln.hookspecs`.
Keep the entry-point module light: import heavy dependencies inside the
compile function, so that listing backends stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from torchkiln.disk_cache import cache_dir, source_fingerprint

PROJECT_NAME = "torchkiln"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: The modes ``compile(mode=...)`` accepts, as in ``torch.compile``.
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class Requirement:
    """A Python package a backend imports, and the pip extra that installs it."""

    module: str
    extra: str | None = None

    def install_hint(self) -> str:
        if self.extra:
            return f"pip install 'torchkiln[{self.extra}]'"
        return f"pip install {self.module}"


@dataclass(frozen=True)
class Option:
    """One key of a backend's option schema.

    ``implemented=False`` declares a known option whose behaviour is not
    built yet: passing it with a value other than its default is an error,
    never a silent no-op.
    """

    name: str
    default: Any
    help: str
    type: type | tuple[type, ...] | None = None
    implemented: bool = True


@dataclass(frozen=True)
class Backend:
    """A backend as a plugin declares it.

    ``compile_fn(gm, example_inputs, **options) -> callable`` has the
    torch.compile backend signature; options are only passed when the user
    gave some (or a mode maps to some), so a plain torch.compile backend
    function works unchanged.

    ``options`` is the schema of accepted option keys; ``None`` means the
    backend accepts no options. ``modes`` maps each supported mode name to
    the options it stands for; a backend without ``modes`` supports only the
    default mode.
    """

    name: str
    compile_fn: Callable[..., Callable]
    description: str = ""
    tags: tuple[str, ...] = ()
    requires: tuple[Requirement, ...] = ()
    device: str | None = None
    options: tuple[Option, ...] | None = None
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def option_schema(self) -> dict[str, Option]:
        return {opt.name: opt for opt in self.options or ()}


__all__ = [
    "MODES",
    "Backend",
    "Option",
    "Requirement",
    "cache_dir",
    "hookimpl",
    "hookspec",
    "source_fingerprint",
]
