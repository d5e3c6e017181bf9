"""The aot_eager backends are declared through the plugin hook, tagged debug."""

from __future__ import annotations

import torch
import torch.fx as fx

from torchkiln.backends import aot
from torchkiln.plugin import Backend


def test_hook_declares_both_aot_backends_tagged_debug() -> None:
    backends = {b.name: b for b in aot.torchkiln_backends()}
    assert set(backends) == {"aot_eager", "aot_eager_decomp_partition"}
    for backend in backends.values():
        assert isinstance(backend, Backend)
        assert backend.tags == ("debug",)


def test_declared_compile_functions_compile_a_graph() -> None:
    gm = fx.symbolic_trace(lambda x: torch.tanh(x) * 2)
    x = torch.randn(5, requires_grad=True)
    for backend in aot.torchkiln_backends():
        out = backend.compile_fn(gm, [x])(x)
        torch.testing.assert_close(out, torch.tanh(x) * 2)
