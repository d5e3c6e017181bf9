"""Library build time of the C++ sources one training step of a small zoo model generates (its
forward and backward graphs), as ``cpp_build`` builds them: in one compiler run (one core)
and in parts compiled at once (this machine's cores), median of five."""

import statistics
import sys
import tempfile
import time
from pathlib import Path

from gcc_time import generated_sources

from torchkiln_inductor import cpp_build

cores = cpp_build.usable_cores()
for model in sys.argv[1:]:
    sources = generated_sources(model)
    for label, usable in (("one run", 1), ("parts", cores)):
        cpp_build.usable_cores = lambda usable=usable: usable
        folder = Path(tempfile.mkdtemp())
        times = []
        for run in range(5):
            start = time.perf_counter()
            for i, source in enumerate(sources):
                cpp_build._build(source, folder / f"graph{run}-{i}.so", "O3")
            times.append(time.perf_counter() - start)
        parts = [len(cpp_build._parts(source)) for source in sources]
        print(f"{model} {label}: parts {parts}, {statistics.median(times):.2f} s")
