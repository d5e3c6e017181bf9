"""The generated code does not depend on Python's string hash seed.

The wrapper's ``del`` lines followed the iteration order of a set of buffer names, so two
processes compiling the same graph wrote different source: plan-cache entries and the
``output_code`` logs of two runs could not be compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import torch, torchkiln
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 8)
    )
    def step(x):
        y = m(x).softmax(-1)
        return (y * y.cumsum(-1)).sum()
    torchkiln.compile(step)(torch.randn(4, 16)).backward()
    """
)


def _output_code(cache: str, hash_seed: int) -> str:
    env = dict(
        os.environ,
        TORCHKILN_CACHE_DIR=cache,
        TORCHKILN_LOGS="output_code",
        PYTHONHASHSEED=str(hash_seed),
    )
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "def call(" in out.stderr + out.stdout
    return out.stderr + out.stdout


def test_two_hash_seeds_generate_the_same_source(tmp_path):
    first = _output_code(str(tmp_path / "a"), 1)
    assert _output_code(str(tmp_path / "b"), 2) == first
