import importlib.abc
import runpy
import sys
import time
import traceback

t0 = time.monotonic()


class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            print(f"--- torch imported at {time.monotonic() - t0:.2f} s from:", flush=True)
            traceback.print_stack(limit=40)
        return None


sys.meta_path.insert(0, Spy())
w = runpy.run_path("plugins/inductor/codegen/triton_compile_worker.py", run_name="kiln_worker")
from triton.runtime import driver  # noqa: E402  (after the spy)

print("triton imported", f"{time.monotonic() - t0:.2f}", "torch" in sys.modules, flush=True)
from triton.backends.compiler import GPUTarget  # noqa: E402

driver.set_active(w["CompileOnlyDriver"](GPUTarget("cuda", 90, 32)))
w["_warm_up"]()
print("warm up done", f"{time.monotonic() - t0:.2f}", "torch" in sys.modules)
