"""Each op's forward and backward graphs, compiled as for training, against eager's outputs and
gradients on OpInfo samples (``opinfo_sweep_backward.py``), in float32.

The fast set covers one or two ops of each family on the C++ generator, and fewer through
Triton's interpreter; the rest of ``SWEEP_OPS`` carries the ``slow`` marker. An op none of whose
cases reaches the inductor's backward (no gradient, or views the AOT runtime rebuilds and
eager autograd differentiates) is skipped with the sweep's reason, never passed.
"""

import pytest
import torch

pytest.importorskip("expecttest", reason="OpInfo needs expecttest (pip install 'torchkiln[test]')")

from opinfo_sweep_backward import sweep_backward

from torchkiln.testing.opinfo import SWEEP_OPS, opinfos

#: pointwise, reductions, normalizations, matmuls, indexing and structural ops
FAST_OPS = [
    "add",
    "mul",
    "sin",
    "tanh",
    "nn.functional.gelu",
    "where",
    "masked_fill",
    "sum",
    "mean",
    "amax",
    "var_mean",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "nn.functional.batch_norm",
    "mm",
    "addmm",
    "cat",
    "gather",
    "index_select",
    "scatter_add",
    "nn.functional.embedding",
]

TRITON_OPS = ["mul", "sum", "softmax", "nn.functional.layer_norm", "gather", "mm"]


#: why a case that matched eager did not count: its backward never reached the inductor
COMPARED_NOT_COMPILED = ("views of inputs", "runs as captured")


def _check(op: str, **options) -> None:
    """No case of ``op`` (its variants included) differs from eager, and each one either reached
    the inductor's backward or was compared with eager where the AOT runtime runs it without a
    compiled backward (views it rebuilds, graphs it runs as captured)."""
    result = sweep_backward([op], **options)
    failures = "\n".join(f"{name} {dtype}: {why}" for (name, dtype), why in result.failed.items())
    assert not result.failed, failures
    untested = {
        name: why
        for name, why in result.skipped.items()
        if not any(reason in why for reason in COMPARED_NOT_COMPILED)
    }
    assert result.passed or not untested, untested


def _differentiable(name: str) -> bool:
    """Whether OpInfo gives ``name`` a float32 backward on CPU (else the sweep has nothing
    to test: comparisons, ``zeros_like``, integer ops)."""
    return any(
        op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu")
        for _, op in opinfos([name])
    )


@pytest.mark.parametrize("op", FAST_OPS)
def test_gradients_match_eager_without_aten_fallback(op):
    result = sweep_backward([op])
    assert not result.failed, result.failed
    assert op in result.passed, result.skipped
    assert op not in result.fallback_only, result.fallbacks


def test_views_are_skipped_not_passed():
    """A view's output is rebuilt by the AOT runtime and its gradient computed by eager autograd:
    no backward graph reaches the inductor, so the case must not count."""
    result = sweep_backward(["permute"])
    assert not result.passed and not result.failed
    assert "views of inputs" in result.skipped["permute"]


@pytest.mark.parametrize("op", TRITON_OPS)
def test_gradients_match_eager_through_triton(op):
    pytest.importorskip("triton", reason="triton is not installed")
    _check(op, cpu_backend="triton")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize(
    "op", [op for op in SWEEP_OPS if op not in FAST_OPS and _differentiable(op)]
)
def test_gradients_match_eager_slow(op, backend):
    if backend == "triton":
        pytest.importorskip("triton", reason="triton is not installed")
    _check(op, cpu_backend=backend)


def test_loading_the_op_database_leaves_torchscript_calls_alone():
    """torch's OpInfo module replaces ``ScriptFunction.__call__`` with a Python profiling
    wrapper as it loads; ``opinfos`` puts the original back (this module loaded it at
    collection), or capturing a call of a script function would trace into the wrapper."""
    import inspect

    list(opinfos(["add"]))
    assert not inspect.isfunction(torch._C.ScriptFunction.__call__)
    assert not inspect.isfunction(torch._C.ScriptMethod.__call__)
