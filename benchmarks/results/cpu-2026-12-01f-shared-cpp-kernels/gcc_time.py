"""gcc time of the C++ sources one training step of a small zoo model generates (its forward
and backward graphs), each compiled with the inductor's own gcc command, median of three."""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torchkiln
from benchmarks.cases import loss_of
from benchmarks.models import MODELS
from torchkiln_inductor import compile_fx, cpp_build


def generated_sources(model: str) -> list[str]:
    """The translation units compiled for one training step of ``model``."""
    sources = []
    make = compile_fx.translation_unit

    def recorded(kernels):
        sources.append(make(kernels))
        return sources[-1]

    compile_fx.translation_unit = recorded
    try:
        built = MODELS[model].build("small")
        loss_of(torchkiln.compile(built.module)(*built.inputs)).backward()
    finally:
        compile_fx.translation_unit = make
    return sources


def gcc_seconds(sources: list[str], folder: Path) -> float:
    total = 0.0
    for i, text in enumerate(sources):
        source = folder / f"graph{i}.cpp"
        source.write_text(text)
        start = time.perf_counter()
        subprocess.run(cpp_build.command(source, folder / f"graph{i}.so", "O3"), check=True)
        total += time.perf_counter() - start
    return total


if __name__ == "__main__":
    for model in sys.argv[1:]:
        sources = generated_sources(model)
        folder = Path(tempfile.mkdtemp())
        seconds = statistics.median(gcc_seconds(sources, folder) for _ in range(3))
        lines = sum(text.count("\n") for text in sources)
        print(f"{model}: {lines} lines of C++, gcc {seconds:.2f} s (median of 3)")
