"""On a GPU: kernels launched by ``cuda_launch.DirectLaunch`` compute eager's results, static
and sized ones; a cold compile builds no C launcher where Triton would build one per
signature; a profiler's launch hooks still see every launch (through Triton's launcher)."""

import pytest
import torch
from inductor_testing import run_gpu_training_step

import torchkiln

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def builds_launchers() -> bool:
    from triton.backends.nvidia import driver

    return hasattr(driver, "make_launcher")


def test_a_cold_training_step_builds_no_c_launcher(tmp_path):
    launches = run_gpu_training_step(tmp_path)["triton_launch"]
    built = [p.name for p in (tmp_path / "triton").rglob("__triton_launcher*")]
    if builds_launchers():
        assert launches.get("direct", 0) > 0 and launches.get("through_triton", 0) == 0
        assert built == []
    else:
        assert launches.get("direct", 0) == 0


def test_sized_kernels_launched_directly_match_eager_at_every_size():

    def fn(x, w):
        return torch.nn.functional.layer_norm(x * w + 1, x.shape[-1:]).relu()

    compiled = torchkiln.compile(fn, dynamic=True)
    for rows in (3, 17, 256, 1000):
        x = torch.randn(rows, 96, device="cuda")
        w = torch.randn(96, device="cuda")
        torch.testing.assert_close(compiled(x, w), fn(x, w))


def test_launch_hooks_see_every_launch_of_a_directly_launched_kernel():
    if not builds_launchers():
        pytest.skip("needs Triton <= 3.6: later ones launch every kernel through their own")
    from triton import knobs

    def fn(x):
        return (x.sin() + 1).sum(-1)

    compiled = torchkiln.compile(fn)
    x = torch.randn(64, 128, device="cuda")
    torch.testing.assert_close(compiled(x), fn(x))  # compiled and launched directly
    seen = []

    def hook(metadata):
        seen.append(metadata)

    knobs.runtime.launch_enter_hook.add(hook)  # Triton 3.6 keeps the hooks in a chain
    try:
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen


def test_a_thread_that_made_no_cuda_call_yet_runs_a_compiled_graph():
    import threading

    def fn(x):
        return (x * 2).softmax(-1)

    compiled = torchkiln.compile(fn)
    x = torch.randn(16, 64, device="cuda")
    compiled(x)  # compiled and loaded on this thread
    results = []
    thread = threading.Thread(target=lambda: results.append(compiled(x)))
    thread.start()
    thread.join()
    torch.testing.assert_close(results[0], fn(x))
