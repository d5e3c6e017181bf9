"""Long float reductions are as accurate as eager's, measured against a float64 reference.

A lane that adds thousands of floats one after the other loses accuracy like n * eps;
deep convnets amplify BatchNorm statistics computed that way into wrong gradients.
"""

import torch
import torch.nn.functional as F
from inductor_testing import check, compile_fn

from torchkiln_inductor.backend import compile_graph


def _rms_relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    return ((actual.double() - reference).norm() / reference.norm()).item()


def _reductions(row, rows, col, cube, half):
    return (
        row.sum(-1),  # 2^20 floats a row, one lane loop per row
        row.sum(),  # a reduction of everything: split into parallel chunks
        row.var(),  # Welford in parallel chunks, combined (Chan)
        rows.sum(-1),  # 2048 floats a row
        rows.mean(-1),
        rows.var(-1),  # Welford, lanes along the row
        col.sum(0),  # column reductions: lanes are outputs, each walks down 16384 rows
        col.var(0),
        cube.sum((0, 2)),  # strided: two inner loops
        # bfloat16 accumulated in float32 (in float64 for the reference)
        half.sum(-1, dtype=torch.float64 if row.dtype == torch.float64 else torch.float32),
    )


def test_long_sums_means_and_variances_are_as_accurate_as_eager():
    torch.manual_seed(0)
    args = (
        torch.rand(2, 1 << 20) + 1,
        torch.rand(256, 2048) + 1,
        torch.rand(16384, 64) + 1,
        torch.rand(256, 4, 1024) + 1,
        torch.rand(2, 1 << 20).bfloat16(),
    )
    compiled = compile_fn(_reductions, *args)
    references = _reductions(*(a.double() for a in args))
    for i, (kiln, eager, ref) in enumerate(zip(compiled(*args), _reductions(*args), references)):
        kiln_error = _rms_relative_error(kiln, ref)
        # float32 rounding of the result itself is the floor of any implementation
        bound = 2 * max(_rms_relative_error(eager, ref), 2**-24)
        assert kiln_error <= bound, f"output {i}: error {kiln_error:.2e} > 2x eager's ({bound:.2e})"


def _conv_batch_norm_loss(x, target, weight, bias, gamma, beta):
    # running statistics, as nn.BatchNorm2d keeps them (updated in place, so fresh ones per call)
    mean, var = torch.zeros(16, dtype=x.dtype), torch.ones(16, dtype=x.dtype)
    y = F.batch_norm(F.conv2d(x, weight, bias, padding=1), mean, var, gamma, beta, training=True)
    return ((y * target).sum(),)


def test_batch_norm_training_gradients_are_as_accurate_as_eager():
    # BatchNorm's statistics and its weight gradient reduce 32768 elements per channel
    torch.manual_seed(0)
    x, target = torch.randn(32, 4, 32, 32), torch.randn(32, 16, 32, 32)
    params = [
        torch.randn(16, 4, 3, 3) * 0.3,
        torch.randn(16),
        torch.rand(16) + 0.5,
        torch.randn(16),
    ]
    params = [p.requires_grad_() for p in params]
    compiled = compile_graph(torch.fx.symbolic_trace(_conv_batch_norm_loss), [x, target, *params])

    def gradients(fn, *args):
        return torch.autograd.grad(fn(*args)[0], args[2:])

    params64 = [p.detach().double().requires_grad_() for p in params]
    references = gradients(_conv_batch_norm_loss, x.double(), target.double(), *params64)
    eager = gradients(_conv_batch_norm_loss, x, target, *params)
    kiln = gradients(compiled, x, target, *params)
    for name, k, e, ref in zip(["gamma", "beta"], kiln[2:], eager[2:], references[2:]):
        kiln_error = _rms_relative_error(k, ref)
        bound = 2 * max(_rms_relative_error(e, ref), 2**-24)
        assert kiln_error <= bound, f"{name}: error {kiln_error:.2e} > 2x eager's ({bound:.2e})"


def test_half_precision_reduction_read_in_its_kernel_is_rounded_to_its_dtype():
    # the bfloat16 sum feeds the conversion in the same kernel: it must be the rounded one
    x = torch.rand(4096, 7) + 1
    check(lambda a: a.bfloat16().sum().float() + a.bfloat16().sum(0).float().sum(), x)


def _var_means(x, x_channels_last, rows):
    return (
        *torch.var_mean(x, [0, 2, 3], correction=0),  # BatchNorm statistics: lanes along rows
        *torch.var_mean(x_channels_last, [0, 2, 3], correction=0),  # column kernel
        rows.var(-1),
    )


def test_variances_of_data_far_from_zero_are_as_accurate_as_eager():
    # a float running mean of data at 3 +- 0.1 rounds at ulp(3) every step: var came out ~27x
    # less accurate than eager's (which accumulates in double) without the shift
    torch.manual_seed(0)
    x = 3 + 0.1 * torch.randn(2, 192, 4, 4)
    args = (x, x.contiguous(memory_format=torch.channels_last), 3 + 0.1 * torch.randn(64, 768))
    compiled = compile_fn(_var_means, *args)
    references = _var_means(*(a.double() for a in args))
    for i, (kiln, eager, ref) in enumerate(zip(compiled(*args), _var_means(*args), references)):
        kiln_error = _rms_relative_error(kiln, ref)
        bound = 2 * max(_rms_relative_error(eager, ref), 2**-24)
        assert kiln_error <= bound, f"output {i}: error {kiln_error:.2e} > 2x eager's ({bound:.2e})"
