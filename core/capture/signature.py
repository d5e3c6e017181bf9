"""A frame's parameters, and the small generated functions that move them around.

Everything generated for a frame (guards, transformed code, the eager
runner) takes ``(___fn, *frame_locals)``: the function object, then one
positional parameter per argument of the code object, in order, with
``*args`` as a tuple and ``**kwargs`` as a dict. The dispatch function
(``dispatch_source``) has the user function's own signature, so CPython
binds each call (defaults, keywords, ``*args``) at no extra cost.
"""

from __future__ import annotations

import inspect
import types


def arg_names(code: types.CodeType) -> list[str]:
    """The code's parameters in order: positional, keyword-only, ``*args``, ``**kwargs``."""
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return list(code.co_varnames[:n])


def local_name(name: str, index: int) -> str:
    """The parameter name a frame local gets in generated code."""
    return f"L_{name}" if name.isidentifier() else f"L_arg{index}"


def frame_param_names(code: types.CodeType) -> list[tuple[str, str]]:
    return [(name, local_name(name, i)) for i, name in enumerate(arg_names(code))]


def params_text(code: types.CodeType) -> str:
    return ", ".join(["___fn", *(local for _, local in frame_param_names(code))])


def _signature_parts(code: types.CodeType, names: list[str]) -> tuple[list[str], list[str]]:
    """(parameter declarations, how to pass each one to the original function), under ``names``."""
    nargs, nposonly, nkwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    real = arg_names(code)
    decl, call = [], []
    for i in range(nargs):
        decl.append(names[i])
        call.append(names[i])
        if nposonly and i == nposonly - 1:
            decl.append("/")
    index = nargs + nkwonly
    if has_varargs:
        decl.append("*" + names[index])
        call.append("*" + names[index])
    elif nkwonly:
        decl.append("*")
    for i in range(nargs, nargs + nkwonly):
        decl.append(names[i])
        call.append(f"{real[i]}={names[i]}")
    if code.co_flags & inspect.CO_VARKEYWORDS:
        varkw = names[index + has_varargs]
        decl.append("**" + varkw)
        call.append("**" + varkw)
    return decl, call


def dispatch_source(code: types.CodeType, bound: bool, fn_param: bool = False) -> str:
    """``___dispatch`` with ``code``'s own signature (so CPython binds the call), minus ``self`` if bound.

    Every parameter defaults to ``___D`` (``MISSING``) and takes ``___fn``'s default at call
    time (``default_argument``). Its body runs the guards of ``___entries`` in order on the frame locals
    and calls the first passing entry's ``run``; no match calls ``___on_miss``.
    """
    names = [name if name.isidentifier() else local for name, local in frame_param_names(code)]
    decl, _ = _signature_parts(code, names)
    named = names[: code.co_argcount + code.co_kwonlyargcount]
    decl = [f"{d}=___D" if d in named else d for d in decl]
    frame_locals = list(names)
    if bound:
        decl = decl[2:] if len(decl) > 1 and decl[1] == "/" else decl[1:]
        frame_locals[0] = "___self"
    defaults = "".join(
        f"    if {name} is ___D:\n        {name} = ___default(___fn, {i}, {real!r})\n"
        for i, (name, real) in enumerate(zip(named, arg_names(code)))
        if not (bound and i == 0)
    )
    passed = ", ".join(frame_locals)
    if fn_param:  # the function is the first argument, not a name of the namespace
        decl = ["___fn", *decl]
    return (
        f"def ___dispatch({', '.join(decl)}):\n"
        f"{defaults}"
        "    for ___guard, ___run in ___entries:\n"
        "        try:\n"
        f"            ___ok = ___guard(___fn, {passed})\n"
        "        except Exception:\n"
        "            ___ok = False\n"
        "        if ___ok:\n"
        "            ___hits['hits'] += 1\n"
        f"            return ___run(___fn, {passed})\n"
        f"    return ___on_miss(___fn, ___cfg, ___cache, ({passed}{',' if len(frame_locals) == 1 else ''}))\n"
    )


#: The default every dispatch parameter declares: "not passed, take the function's default now".
MISSING = object()


def default_argument(fn: types.FunctionType, index: int, name: str) -> object:
    """The default of parameter ``index`` of ``fn``, read at call time.

    Users may reassign ``fn.__defaults__`` / ``__kwdefaults__`` after compiling: the dispatch
    function declares no defaults of its own (every parameter defaults to ``MISSING``) so that
    each call binds exactly as a call of ``fn`` would now.
    """
    code = fn.__code__
    if index < code.co_argcount:
        defaults = fn.__defaults__ or ()
        position = index - (code.co_argcount - len(defaults))
        if position >= 0:
            return defaults[position]
        raise TypeError(f"{fn.__qualname__}() missing required positional argument: {name!r}")
    kwdefaults = fn.__kwdefaults__ or {}
    if name in kwdefaults:
        return kwdefaults[name]
    raise TypeError(f"{fn.__qualname__}() missing required keyword-only argument: {name!r}")


def call_original_source(code: types.CodeType, name: str) -> str:
    """``def name(___fn, *frame_locals): return ___fn(...)``: runs the frame uncompiled."""
    _, call = _signature_parts(code, [local for _, local in frame_param_names(code)])
    return f"def {name}({params_text(code)}):\n    return ___fn({', '.join(call)})\n"
