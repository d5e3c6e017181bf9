"""``contextlib``'s context managers: ``nullcontext`` (libraries pick it where a real context
is not needed, as transformers' ``maybe_autocast`` does), ``suppress``, ``ExitStack`` and the
``@contextmanager`` generators. Each ``enter`` returns the tracker of its ``__exit__``, which
``WITH_EXCEPT_START`` calls with the exception a block raised (user classes with ``__enter__``
and ``__exit__`` are in ``objects``; grad-mode contexts in ``torch_objects``). ``torch.autocast``
and ``torch.inference_mode`` regions are switches in the graph."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import inference_mode, runtime
from torchkiln.capture.variables import constants, exceptions, functions, iterators
from torchkiln.capture.variables.base import VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: What a ``nullcontext``'s ``__exit__`` is, rebuilt where a graph break leaves the block open.
_NULL_EXIT = contextlib.nullcontext().__exit__


class NullContextVariable(VariableTracker):
    """``nullcontext(enter_result)``: ``with`` gives ``enter_result`` and exits doing nothing."""

    def __init__(self, enter_result: VariableTracker):
        self.enter_result = enter_result

    def python_type(self) -> type:
        return contextlib.nullcontext

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        return NullExitVariable(), self.enter_result

    def reconstruct(self, codegen: Any) -> str:
        cls = codegen.bind(contextlib.nullcontext, "nullcontext")
        return f"{cls}({codegen.reconstruct(self.enter_result)})"


class NullExitVariable(VariableTracker):
    """The ``__exit__`` of a ``nullcontext``: returns None, so exceptions propagate."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return constants.ConstantVariable(None)

    def reconstruct(self, codegen: Any) -> str:
        return codegen.bind(_NULL_EXIT, "null_exit")


def _nullcontext(tx: Translator, enter_result: VariableTracker | None = None) -> VariableTracker:
    return NullContextVariable(enter_result or constants.ConstantVariable(None))


def _is_none(vt: VariableTracker) -> bool:
    return vt.is_constant() and vt.as_python_constant() is None


class SuppressVariable(VariableTracker):
    """``contextlib.suppress(*classes)``: its ``__exit__`` swallows exceptions of ``classes``."""

    def __init__(self, classes: tuple[type, ...]):
        self.classes = classes

    def python_type(self) -> type:
        return contextlib.suppress

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        return functions.BoundMethodVariable(self, "__exit__"), constants.ConstantVariable(None)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name != "__exit__" or kwargs or len(args) != 3:
            raise Unsupported(f"suppress.{name}() with these arguments")
        exc_type = args[0].as_python_constant()
        return constants.ConstantVariable(
            exc_type is not None and issubclass(exc_type, self.classes)
        )

    def reconstruct(self, codegen: Any) -> str:
        classes = ", ".join(codegen.bind(c, c.__name__) for c in self.classes)
        return f"{codegen.bind(contextlib.suppress, 'suppress')}({classes})"


def _suppress(tx: Translator, *classes: VariableTracker) -> VariableTracker:
    return SuppressVariable(tuple(c.as_python_constant() for c in classes))


class GeneratorContextVariable(VariableTracker):
    """A ``@contextmanager`` function's manager: the generator runs to its ``yield`` on entry;
    on exit it resumes, or gets the block's exception thrown in at the ``yield`` (as
    ``contextlib._GeneratorContextManager.__exit__``)."""

    def __init__(self, gen: iterators.GeneratorVariable):
        self.gen = gen

    def python_type(self) -> type:
        return contextlib._GeneratorContextManager

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        value = self.gen.next(tx)
        if value is None:
            raise exceptions.error(RuntimeError, "generator didn't yield", reason="@contextmanager")
        return functions.BoundMethodVariable(self, "__exit__"), value

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name != "__exit__" or kwargs or len(args) != 3:
            raise Unsupported(f"{name}() of a @contextmanager object")
        value = args[1]
        if _is_none(value):
            if self.gen.next(tx) is not None:
                raise exceptions.error(
                    RuntimeError, "generator didn't stop", reason="@contextmanager"
                )
            return constants.ConstantVariable(False)
        try:
            item = self.gen.throw(tx, value)
        except exceptions.Raised as e:
            if e.exc is value:  # the block's exception came back out: not suppressed
                return constants.ConstantVariable(False)
            raise
        if item is not None:
            raise exceptions.error(
                RuntimeError, "generator didn't stop after throw()", reason="@contextmanager"
            )
        return constants.ConstantVariable(True)  # the generator caught it and returned


