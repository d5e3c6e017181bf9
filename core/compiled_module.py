"""The object ``torchkiln.compile`` returns for an ``nn.Module``: the module, with ``forward`` compiled.

Programs keep using that object as the module: they set attributes on it, switch it
between train and eval, register hooks, save and load its state, move it, copy it.
Each of those must act on the original module, or compiled calls would silently
disagree with it. So :class:`CompiledModule` holds no module state of its own:
everything is read from, written to and run on the original, and calling it runs
the original's hooks around the compiled ``forward`` as ``nn.Module.__call__`` runs
them around ``forward``.
"""

from __future__ import annotations

import copy
import functools
import types
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import torch
from torch.nn.modules import module as _nn
from torch.utils.hooks import BackwardHook


def _forward_of(module: torch.nn.Module) -> Any:
    """What ``module.forward`` resolves to now: an instance attribute, else the class's."""
    return module.__dict__.get("forward") or type(module).forward


def call_override(module: torch.nn.Module) -> Any:
    """The ``__call__`` that ``module``'s class defines in place of ``nn.Module``'s, or None.

    Calling the module runs it instead of the hooks and ``forward``, so that is what is
    compiled (torch.compile compiles ``module.__call__`` too).
    """
    call = type(module).__call__
    return None if call is torch.nn.Module.__call__ else call


