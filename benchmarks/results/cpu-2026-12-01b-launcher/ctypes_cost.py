"""What a ctypes call of ``cuLaunchKernel`` costs (the stand-in driver's, which copies
nothing here), with and without declared argument types, and a buffer fill and a lock.

    LD_LIBRARY_PATH=DIR python ctypes_cost.py
"""

import ctypes
import threading
import timeit

CALLS = 300000
uint = ctypes.c_uint
declared = ctypes.CDLL("libcuda.so.1")
ctypes.c_int.in_dll(declared, "param_count").value = 0
declared.cuLaunchKernel.restype = ctypes.c_int
declared.cuLaunchKernel.argtypes = [
    ctypes.c_void_p, uint, uint, uint, uint, uint, uint, uint, ctypes.c_void_p,
    ctypes.c_void_p, ctypes.c_void_p,
]  # fmt: skip
undeclared = ctypes.CDLL("libcuda.so.1")
undeclared.cuLaunchKernel.restype = ctypes.c_int
holding_gil = ctypes.PyDLL("libcuda.so.1")
holding_gil.cuLaunchKernel.restype = ctypes.c_int
holding_gil.cuLaunchKernel.argtypes = declared.cuLaunchKernel.argtypes
params = (ctypes.c_void_p * 8)()
function = ctypes.c_void_p(0xABC)
slots = (ctypes.c_uint64 * 8)()
values = [0x7F0000001000 + i for i in range(6)]
lock = threading.Lock()


def with_argtypes():
    declared.cuLaunchKernel(function, 4, 1, 1, 128, 1, 1, 0, 0x7F00001234, params, None)


def without_argtypes():
    stream = ctypes.c_void_p(0x7F00001234)
    undeclared.cuLaunchKernel(function, 4, 1, 1, 128, 1, 1, 0, stream, params, None)


def pydll_with_argtypes():
    holding_gil.cuLaunchKernel(function, 4, 1, 1, 128, 1, 1, 0, 0x7F00001234, params, None)


def fill_six_slots():
    slots[:6] = values


def take_a_lock():
    with lock:
        pass


for name, call in (
    ("argtypes", with_argtypes),
    ("no argtypes", without_argtypes),
    ("PyDLL argtypes", pydll_with_argtypes),
    ("slice assign 6", fill_six_slots),
    ("lock", take_a_lock),
):
    seconds = min(timeit.repeat(call, number=CALLS, repeat=5)) / CALLS
    print(f"{name:16s} {seconds * 1e6:.3f} us")
