"""Which dimensions of a graph input a capture makes symbolic, as torch.compile decides.

- ``dynamic=False``: every size is a constant of the entry (guarded exactly).
- ``dynamic=True``: every dimension of every input is symbolic from the first call,
  except those of parameters and buffers (a model's weights do not change size).
- ``dynamic=None`` (the default, *automatic dynamic*): the first capture of a frame is
  static; a dimension whose size differs from the one an earlier capture of the same
  frame saw (same source) is symbolic in every later capture.

On top of the knob, marks on a tensor (``mark_dynamic``, ``maybe_mark_dynamic``,
``mark_static``) decide its own dimensions. Sizes 0 and 1 are always specialized (the
ShapeEnv's rule, as in torch): a symbolic dimension is at least 2.

Sizes can also come from the data: ``nonzero``, ``x[mask]``, ``unique`` return tensors whose
size only the run knows. With ``config.capture_dynamic_output_shape_ops`` such ops stay in
the graph, their sizes *unbacked* SymInts (no input size gives them, nothing may guard on
them); without it, or for a backend that takes static shapes only, the graph breaks there
(``data_dependent_break``).

The policy of the capture under way is a context variable that ``dispatch`` sets around
each capture (graph-break resume frames are captured with their own).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from torchkiln import config

#: Tensor attributes holding the marks: ``{dim: (min, max)}``, ``{dim}``, ``{dim}``.
_DYNAMIC, _MAYBE_DYNAMIC, _STATIC = (
    "_torchkiln_dynamic",
    "_torchkiln_maybe_dynamic",
    "_torchkiln_static",
)

#: A dimension's bounds: ``(min, max)``, ``max`` None for unbounded.
Bounds = tuple[int, int | None]


def _check_dim(t: torch.Tensor, dim: int, fn: str) -> int:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn} takes a tensor, got {type(t).__name__}")
    if not isinstance(dim, int) or not -t.dim() <= dim < max(t.dim(), 1):
        raise IndexError(f"{fn}: dim {dim!r} is out of range for a {t.dim()}-d tensor")
    return dim % t.dim()


def _marks(t: torch.Tensor, name: str, empty: type) -> dict | set:
    if name not in t.__dict__:
        setattr(t, name, empty())
    return getattr(t, name)


def mark_dynamic(t: torch.Tensor, dim: int, *, min: int | None = None, max: int | None = None):
    """Compile dimension ``dim`` of ``t`` symbolically, within ``[min, max]`` (guarded: a size
    outside the bounds recompiles). Its size now must be in the bounds and not 0 or 1."""
    dim = _check_dim(t, dim, "mark_dynamic")
    size = t.size(dim)
    low = 2 if min is None else min
    if low < 2 or (max is not None and max < low):
        raise ValueError(
            f"mark_dynamic(dim={dim}, min={min}, max={max}): bounds must satisfy 2 <= min <= max "
            "(sizes 0 and 1 are always specialized)"
        )
    if size < 2:
        raise ValueError(
            f"mark_dynamic: dimension {dim} has size {size}, and sizes 0 and 1 are specialized; "
            "use torchkiln.maybe_mark_dynamic to allow that"
        )
    if not low <= size <= (size if max is None else max):
        raise ValueError(
            f"mark_dynamic: dimension {dim} has size {size}, outside the bounds [{low}, {max}]"
        )
    _marks(t, _DYNAMIC, dict)[dim] = (low, max)
    _marks(t, _STATIC, set).discard(dim)


def maybe_mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Compile dimension ``dim`` of ``t`` symbolically unless its size is 0 or 1."""
    dim = _check_dim(t, dim, "maybe_mark_dynamic")
    _marks(t, _MAYBE_DYNAMIC, set).add(dim)
    _marks(t, _STATIC, set).discard(dim)


def mark_static(t: torch.Tensor, dim: int) -> None:
    """Specialize dimension ``dim`` of ``t`` whatever ``dynamic=`` and earlier sizes say."""
    dim = _check_dim(t, dim, "mark_static")
    _marks(t, _STATIC, set).add(dim)
    _marks(t, _DYNAMIC, dict).pop(dim, None)
    _marks(t, _MAYBE_DYNAMIC, set).discard(dim)


