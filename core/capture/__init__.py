"""Capture: CPython bytecode → torch.fx graphs, with guards, a per-code cache and graph breaks.

``optimize(fn, compile_graph=...)`` returns a wrapper that behaves like
``fn``; see ``README.md`` in this folder for how the pieces fit.
"""

from torchkiln.capture.dispatch import optimize, reset
from torchkiln.capture.explain import ExplainOutput, explain

__all__ = ["ExplainOutput", "explain", "optimize", "reset"]
