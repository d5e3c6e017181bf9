"""The backend registry: pluggy plugins, entry-point discovery, lookup by name.

Where backends come from, in the order they are registered:

1. built-in plugin modules of ``torchkiln.backends`` (the debug backends);
2. entry points in the group ``torchkiln.backends`` (the bundled plugins and
   any third-party package), each naming a module with ``@hookimpl``s;
3. entry points in torch.compile's group ``torch_dynamo_backends``: plain
   ``(gm, example_inputs)`` functions, tagged ``torch-compat`` and
   ``experimental``, loaded only when first compiled with;
4. ``register_backend(...)`` calls in the running process.

Plugins also declare runtime wrappers (``torchkiln_runtime_wrappers``), looked
up by name (``lookup_runtime_wrapper``) or by the mode they stand for.

Discovery is lazy (on the first lookup or listing) and fault-tolerant: a
plugin that fails to import or whose hook raises is recorded in
``plugin_failures()`` and the others still load.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import logging
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, overload

import pluggy

from torchkiln import hookspecs
from torchkiln.exc import BackendUnavailable, KilnError, UnknownBackendError
from torchkiln.plugin import PROJECT_NAME, Backend, Option, Requirement, RuntimeWrapper

log = logging.getLogger("torchkiln.backends")

ENTRY_POINT_GROUP = "torchkiln.backends"
TORCH_COMPAT_GROUP = "torch_dynamo_backends"
BUILTIN_PLUGINS = ("torchkiln.backends.debug", "torchkiln.backends.aot")
DEFAULT_EXCLUDED_TAGS = ("debug", "experimental")


@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can run on this machine, and if not, what to do."""

    usable: bool
    reason: str = ""


