"""A process's first symbolic size does not import torch.export, AOT autograd and the inductor.

torch's ShapeEnv imports them (1.7 s on the CI machine, 2 s on the GPU machine) to know
which frames to skip when it notes the user's line for a new symbol, a location only
messages show; torchkiln's ShapeEnv skips torch's and its own files by folder instead.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys, torch, torchkiln
    compiled = torchkiln.compile(lambda x: x.sum(0) * x.shape[0], backend="aot_eager", dynamic=True)
    x = torch.randn(5, 3)
    torch.testing.assert_close(compiled(x), x.sum(0) * 5)
    assert torchkiln.counters["frames"]["total"] == 1
    print(sorted(m for m in ("torch.export._trace", "torch._inductor.inductor_prims") if m in sys.modules))
    """
)


def test_the_first_symbolic_size_imports_no_export_or_inductor():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
