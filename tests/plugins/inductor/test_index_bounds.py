"""An index tensor's value outside its dimension raises IndexError, as in eager.

The C++ kernels read and wrote wherever such an index pointed: garbage out of a gather, an
embedding or ``x[i]``, memory corrupted by a scatter or ``index_put_``. Each run-time index
is now checked (one compare), read as 0 when out of range, and the kernel reports which
check failed to the wrapper, which raises.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln
from tests.plugins.inductor.inductor_testing import compile_fn


def take(x, i):
    return (x[i] * 2,)


def embed(w, i):
    return (torch.nn.functional.embedding(i, w) + 1,)


def put(x, i, v):
    return (x.index_put((i,), v, accumulate=True),)


def scatter(x, i, v):
    return (x.scatter_add(0, i, v),)


#: name: (function, its inputs around an index tensor, whether eager counts negative
#: indices from the end, what eager raises out of range)
CASES = {
    "x[i]": (take, lambda i: (torch.randn(5), i), True, IndexError),
    "embedding": (embed, lambda i: (torch.randn(5, 3), i), False, IndexError),
    "index_put": (put, lambda i: (torch.zeros(5), i, torch.ones(2)), True, IndexError),
    "scatter_add": (scatter, lambda i: (torch.zeros(5), i, torch.ones(2)), False, RuntimeError),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bad", [5, 40, -6, -1], ids=["size", "far", "below-minus-size", "-1"])
def test_an_index_out_of_range_raises_as_in_eager(case, bad):
    fn, inputs, negative_ok, raised = CASES[case]
    compiled = compile_fn(fn, *inputs(torch.tensor([1, 2])))
    good = inputs(torch.tensor([4, -5] if negative_ok else [4, 0]))
    torch.testing.assert_close(compiled(*good), list(fn(*good)))
    if bad == -1 and negative_ok:  # the last element
        last = inputs(torch.tensor([0, -1]))
        torch.testing.assert_close(compiled(*last), list(fn(*last)))
        return
    with pytest.raises(raised):
        fn(*inputs(torch.tensor([0, bad])))
    with pytest.raises(raised, match="out of bounds.*size 5"):
        compiled(*inputs(torch.tensor([0, bad])))


def test_a_tuned_kernel_checks_its_indices_too():
    """max_autotune's C++ variants (timed on the call's own inputs) report as the kernel."""
    compiled = compile_fn(take, torch.randn(4096), torch.arange(4096), max_autotune=True)
    with pytest.raises(IndexError):
        compiled(torch.randn(4096), torch.full((4096,), 4096))


def test_torchkiln_compile_raises_where_eager_does():
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x, i: x[i] + 1, backend="inductor")
    x = torch.randn(6)
    torch.testing.assert_close(compiled(x, torch.tensor([5, 0])), x[torch.tensor([5, 0])] + 1)
    with pytest.raises(IndexError):
        compiled(x, torch.tensor([6, 0]))
