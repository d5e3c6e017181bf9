"""The Triton generator with symbolic sizes: one compile serves every size.

Kernels of a graph with symbolic sizes take the size symbols as ``int64`` arguments, and
their launchers compute the grid at each call. Run on CPU tensors by Triton's interpreter
(``cpu_backend="triton"``), at tiny sizes: it runs every program of the grid in numpy.
"""

import pytest
import torch
from inductor_testing import needs_interpreter
from test_symbolic_sizes import (  # noqa: F401 (fresh_state: autouse)
    CASES,
    SIZES,
    Block,
    fresh_state,
    train_block_like_eager,
)
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln_inductor.codegen.triton_launch import (
    SizedInterpretedLauncher,
    SizedLeanLauncher,
)
from torchkiln_inductor.compile_fx import generate
from torchkiln_inductor.options import InductorOptions

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = needs_interpreter


def symbolic_compile(fn, example):
    """``fn`` traced with every input size symbolic, compiled by the inductor's Triton path."""
    gm = make_fx(fn, tracing_mode="symbolic")(*example)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    generated = generate(gm, fakes, InductorOptions(cpu_backend="triton"))
    assert generated.artifact.triton is not None
    return generated, generated.artifact.load(fresh=True)


def the_launch(generated):
    (launch,) = generated.artifact.triton.launches
    return launch


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_compile_serves_every_size(name):
    fn, make = CASES[name]
    generated, compiled = symbolic_compile(fn, make(*SIZES[0]))
    assert any(k.size_params for k in generated.artifact.triton.launches)
    for sizes in SIZES:
        inputs = make(*sizes)
        torch.testing.assert_close(compiled(*inputs), fn(*inputs))


def test_kernels_take_the_sizes_as_unspecialized_int64_arguments():
    """A size that Triton specialized (1, a multiple of 16) would compile a kernel of its own
    per value, which a launcher compiling once per pointer alignment would not see."""
    generated, _ = symbolic_compile(lambda x, y: x * 2 + y.sin(), [torch.randn(6, 7)] * 2)
    launch = the_launch(generated)
    assert len(launch.size_params) == 2
    source = generated.artifact.triton.source
    assert f"@triton.jit(do_not_specialize={list(launch.size_params)})" in source
    assert all(f"{s}: tl.int64" in source for s in launch.size_params)


def test_a_looped_reduction_serves_rows_longer_than_its_block():
    """The block comes from the first call's rows (7: RBLOCK 8); no block holds every length,
    so the reduction loops, and serves 300. Light tuning leaves it (its winner would be the
    first size's)."""
    fn = lambda x: (x.sum(-1), x.amax(-1), x.argmin(-1), torch.softmax(x, -1))  # noqa: E731
    generated, compiled = symbolic_compile(fn, [torch.randn(3, 7)])
    launch = the_launch(generated)
    assert dict(launch.meta)["RBLOCK0"] == 8
    assert "for r0offset in range(0, s" in generated.artifact.triton.source
    assert isinstance(compiled._call.__globals__[launch.name], SizedInterpretedLauncher)
    for n, m in [(3, 7), (2, 300), (5, 8), (4, 2)]:
        x = torch.randn(n, m) + 2
        torch.testing.assert_close(compiled(x), fn(x))


def short_rows_softmax(x):
    torch._check(x.shape[1] <= 8)
    return torch.softmax(x, -1), x.sum(-1)


def short_rows_layer_norm(x):
    torch._check(x.shape[1] <= 8)
    return torch.nn.functional.layer_norm(x, x.shape[-1:]), x.sum(-1)


@pytest.mark.parametrize("fn", [short_rows_softmax, short_rows_layer_norm])
def test_a_reduction_is_persistent_where_its_block_holds_every_length(fn):
    """Rows of at most 8 elements (``torch._check``): one block of 8 holds each, whatever the
    length, and the tile reduces at once (Welford's count is the symbolic length)."""
    generated, compiled = symbolic_compile(fn, [torch.randn(3, 7)])
    launch = the_launch(generated)
    assert dict(launch.meta)["RBLOCK0"] == 8
    assert "for r0offset" not in generated.artifact.triton.source
    for n, m in [(3, 7), (5, 8), (4, 2), (9, 5)]:
        x = torch.randn(n, m)
        torch.testing.assert_close(compiled(x), fn(x))


class GridSpy:
    """Wraps a Triton function: records the grid of each launch."""

    def __init__(self, fn):
        self.fn = fn
        self.grids = []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.fn[grid]


def test_the_grid_follows_the_size_at_each_call():
    fn = lambda x: x * 2 + 1  # noqa: E731
    generated, compiled = symbolic_compile(fn, [torch.randn(4, 5)])
    launch = the_launch(generated)
    assert dict(launch.meta)["XBLOCK"] == 32  # the first call's 20 elements
    launcher = compiled._call.__globals__[launch.name]
    launcher._fn = spy = GridSpy(launcher._fn)
    for n, m in [(4, 5), (40, 50), (3, 2)]:
        x = torch.randn(n, m)
        torch.testing.assert_close(compiled(x), fn(x))
    assert spy.grids == [(1,), (63,), (1,)]


class StandInKernel:
    """A stand-in ``JITFunction`` that records how it is compiled."""

    def __init__(self):
        self.fn = self.warmup  # what a compile job names the kernel by (its code object)
        self.warmups = []

    def warmup(self, *tensors, grid, **options):
        self.warmups.append(options)
        return "compiled kernel"


def test_a_gpu_kernel_that_takes_sizes_compiles_with_them_bound_by_name():
    """Compiles (this process's, the workers') bind the sizes by name, to any value: an
    unspecialized int64 compiles the same kernel for every size."""
    kernel = StandInKernel()
    launcher = SizedLeanLauncher(kernel, (1,), {"XBLOCK": 64}, 4, None, ("s0", "s1"))
    assert dict(launcher.job((torch.float32,)).meta) == {"XBLOCK": 64, "s0": 2, "s1": 2}
    launcher.start((torch.empty(1),))
    assert kernel.warmups == [{"num_warps": 4, "XBLOCK": 64, "s0": 2, "s1": 2}]


LENGTHS = [5, 9, 17]


def test_block_compiles_once_for_every_length():
    model, twin = Block(), Block()
    twin.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, dynamic=True, options={"cpu_backend": "triton"})
    with torch.no_grad():
        for t in LENGTHS:
            x = torch.randn(2, t, 32)
            torch.testing.assert_close(compiled(x), twin(x))
    train_block_like_eager(compiled, model, twin, LENGTHS)
    assert torchkiln.counters["static_shapes"]["specializations"] == 0
