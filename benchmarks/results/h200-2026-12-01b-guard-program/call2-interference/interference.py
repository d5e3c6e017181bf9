"""Why kiln's cold training compile is slower in a process where torch.compile compiled first.

    python .device_scripts/interference.py            # every variant, each in a fresh process
Variants: kiln alone; kiln after torch.compile compiled the same model in the process; kiln
alone with TRITON_PTXAS_PATH set to torch's bundled ptxas (what torch.compile sets).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.getcwd())
from benchmarks.caches import cache_env

MODEL = os.environ.get("PROBE_MODEL", "mlp")


def child(variant: str) -> None:
    import time

    import torch

    from benchmarks import compile_phases

    if variant == "after_torch_compile":
        from benchmarks.cases import make_workload
        from benchmarks.models import MODELS
        from benchmarks.rows import on_device

        built = on_device(MODELS[MODEL].build("large"), torch.device("cuda"), torch.bfloat16)
        work = make_workload(built.module, torch.compile(built.module), built.inputs, "training")
        t = time.perf_counter()
        work.step()
        torch.cuda.synchronize()
        print("torch.compile first step", time.perf_counter() - t, file=sys.stderr)
        print("TRITON_PTXAS_PATH", os.environ.get("TRITON_PTXAS_PATH"), file=sys.stderr)
    r = compile_phases.child(MODEL, "kiln:inductor", "training", "cuda", "large", 25)
    print(json.dumps(r))


def main() -> None:
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    import torch

    ptxas = str(Path(torch.__file__).parent / "bin" / "ptxas")
    from benchmarks.compile_phases import report

    for variant, extra in [
        ("alone", {}),
        ("after_torch_compile", {}),
        ("alone", {"TRITON_PTXAS_PATH": ptxas}),
        ("alone", {}),
    ]:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, **cache_env(Path(tmp)), **extra}
            done = subprocess.run(
                [sys.executable, __file__, variant], env=env, stdout=subprocess.PIPE, text=True
            )
        try:
            r = json.loads(done.stdout.strip().splitlines()[-1])
        except Exception:
            print(variant, extra, "failed", done.stdout[-2000:])
            continue
        report(MODEL, f"training [{variant} {extra}]", {"kiln:inductor": r})


main()
