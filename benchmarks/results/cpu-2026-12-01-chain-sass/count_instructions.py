"""The chain's fused kernel compiled for sm_90 on a machine without a GPU (Triton's
compile-only path, as kiln's compile workers use it), disassembled with Triton's
``nvdisasm``: SASS instructions per thread and per element, by opcode.

    python benchmarks/results/cpu-2026-12-01-chain-sass/count_instructions.py
"""

import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver

from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

HERE = Path(__file__).parent
ROWS, WIDTH = 32768, 4096
NVDISASM = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")


def main() -> None:
    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    spec = importlib.util.spec_from_file_location("kiln_chain", HERE / "kiln_chain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = next(v for k, v in vars(module).items() if k.startswith("kiln_red_"))
    for warps in (4, 8, 16):
        compiled = kernel.warmup(*(torch.bfloat16,) * 4, grid=(ROWS,), XBLOCK=1,
                                 RBLOCK0=WIDTH, num_warps=warps)  # fmt: skip
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(compiled.asm["cubin"])
            cubin.flush()
            sass = subprocess.run([str(NVDISASM), "-c", cubin.name], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
        ops = collections.Counter(
            m.group(1) for m in map(INSTRUCTION.match, sass.splitlines()) if m
        )
        total = sum(ops.values())
        per_element = total / (WIDTH / (warps * 32))
        warp_instructions = ROWS * warps * total
        print(f"{warps:2d} warps: {total} instructions a thread, {per_element:.1f} an element, "
              f"{warp_instructions / 1e6:.0f}M warp instructions in all")  # fmt: skip
        print("   ", ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))


if __name__ == "__main__":
    sys.exit(main())
