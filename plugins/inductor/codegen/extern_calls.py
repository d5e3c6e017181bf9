"""How the wrapper calls an aten overload: through torch's generated Python binding where that
can only run the same overload, else through the overload's C op (``OpOverload._op``).

``_op`` converts its arguments against the overload's schema one by one, boxed: on the CPU VM
it cost 1-4 us more a call than the binding ``torch.*`` functions use (``mm`` 2.6 against
1.8 us, ``addmm`` 4.3 against 3.0, ``as_strided`` 5.7 against 1.4), and a graph calls its
matmuls, convolutions and attention that way on every call. The binding takes the first of
the op's signatures its arguments fit, so it is used only for the ops of
:data:`WITH_BINDINGS` (whose bindings' extra signatures, deprecated ones included, I read),
and only where no other overload of the op (``out=`` variants need ``out``, which these calls
never pass) accepts a call of the same shape: as many positional arguments, the same keywords.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

#: ops whose Python binding runs the overload a call's shape selects: the matmuls (their
#: ``dtype`` overloads need ``out_dtype``; ``addmm``'s and ``baddbmm``'s deprecated signatures
#: take ``beta`` first, four positional arguments or more), convolution and attention
WITH_BINDINGS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)


def python_binding(overload: torch._ops.OpOverload) -> Any:
    """torch's generated binding of ``overload``'s op (``torch.addmm`` for ``aten.addmm``)."""
    return getattr(torch._C._VariableFunctions, overload._overloadpacket.__name__)


def binding_picks_only(
    overload: torch._ops.OpOverload, positional: int, keywords: Iterable[str]
) -> bool:
    """Whether the binding, called with ``positional`` arguments and ``keywords``, can run no
    overload but ``overload``: its op is one of :data:`WITH_BINDINGS`, ``overload`` accepts
    the call, and no other overload of the op does."""
    packet = overload._overloadpacket
    if overload.namespace != "aten" or packet.__name__ not in WITH_BINDINGS:
        return False
    keywords = set(keywords)
    if not _accepts(overload._schema, positional, keywords):
        return False
    return not any(
        _accepts(getattr(packet, name)._schema, positional, keywords)
        for name in packet.overloads()
        if getattr(packet, name) is not overload
    )


def _accepts(schema: torch._C.FunctionSchema, positional: int, keywords: set[str]) -> bool:
    """Whether a call with ``positional`` arguments and ``keywords`` binds to ``schema``."""
    arguments = schema.arguments
    in_order = [a for a in arguments if not a.kwarg_only]
    if positional > len(in_order) or not keywords <= {a.name for a in arguments}:
        return False
    given = {a.name for a in in_order[:positional]} | keywords
    return all(a.name in given or a.has_default_value() for a in arguments)
