"""Global torch state and function defaults: a change between calls recompiles, never a stale
answer (issue #14, items 1 and 2). Each state is tried in both orders of calls."""

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import torchkiln


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def matmul(x, w):
    return x @ w


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("autocast_first", [True, False])
def test_autocast_is_guarded_in_both_orders(backend, autocast_first):
    f = torchkiln.compile(matmul, backend=backend)
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    order = [True, False] if autocast_first else [False, True]
    for autocast in order:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out, ref = f(x, w), matmul(x, w)
        assert out.dtype == ref.dtype
        assert_close(out, ref)


def test_autocast_dtype_change_recompiles():
    f = torchkiln.compile(matmul, backend="aot_eager")
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        with torch.autocast("cpu", dtype=dtype):
            assert f(x, w).dtype == dtype
    assert frames() == 2


def test_identical_calls_under_autocast_do_not_recompile():
    f = torchkiln.compile(matmul, backend="aot_eager")
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        f(x, w)
        f(x, w)
    assert frames() == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("inference_first", [True, False])
def test_inference_mode_is_guarded_in_both_orders(backend, inference_first):
    f = torchkiln.compile(lambda x: x * 2, backend=backend)
    for inference in [True, False] if inference_first else [False, True]:
        with torch.inference_mode(inference):
            out = f(torch.randn(3))
            assert out.is_inference() == inference
            assert torch.is_inference_mode_enabled() == inference


def branch_on_state(x):
    deterministic = 1.0 if torch.are_deterministic_algorithms_enabled() else 2.0
    profiling = 10.0 if torch.autograd._profiler_enabled() else 0.0
    autocast = 100.0 if torch.is_autocast_enabled("cpu") else 0.0
    return x + deterministic + profiling + autocast


@pytest.fixture
def deterministic_off():
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("enabled_first", [True, False])
def test_deterministic_algorithms_are_guarded(deterministic_off, enabled_first):
    f = torchkiln.compile(branch_on_state, backend="eager")
    x = torch.randn(3)
    for enabled in [enabled_first, not enabled_first, enabled_first]:
        torch.use_deterministic_algorithms(enabled)
        assert_close(f(x), branch_on_state(x))
    assert frames() == 2


@pytest.mark.parametrize("profile_first", [True, False])
def test_profiler_state_read_in_the_frame_is_guarded(profile_first):
    f = torchkiln.compile(branch_on_state, backend="aot_eager")
    x = torch.randn(3)
    for profiling in [profile_first, not profile_first]:
        with torch.autograd.profiler.profile(enabled=profiling):
            out, ref = f(x), branch_on_state(x)
        assert_close(out, ref)


def test_autocast_query_in_the_frame_is_guarded():
    f = torchkiln.compile(branch_on_state, backend="eager")
    x = torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_close(f(x), branch_on_state(x))
    assert_close(f(x), branch_on_state(x))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_reassigned_defaults_of_the_compiled_function(backend):
    def scale(x, s=2.0, *, shift=0.0):
        return x * s + shift

    f = torchkiln.compile(scale, backend=backend)
    x = torch.randn(3)
    assert_close(f(x), x * 2)
    scale.__defaults__ = (3.0,)
    assert_close(f(x), x * 3)
    scale.__kwdefaults__ = {"shift": 1.0}
    assert_close(f(x), x * 3 + 1)
    scale.__kwdefaults__["shift"] = 5.0  # mutated in place
    assert_close(f(x), x * 3 + 5)


def test_defaults_removed_later_raise_like_python():
    def scale(x, s=2.0):
        return x * s

    f = torchkiln.compile(scale, backend="eager")
    f(torch.randn(3))
    scale.__defaults__ = None
    with pytest.raises(TypeError, match="missing required positional argument: 's'"):
        f(torch.randn(3))
    scale.__defaults__ = (torch.randn(3), 4.0)  # x gains a default too
    assert_close(f(), scale.__defaults__[0] * 4.0)


def helper(x, s=2.0, t=1.0):
    return x * s + t


def uses_helper(x):
    return helper(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_reassigned_defaults_of_an_inlined_helper(backend):
    f = torchkiln.compile(uses_helper, backend=backend)
    x = torch.randn(3)
    try:
        assert_close(f(x), x * 2 + 1)
        helper.__defaults__ = (3.0, 1.0)
        assert_close(f(x), x * 3 + 1)
        # a longer tuple shifts which parameter each value belongs to: same leading values
        helper.__defaults__ = (3.0, 1.0, 7.0)
        assert_close(f(x), uses_helper(x))
    finally:
        helper.__defaults__ = (2.0, 1.0)


def numpy_sizes(x):
    n = np.prod(np.array(x.shape))
    return x.reshape(-1) * int(n)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_sizes_through_numpy_do_not_recompile(backend):
    f = torchkiln.compile(numpy_sizes, backend=backend)
    x = torch.randn(2, 3)
    assert_close(f(x), numpy_sizes(x))
    after_first = frames()
    for _ in range(3):
        assert_close(f(x), numpy_sizes(x))
    assert frames() == after_first
    assert torchkiln.counters["recompiles"]["total"] == 0


def test_autocast_dtype_change_is_not_served_from_the_plan_cache(tmp_path, monkeypatch):
    """The on-disk plan cache keys plans by the whole autocast state, dtype included."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    f = torchkiln.compile(matmul, backend="inductor")  # inductor's plans are kept on disk
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            out = f(x, w)
            assert out.dtype == dtype
            assert_close(out, matmul(x, w))


def enable_grad_inside(x):
    y = x + 1
    with torch.enable_grad():
        z = (y * x).sum()
    return z, y


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_enable_grad_inside_a_frame_called_under_no_grad(backend):
    compiled = torchkiln.compile(enable_grad_inside, backend=backend)
    for _ in range(2):
        x = torch.randn(2, 3, requires_grad=True)
        with torch.no_grad():
            out, ref = compiled(x), enable_grad_inside(x)
        assert [o.requires_grad for o in out] == [r.requires_grad for r in ref]
        assert_close(out, ref)
        out[0].backward()
        grad = x.grad.clone()
        x.grad = None
        ref[0].backward()
        assert_close(grad, x.grad)
