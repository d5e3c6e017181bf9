"""End to end: aten graph -> IR -> fused C++ -> ctypes -> same result as eager."""

import re
import weakref

import torch
import torch.nn.functional as F
from inductor_testing import check, compile_fn, kernel_count, live_storages


def chain(x, w, b, lw, lb):
    return torch.softmax(F.layer_norm(F.gelu(x * w + b), (x.shape[-1],), lw, lb), -1)


def chain_inputs(rows=64, cols=256):
    return [torch.randn(rows, cols), *(torch.randn(cols) for _ in range(4))]


def test_gelu_layer_norm_softmax_chain_matches_eager():
    check(chain, *chain_inputs())


def test_gelu_layer_norm_softmax_chain_is_at_most_two_kernels():
    compiled = compile_fn(chain, *chain_inputs())
    assert kernel_count(compiled) <= 2
    assert "#pragma omp parallel for" in compiled.artifact.cpp_source


def test_pointwise_chain_is_one_kernel():
    compiled = check(
        lambda x, y: torch.relu(x * y + 1).sigmoid() - y, torch.randn(128, 300), torch.randn(300)
    )
    assert kernel_count(compiled) == 1


def test_reduction_fuses_with_its_pointwise_producer_and_consumer():
    compiled = check(lambda x: x / (x * 2).exp().sum(-1, keepdim=True), torch.randn(64, 100))
    assert kernel_count(compiled) == 1


def test_transposed_read_of_reduction_input_stays_correct():
    check(lambda x: (x + 1).sum(0) + (x + 1).t().sum(0), torch.randn(37, 37))


def test_independent_kernels_over_one_space_fuse_horizontally():
    compiled = check(lambda x, y: (x.exp(), y.sin()), torch.randn(50, 60), torch.randn(50, 60))
    assert kernel_count(compiled) == 1


def test_matmul_runs_as_extern_with_fused_epilogue():
    compiled = check(
        lambda x, w, b: torch.relu(x @ w + b) * 2,
        torch.randn(32, 16),
        torch.randn(16, 8),
        torch.randn(8),
    )
    assert "aten_mm_default(" in compiled.artifact.wrapper_source
    assert kernel_count(compiled) == 1


def test_layers_of_the_same_sizes_share_one_kernel_function():
    """A kernel's params and local rows are named by position, not by buffer: the softmax
    before and after a matmul is one C++ function, compiled once and called twice."""

    def fn(x, w):
        return torch.softmax(torch.softmax(x, -1) @ w, -1)

    compiled = check(fn, torch.randn(8, 16), torch.randn(16, 16))
    assert kernel_count(compiled) == 1
    (name,) = set(re.findall(r"\b(kiln_\w+)\(", compiled.artifact.wrapper_source))
    assert compiled.artifact.wrapper_source.count(f"{name}(") == 2
    assert "local0[" in compiled.artifact.cpp_source


def test_normalized_rows_viewed_as_a_matrix_fuse_with_their_statistics():
    """layer_norm on (2, 16, 32) viewed as (32, 32) for a matmul: the output's loop of 32 rows
    splits into the statistics' (2, 16), so normalizing joins the kernel that computes them
    (one pass over the rows, not a second kernel re-reading them)."""

    def fn(x, w):
        return F.layer_norm(x, (32,)).view(32, 32) @ w

    compiled = check(fn, torch.randn(2, 16, 32), torch.randn(32, 8), rtol=1e-4, atol=1e-4)
    assert kernel_count(compiled) == 1


def test_dead_buffers_are_reused():
    def fn(x, w):
        a = torch.relu(x @ w)
        b = torch.relu(a @ w)
        c = torch.relu(b @ w)
        return c @ w

    compiled = check(fn, torch.randn(16, 16), torch.randn(16, 16), rtol=1e-4, atol=1e-4)
    assert "# reuses" in compiled.artifact.wrapper_source
    assert "_view(" not in compiled.artifact.wrapper_source  # same layout: the tensor itself


def test_a_reused_buffer_is_freed_after_its_last_reuse_dies():
    """``b = a  # reuses a`` must unbind ``a``: else the storage outlives ``b``'s last
    reader and every chain of reuses is held to the end of the call."""

    def fn(x, w, w_out):
        for _ in range(4):
            x = torch.relu(x @ w)  # each relu's buffer reuses the one before
        return torch.relu(x @ w_out)  # the chain's last buffer dies in this matmul

    x, w, w_out = torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 8)
    compiled = check(fn, x, w, w_out, rtol=1e-4, atol=1e-4)
    source = compiled.artifact.wrapper_source
    assert "# reuses" in source
    lines = source.splitlines()
    last_kernel = max(i for i, line in enumerate(lines) if "data_ptr()" in line)
    # at the last kernel: the matmul's product and the result, nothing of the chain
    assert live_storages(source)[last_kernel] == 2, source


def test_dead_buffer_no_later_one_reuses_is_freed_where_it_dies():
    """Held to the end of the call, buffers no later one takes over would raise peak memory
    above eager's (which frees each tensor after its last use)."""

    def fn(x, w):
        return ((x.sin() + 1) @ w).cos()  # sin's buffer dies in the matmul

    compiled = check(fn, torch.randn(64, 100), torch.randn(100, 8), rtol=1e-4, atol=1e-4)
    lines = compiled.artifact.wrapper_source.splitlines()
    last_kernel = max(i for i, line in enumerate(lines) if "data_ptr()" in line)
    freed = [i for i, line in enumerate(lines) if line.strip().startswith("del ")]
    assert freed and min(freed) < last_kernel, compiled.artifact.wrapper_source


def test_outputs_keep_eager_strides():
    x = torch.randn(8, 6)
    compiled = compile_fn(lambda a: (a + 1).t().contiguous().t() * 1, x)
    (out,) = compiled(x)
    torch.testing.assert_close(out, (x + 1))


def test_view_of_input_is_returned_without_a_kernel():
    compiled = check(lambda x: x.t()[1:], torch.randn(5, 7))
    assert kernel_count(compiled) == 0


def test_input_with_other_strides_than_compiled_for_is_handled():
    x = torch.randn(6, 9)
    compiled = compile_fn(lambda a: a * 2, x)
    other = torch.randn(9, 6).t()
    torch.testing.assert_close(compiled(other)[0], other * 2)


def test_reduction_over_leading_dim_vectorizes_across_outputs():
    compiled = check(
        lambda x: (x.sum(0), torch.var_mean(x, 0), x.argmax(0)),
        torch.randn(40, 300),
        rtol=1e-4,
        atol=1e-4,
    )
    assert "ob += " in compiled.artifact.cpp_source


def test_full_reduction_of_a_large_tensor_runs_in_parallel_chunks():
    compiled = check(
        lambda x: (x.sum(), x.amax(), (x > 3).any()), torch.randn(300, 1001), rtol=1e-4, atol=1e-3
    )
    assert "#pragma omp parallel for" in compiled.artifact.cpp_source


def test_boxed_call_frees_each_input_after_its_last_use():
    def fn(a, b):
        return (a.sin() @ b).cos()

    a, b = torch.randn(16, 16), torch.randn(16, 16)
    compiled = compile_fn(fn, a, b)
    wrapper = compiled.artifact.wrapper_source
    assert wrapper.index("del arg0") < wrapper.index("mm_default(")  # before the matmul runs
    args = [a.clone(), b.clone()]
    first = weakref.ref(args[0])
    (out,) = compiled.call_boxed(args)
    assert args == [] and first() is None
    torch.testing.assert_close(out, fn(a, b))