@dataclass
class SizeHistory:
    """The sizes earlier captures of one frame saw, per input source; None: seen changing.
    ``changes`` says which dimensions the capture under way made dynamic, for the
    recompiles log."""

    sizes: dict[str, list[int | None]] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)

    def changed_dims(self, source: str, shape: tuple[int, ...]) -> set[int]:
        """Record ``shape``; the dimensions that have had more than one size."""
        seen = self.sizes.get(source)
        if seen is None or len(seen) != len(shape):
            self.sizes[source] = list(shape)
            return set()
        changed = set()
        for dim, size in enumerate(shape):
            if seen[dim] is not None and seen[dim] != size:
                self.changes.append(f"{source}.size()[{dim}] changed from {seen[dim]} to {size}")
                seen[dim] = None
            if seen[dim] is None:
                changed.add(dim)
        return changed


#: Why ops with data-dependent output sizes break the graph when the flag is off.
FLAG_OFF = "set torchkiln.config.capture_dynamic_output_shape_ops = True to keep it in the graph"


def data_dependent_break(compile_graph: Callable) -> str | None:
    """Why an op whose output size depends on the data breaks a graph for ``compile_graph``
    (a ``GraphCompiler``, or any backend callable); None: it stays in the graph."""
    if not config.capture_dynamic_output_shape_ops:
        return FLAG_OFF
    if getattr(compile_graph, "static_shapes", False):  # a GraphCompiler's
        return (
            f"backend {compile_graph.name!r} takes static shapes only (Backend.dynamic_shapes=False), so "
            "config.capture_dynamic_output_shape_ops does not apply to it"
        )
    if not getattr(compile_graph, "data_dependent_sizes", True):
        return (
            f"backend {compile_graph.name!r} takes no data-dependent sizes "
            "(Backend.data_dependent_sizes=False), so config.capture_dynamic_output_shape_ops "
            "does not apply to it"
        )
    return None


@dataclass(frozen=True)
class Policy:
    """``dynamic=`` of the compile call, the frame's size history (automatic dynamic), and
    why ops with data-dependent output sizes break the graph (None: they stay in it)."""

    dynamic: bool | None = False
    history: SizeHistory | None = None
    data_dependent_break: str | None = FLAG_OFF

    def dynamic_dims(self, source: str, t: torch.Tensor) -> dict[int, Bounds]:
        """The dimensions of input ``t`` (read through ``source``) to make symbolic."""
        static = getattr(t, _STATIC, set())
        dims: dict[int, Bounds] = {}
        weight = isinstance(t, torch.nn.Parameter) or "._buffers[" in source
        if self.dynamic and not weight:
            dims = dict.fromkeys(range(t.dim()), (2, None))
        elif self.dynamic is None and self.history is not None:
            dims = dict.fromkeys(self.history.changed_dims(source, tuple(t.shape)), (2, None))
        dims.update(dict.fromkeys(getattr(t, _MAYBE_DYNAMIC, ()), (2, None)))
        dims.update(getattr(t, _DYNAMIC, {}))
        return {d: b for d, b in dims.items() if d not in static and _fits(t, d, b)}


def _fits(t: torch.Tensor, dim: int, bounds: Bounds) -> bool:
    """Whether ``t`` has dimension ``dim`` with a size within ``bounds``. A mark may not: the
    program changed the tensor's shape in place since (``unsqueeze_`` moves its dimensions,
    ``squeeze_`` drops some). Such a dimension is then specialized, its size guarded."""
    low, high = bounds
    return dim < t.dim() and low <= t.size(dim) and (high is None or t.size(dim) <= high)


_current: contextvars.ContextVar[Policy] = contextvars.ContextVar("torchkiln_dynamic")
_STATIC_POLICY = Policy()


def current() -> Policy:
    return _current.get(_STATIC_POLICY)


@contextlib.contextmanager
def policy(
    dynamic: bool | None, history: SizeHistory | None, data_dependent: str | None = FLAG_OFF
) -> Iterator[None]:
    """Captures inside this block decide dynamic dimensions by ``dynamic`` and ``history``,
    and break at ops with data-dependent output sizes for the reason ``data_dependent``
    (None: keep them)."""
    token = _current.set(Policy(dynamic, history, data_dependent))
    try:
        yield
    finally:
        _current.reset(token)
