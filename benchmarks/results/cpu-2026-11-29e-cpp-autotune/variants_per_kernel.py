"""Every C++ kernel of a zoo model timed in several variants on its real inputs (one thread).

Each graph's kernels are generated again in each variant (``VARIANTS``: ``+``-joined parts:
``serial``, ``simdN``, ``vw256`` = ``target("prefer-vector-width=256")``, ``unroll`` =
``optimize("unroll-loops")``, ``same`` = the heuristic's code again under another name,
the noise control), built into one library, and at each kernel's first call all its
variants run on the call's pointers: 7 rounds, the variants in turn (order reversed every
other round), each a batch of about 0.2 ms, median per variant. Writes
``res<TAG>_<model>_<case>_t<threads>.json``: per kernel, microseconds per variant.

    PYTHONPATH=. TORCHKILN_CACHE_DIR=$(mktemp -d) VARIANTS=same,serial,simd16,simd8,unroll \\
        python benchmarks/results/cpu-2026-11-29e-cpp-autotune/variants_per_kernel.py \\
        nanogpt training
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time

import torch

import torchkiln
import torchkiln_inductor.compile_fx as cfx
from benchmarks.models import MODELS
from torchkiln_inductor.codegen.cpp import GeneratedKernel, generate_kernel, translation_unit
from torchkiln_inductor.cpp_build import load_library

THREADS = int(os.environ.get("THREADS", "1"))
VARIANTS = os.environ.get("VARIANTS", "same,serial,simd16,simd8,unroll").split(",")
ATTRIBUTES = {
    "vw256": '__attribute__((target("prefer-vector-width=256"))) ',
    "unroll": '__attribute__((optimize("unroll-loops"))) ',
    "same": " ",
}
RESULTS: list[dict] = []


def variants_of(generated) -> dict[str, dict[str, GeneratedKernel]]:
    """Heuristic kernel name -> {variant label: its source under a name of its own}."""
    o = generated.options
    out: dict[str, dict[str, GeneratedKernel]] = {}
    for plan in generated.plans.values():
        base = generate_kernel(plan, generated.graph, o.simdlen, o.threads, o.parallel_threshold)
        for label in VARIANTS:
            simdlen, serial, attribute = o.simdlen, False, ""
            for part in label.split("+"):
                if part == "serial":
                    serial = True
                elif part.startswith("simd"):
                    simdlen = int(part[4:])
                else:
                    attribute += ATTRIBUTES[part]
            k = generate_kernel(
                plan, generated.graph, simdlen, o.threads, o.parallel_threshold, serial
            )
            if k.name == base.name and not attribute:
                continue  # the same code as the heuristic's
            name = f"{base.name}_{label.replace('+', '_')}"
            source = k.source.replace(
                f'extern "C" void {k.name}', f'extern "C" {attribute}void {name}'
            )
            out.setdefault(base.name, {})[label] = GeneratedKernel(name, source, k.params)
    return out


class Timed:
    """A kernel's heuristic function until its first call, which times every variant."""

    def __init__(self, name: str, functions: dict, namespace: dict, source: str):
        self.name, self.functions, self.namespace, self.source = name, functions, namespace, source

    def __call__(self, *pointers: int) -> None:
        heuristic = self.functions["base"]
        heuristic(*pointers)
        start = time.perf_counter()
        heuristic(*pointers)
        runs = max(1, int(2e-4 / max(time.perf_counter() - start, 1e-7)))
        times: dict[str, list[float]] = {label: [] for label in self.functions}
        for r in range(7):
            labels = list(self.functions) if r % 2 == 0 else list(reversed(self.functions))
            for label in labels:
                fn = self.functions[label]
                fn(*pointers)
                start = time.perf_counter()
                for _ in range(runs):
                    fn(*pointers)
                times[label].append((time.perf_counter() - start) / runs * 1e6)
        RESULTS.append(
            {
                "model": MODEL,
                "kernel": self.name,
                "us": {label: statistics.median(t) for label, t in times.items()},
                "parallel": "omp parallel" in self.source,
                "reduction": "acc" in self.source,
            }
        )
        heuristic(*pointers)  # the real call, last
        self.namespace[self.name] = heuristic


original_generate, original_bind = cfx.generate, cfx.GraphArtifact.bind
_variants: dict[int, tuple] = {}


def generate(gm, example_inputs, options):
    generated = original_generate(gm, example_inputs, options)
    if generated.kernels:
        variants = variants_of(generated)
        kernels = [k for by_label in variants.values() for k in by_label.values()]
        library = load_library(translation_unit(kernels), options.opt_level)
        sources = {k.name: k.source for k in generated.kernels}
        _variants[id(generated.artifact)] = (library, variants, sources)
    return generated


def bind(self, lib, fresh=False):
    compiled = original_bind(self, lib, fresh)
    if id(self) not in _variants:
        return compiled
    library, variants, sources = _variants.pop(id(self))
    namespace = compiled._call.__globals__
    for name, by_label in variants.items():
        if name not in namespace:
            continue
        functions = {"base": namespace[name]}
        for label, k in by_label.items():
            fn = getattr(library, k.name)
            fn.argtypes, fn.restype = [ctypes.c_void_p] * len(k.params), None
            functions[label] = fn
        namespace[name] = Timed(name, functions, namespace, sources[name])
    return compiled


cfx.generate, cfx.GraphArtifact.bind = generate, bind

if __name__ == "__main__":
    MODEL, case = sys.argv[1], sys.argv[2]
    torch.set_num_threads(THREADS)
    built = MODELS[MODEL].build("small")
    model = built.module.eval() if case == "inference" else built.module
    compiled = torchkiln.compile(model, backend="inductor")
    if case == "inference":
        with torch.no_grad():
            compiled(*built.inputs)
    else:
        out = compiled(*built.inputs)
        out = out if isinstance(out, torch.Tensor) else out[0]
        out.float().pow(2).mean().backward()
    tag = os.environ.get("TAG", "")
    with open(f"res{tag}_{MODEL}_{case}_t{THREADS}.json", "w") as f:
        json.dump(RESULTS, f)
    base = sum(r["us"]["base"] for r in RESULTS)
    best = sum(min(r["us"].values()) for r in RESULTS)
    print(f"{MODEL} {case}: {len(RESULTS)} kernels, {base:.0f} us heuristic, {best:.0f} us best")
