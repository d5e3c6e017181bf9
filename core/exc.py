"""torchkiln's errors: one small hierarchy, so users can catch ``KilnError``.

Messages say what happened, where in the user's source (file:line) when
that is known, and what to do about it.
"""

from __future__ import annotations


class KilnError(RuntimeError):
    """Base class of every error torchkiln raises on purpose."""


class UnknownBackendError(KilnError, ValueError):
    """``backend=`` named a backend that no plugin provides."""


class InvalidBackendChain(KilnError, ValueError):
    """``backend=[...]`` lists backends that cannot run as a chain (order, names, options)."""


class BackendUnavailable(KilnError):
    """The backend exists but cannot run here (missing package or device)."""


class InvalidOptionError(KilnError, ValueError):
    """``mode=`` or ``options=`` do not fit the backend's schema."""


class NotImplementedYet(KilnError, NotImplementedError):
    """A declared feature (an option, a mode, a backend) is not built yet."""


class NeedsStaticShapes(KilnError):
    """A backend's compiler can't express this graph's symbolic sizes (it needs a concrete one).

    The core catches it and compiles the graph once per concrete size instead
    (``torchkiln.static_shapes.PerSizeCompiled``): raise it only for a graph with symbolic sizes.
    """


class BackendCompilerFailed(KilnError):
    """A backend raised while compiling a captured graph.

    The original exception is chained as ``__cause__`` and kept in
    ``.inner``; ``.backend_name`` and ``.graph`` say who failed on what.
    """

    def __init__(self, backend_name: str, graph_text: str, inner: BaseException):
        self.backend_name = backend_name
        self.graph = graph_text
        self.inner = inner
        super().__init__(
            f"backend {backend_name!r} raised {type(inner).__name__}: {inner}\n\n"
            f"while compiling this graph:\n{graph_text}\n"
            "Set torchkiln.config.suppress_errors = True to fall back to eager instead."
        )


class CaptureError(KilnError):
    """The capture core failed on code it should have handled (a torchkiln bug)."""


class Unsupported(KilnError):
    """Code that cannot be captured into a graph.

    Without ``fullgraph=True`` this becomes a graph break (or an eager
    fallback); with it, it is raised to the user with the reason and the
    user's ``file:line``.
    """

    def __init__(self, reason: str, location: str | None = None):
        self.reason = reason
        self.location = location
        where = f" at {location}" if location else ""
        super().__init__(f"{reason}{where}")


class RecompileLimitExceeded(KilnError):
    """A code object hit ``config.cache_size_limit`` (only raised when asked to)."""


class IndexOutOfBounds(IndexError, RuntimeError):
    """An index tensor holds a value outside the dimension it indexes, as eager reports:
    IndexError for some ops (``x[i]``, ``embedding``, ``index_select``), RuntimeError for
    others (``gather``, ``scatter``); this is caught as either. Not a KilnError: the
    user's input is at fault, not torchkiln."""
