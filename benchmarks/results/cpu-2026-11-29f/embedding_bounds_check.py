"""The inductor's embedding kernel with its index bounds check (dd543f8) and without it (the
check patched out of the C++ generator), 8x512 lookups of a 50257x768 table plus a position
table, one thread, medians of 50 calls, three rounds:

    PYTHONPATH=. .venv/bin/python benchmarks/results/cpu-2026-11-29f/embedding_bounds_check.py
"""

import statistics
import time

import torch

from tests.plugins.inductor.inductor_testing import compile_fn
from torchkiln_inductor.codegen import cpp
from torchkiln_inductor.indexing import Expr, Indirect

torch.set_num_threads(1)


def emb(w, i, pos):
    return (torch.nn.functional.embedding(i, w) + pos,)


w, i, pos = torch.randn(50257, 768), torch.randint(0, 50257, (8, 512)), torch.randn(512, 768)
new = compile_fn(emb, w, i, pos)
orig = cpp.CppOpsHandler.indirect_indexing


def old(self, x, size, wrap=True):
    name = self.kernel.new_tmp("idx")
    text = f"static_cast<int64_t>({x})"
    self.scope.lines.append(f"int64_t {name} = {text} < 0 ? {text} + {size}LL : {text};")
    return Expr.of(Indirect(name, size))


cpp.CppOpsHandler.indirect_indexing = old
oldc = compile_fn(emb, w, i, pos)
cpp.CppOpsHandler.indirect_indexing = orig


def bench(f):
    for _ in range(5):
        f(w, i, pos)
    ts = []
    for _ in range(50):
        s = time.perf_counter()
        f(w, i, pos)
        ts.append(time.perf_counter() - s)
    return statistics.median(ts) * 1e3


for _ in range(3):
    print(f"checked {bench(new):.3f} ms  unchecked {bench(oldc):.3f} ms")