class BackendRegistry:
    """Holds the plugin manager and the backends its plugins declared."""

    def __init__(
        self,
        builtin_plugins: Iterable[str] = BUILTIN_PLUGINS,
        entry_point_groups: tuple[str, str] = (ENTRY_POINT_GROUP, TORCH_COMPAT_GROUP),
    ):
        self._builtin_plugins = tuple(builtin_plugins)
        self._plugin_group, self._compat_group = entry_point_groups
        self._lock = threading.RLock()
        self._discovered = False
        self._backends: dict[str, Backend] = {}
        self._wrappers: dict[str, RuntimeWrapper] = {}
        self._failures: dict[str, str] = {}
        self.plugin_manager = pluggy.PluginManager(PROJECT_NAME)
        self.plugin_manager.add_hookspecs(hookspecs)

    # -- discovery -----------------------------------------------------------
    def _discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            for module_name in self._builtin_plugins:
                self._register_plugin(module_name, lambda m=module_name: importlib.import_module(m))
            for ep in importlib.metadata.entry_points(group=self._plugin_group):
                self._register_plugin(f"{ep.name} ({ep.value})", ep.load)
            for ep in importlib.metadata.entry_points(group=self._compat_group):
                self._register_torch_compat(ep)

    def _register_plugin(self, plugin_name: str, load: Callable[[], Any]) -> None:
        try:
            plugin = load()
            if self.plugin_manager.is_registered(plugin):
                return
            self.plugin_manager.register(plugin, name=plugin_name)
        except Exception as e:
            self._record_failure(plugin_name, e)
            return
        for impl in self.plugin_manager.hook.torchkiln_backends.get_hookimpls():
            if impl.plugin_name != plugin_name:
                continue
            try:
                declared = impl.function()
                for backend in declared:
                    self._add(backend, source=plugin_name)
            except Exception as e:
                self._record_failure(plugin_name, e)
        for impl in self.plugin_manager.hook.torchkiln_runtime_wrappers.get_hookimpls():
            if impl.plugin_name != plugin_name:
                continue
            try:
                for wrapper in impl.function():
                    self._add_wrapper(wrapper, source=plugin_name)
            except Exception as e:
                self._record_failure(plugin_name, e)

    def _register_torch_compat(self, ep: importlib.metadata.EntryPoint) -> None:
        if ep.name in self._backends:
            log.info("torch_dynamo_backends entry %r hidden by a torchkiln backend", ep.name)
            return
        loaded: list[Callable] = []

        def compile_fn(gm, example_inputs, **options):
            if not loaded:
                loaded.append(ep.load())
            return loaded[0](gm, example_inputs, **options)

        self._backends[ep.name] = Backend(
            name=ep.name,
            compile_fn=compile_fn,
            description=f"torch.compile backend {ep.value}",
            tags=("torch-compat", "experimental"),
        )

    def _record_failure(self, plugin_name: str, error: BaseException) -> None:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        self._failures[plugin_name] = text
        log.warning("torchkiln plugin %s failed to load: %s", plugin_name, text)

    def _add(self, backend: Backend, source: str, override: bool = False) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(
                f"plugin {source} returned {type(backend).__name__}, expected torchkiln.plugin.Backend"
            )
        if backend.name in self._backends and not override:
            raise KilnError(
                f"a backend named {backend.name!r} is already registered; "
                "pass override=True to replace it"
            )
        self._backends[backend.name] = backend

    def _add_wrapper(self, wrapper: RuntimeWrapper, source: str, override: bool = False) -> None:
        if not isinstance(wrapper, RuntimeWrapper):
            raise TypeError(
                f"plugin {source} returned {type(wrapper).__name__}, "
                "expected torchkiln.plugin.RuntimeWrapper"
            )
        if wrapper.name in self._wrappers and not override:
            raise KilnError(
                f"a runtime wrapper named {wrapper.name!r} is already registered; "
                "pass override=True to replace it"
            )
        self._wrappers[wrapper.name] = wrapper

    # -- public operations ---------------------------------------------------
    def register(self, backend: Backend, override: bool = False) -> None:
        self._discover()
        with self._lock:
            self._add(backend, source="register_backend", override=override)

    def lookup(self, name: str) -> Backend:
        self._discover()
        backend = self._backends.get(name)
        if backend is None:
            known = sorted(self._backends)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UnknownBackendError(
                f"unknown backend {name!r}.{hint} Available backends: {', '.join(known)}. "
                "torchkiln.list_backends(exclude_tags=()) lists them all."
            )
        return backend

    def register_wrapper(self, wrapper: RuntimeWrapper, override: bool = False) -> None:
        self._discover()
        with self._lock:
            self._add_wrapper(wrapper, source="register_runtime_wrapper", override=override)

    def wrapper(self, name: str) -> RuntimeWrapper:
        self._discover()
        wrapper = self._wrappers.get(name)
        if wrapper is None:
            known = ", ".join(sorted(self._wrappers)) or "none"
            raise UnknownBackendError(
                f"unknown runtime wrapper {name!r} (registered: {known}); the plugin that "
                "provides it is not installed or failed to load (torchkiln.registry.plugin_failures())"
            )
        return wrapper

    def wrappers_for_mode(self, mode: str) -> list[RuntimeWrapper]:
        self._discover()
        return [w for w in self._wrappers.values() if mode in w.modes]

    def names(self, exclude_tags: Iterable[str]) -> list[str]:
        self._discover()
        excluded = set(exclude_tags)
        return sorted(n for n, b in self._backends.items() if not excluded.intersection(b.tags))

    def failures(self) -> dict[str, str]:
        self._discover()
        return dict(self._failures)


def backend_status(backend: Backend) -> BackendStatus:
    """Can ``backend`` run here? Missing packages name the pip extra to install."""
    for req in backend.requires:
        if importlib.util.find_spec(req.module) is None:
            return BackendStatus(False, f"missing package {req.module!r}: {req.install_hint()}")
    if backend.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return BackendStatus(False, "needs a CUDA GPU (none is available here)")
    return BackendStatus(True)


