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

A backend that runs only some ops declares its :class:`Capabilities`; the core then
splits each graph and gives the rest to the next backend of the chain (eager when
the user named this backend alone)::

    from torchkiln.plugin import Backend, Capabilities

    def capabilities():                       # called once, on the first compile
        from my_package.converter import CONVERTERS, compile_aten_graph
        return Capabilities(
            compile_partition=compile_aten_graph,   # one functional aten graph
            ops=frozenset(CONVERTERS),              # aten overloads (or packets)
            supports=lambda node: "complex" not in str(node.meta["val"].dtype)
            or "complex tensors",                   # True, or the reason it can't
        )

    Backend("mybackend", capabilities=capabilities)   # no compile_fn: the core compiles

The hook specifications themselves live in :mod:`torchkiln.hookspecs`.
Keep the entry-point module light: import heavy dependencies inside the
compile function, so that listing backends stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from torchkiln.cache_seal import Damaged
from torchkiln.disk_cache import (
    cache_dir,
    discard,
    private_cache_dir,
    read_entry,
    scratch_dir,
    source_fingerprint,
    write_entry,
)
from torchkiln.options import check_options

if TYPE_CHECKING:
    from torchkiln.aot import ArtifactCodec

PROJECT_NAME = "torchkiln"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: The modes ``compile(mode=...)`` accepts, as in ``torch.compile``, and what each one does.
MODE_DESCRIPTIONS = {
    "default": "the backend's defaults",
    "reduce-overhead": (
        "CUDA graphs around the compiled graphs (fewer launches from Python, more memory); "
        "graphs on the CPU run without them, and say so once"
    ),
    "max-autotune": "the backend's slowest-to-compile, fastest-to-run settings, and CUDA graphs",
    "max-autotune-no-cudagraphs": "max-autotune without CUDA graphs",
}
MODES = tuple(MODE_DESCRIPTIONS)


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
    never a silent no-op. ``torchkiln.compile`` checks every given value
    against ``type`` (a bool is no int), ``choices`` and ``minimum``
    (``torchkiln.options.check_options``), so a compile function gets only
    values it can use.
    """

    name: str
    default: Any
    help: str
    type: type | tuple[type, ...] | None = None
    implemented: bool = True
    #: The values it accepts, where they are few (``None``: any of its type).
    choices: tuple[Any, ...] | None = None
    #: The least number it accepts (``None`` as a value is not compared).
    minimum: int | float | None = None
    #: A :class:`RuntimeWrapper`'s name: when the option's value (given, or its default) is
    #: true, the core applies that wrapper around the compiled graphs, and the compile
    #: function never sees the option.
    runtime_wrapper: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """Which nodes of a graph a backend runs, and how it compiles a part of a graph.

    The core traces the graph with the ``torchkiln.aot`` layer (``decompositions()``,
    default ``torchkiln.aot.default_decompositions()``), cuts each forward, backward
    and inference graph into partitions of supported nodes and of the others
    (``torchkiln.partition``), and calls ``compile_partition(gm, example_inputs,
    **options)`` on each supported partition: a functional aten graph with the
    conventions of a ``torchkiln.aot`` compiler (flat tensors in, a tuple out, fake
    ``example_inputs``). A partition whose compile raises goes to the next backend.

    A node (``call_function`` of an aten overload, with ``meta["val"]``) is supported
    when its overload, or its overload packet, is in ``ops`` (if ``ops`` is given) and
    ``supports(node)`` is ``True`` (if given); a string from ``supports`` is the
    reason it is not, shown in the partition plan (``TORCHKILN_LOGS=partitions``).

    ``configure(options)``, if given, returns the capabilities under the options the
    backend compiles with (an option that turns ops off, say); the core calls it once
    per compiled model, before any graph is split.

    ``codec`` (a :class:`torchkiln.aot.ArtifactCodec`), if given, stores compiled
    partitions in the on-disk plan cache, so that a second process compiling the same
    model converts nothing: ``dump(compiled)`` returns a picklable artifact (``None``:
    this one can't be stored), ``load(artifact)`` the callable again, without converting;
    ``salt`` names the code that made it (the plugin's source fingerprint, its runtime's
    version). The core adds the backend's name and options to the key
    (``torchkiln.chain_cache``).

    ``saves_for_others`` (training, the chain's first backend): a forward value that the
    backward reads only in ops this backend does not run is saved, not recomputed by the
    backward (``torchkiln.aot.MaterializingMinCut``): recomputed, it would be written out
    for the other backend anyway. Off by default (the plain min cut).
    """

    compile_partition: Callable[..., Callable]
    ops: Collection[Any] = ()
    supports: Callable[[Any], bool | str] | None = None
    decompositions: Callable[[], Mapping[Any, Callable]] | None = None
    configure: Callable[[Mapping[str, Any]], Capabilities] | None = None
    codec: ArtifactCodec | None = None
    saves_for_others: bool = False

    def __post_init__(self) -> None:
        if not self.ops and self.supports is None:
            raise TypeError(
                "Capabilities needs ops=(the aten overloads it compiles), supports=(a "
                "predicate), or both; a backend that runs every op declares no Capabilities"
            )

    def verdict(self, node: Any) -> bool | str:
        """``True`` when the backend runs ``node``, else the reason it does not."""
        if self.ops:
            packet = getattr(node.target, "overloadpacket", None)
            if node.target not in self.ops and packet not in self.ops:
                return "not among its ops"
        if self.supports is None:
            return True
        verdict = self.supports(node)
        return verdict if isinstance(verdict, str) else bool(verdict) or "rejected by supports()"


@dataclass(frozen=True)
class Backend:
    """A backend as a plugin declares it.

    ``compile_fn(gm, example_inputs, **options) -> callable`` has the
    torch.compile backend signature; options are only passed when the user
    gave some (or a mode maps to some), so a plain torch.compile backend
    function works unchanged. A backend gives either ``compile_fn`` (it compiles
    whole graphs) or ``capabilities`` (the core partitions and calls its
    ``compile_partition``), never both: one of them would never be called.

    ``options`` is the schema of accepted option keys; ``None`` means the
    backend accepts no options. ``modes`` maps each supported mode name to
    the options it stands for; a backend without ``modes`` supports only the
    default mode.

    ``capabilities`` (a :class:`Capabilities`, or a function returning one, so that
    the entry-point module imports nothing heavy) says the backend runs only some
    ops: the core partitions graphs for it. ``None``: it runs every graph whole.

    ``dynamic_shapes``: whether its compiler takes graphs whose inputs have symbolic sizes
    (``compile(dynamic=...)``). ``False``: the core hands it one graph specialized to each
    concrete size instead (``torchkiln.static_shapes``).

    ``data_dependent_sizes``: whether it takes graphs with sizes only the data gives (``nonzero``,
    ``x[mask]``: unbacked SymInts, ``config.capture_dynamic_output_shape_ops``); ``None``: as
    ``dynamic_shapes``. ``False``: the graph breaks at such ops for it.

    ``dtypes`` names the floating-point dtypes besides float32 that the backend runs
    (e.g. ``("bfloat16", "float16")``): the conformance kit (``torchkiln.testing``)
    checks them too.

    ``prepare(devices)``, if given, is called as the capture of a frame compiled for this
    backend begins, with the set of devices of the tensors among the frame's arguments: it
    starts slow one-time work the compile will need (a pool of compiler processes, say)
    in the background, so that it overlaps the capture. It must return at once.
    """

    name: str
    compile_fn: Callable[..., Callable] | None = None
    description: str = ""
    tags: tuple[str, ...] = ()
    requires: tuple[Requirement, ...] = ()
    device: str | None = None
    options: tuple[Option, ...] | None = None
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capabilities: Capabilities | Callable[[], Capabilities] | None = None
    dtypes: tuple[str, ...] = ()
    dynamic_shapes: bool = True
    data_dependent_sizes: bool | None = None
    prepare: Callable[[set[Any]], None] | None = None

    def __post_init__(self) -> None:
        if self.data_dependent_sizes is None:
            object.__setattr__(self, "data_dependent_sizes", self.dynamic_shapes)
        if (self.compile_fn is None) == (self.capabilities is None):
            given = "both" if self.compile_fn is not None else "neither"
            raise TypeError(
                f"Backend {self.name!r} got {given} of compile_fn and capabilities: give "
                "compile_fn for a backend that compiles whole graphs, or capabilities= for "
                "one that runs some ops (the core partitions graphs and calls its "
                "compile_partition)"
            )

    def option_schema(self) -> dict[str, Option]:
        return {opt.name: opt for opt in self.options or ()}


@dataclass(frozen=True)
class RuntimeWrapper:
    """A wrapper the core puts around *any* backend's compiled graphs, as a plugin declares it.

    ``make()`` is called once per compiled model (per ``torchkiln.compile`` configuration)
    and returns ``wrap(fn, kind) -> callable``, which holds what the model's graphs share
    (a CUDA graph memory pool, say). ``wrap`` gets each compiled callable and returns one
    that behaves the same, called the same way. ``kind`` says what ``fn`` is:

    * ``"forward"``, ``"backward"``, ``"inference"``: a graph of ``torchkiln.aot`` (flat
      tensors in, a tuple or list of tensors out; forward and backward run with grad off);
    * ``"graph"``: the whole callable a backend that does not use ``torchkiln.aot``
      returned. The core calls it through the wrapper only when no gradient is needed
      (grad mode off, or no input requires grad), and says once why otherwise.

    ``modes`` are the ``compile(mode=...)`` values that stand for this wrapper alone on
    a backend that declares no options of its own for them; a backend that declares the
    mode asks for the wrapper through an option with ``runtime_wrapper=`` set.
    """

    name: str
    make: Callable[[], Callable[[Callable, str], Callable]]
    description: str = ""
    modes: tuple[str, ...] = ()


def tensors_check(
    expected: Sequence[tuple[int, tuple, int | None]],
) -> Callable[[list], bool] | None:
    """A C++ check that a list holds at each ``(position, layout, address)`` a strided
    tensor of ``layout`` (``(dtype, device, requires_grad, sizes, strides)``) whose data
    starts at ``address`` (unless None); None where the C++ guard module is not built
    (:func:`torchkiln.capture.native.tensors_check`). A runtime wrapper checking a model's
    parameters every call (CUDA graphs read them in place) pays nanoseconds, not Python's
    tenths of a microsecond a tensor attribute."""
    from torchkiln.capture import native

    return native.tensors_check(expected)


__all__ = [
    "MODES",
    "MODE_DESCRIPTIONS",
    "Backend",
    "Capabilities",
    "Damaged",
    "Option",
    "Requirement",
    "RuntimeWrapper",
    "cache_dir",
    "check_options",
    "discard",
    "hookimpl",
    "hookspec",
    "private_cache_dir",
    "read_entry",
    "scratch_dir",
    "source_fingerprint",
    "tensors_check",
    "write_entry",
]
