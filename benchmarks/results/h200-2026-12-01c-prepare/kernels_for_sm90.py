"""Generate a model's Triton kernels on the CPU VM and keep them for compiling for sm_90.

    TORCHKILN_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python kernels_for_sm90.py mlp /tmp/mlpk small

Runs the training step with ``cpu_backend="triton"`` (Triton's interpreter), copies the
generated modules and each kernel's launch (block sizes, warps, dtypes) to the folder, and
makes the modules what the GPU generator writes: Triton's libdevice, no bf16 rounding.
"""

import glob
import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

INTERPRETED = (
    "from torchkiln_inductor.codegen.triton_libdevice import InterpretedLibdevice\n\n"
    "libdevice = InterpretedLibdevice()"
)
ROUND_BF16 = """def kiln_round_bf16(x):
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))"""


def main() -> None:
    import torchkiln
    import torchkiln_inductor.codegen.triton_module as triton_module
    from benchmarks.cases import loss_of
    from benchmarks.models import MODELS
    from torchkiln.plugin import scratch_dir

    name, out, size = sys.argv[1:4]
    launches = []
    load = triton_module.TritonModule.load

    def recording_load(self, namespace, fresh=False):
        for k in self.launches:
            dtypes = [str(d) for d in k.dtypes]
            launches.append([k.name, dict(k.meta), k.num_warps, dtypes])
        return load(self, namespace, fresh)

    triton_module.TritonModule.load = recording_load
    built = MODELS[name].build(size)
    compiled = torchkiln.compile(built.module, options={"cpu_backend": "triton"})
    loss_of(compiled(*built.inputs)).backward()
    os.makedirs(out, exist_ok=True)
    for path in glob.glob(str(scratch_dir() / "kiln_*.py")):
        with open(path) as f:
            source = f.read()
        source = source.replace(INTERPRETED, "from triton.language.extra import libdevice")
        source = source.replace(ROUND_BF16, "def kiln_round_bf16(x):\n    return x")
        with open(os.path.join(out, os.path.basename(path)), "w") as f:
            f.write(source)
    with open(os.path.join(out, "launches.json"), "w") as f:
        json.dump(launches, f)
    print(len(launches), "launches")


if __name__ == "__main__":
    main()