def has_call_hooks(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` runs hooks around its ``forward``: its own or global ones.

    The same test as ``nn.Module._call_impl``'s fast path.
    """
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or _nn._has_any_global_hook()
    )


class CompiledModule(torch.nn.Module):
    """``mod`` whose ``forward`` runs compiled; everything else is ``mod``'s.

    Its ``__dict__`` holds only the original (``_orig_mod``), how to compile a forward
    and the compiled forward. Reading any other attribute reads the original's
    (``training``, parameters, hooks...); setting or deleting one does it on the
    original, as torch's ``OptimizedModule`` does, so compiled calls see the change
    (the capture's guards on the module recompile). The public ``nn.Module`` methods
    run on the original, its class's overrides included, and give back this wrapper
    where they give back the module: ``compile(m).to(device)`` stays compiled. Calling
    a module whose class overrides ``__call__`` runs that override compiled, as calling
    the module runs it eagerly.
    """

    #: what the wrapper keeps in its own ``__dict__`` (anything else there, an API applied
    #: to the wrapper itself put there: see :meth:`named_modules`)
    _own_slots = frozenset(
        {"_orig_mod", "_compile_forward", "_compiled_forward", "_compiled_from", "_compiled_call"}
    )

    def __init__(self, mod: torch.nn.Module, compile_forward: Callable[[Callable], Callable]):
        # No nn.Module.__init__: it would give the wrapper tables and a training flag
        # of its own, where every read must find the original's.
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_compile_forward", compile_forward)
        object.__setattr__(self, "_compiled_forward", compile_forward(mod.forward))
        object.__setattr__(self, "_compiled_from", _forward_of(mod))
        object.__setattr__(self, "_compiled_call", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        mod = self._orig_mod
        override = call_override(mod)
        if override is not None:
            return self._compiled_override(override)(*args, **kwargs)
        if _forward_of(mod) is not self._compiled_from:
            self._recompile_forward()
        if has_call_hooks(mod):
            return call_with_hooks(mod, self._compiled_forward, args, kwargs)
        return self._compiled_forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if _forward_of(self._orig_mod) is not self._compiled_from:
            self._recompile_forward()
        return self._compiled_forward(*args, **kwargs)

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Any:
        """The original's modules, and first this wrapper where an API was applied to the
        wrapper itself: FSDP2's ``fully_shard`` keeps its state in the wrapper's
        ``__dict__``, and its root finds every sharded module by walking ``modules()``."""
        memo = set() if memo is None else memo
        if self.__dict__.keys() - self._own_slots and not (remove_duplicate and self in memo):
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
        yield from self._orig_mod.named_modules(memo, prefix, remove_duplicate)

    def modules(self) -> Any:
        for _, module in self.named_modules():
            yield module

    def compile(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "this module is already compiled by torchkiln; nn.Module.compile() would compile "
            "the original again with torch.compile. Call torchkiln.compile on the original "
            "module (`compiled._orig_mod`) to change how it is compiled"
        )

    def __getattr__(self, name: str) -> Any:
        # Dunders are the wrapper's protocol (copy asks for ``__deepcopy__``), not the module's.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Dunders are the wrapper's own: FSDP2's ``fully_shard`` sets ``__class__`` to a
        # subclass of the wrapper's class, which the original must not become.
        if name.startswith("__") and name.endswith("__"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    def _compiled_override(self, override: Callable) -> Callable:
        """The class's ``__call__`` override bound to the original, compiled; compiled again
        when the class's ``__call__`` is replaced."""
        compiled = self._compiled_call
        if compiled is None or compiled[0] is not override:
            bound = types.MethodType(override, self._orig_mod)
            compiled = (override, self._compile_forward(bound))
            object.__setattr__(self, "_compiled_call", compiled)
        return compiled[1]

    def _recompile_forward(self) -> None:
        """The original's ``forward`` was replaced (through this wrapper, on the module or on
        its class: checked at every call): compile the one calls now reach."""
        mod = self._orig_mod
        object.__setattr__(self, "_compiled_forward", self._compile_forward(mod.forward))
        object.__setattr__(self, "_compiled_from", _forward_of(mod))

    # A copy compiles the forward of the module it wraps: a compiled forward is bound to the
    # module it was compiled from. Deep copies share the backend, as they share the class.
    def __reduce__(self) -> tuple:
        return (type(self), (self._orig_mod, self._compile_forward))

    def __deepcopy__(self, memo: dict) -> CompiledModule:
        return type(self)(copy.deepcopy(self._orig_mod, memo), self._compile_forward)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(dir(type(self))))

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_mod!r})"


def _on_original(name: str) -> Callable:
    """``nn.Module`` method ``name``, run on the original; the original given back is the wrapper."""
    method = getattr(torch.nn.Module, name)

    @functools.wraps(method)
    def on_original(self: CompiledModule, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self._orig_mod, name)(*args, **kwargs)
        return self if result is self._orig_mod else result

    return on_original


# Every nn.Module method runs on the original, the private ones too: a parent module's
# ``to()``, ``load_state_dict()``... reach a compiled child through ``_apply``,
# ``_load_from_state_dict``... The methods that run ``forward`` are the wrapper's own.
_CALL_PATH = {"_call_impl", "_wrapped_call_impl", "_slow_forward"}
for _name, _value in vars(torch.nn.Module).items():
    if (
        callable(_value)
        and not _name.startswith("__")
        and _name not in _CALL_PATH
        and _name not in vars(CompiledModule)
    ):
        setattr(CompiledModule, _name, _on_original(_name))
del _name, _value


def call_with_hooks(
    mod: torch.nn.Module, forward: Callable, args: tuple, kwargs: dict[str, Any]
) -> Any:
    """``mod(*args, **kwargs)`` with ``forward`` in place of ``mod.forward``.

    ``nn.Module._call_impl`` (torch 2.11-2.13) step by step: forward pre-hooks,
    backward hooks on the inputs, ``forward``, forward hooks, backward hooks on the
    output, and the ``always_call`` forward hooks when ``forward`` raises. It is
    repeated here because ``_call_impl`` reads ``self.forward`` itself: making that
    the compiled forward would change the user's module for every thread.
    """
    called_always = set()
    result = None
    try:
        backward_pre_hooks = []
        if mod._backward_pre_hooks or _nn._global_backward_pre_hooks:
            backward_pre_hooks = mod._get_backward_pre_hooks()
        full_backward_hooks, non_full_backward_hooks = [], []
        if mod._backward_hooks or _nn._global_backward_hooks:
            full_backward_hooks, non_full_backward_hooks = mod._get_backward_hooks()

        for hook_id, hook in (
            *_nn._global_forward_pre_hooks.items(),
            *mod._forward_pre_hooks.items(),
        ):
            if hook_id in mod._forward_pre_hooks_with_kwargs:
                new = hook(mod, args, kwargs)
                if new is not None:
                    if not (isinstance(new, tuple) and len(new) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple "
                            f"of (new_args, new_kwargs), but got {new}."
                        )
                    args, kwargs = new
            else:
                new = hook(mod, args)
                if new is not None:
                    args = new if isinstance(new, tuple) else (new,)

        bw_hook = None
        if full_backward_hooks or backward_pre_hooks:
            bw_hook = BackwardHook(mod, full_backward_hooks, backward_pre_hooks)
            args = bw_hook.setup_input_hook(args)

        result = forward(*args, **kwargs)

        for hook_id, hook in (*_nn._global_forward_hooks.items(), *mod._forward_hooks.items()):
            if _always_called(mod, hook_id):
                called_always.add(hook_id)
            if _with_kwargs(mod, hook_id):
                new = hook(mod, args, kwargs, result)
            else:
                new = hook(mod, args, result)
            if new is not None:
                result = new

        if bw_hook:
            if not isinstance(result, (torch.Tensor, tuple)):
                warnings.warn(
                    "For backward hooks to be called, module output should be a Tensor or a "
                    f"tuple of Tensors but received {type(result)}",
                    stacklevel=3,
                )
            result = bw_hook.setup_output_hook(result)

        if non_full_backward_hooks:  # the deprecated register_backward_hook
            var = result
            while not isinstance(var, torch.Tensor):
                if isinstance(var, dict):
                    var = next(v for v in var.values() if isinstance(v, torch.Tensor))
                else:
                    var = var[0]
            if var.grad_fn is not None:
                for hook in non_full_backward_hooks:
                    var.grad_fn.register_hook(_nn._WrappedHook(hook, mod))
                mod._maybe_warn_non_full_backward_hook(args, result, var.grad_fn)
        return result
    except Exception:
        for hook_id, hook in (*_nn._global_forward_hooks.items(), *mod._forward_hooks.items()):
            if hook_id in called_always or not _always_called(mod, hook_id):
                continue
            try:
                if hook_id in mod._forward_hooks_with_kwargs:
                    new = hook(mod, args, kwargs, result)
                else:
                    new = hook(mod, args, result)
                if new is not None:
                    result = new
            except Exception as e:
                warnings.warn(
                    "module forward hook with ``always_call=True`` raised an exception that was "
                    f"silenced as another error was raised in forward: {e}",
                    stacklevel=3,
                )
        raise


def _always_called(mod: torch.nn.Module, hook_id: int) -> bool:
    return hook_id in mod._forward_hooks_always_called or (
        hook_id in _nn._global_forward_hooks_always_called
    )


def _with_kwargs(mod: torch.nn.Module, hook_id: int) -> bool:
    return (
        hook_id in mod._forward_hooks_with_kwargs
        or hook_id in _nn._global_forward_hooks_with_kwargs
    )