def _generator_context(
    tx: Translator, func: VariableTracker, args: VariableTracker, kwds: VariableTracker
) -> VariableTracker:
    gen = tx.call_function(func, tx.unpack_iterable(args), dict(kwds.items))
    if not isinstance(gen, iterators.GeneratorVariable):
        raise Unsupported(f"@contextmanager over {gen.describe()} (not a generator)")
    return GeneratorContextVariable(gen)


class ExitStackVariable(VariableTracker):
    """``contextlib.ExitStack()``: ``enter_context`` and ``callback`` push exits that its own
    ``__exit__`` (or ``close()``) runs last-in first-out, each seeing the exception still
    pending; one that returns true swallows it."""

    METHODS = ("enter_context", "callback", "close", "__exit__")

    def __init__(self) -> None:
        # (``__exit__``, None, {}) or (callback, args, kwargs)
        self.exits: list[tuple[VariableTracker, list | None, dict]] = []

    def python_type(self) -> type:
        return contextlib.ExitStack

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        return functions.BoundMethodVariable(self, "__exit__"), self

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name not in self.METHODS:
            raise Unsupported(f"ExitStack.{name} (only {', '.join(self.METHODS)} are traced)")
        return functions.BoundMethodVariable(self, name)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "enter_context" and len(args) == 1 and not kwargs:
            exit_fn, value = args[0].enter(tx)
            self.exits.append((exit_fn, None, {}))
            return value
        if name == "callback" and args:
            self.exits.append((args[0], list(args[1:]), dict(kwargs)))
            return args[0]
        if name == "close" and not args and not kwargs:
            self.unwind(tx, None)
            return constants.ConstantVariable(None)
        if name == "__exit__" and len(args) == 3 and not kwargs:
            pending = None if _is_none(args[1]) else args[1]
            return constants.ConstantVariable(self.unwind(tx, pending))
        raise Unsupported(f"ExitStack.{name}() with these arguments")

    def unwind(self, tx: Translator, pending: VariableTracker | None) -> bool:
        """Runs the exits; whether ``pending`` (the block's exception) was swallowed. An
        exception an exit raises replaces the pending one and is raised at the end."""
        received = pending
        while self.exits:
            fn, args, kwargs = self.exits.pop()
            info = [constants.ConstantVariable(None)] * 3
            if pending is not None:
                info = [tx.output.wrap(pending.python_type(), None), pending, info[2]]
            try:
                if args is not None:  # a callback: runs, sees no exception, swallows none
                    tx.call_function(fn, args, kwargs)
                elif tx.truth(tx.call_function(fn, info, {})):
                    pending = None
            except exceptions.Raised as e:
                pending = e.exc
        if pending is not None and pending is not received:
            raise exceptions.Raised(pending, f"{pending.describe()} in an ExitStack exit")
        return received is not None and pending is None


def _exit_stack(tx: Translator) -> VariableTracker:
    return ExitStackVariable()


class AutocastVariable(VariableTracker):
    """A ``torch.autocast``: a real one, built from constant arguments, so torch decides what
    entering it does (``"cuda"`` without a GPU disables it). Entering and leaving it switch
    autocast in the graph (``OutputGraph.set_autocast``), so the block's ops cast as in eager."""

    def __init__(self, mode: torch.autocast):
        self.mode = mode

    def python_type(self) -> type:
        return torch.autocast

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        prev = tx.output.autocast
        with self.mode:  # what entering does, read off torch
            state = runtime.autocast_snapshot()
        tx.output.set_autocast(state)
        return AutocastExitVariable(prev), self

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if len(args) != 1 or kwargs:
            raise Unsupported("calling a torch.autocast object with other than one function")
        return RegionDecoratedVariable(self, args[0])

    def reconstruct(self, codegen: Any) -> str:
        m = self.mode
        args = (m.device, m.fast_dtype, m._enabled, m._cache_enabled)
        return f"{codegen.bind(torch.autocast, 'autocast')}({', '.join(map(codegen.guards.literal, args))})"


