"""Triton's import, then its CUDA driver's C utilities built with gcc (a cold cache: each run
gets its own ``TRITON_CACHE_DIR``). With the stand-in ``libcuda.so.1`` the built module
can't load (it lacks the driver's symbols): the build is what is timed.

    LD_LIBRARY_PATH=DIR TRITON_LIBCUDA_PATH=DIR TRITON_CACHE_DIR=$(mktemp -d) \
        PYTHONPATH=.triton36 python utils_cost.py
"""

import importlib
import time

start = time.perf_counter()
importlib.import_module("triton.runtime.driver")
imported = time.perf_counter()
nvidia = importlib.import_module("triton.backends.nvidia.driver")
try:
    nvidia.CudaUtils()
except ImportError as e:
    print("load failed (expected with the stand-in driver):", type(e).__name__)
built = time.perf_counter()
print(f"import triton {imported - start:.2f} s, CudaUtils build {built - imported:.2f} s")
