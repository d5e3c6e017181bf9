"""``cuda_launch``: which kernels it launches, and the parameter buffer it hands
``cuLaunchKernel`` (no GPU: a stand-in driver reads the buffer as the driver would)."""

import ctypes
from types import SimpleNamespace

import pytest

pytest.importorskip("triton", reason="triton is not installed")

from torchkiln_inductor.codegen import cuda_launch, triton_compile_worker


def kernel_with(signature: dict, **metadata):
    meta = dict(
        num_warps=4, shared=1024, num_ctas=1, global_scratch_size=0,
        target=SimpleNamespace(backend="cuda", arch=90),
    )  # fmt: skip
    meta.update(metadata)
    return SimpleNamespace(
        name="kiln_kernel",
        src=SimpleNamespace(signature=signature),
        metadata=SimpleNamespace(**meta),
        module=1,  # loaded already: DirectLaunch doesn't load it again
        function=0xF00,
    )


class RecordingDriver:
    """``cuLaunchKernel`` that reads each parameter through the pointer array it is given."""

    def __init__(self, slots: int, result: int = 0):
        self.slots = slots  # the kernel's arguments and Triton's two scratch pointers
        self.launches = []
        self.result = result

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        read = [ctypes.c_uint64.from_address(slots[i]).value for i in range(self.slots)]
        self.launches.append(
            dict(function=function.value, grid=(gx, gy, gz), block=(bx, by, bz),
                 shared=shared, stream=stream.value, params=read, extra=extra)
        )  # fmt: skip
        return self.result

    def cuGetErrorString(self, result, text):
        ctypes.cast(text, ctypes.POINTER(ctypes.c_char_p))[0] = b"an illegal address"
        return 0


SIGNATURE = {"in_ptr": "*bf16", "out_ptr": "*fp32", "XBLOCK": "constexpr", "n": "i64", "m": "i32"}


@pytest.fixture
def with_launcher_builds(monkeypatch):
    """Pretend this Triton builds a C launcher per signature, as 3.6 does (3.9 doesn't)."""
    monkeypatch.setattr(triton_compile_worker, "_triton_builds_launchers", lambda: True)


def test_pointers_and_integers_are_launchable_other_kernels_keep_tritons(with_launcher_builds):
    assert cuda_launch.launchable(kernel_with(SIGNATURE))
    assert not cuda_launch.launchable(kernel_with({**SIGNATURE, "scale": "fp32"}))
    assert not cuda_launch.launchable(kernel_with({**SIGNATURE, "desc": "nvTmaDesc"}))
    assert not cuda_launch.launchable(kernel_with({"pair": ("*fp32", "i32")}))
    assert not cuda_launch.launchable(kernel_with(SIGNATURE, global_scratch_size=64))
    assert not cuda_launch.launchable(kernel_with(SIGNATURE, num_ctas=2))
    assert not cuda_launch.launchable(kernel_with(SIGNATURE, launch_pdl=True))
    assert not cuda_launch.launchable(kernel_with(SIGNATURE, target=SimpleNamespace(backend="hip")))


def test_no_kernel_is_launched_directly_where_triton_builds_no_launchers(monkeypatch):
    monkeypatch.setattr(triton_compile_worker, "_triton_builds_launchers", lambda: False)
    assert not cuda_launch.launchable(kernel_with(SIGNATURE))


def test_the_parameter_buffer_holds_each_argument_then_two_null_scratch_pointers(monkeypatch):
    driver = RecordingDriver(slots=6)
    monkeypatch.setattr(cuda_launch, "_driver", lambda: driver)
    launch = cuda_launch.DirectLaunch(kernel_with(SIGNATURE), device=0)
    launch(7, 1, 1, 0x5, [0x7F0000001000, 0x7F0000002000, 1 << 40, 3])
    launch(2, 3, 1, 0x6, [0x10, 0x20, -2, -1])  # negative integers: two's complement
    first, second = driver.launches
    assert first["function"] == 0xF00
    assert (first["grid"], first["block"], first["shared"], first["stream"]) == (
        (7, 1, 1), (128, 1, 1), 1024, 0x5,
    )  # fmt: skip
    assert first["params"] == [0x7F0000001000, 0x7F0000002000, 1 << 40, 3, 0, 0]
    assert second["grid"] == (2, 3, 1)
    assert second["params"][:4] == [0x10, 0x20, 2**64 - 2, 2**64 - 1]


def test_an_empty_grid_launches_nothing_and_a_driver_error_names_the_kernel(monkeypatch):
    driver = RecordingDriver(slots=6, result=700)
    monkeypatch.setattr(cuda_launch, "_driver", lambda: driver)
    launch = cuda_launch.DirectLaunch(kernel_with(SIGNATURE), device=0)
    launch(0, 1, 1, 0, [1, 2, 3, 4])
    assert driver.launches == []
    with pytest.raises(RuntimeError, match="kiln_kernel: CUDA error 700: an illegal address"):
        launch(1, 1, 1, 0, [1, 2, 3, 4])
    with pytest.raises(TypeError, match="kiln_kernel takes 4 pointer and integer arguments"):
        launch(1, 1, 1, 0, [1, 2, 3])


class ContextlessThreadDriver(RecordingDriver):
    """A thread with no current context: the first launch fails with
    ``CUDA_ERROR_INVALID_CONTEXT`` until the device's primary context is made current."""

    def __init__(self):
        super().__init__(slots=6)
        self.current = None
        self.made_current = []

    def cuLaunchKernel(self, *args):
        if self.current is None:
            return 201
        return super().cuLaunchKernel(*args)

    def cuDeviceGet(self, handle, ordinal):
        ctypes.cast(handle, ctypes.POINTER(ctypes.c_int))[0] = ordinal
        return 0

    def cuDevicePrimaryCtxRetain(self, context, handle):
        ctypes.cast(context, ctypes.POINTER(ctypes.c_void_p))[0] = 0xC0 + handle.value
        return 0

    def cuCtxSetCurrent(self, context):
        self.current = context.value
        self.made_current.append(context.value)
        return 0


def test_a_thread_without_a_context_gets_the_devices_primary_one_and_launches(monkeypatch):
    driver = ContextlessThreadDriver()
    monkeypatch.setattr(cuda_launch, "_driver", lambda: driver)
    launch = cuda_launch.DirectLaunch(kernel_with(SIGNATURE), device=1)
    launch(1, 1, 1, 0, [1, 2, 3, 4])
    launch(1, 1, 1, 0, [1, 2, 3, 4])
    assert driver.made_current == [0xC1] and len(driver.launches) == 2