class RegionDecoratedVariable(VariableTracker):
    """A function decorated inside the frame with a state region (``torch.autocast(...)``,
    ``torch.inference_mode(...)``): each call runs in the region."""

    def __init__(self, ctx: AutocastVariable | InferenceModeVariable, fn: VariableTracker):
        self.ctx = ctx
        self.fn = fn

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        exit_fn, _ = self.ctx.enter(tx)
        result = self.fn.call(tx, args, kwargs)
        exit_fn.call(tx, [], {})
        return result


class AutocastExitVariable(VariableTracker):
    """The ``__exit__`` of a ``torch.autocast`` block: puts back the state from before it; a
    graph break leaves an ``AutocastRestore`` in its place."""

    def __init__(self, prev: tuple):
        self.prev = prev

    def python_type(self) -> type:
        return runtime.AutocastRestore

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        tx.output.set_autocast(self.prev)
        return constants.ConstantVariable(False)

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(runtime.AutocastRestore, 'AutocastRestore')}({self.prev!r})"


def _autocast(tx: Translator, *args: VariableTracker, **kwargs: VariableTracker) -> VariableTracker:
    consts = [a.as_python_constant() for a in args]
    return AutocastVariable(
        torch.autocast(*consts, **{k: v.as_python_constant() for k, v in kwargs.items()})
    )


def _switch_inference_mode(tx: Translator, fn: Any, *args: bool) -> None:
    """Enter or leave an inference-mode region now and in the graph; entering turns grad
    mode off and leaving puts it back, which the graph's grad-mode tracking follows."""
    tx.output.graph.call_function(fn, args)
    fn(*args)
    tx.output.grad_enabled = torch.is_grad_enabled()


class InferenceModeVariable(VariableTracker):
    """``torch.inference_mode(mode)``: a region switch in the graph (``capture.inference_mode``
    says why such a graph runs as captured)."""

    def __init__(self, mode: bool):
        self.mode = mode

    def python_type(self) -> type:
        return torch.inference_mode

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``__class__``, ``mode`` and ``clone``: what its decorator's wrapper reads."""
        if name == "__class__":
            return tx.output.wrap(torch.inference_mode, None)
        if name == "mode":
            return constants.ConstantVariable(self.mode)
        if name == "clone":
            return functions.BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "clone" and not args and not kwargs:
            return InferenceModeVariable(self.mode)
        raise Unsupported(f"torch.inference_mode.{name}() with these arguments")

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        _switch_inference_mode(tx, inference_mode.enter, self.mode)
        return InferenceModeExitVariable(), constants.ConstantVariable(None)

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if len(args) != 1 or kwargs:
            raise Unsupported("calling a torch.inference_mode object with other than one function")
        return RegionDecoratedVariable(self, args[0])

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(torch.inference_mode, 'inference_mode')}({self.mode!r})"


class InferenceModeExitVariable(VariableTracker):
    """The ``__exit__`` of a ``torch.inference_mode`` block: leaves the region; a graph break
    leaves an ``InferenceModeRestore`` in its place."""

    def python_type(self) -> type:
        return inference_mode.InferenceModeRestore

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        _switch_inference_mode(tx, inference_mode.exit_)
        return constants.ConstantVariable(False)

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(inference_mode.InferenceModeRestore, 'InferenceModeRestore')}()"


def _inference_mode(tx: Translator, mode: VariableTracker | None = None) -> VariableTracker:
    value = True if mode is None else mode.as_python_constant()
    if not isinstance(value, bool):
        raise Unsupported("torch.inference_mode(f) on a function inside the compiled frame")
    return InferenceModeVariable(value)


#: Context-manager classes built by the frame.
CONSTRUCTORS = {
    contextlib.nullcontext: _nullcontext,
    contextlib.suppress: _suppress,
    contextlib._GeneratorContextManager: _generator_context,
    contextlib.ExitStack: _exit_stack,
    torch.autocast: _autocast,
    torch.inference_mode: _inference_mode,
}
