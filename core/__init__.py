"""torchkiln: a just-in-time compiler for PyTorch programs.

Capture is the core, backends are plugins::

    import torchkiln
    model = torchkiln.compile(model)              # default backend "inductor"
    torchkiln.list_backends()
"""

from torchkiln import config, exc
from torchkiln.api import CompiledModule, compile
from torchkiln.capture import explain, reset
from torchkiln.capture.dynamic import mark_dynamic, mark_static, maybe_mark_dynamic
from torchkiln.plugin import Backend, Option, Requirement
from torchkiln.registry import list_backends, register_backend
from torchkiln.stats import counters

__all__ = [
    "Backend",
    "CompiledModule",
    "Option",
    "Requirement",
    "compile",
    "config",
    "counters",
    "exc",
    "explain",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "register_backend",
    "reset",
]
