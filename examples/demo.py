"""torchkiln demo: compile a small MLP, compare it with eager (time and max difference).

python examples/demo.py [backend]      # default backend: inductor
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import torchkiln


class MLP(torch.nn.Module):
    def __init__(self, width: int = 512):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def median_ms(fn, x: torch.Tensor, repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "inductor"
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(64, 512)
    compiled = torchkiln.compile(model, backend=backend)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(x)
        compile_s = time.perf_counter() - start
        eager_ms = median_ms(model, x)
        compiled_ms = median_ms(compiled, x)
        max_diff = (compiled(x) - model(x)).abs().max().item()
    print(f"backends available here: {', '.join(torchkiln.list_backends())}")
    print(f"backend {backend!r}: first call (capture + compile) {compile_s:.2f} s")
    print(f"eager     {eager_ms:8.3f} ms per call (median of 30)")
    print(
        f"compiled  {compiled_ms:8.3f} ms per call (median of 30), speedup {eager_ms / compiled_ms:.2f}x"
    )
    print(f"max |compiled - eager| = {max_diff:.2e}")


if __name__ == "__main__":
    main()
