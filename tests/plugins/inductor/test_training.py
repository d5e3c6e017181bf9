"""Forward and backward graphs through the AOT layer match eager, gradients included."""

import torch
import torch.nn.functional as F

from torchkiln_inductor.backend import compile_graph


def mlp(x, w1, b1, lw, lb, w2, b2):
    h = F.gelu(F.layer_norm(F.linear(x, w1, b1), (w1.shape[0],), lw, lb))
    h = F.dropout(h, 0.0, training=True)
    return (torch.log_softmax(F.linear(h, w2, b2), -1).sum(-1).mean(),)


def params():
    torch.manual_seed(0)
    shapes = [(48, 32), (48,), (48,), (48,), (10, 48), (10,)]
    return [(torch.randn(s) * 0.2).requires_grad_() for s in shapes]


def test_training_step_matches_eager_forward_and_gradients():
    ps, x = params(), torch.randn(16, 32)
    compiled = compile_graph(torch.fx.symbolic_trace(mlp), [x, *ps])
    (loss,) = compiled(x, *ps)
    (expected,) = mlp(x, *ps)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    grads = torch.autograd.grad(loss, ps)
    expected_grads = torch.autograd.grad(expected, ps)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_inference_under_no_grad_matches_eager():
    ps, x = params(), torch.randn(16, 32)
    with torch.no_grad():
        compiled = compile_graph(torch.fx.symbolic_trace(mlp), [x, *ps])
        torch.testing.assert_close(compiled(x, *ps)[0], mlp(x, *ps)[0], rtol=1e-4, atol=1e-4)