def ensure_usable(backend: Backend) -> None:
    """Raise ``BackendUnavailable`` naming what to install when ``backend`` can't run."""
    status = backend_status(backend)
    if not status.usable:
        raise BackendUnavailable(f"backend {backend.name!r} is unavailable: {status.reason}")


_registry = BackendRegistry()


def lookup_backend(name: str) -> Backend:
    """The backend registered as ``name``; unknown names list what exists."""
    return _registry.lookup(name)


def list_backends(
    exclude_tags: Iterable[str] = DEFAULT_EXCLUDED_TAGS, experimental: bool = False
) -> list[str]:
    """Sorted names of the registered backends.

    By default debug and experimental backends are left out;
    ``experimental=True`` includes them, ``exclude_tags=()`` lists everything.
    """
    return _registry.names(() if experimental else exclude_tags)


def lookup_runtime_wrapper(name: str) -> RuntimeWrapper:
    """The runtime wrapper registered as ``name``; unknown names list what exists."""
    return _registry.wrapper(name)


def runtime_wrappers_for_mode(mode: str) -> list[RuntimeWrapper]:
    """The runtime wrappers that ``compile(mode=mode)`` stands for on a backend without modes."""
    return _registry.wrappers_for_mode(mode)


def register_runtime_wrapper(wrapper: RuntimeWrapper, override: bool = False) -> None:
    """Register a runtime wrapper in this process (plugins use the hook instead)."""
    _registry.register_wrapper(wrapper, override=override)


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to load: plugin name -> error text."""
    return _registry.failures()


@overload
def register_backend(
    compile_fn: Callable, name: str | None = None, tags: Iterable[str] = (), **kwargs: Any
) -> Callable: ...


@overload
def register_backend(
    compile_fn: None = None, name: str | None = None, tags: Iterable[str] = (), **kwargs: Any
) -> Callable[[Callable], Callable]: ...


def register_backend(
    compile_fn: Callable | Backend | None = None,
    name: str | None = None,
    tags: Iterable[str] = (),
    *,
    description: str = "",
    requires: Iterable[Requirement] = (),
    device: str | None = None,
    options: Iterable[Option] | None = None,
    override: bool = False,
) -> Callable:
    """Register a backend in this process, as a decorator or a call.

    ::

        @register_backend
        def my_backend(gm, example_inputs): return gm.forward

        @register_backend(name="fast", tags=("experimental",))
        def fast(gm, example_inputs): ...

        register_backend(my_fn, name="mine")
        register_backend(Backend("mine", my_fn))

    A name that is already taken is an error unless ``override=True``.
    Returns the compile function, so decorated functions stay usable.
    """
    if compile_fn is None:
        return lambda fn: register_backend(
            fn,
            name,
            tags,
            description=description,
            requires=requires,
            device=device,
            options=options,
            override=override,
        )
    if not isinstance(compile_fn, Backend) and not callable(compile_fn):
        hint = (
            f" (the name goes second: register_backend(fn, {compile_fn!r}))"
            if isinstance(compile_fn, str)
            else ""
        )
        raise TypeError(
            f"register_backend: the compile function must be callable, got "
            f"{type(compile_fn).__name__} {compile_fn!r}{hint}"
        )
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"register_backend: name must be a non-empty string, got {name!r}")
    if isinstance(compile_fn, Backend):
        backend = compile_fn if name is None else replace(compile_fn, name=name)
        _registry.register(backend, override=override)
        return backend.compile_fn
    backend = Backend(
        name=name or compile_fn.__name__,
        compile_fn=compile_fn,
        description=description or _first_doc_line(compile_fn),
        tags=tuple(tags),
        requires=tuple(requires),
        device=device,
        options=None if options is None else tuple(options),
    )
    _registry.register(backend, override=override)
    return compile_fn


def _first_doc_line(fn: Callable) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""
