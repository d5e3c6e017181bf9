"""Per-call time of a compiled graph of extern matmuls, their calls through torch's Python
bindings against through each overload's C op (``_op``), in one process, calls alternated.

    PYTHONPATH=. python benchmarks/results/cpu-2026-11-30-extern-bindings/ab_bindings.py
"""

import statistics
import time

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln_inductor.codegen import wrapper
from torchkiln_inductor.compile_fx import compile_fx
from torchkiln_inductor.options import parse_options

torch.set_num_threads(1)


def layers(x, *weights):
    """Eight linear layers (addmm) and a bmm: a small MLP's extern calls."""
    for w, b in zip(weights[0::2], weights[1::2], strict=True):
        x = torch.addmm(b, x, w).relu()
    return torch.bmm(x[None], x.t()[None])


args = [torch.randn(4, 16)] + [t for _ in range(8) for t in (torch.randn(16, 16), torch.randn(16))]


def compiled(bindings: bool):
    choose = wrapper.binding_picks_only
    if not bindings:
        wrapper.binding_picks_only = lambda *a: False
    try:
        return compile_fx(make_fx(layers)(*args), list(args), parse_options({}))
    finally:
        wrapper.binding_picks_only = choose


variants = {"bindings": compiled(True), "_op": compiled(False)}
assert "_python_binding(" in variants["bindings"].artifact.wrapper_source
assert "_python_binding(" not in variants["_op"].artifact.wrapper_source
times = {name: [] for name in variants}
for i in range(4000):
    for name, fn in variants.items() if i % 2 else reversed(variants.items()):
        start = time.perf_counter()
        fn(*args)
        times[name].append(time.perf_counter() - start)
for name, t in times.items():
    print(f"{name}: median {statistics.median(t) * 1e6:.1f} us a call")
