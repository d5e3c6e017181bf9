"""torchkiln: a just-in-time compiler for PyTorch programs.

Capture is the core, backends are plugins::

    import torchkiln
    model = torchkiln.compile(model)              # default backend "inductor"
    torchkiln.list_backends()
"""

from torchkiln import config, exc
from torchkiln.api import CompiledModule, compile
from torchkiln.capture import explain, reset
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
    "register_backend",
    "reset",
]
